//! The executor against a recording fake of [`Hands`]: for every action it
//! makes exactly the writes of the action's plan, in order, and stops
//! where the plan says a refusal stops it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;

use super::*;
use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransferPhase as Phase, SourceClaimSnapshot,
};
use crate::controller::transfer::decide::tests::{
    clone_fresh, committed, created, fresh, locked, protect, retained,
};
use crate::controller::transfer::decide::{
    snapshot_of, Action, Question, Report, REASON_DESTINATION_LOST,
};
use crate::controller::transfer::plan::snapshot::SnapshotWrite;
use crate::controller::transfer::plan::{plan, Edit, On, Write};

/// One call the executor made.
#[derive(Debug, Clone, PartialEq)]
enum Made {
    Cluster(ClusterWrite),
    Create(String, String),
    Status(String, StatusChange),
    Finalizer(String, bool),
    Delete(String),
    Event(ObjectReference, &'static str, String),
    Wake(String),
    Snapshot(SnapshotWrite),
}

/// A fake that records every call, gives created claims the uid
/// `uid-created`, and fails the call numbered `fail` (from 0) with `with`.
struct Recorder {
    made: Mutex<Vec<Made>>,
    fail: Option<(usize, ClusterError)>,
}

impl Recorder {
    fn new() -> Self {
        Self {
            made: Mutex::new(Vec::new()),
            fail: None,
        }
    }

    fn failing(call: usize, with: ClusterError) -> Self {
        Self {
            fail: Some((call, with)),
            ..Self::new()
        }
    }

    fn made(&self) -> Vec<Made> {
        self.made.lock().unwrap().clone()
    }

    /// Records `made`; the failure, if this is the call to fail.
    fn record(&self, made: Made) -> Result<(), ClusterError> {
        let mut all = self.made.lock().unwrap();
        let n = all.len();
        all.push(made);
        match &self.fail {
            Some((call, with)) if *call == n => Err(with.clone()),
            _ => Ok(()),
        }
    }
}

fn uid(t: &NamespaceTransfer) -> String {
    t.metadata.uid.clone().unwrap_or_default()
}

impl Hands for Recorder {
    fn lead(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn cluster(&self, write: &ClusterWrite) -> Result<(), ClusterError> {
        self.record(Made::Cluster(write.clone()))
    }

    async fn create(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<String, ClusterError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.record(Made::Create(namespace.to_owned(), name))?;
        Ok("uid-created".to_owned())
    }

    async fn status(
        &self,
        t: &NamespaceTransfer,
        change: &StatusChange,
        _pair: (&NamespaceTransfer, Option<&NamespaceTransfer>),
        _written: Option<Phase>,
    ) -> Result<Option<Phase>, Error> {
        self.record(Made::Status(uid(t), change.clone()))?;
        Ok(None)
    }

    async fn finalizer(&self, t: &NamespaceTransfer, present: bool) -> Result<(), Error> {
        Ok(self.record(Made::Finalizer(uid(t), present))?)
    }

    async fn delete(&self, t: &NamespaceTransfer) -> Result<(), Error> {
        Ok(self.record(Made::Delete(uid(t)))?)
    }

    async fn publish(&self, regarding: &ObjectReference, event: &EventWrite) {
        let _ = self.record(Made::Event(
            regarding.clone(),
            event.reason,
            event.note.clone(),
        ));
    }

    fn wake(&self, t: &NamespaceTransfer) {
        let _ = self.record(Made::Wake(uid(t)));
    }

    async fn snapshot(&self, write: &SnapshotWrite) -> Result<Option<String>, ClusterError> {
        self.record(Made::Snapshot(write.clone()))?;
        Ok(matches!(
            write,
            SnapshotWrite::CreateContent(_) | SnapshotWrite::CreateSnapshot { .. }
        )
        .then(|| "uid-created".to_owned()))
    }
}

/// What performing `p` must come to: each write of the plan, to the object
/// it names, with what only the API knows filled in.
fn expected(f: &Facts, p: &Plan) -> Vec<Made> {
    let object = |on: On| match on {
        On::Source => Some(uid(&f.source)),
        On::Peer => peer_or_self(f).map(uid),
    };
    p.writes
        .iter()
        .filter_map(|w| match w {
            Write::Cluster(c) => Some(Made::Cluster(c.clone())),
            Write::Create {
                namespace, claim, ..
            } => Some(Made::Create(
                namespace.clone(),
                claim.metadata.name.clone().unwrap_or_default(),
            )),
            Write::Status { on, change } => {
                let mut change = change.clone();
                if let Edit::Destination(r) = &mut change.edit {
                    if r.uid.is_empty() {
                        r.uid = "uid-created".to_owned();
                    }
                }
                if let Edit::SnapshotDestination(r) = &mut change.edit {
                    if r.uid.is_empty() {
                        r.uid = "uid-created".to_owned();
                    }
                }
                object(*on).map(|u| Made::Status(u, change))
            }
            Write::Finalizer { on, present } => object(*on).map(|u| Made::Finalizer(u, *present)),
            Write::Delete(on) => object(*on).map(Made::Delete),
            Write::Event(e) => {
                let mut regarding = e.regarding.clone();
                if e.of_created {
                    regarding.uid = Some("uid-created".to_owned());
                }
                Some(Made::Event(regarding, e.reason, e.note.clone()))
            }
            Write::Wake(on) => object(*on).map(Made::Wake),
            Write::Snapshot(w) => Some(Made::Snapshot(w.clone())),
        })
        .collect()
}

/// A claim to create: the plan carries it as decided.
fn claim_named(name: &str) -> Box<PersistentVolumeClaim> {
    let mut claim = PersistentVolumeClaim::default();
    claim.metadata.name = Some(name.to_owned());
    Box::new(claim)
}

fn run(hands: &Recorder, f: &Facts, action: &Action) -> Outcome {
    futures::executor::block_on(perform(hands, f, label(action), &plan(f, action)))
        .unwrap_or_else(|e| panic!("{action:?}: {e}"))
}

/// Facts and an action for every kind of action, each where it is
/// decided, so that its plan has writes to make.
fn every_action() -> Vec<(Facts, Action)> {
    let mut out = Vec::new();
    let f = fresh();
    let snapshot = |f: &Facts| -> SourceClaimSnapshot {
        snapshot_of(f.moved_claim.as_ref().unwrap(), f.volume.as_ref().unwrap())
    };
    let report = Report::new("Reason", "the source's words");
    out.push((f.clone(), Action::Nothing { after: None }));
    out.push((f.clone(), Action::Ask(Question::Users)));
    out.push((
        f.clone(),
        Action::Wait {
            phase: Phase::WaitingForRelease,
            report: Report::new(
                crate::controller::transfer::decide::REASON_SOURCE_IN_USE,
                "in use",
            ),
            in_use: true,
            after: Some(std::time::Duration::from_secs(5)),
        },
    ));
    out.push((f.clone(), Action::RecordMatch));
    out.push((
        f.clone(),
        Action::Finish {
            phase: Phase::Cancelled,
            report: report.clone(),
        },
    ));
    out.push((f.clone(), Action::Protect));
    let mut lockable = fresh();
    protect(&mut lockable);
    out.push((
        lockable.clone(),
        Action::Lock {
            resource_version: "3".to_owned(),
        },
    ));
    out.push((lockable.clone(), Action::RecordSource(snapshot(&lockable))));
    let l = locked();
    out.push((
        l.clone(),
        Action::Retain {
            resource_version: "4".to_owned(),
            policy: "Delete".to_owned(),
        },
    ));
    out.push((
        l.clone(),
        Action::Unlock {
            resource_version: "5".to_owned(),
        },
    ));
    let r = retained();
    out.push((r.clone(), Action::CreateDestination(claim_named("db"))));
    let reference = ClaimReference {
        namespace: "dev".to_owned(),
        name: "db".to_owned(),
        uid: "uid-dest".to_owned(),
    };
    out.push((r.clone(), Action::RecordDestination(reference.clone())));
    out.push((
        r.clone(),
        Action::Unmark {
            resource_version: "6".to_owned(),
            restore: Some("Delete".to_owned()),
        },
    ));
    let c = created();
    out.push((
        c.clone(),
        Action::Commit {
            resource_version: "7".to_owned(),
            destination: reference.clone(),
        },
    ));
    out.push((
        c.clone(),
        Action::ProtectDestination {
            resource_version: "8".to_owned(),
            finalizers: vec!["x".to_owned()],
            volume_name: None,
        },
    ));
    out.push((
        c.clone(),
        Action::DeleteDestination {
            uid: "uid-dest".to_owned(),
        },
    ));
    let mut m = committed();
    m.users = Some(vec!["late".to_owned()]);
    out.push((
        m.clone(),
        Action::ReleaseSource {
            uid: "uid-db".to_owned(),
        },
    ));
    out.push((m.clone(), Action::UnlockDestination));
    out.push((
        m.clone(),
        Action::Rehold {
            resource_version: "9".to_owned(),
        },
    ));
    out.push((
        m.clone(),
        Action::UnprotectDestination {
            resource_version: "10".to_owned(),
            finalizers: Vec::new(),
        },
    ));
    out.push((
        m.clone(),
        Action::Settle {
            resource_version: "11".to_owned(),
            policy: "Delete".to_owned(),
        },
    ));
    out.push((m.clone(), Action::Complete));
    out.push((
        m.clone(),
        Action::DestinationLost {
            report: Report::new(REASON_DESTINATION_LOST, "lost"),
        },
    ));
    let mut done = m.clone();
    done.source.status.as_mut().unwrap().phase = Some(Phase::Completed);
    done.source.spec.ttl_seconds_after_finished = Some(0);
    out.push((done.clone(), Action::Mirror));
    out.push((done.clone(), Action::DropFinalizers));
    let mut expired = done.clone();
    expired.source.metadata.finalizers = None;
    out.push((expired, Action::Expire));
    let cf = clone_fresh();
    out.push((cf.clone(), Action::CreateClone(claim_named("give-clone"))));
    out.push((
        cf.clone(),
        Action::DeleteClone {
            name: "give-clone".to_owned(),
            uid: "uid-clone".to_owned(),
        },
    ));
    // A standing offer's pair (`clone_fresh` is one): R1's two writes, and
    // the finalizers that are the request's alone.
    let mut standing = clone_fresh();
    standing.moved_claim = fresh().moved_claim;
    standing.volume = fresh().volume;
    out.push((standing.clone(), Action::RecordSource(snapshot(&standing))));
    out.push((standing, Action::DropFinalizers));
    out
}

#[test]
fn the_executor_makes_exactly_the_plans_writes_for_every_action() {
    let mut labels = BTreeSet::new();
    let mut writes = 0;
    let mut pair_records = 0;
    for (f, action) in every_action() {
        let hands = Recorder::new();
        let p = plan(&f, &action);
        let outcome = run(&hands, &f, &action);
        assert_eq!(hands.made(), expected(&f, &p), "{action:?}");
        assert_eq!(outcome, Outcome::Next(p.then), "{action:?}");
        labels.insert(label(&action));
        writes += p.writes.len();
        pair_records += p
            .writes
            .iter()
            .filter(|w| {
                matches!(w, Write::Status { change, .. } if matches!(change.edit, Edit::PairRecord(_)))
            })
            .count();
    }
    // The standing offer's pair was among them.
    assert_eq!(pair_records, 1);
    // Every kind of action was run (`label` names each one).
    assert_eq!(labels.len(), 28, "{labels:?}");
    assert!(writes > 50, "{writes} writes in all");
}

#[test]
fn a_conditional_write_refused_ends_the_plan_and_nothing_after_it_is_made() {
    let f = created();
    let commit = Action::Commit {
        resource_version: "7".to_owned(),
        destination: ClaimReference {
            namespace: "dev".to_owned(),
            name: "db".to_owned(),
            uid: "uid-dest".to_owned(),
        },
    };
    assert!(plan(&f, &commit).writes.len() > 2);
    let conflict = ClusterError::Conflict {
        message: "the volume changed".to_owned(),
    };
    let hands = Recorder::failing(0, conflict);
    assert_eq!(run(&hands, &f, &commit), Outcome::Next(Next::Now));
    assert_eq!(hands.made().len(), 1, "{:?}", hands.made());
}

/// kube-apiserver's 403 with `message` (quota, admission, a webhook).
fn forbidden(message: &str) -> ClusterError {
    ClusterError::Refused {
        code: 403,
        reason: "Forbidden".to_owned(),
        message: message.to_owned(),
    }
}

#[test]
fn a_refused_create_ends_the_plan_and_comes_back_as_a_fact() {
    let f = retained();
    let action = Action::CreateDestination(claim_named("db"));
    assert_r3_refused_by_quota(&f, &action);
}

/// `action`, an R3 create that quota refuses, ends its plan at that write
/// and comes back as R3's refused fact, nothing recorded after it.
#[track_caller]
fn assert_r3_refused_by_quota(f: &Facts, action: &Action) {
    let hands = Recorder::failing(0, forbidden("exceeded quota"));
    assert_eq!(
        run(&hands, f, action),
        Outcome::Refused(Refused {
            step: Step::CreateDestination,
            message: "exceeded quota".to_owned(),
        })
    );
    assert_eq!(
        hands.made().len(),
        1,
        "nothing recorded after the refused create"
    );
}

#[test]
fn r5_refused_by_admission_comes_back_as_a_fact_and_records_no_step() {
    let mut f = committed();
    f.users = Some(Vec::new());
    let action = Action::ReleaseSource {
        uid: "uid-db".to_owned(),
    };
    // The delete comes after the source claim is made Lost.
    let delete = plan(&f, &action)
        .writes
        .iter()
        .position(|w| matches!(w, Write::Cluster(ClusterWrite::DeleteClaim { .. })))
        .unwrap();
    assert_eq!(delete, 1);
    let refused = forbidden("denied by a webhook");
    let hands = Recorder::failing(delete, refused);
    assert!(matches!(
        run(&hands, &f, &action),
        Outcome::Refused(Refused {
            step: Step::ReleaseSource,
            ..
        })
    ));
    assert_eq!(hands.made().len(), 2);
}

#[test]
fn a_write_for_the_binder_refused_in_any_way_but_one_that_may_pass_is_skipped_and_the_plan_goes_on()
{
    let mut f = committed();
    f.users = Some(Vec::new());
    let action = Action::ReleaseSource {
        uid: "uid-db".to_owned(),
    };
    let p = plan(&f, &action);
    let conflict = ClusterError::Conflict {
        message: "the binder wrote first".to_owned(),
    };
    for refusal in [
        conflict,
        forbidden("no patch on persistentvolumeclaims/status"),
    ] {
        let hands = Recorder::failing(0, refusal.clone());
        assert_eq!(
            run(&hands, &f, &action),
            Outcome::Next(Next::Now),
            "{refusal:?}"
        );
        assert_eq!(hands.made(), expected(&f, &p), "{refusal:?}");
    }
    // One that may pass is tried again, with the whole reconcile.
    let hands = Recorder::failing(0, ClusterError::Unavailable("timeout".to_owned()));
    let outcome = futures::executor::block_on(perform(&hands, &f, "ReleaseSource", &p));
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(hands.made().len(), 1);
}

#[test]
fn an_unconditional_write_whose_object_is_gone_is_skipped_and_the_plan_goes_on() {
    let mut f = committed();
    f.users = Some(Vec::new());
    // R4's second write, the destination unlock, carries no version.
    let commit = Action::Commit {
        resource_version: "7".to_owned(),
        destination: ClaimReference {
            namespace: "dev".to_owned(),
            name: "db".to_owned(),
            uid: "uid-dest".to_owned(),
        },
    };
    let gone = ClusterError::NotFound {
        message: "gone".to_owned(),
    };
    let hands = Recorder::failing(1, gone);
    let p = plan(&f, &commit);
    assert_eq!(run(&hands, &f, &commit), Outcome::Next(Next::Now));
    assert_eq!(hands.made(), expected(&f, &p));
}

/// A snapshot move's facts: `fresh()` with a VolumeSnapshot source.
fn snapshot_move() -> Facts {
    let mut f = fresh();
    f.source.spec.source.kind = "VolumeSnapshot".to_owned();
    f.moved_claim = None;
    f.volume = None;
    f.snapshot = Some(crate::controller::transfer::snapshot::SnapshotFacts::default());
    f
}

#[test]
fn a_refused_create_of_the_destination_snapshot_comes_back_as_r3s_fact() {
    use crate::controller::transfer::decide::snapshot::SnapshotAction;
    let f = snapshot_move();
    let action = Action::Snapshot(SnapshotAction::CreateDestination(Box::new(
        serde_json::json!({"metadata": {"name": "db"}}),
    )));
    assert_r3_refused_by_quota(&f, &action);
}

#[test]
fn a_rollbacks_refused_delete_is_an_error_to_try_again_not_a_fact_about_r3() {
    use crate::controller::transfer::decide::snapshot::SnapshotAction;
    let f = snapshot_move();
    let action = Action::Snapshot(SnapshotAction::DeleteDestination {
        uid: "uid-snap".to_owned(),
    });
    let refused = forbidden("denied by a webhook");
    let hands = Recorder::failing(0, refused);
    let p = plan(&f, &action);
    let outcome = futures::executor::block_on(perform(&hands, &f, label(&action), &p));
    assert!(outcome.is_err(), "{outcome:?}");
}
