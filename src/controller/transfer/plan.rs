//! Every write an action makes, as data: [`plan`] is a pure function of
//! the facts a decision was made on and the action it chose, and its
//! answer is what both sides run:
//! - the executor (`execute`) performs the list in order against
//!   kube-apiserver and etcd, and stops where a write is refused;
//! - the model check (`model/`) performs the same list on its model of the
//!   cluster, with a crash point after every write.
//!
//! So the model checks the writes that run, not a copy of them. A plan
//! holds:
//! - writes to claims and volumes ([`ClusterWrite`], built by
//!   [`cluster_writes`] in `cluster`), each conditional on what it was
//!   decided on;
//! - the creates of C1's clone and R3's destination claim;
//! - writes to our own objects: a status edit ([`StatusChange`]), a
//!   finalizer, the delete of an expired object;
//! - Events, and the wake of another object's reconcile.
//!
//! The fault points come from the plan too: the boundary after write `i`
//! of an action is named `<label>#<i+1>` ([`label`]), and the boundaries
//! that end a protocol step also carry its name (`R1` … `R6`, `C1`).
//!
//! # Adding a source kind or a destination shape
//! A new source kind (say, a VolumeSnapshot) or destination shape (a claim
//! the tenant wrote) is an addition here, not a branch in the executor:
//! - its facts: a field of [`Facts`], gathered in `gather`, and read by
//!   `decide` (never by the executor);
//! - its decisions: new [`Action`]s, or new arms of the existing ones, in
//!   `decide`;
//! - its lock, retain, commit and release: a [`ClusterWrite`] each (a new
//!   [`ClaimChange`] or [`VolumeChange`] when it writes something new), and
//!   the arm of [`plan`] that lists them in order with their status edits
//!   and Events;
//! - its step names: [`step_of`] and [`label`] name every action, so the
//!   compiler asks for them;
//! - the model: `model/writes.rs` interprets each new kind of write once;
//!   the decisions and plans come for free.
//!
//! The executor needs a change only for a new *kind* of write (a new
//! variant of [`Write`]), never for a new action.

mod cluster;
pub(super) mod snapshot;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};

use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus,
    PairRecord, Role, SnapshotReference, SourceClaimSnapshot, SourceSnapshotRecord,
    TransferStepName as StepName, REASON_MATCHED,
};
use crate::api::namespace_transfer::{REASON_CLONE_CREATED, REASON_COMMITTED, REASON_LOCKED};
use crate::controller::events::{claim_reference, reference_to, Severity};
use crate::controller::{object_key, Next};

pub(super) use cluster::{cluster_writes, ClusterWrite};
#[cfg(test)]
pub(super) use cluster::{BoundStatus, ClaimChange, VolumeChange};

use super::decide::snapshot::{label as snapshot_label, step_of as snapshot_step_of};
use super::decide::{
    destination_of, in_use_message, misfits, moved_claim_name_of, name_of, peer_or_self,
    recorded_destination, recorded_source, Action, Report, REASON_CLAIM_MISMATCH, REASON_COMPLETED,
    REASON_DESTINATION_LOST, REASON_SOURCE_IN_USE, REASON_SOURCE_RELEASE_REFUSED,
    REASON_WAITING_FOR_CLAIM,
};
use super::facts::{Claim, Facts};
use super::matching::{reference, role_of};
use super::standing::{is_standing_pair, R1_COUNT};
use super::status::{completed_for_destination, expiry, received_from, Expiry};
use super::Step;

/// Which of our own objects a write is to: the object that drives the pair
/// (`Facts::source`, for a standing offer's pair the offer), or its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum On {
    Source,
    Peer,
}

/// One write of a plan.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Write {
    /// A patch or delete of a claim or volume.
    Cluster(ClusterWrite),
    /// Create `claim` in `namespace`: C1's clone or R3's destination
    /// claim. If it exists already, the plan ends (the next decision finds
    /// it); if kube-apiserver refuses it, the plan ends and the refusal is a
    /// fact for the next decision.
    Create {
        step: Step,
        namespace: String,
        claim: Box<PersistentVolumeClaim>,
    },
    /// A read-modify-write of one of our objects' status.
    Status { on: On, change: StatusChange },
    /// Our finalizer on one of our objects: added or taken off.
    Finalizer { on: On, present: bool },
    /// Delete one of our objects, by its uid (its TTL has passed).
    Delete(On),
    /// Publish an Event.
    Event(EventWrite),
    /// Reconcile one of our objects again (it is not woken otherwise).
    Wake(On),
    /// A write to a VolumeSnapshot or its content (DESIGN §2.1.7).
    Snapshot(snapshot::SnapshotWrite),
}

/// A status edit: say `say` (reason and message) first, then `edit`, then
/// record the peer and its phase, as `update_pair` always did.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StatusChange {
    pub say: Option<(&'static str, String)>,
    pub edit: Edit,
    /// Record this object as the peer (by the uid the written object may
    /// know it by).
    pub peer_of: Option<On>,
    /// Record the peer's phase.
    pub peer_phase: Option<PeerPhase>,
}

impl StatusChange {
    /// Whether the write also puts our finalizer on the object (`true`)
    /// or takes it off (`false`), in the same etcd write; never on an
    /// object being deleted, whose finalizers the write leaves as they are
    /// (`Part::StatusAndFinalizers`).
    /// - The match's writes protect: the finalizers come with the match,
    ///   not as two writes of their own (`Action::Protect` is left for what
    ///   the match did not protect: a standing offer, and pairs matched
    ///   before the match protected).
    /// - The completion's write on the peer lets it go (`Edit::Completed`'s
    ///   `release`): the source object keeps its finalizer, and the pair's
    ///   record, until `tidy` has let the destination claim go
    ///   (`Action::DropFinalizers`, which then has only the source object
    ///   left to write). The peer still goes first, as it always did.
    pub(super) fn finalizer(&self) -> Option<bool> {
        match self.edit {
            Edit::Matched => Some(true),
            Edit::Completed { release: true, .. } => Some(false),
            _ => None,
        }
    }
}

/// Which phase a status write records for the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PeerPhase {
    /// The written object's own phase, after the edit (the source object
    /// of a pair, which is its own record).
    Own,
    /// The phase the source object was given by the write before this one.
    Written,
    /// This phase, known when the plan was made (a standing offer's).
    Known(Option<Phase>),
}

/// What a status write changes, after `say`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Edit {
    /// The pair waits in `phase`; `in_use` also marks
    /// `SourceReleased=False` with this reason.
    Waiting {
        phase: Phase,
        in_use: Option<&'static str>,
    },
    /// The match: WaitingForRelease, `PeerMatched=True`, and our finalizer
    /// on the object in the same write ([`StatusChange::finalizer`]).
    Matched,
    /// A finished phase, `Ready=False` with `reason`.
    Finished { phase: Phase, reason: &'static str },
    /// R1: Rebinding, `SourceReleased=True` saying `released`, the step;
    /// on the source object also R1's snapshot.
    Locked {
        snapshot: Option<SourceClaimSnapshot>,
        released: String,
    },
    /// R2 of a snapshot move: `Authorized=True` (the rights were confirmed
    /// before it), and the step. A claim's R2 has no record of its own:
    /// [`Edit::Destination`] carries it.
    Retained,
    /// R4: `Rebound=True` saying `rebound`, the step.
    Committed { rebound: String },
    /// R6: Completed with `volume`, `Ready=True`, the step; on a populating
    /// request also the claim it `served`. With `release`, our finalizer
    /// comes off in the same write ([`StatusChange::finalizer`]): only the
    /// peer of a pair whose source object holds the record.
    Completed {
        volume: String,
        served: Option<ClaimReference>,
        release: bool,
    },
    /// After R4 the destination claim is gone: Rebinding, `Ready=False`.
    Lost { reason: &'static str },
    /// A step done, nothing else.
    Step(StepName),
    /// R3's memory: the destination claim. An empty uid means the claim
    /// the `Create` before this write made.
    Destination(ClaimReference),
    /// A standing offer's record of a pair (R1), counted as a clone made,
    /// once.
    PairRecord(Box<PairRecord>),
    /// The peer shows this outcome of the source object's.
    Mirror(Box<NamespaceTransferStatus>),
    /// A snapshot move's R1: Rebinding, `SourceReleased=True` saying
    /// `released`, the step; on the source object also R1's record.
    SnapshotLocked {
        record: Option<SourceSnapshotRecord>,
        released: String,
    },
    /// A snapshot move's R3 memory. An empty uid means the snapshot the
    /// create before this write made.
    SnapshotDestination(SnapshotReference),
    /// A snapshot move's R6: Completed, `Ready=True`, the step.
    SnapshotCompleted,
}

/// An Event to publish.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EventWrite {
    pub regarding: ObjectReference,
    /// The regarding claim is the one the `Create` before made: its uid is
    /// that claim's.
    pub of_created: bool,
    pub severity: Severity,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// What an action does: its writes in order, what the reconcile asks of
/// the queue once they are all made, and the protocol step it carries out.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    pub writes: Vec<Write>,
    pub then: Next,
    pub step: Option<Step>,
    /// The boundaries that end a protocol step or stand inside one, by
    /// name: after write `i`, the point named so (`R4`, `R1-count`).
    pub points: Vec<(usize, &'static str)>,
}

impl Plan {
    fn new(then: Next) -> Self {
        Self {
            writes: Vec::new(),
            then,
            step: None,
            points: Vec::new(),
        }
    }

    /// The fault point after the last write so far.
    fn point(&mut self, name: &'static str) {
        if let Some(last) = self.writes.len().checked_sub(1) {
            self.points.push((last, name));
        }
    }

    fn event(
        &mut self,
        regarding: ObjectReference,
        severity: Severity,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        self.writes.push(Write::Event(EventWrite {
            regarding,
            of_created: false,
            severity,
            reason,
            action,
            note,
        }));
    }

    /// The named points at the boundary after write `i`.
    pub(super) fn points_after(&self, i: usize) -> impl Iterator<Item = &'static str> + '_ {
        self.points
            .iter()
            .filter(move |(at, _)| *at == i)
            .map(|(_, name)| *name)
    }
}

/// The action's name in a fault point: every action is named, so a new one
/// must be placed here.
pub(super) fn label(action: &Action) -> &'static str {
    match action {
        Action::Nothing { .. } => "Nothing",
        Action::Wait { .. } => "Wait",
        Action::RecordMatch => "RecordMatch",
        Action::Finish { .. } => "Finish",
        Action::Ask(_) => "Ask",
        Action::Protect => "Protect",
        Action::CreateClone(_) => "CreateClone",
        Action::DeleteClone { .. } => "DeleteClone",
        Action::Lock { .. } => "Lock",
        Action::RecordSource(_) => "RecordSource",
        Action::Retain { .. } => "Retain",
        Action::CreateDestination(_) => "CreateDestination",
        Action::RecordDestination(_) => "RecordDestination",
        Action::Adopt(_) => "Adopt",
        Action::Commit { .. } => "Commit",
        Action::ProtectDestination { .. } => "ProtectDestination",
        Action::UnprotectDestination { .. } => "UnprotectDestination",
        Action::Rehold { .. } => "Rehold",
        Action::UnlockDestination => "UnlockDestination",
        Action::ReleaseSource { .. } => "ReleaseSource",
        Action::Settle { .. } => "Settle",
        Action::Complete => "Complete",
        Action::DestinationLost { .. } => "DestinationLost",
        Action::Unmark { .. } => "Unmark",
        Action::DeleteDestination { .. } => "DeleteDestination",
        Action::Unlock { .. } => "Unlock",
        Action::Mirror => "Mirror",
        Action::DropFinalizers => "DropFinalizers",
        Action::Expire => "Expire",
        Action::Snapshot(a) => snapshot_label(a),
    }
}

/// The protocol step an action carries out, for the fault hooks; `None`
/// for an action that is no step of R1–R6 (or C1). Every action is named,
/// so a new one must be placed here.
pub(super) fn step_of(action: &Action) -> Option<Step> {
    match action {
        Action::CreateClone(_) => Some(Step::Clone),
        Action::Lock { .. } | Action::RecordSource(_) => Some(Step::Lock),
        Action::Retain { .. } => Some(Step::Retain),
        Action::CreateDestination(_)
        | Action::RecordDestination(_)
        | Action::Adopt(_)
        | Action::ProtectDestination { .. } => Some(Step::CreateDestination),
        Action::Commit { .. } => Some(Step::Commit),
        Action::ReleaseSource { .. } => Some(Step::ReleaseSource),
        Action::UnlockDestination | Action::Settle { .. } | Action::Complete => Some(Step::Settle),
        Action::Snapshot(a) => snapshot_step_of(a),
        Action::Nothing { .. }
        | Action::Wait { .. }
        | Action::RecordMatch
        | Action::Finish { .. }
        | Action::Ask(_)
        | Action::Protect
        | Action::DeleteClone { .. }
        | Action::UnprotectDestination { .. }
        | Action::Rehold { .. }
        | Action::DestinationLost { .. }
        | Action::Unmark { .. }
        | Action::DeleteDestination { .. }
        | Action::Unlock { .. }
        | Action::Mirror
        | Action::DropFinalizers
        | Action::Expire => None,
    }
}

/// The writes `action`, decided on `f`, makes, in order, and what then.
pub(super) fn plan(f: &Facts, action: &Action) -> Plan {
    let s = &f.source;
    let d = peer_or_self(f);
    let source_ns = s.source_namespace();
    let mut p = Plan::new(Next::Now);
    p.step = step_of(action);
    match action {
        Action::Nothing { after } => p.then = after.map_or(Next::Done, Next::After),
        Action::Ask(_) => {}
        Action::Wait {
            phase,
            report,
            in_use,
            after,
        } => {
            let in_use = in_use.then_some(report.reason);
            pair(f, &mut p, report, |_| Edit::Waiting {
                phase: *phase,
                in_use,
            });
            let was = s.status.as_ref().and_then(|st| st.reason.as_deref());
            if was != Some(report.reason)
                && report.reason == REASON_SOURCE_IN_USE
                && f.snapshot.is_none()
            {
                let claim = claim_reference(
                    source_ns,
                    &moved_claim_name_of(s, &f.peer).unwrap_or_default(),
                    None,
                );
                for regarding in [reference_to(s), claim] {
                    p.event(
                        regarding,
                        Severity::Warning,
                        report.reason,
                        "Wait",
                        report.source.clone(),
                    );
                }
            }
            // The claims that do not fit are told when what is wrong
            // changes (a claim comes, goes, or the pair starts waiting).
            // (The request's message lists them; the offer's does not.)
            let said = other(f)
                .and_then(|d| d.status.as_ref())
                .and_then(|st| st.message.as_deref());
            if report.reason == REASON_WAITING_FOR_CLAIM
                && said != Some(report.destination.as_str())
            {
                claims_told(f, &mut p);
            }
            if report.reason == REASON_SOURCE_RELEASE_REFUSED {
                p.event(
                    reference_to(s),
                    Severity::Warning,
                    report.reason,
                    Step::ReleaseSource.action(),
                    report.source.clone(),
                );
            }
            p.then = after.map_or(Next::Done, Next::After);
        }
        Action::RecordMatch => {
            let matched = "matched with the transfer in the other namespace";
            pair(f, &mut p, &Report::shared(REASON_MATCHED, matched), |_| {
                Edit::Matched
            });
        }
        Action::Finish { phase, report } => {
            finish(f, &mut p, *phase, report);
            if let Some(claim) = &f.moved_claim {
                p.event(
                    claim_reference(source_ns, &claim.name, Some(&claim.uid)),
                    Severity::Warning,
                    report.reason,
                    "Transfer",
                    format!("NamespaceTransfer {}: {}", object_key(s), report.source),
                );
            }
        }
        Action::Protect => {
            p.writes.push(Write::Finalizer {
                on: On::Source,
                present: true,
            });
            if other(f).is_some() {
                p.writes.push(Write::Finalizer {
                    on: On::Peer,
                    present: true,
                });
            }
        }
        Action::CreateClone(clone) => {
            let name = clone.metadata.name.clone().unwrap_or_default();
            let origin = &s.spec.source.name;
            p.writes.push(Write::Create {
                step: Step::Clone,
                namespace: source_ns.to_owned(),
                claim: clone.clone(),
            });
            p.point(Step::Clone.name());
            let note = format!(
                "created {source_ns}/{name}, a clone of {source_ns}/{origin}, to hand over"
            );
            p.writes.push(Write::Event(EventWrite {
                regarding: claim_reference(source_ns, &name, None),
                of_created: true,
                severity: Severity::Normal,
                reason: REASON_CLONE_CREATED,
                action: Step::Clone.action(),
                note: note.clone(),
            }));
            p.event(
                reference_to(s),
                Severity::Normal,
                REASON_CLONE_CREATED,
                Step::Clone.action(),
                note,
            );
            // The destination learns that its clone is on the way, not the
            // clone's name (it names the offer).
            if let Some(d) = other(f) {
                p.event(
                    reference_to(d),
                    Severity::Normal,
                    REASON_CLONE_CREATED,
                    Step::Clone.action(),
                    format!(
                        "the provisioner is making a clone of {source_ns}/{origin} for this transfer"
                    ),
                );
            }
        }
        Action::DeleteClone { name, .. } => {
            cluster(f, &mut p, action, None);
            p.event(
                reference_to(s),
                Severity::Normal,
                "CloneDeleted",
                "RollBack",
                format!("deleted the clone {source_ns}/{name}, which was never handed over"),
            );
        }
        Action::RecordSource(snapshot) => record_source(f, &mut p, snapshot),
        Action::Retain { .. } => {
            if cluster_writes(f, action).is_empty() {
                return p;
            }
            // The volume's write alone. No decision reads the step (the
            // volume's annotation says whether R2 happened) or the
            // `Authorized` condition: R3's record, right after, carries both
            // (`Edit::Destination`), one write of ours fewer per pair.
            cluster(f, &mut p, action, Some(Step::Retain));
        }
        Action::CreateDestination(claim) => {
            let Some(d) = d else { return p };
            let (dest_ns, dest_name) = destination_of(s, d);
            p.writes.push(Write::Create {
                step: Step::CreateDestination,
                namespace: dest_ns.to_owned(),
                claim: claim.clone(),
            });
            p.point(Step::CreateDestination.name());
            record_destination(
                f,
                &mut p,
                ClaimReference {
                    namespace: dest_ns.to_owned(),
                    name: dest_name.to_owned(),
                    uid: String::new(),
                },
            );
            // The record carried the step to its holder; the other side
            // hears of it at the end (`peer_keeps_steps`). No Event: R3 is
            // no phase change (DESIGN §2.1.6); the claim hears of the pair
            // when it completes (`TransferCompleted`).
        }
        Action::RecordDestination(reference) => record_destination(f, &mut p, reference.clone()),
        Action::Adopt(reference) => adopt(f, &mut p, reference),
        Action::Commit { destination, .. } => {
            if f.volume.is_none() {
                return p;
            }
            cluster(f, &mut p, action, Some(Step::Commit));
            let rebound = format!(
                "the volume now names {}/{}",
                destination.namespace, destination.name
            );
            let report = Report::shared(REASON_COMMITTED, rebound.clone());
            pair_step(f, &mut p, &report, |_| Edit::Committed {
                rebound: rebound.clone(),
            });
            // No Event on the transfer: the commit is no phase change (it
            // stays Rebinding) and its step and condition say it (DESIGN
            // §2.1.6: Events for phase changes and refusals).
            // The claim a populating request adopted is its tenant's: it
            // hears of each step (DESIGN §2.3).
            if other(f).is_some_and(NamespaceTransfer::populates) {
                p.event(
                    claim_reference(
                        &destination.namespace,
                        &destination.name,
                        Some(&destination.uid),
                    ),
                    Severity::Normal,
                    REASON_COMMITTED,
                    Step::Commit.action(),
                    format!(
                        "the volume from {} now names this claim; the cluster binds it next",
                        received_from(s)
                    ),
                );
            }
        }
        Action::Lock { .. }
        | Action::ProtectDestination { .. }
        | Action::UnprotectDestination { .. }
        | Action::Rehold { .. }
        | Action::UnlockDestination
        | Action::Unmark { .. }
        | Action::DeleteDestination { .. }
        | Action::Unlock { .. } => cluster(f, &mut p, action, None),
        Action::ReleaseSource { uid } => {
            let name = recorded_source(s).map_or(s.spec.source.name.as_str(), |snap| &snap.name);
            // Scheduled between the last check and the commit: only
            // reported, the volume is the destination's already.
            let users = f.users.as_deref().unwrap_or_default();
            if !users.is_empty() {
                let volume = f.volume.as_ref().map_or("", |v| v.name.as_str());
                let note = format!(
                    "{}, but its volume {volume} was already handed over",
                    in_use_message(source_ns, name, users)
                );
                for regarding in [reference_to(s), claim_reference(source_ns, name, Some(uid))] {
                    p.event(
                        regarding,
                        Severity::Warning,
                        REASON_SOURCE_IN_USE,
                        Step::ReleaseSource.action(),
                        note.clone(),
                    );
                }
            }
            // No record of its own: whether R5 happened is read from the
            // source claim, and the completion, right after, records the
            // step with `Settled` (`record_step` fills in the steps before).
            cluster(f, &mut p, action, Some(Step::ReleaseSource));
        }
        Action::Settle { .. } => cluster(f, &mut p, action, Some(Step::Settle)),
        Action::Complete => {
            let (Some(volume), Some(dest)) = (&f.volume, recorded_destination(s)) else {
                return p;
            };
            let from = recorded_source(s)
                .map(|snap| format!("{source_ns}/{}", snap.name))
                .unwrap_or_default();
            let to = format!("{}/{}", dest.namespace, dest.name);
            let report = Report {
                reason: REASON_COMPLETED,
                source: format!("volume {} moved from {from} to {to}", volume.name),
                destination: completed_for_destination(s, &volume.name, &to),
            };
            // A populating request records the claim it served (its R3
            // record may be the one a crash kept from being written).
            let served = other(f).filter(|d| d.populates()).map(|_| dest.clone());
            // The peer is let go with its Completed write; a standing
            // offer's request holds the pair's record, and waits for
            // `tidy` as the source object does.
            let standing = is_standing_pair(s);
            pair(f, &mut p, &report, |is_source| Edit::Completed {
                volume: volume.name.clone(),
                served: served.clone().filter(|_| !is_source),
                release: !is_source && !standing,
            });
            p.event(
                claim_reference(&dest.namespace, &dest.name, Some(&dest.uid)),
                Severity::Normal,
                "TransferCompleted",
                Step::Settle.action(),
                report.destination,
            );
        }
        Action::DestinationLost { report } => {
            pair(f, &mut p, report, |_| Edit::Lost {
                reason: report.reason,
            });
            p.event(
                reference_to(s),
                Severity::Warning,
                REASON_DESTINATION_LOST,
                "Settle",
                report.source.clone(),
            );
        }
        Action::Snapshot(a) => snapshot::plan(f, &mut p, a),
        Action::Mirror => {
            if other(f).is_some() && !is_standing_pair(s) {
                let status = s.status.clone().unwrap_or_default();
                p.writes.push(Write::Status {
                    on: On::Peer,
                    change: StatusChange {
                        say: None,
                        edit: Edit::Mirror(Box::new(status)),
                        peer_of: None,
                        peer_phase: None,
                    },
                });
            }
        }
        Action::DropFinalizers if is_standing_pair(s) => {
            // The offer's finalizer is its own to let go (`tend_offer`).
            if d.is_some() {
                p.writes.push(Write::Finalizer {
                    on: On::Peer,
                    present: false,
                });
            }
            p.writes.push(Write::Wake(On::Source));
        }
        Action::DropFinalizers => {
            // The destination side first, so that a Destination never
            // waits on a vanished Source.
            if other(f).is_some() {
                p.writes.push(Write::Finalizer {
                    on: On::Peer,
                    present: false,
                });
            }
            p.writes.push(Write::Finalizer {
                on: On::Source,
                present: false,
            });
        }
        Action::Expire => {
            let (on, t) = if is_standing_pair(s) {
                match d {
                    Some(d) => (On::Peer, d),
                    None => {
                        p.then = Next::Done;
                        return p;
                    }
                }
            } else {
                (On::Source, s)
            };
            p.then = match expiry(t, f.now) {
                Expiry::Keep => Next::Done,
                Expiry::After(left) => Next::After(left),
                Expiry::Due => {
                    p.writes.push(Write::Delete(on));
                    Next::Done
                }
            };
        }
    }
    p
}

/// The peer, when it is another object than the source (not a rename).
fn other(f: &Facts) -> Option<&NamespaceTransfer> {
    peer_or_self(f).filter(|d| d.metadata.uid != f.source.metadata.uid)
}

/// The claim and volume writes of `action` ([`cluster_writes`]), with
/// `step`'s name on the boundary after the first.
fn cluster(f: &Facts, p: &mut Plan, action: &Action, step: Option<Step>) {
    let first = p.writes.len();
    p.writes
        .extend(cluster_writes(f, action).into_iter().map(Write::Cluster));
    if let Some(step) = step.filter(|_| p.writes.len() > first) {
        p.points.push((first, step.name()));
    }
}

/// The status writes of one change to the pair, each side with its own
/// words of `report` and its peer recorded. The source object is written
/// first: its record is the one the pair goes by. A standing offer's pair
/// keeps its state on the request alone (the offer is shared, its record
/// written at R1).
fn pair(f: &Facts, p: &mut Plan, report: &Report, edit: impl Fn(bool) -> Edit) {
    pair_to(f, p, report, edit, true);
}

/// [`pair`] for a step that changes no phase: the peer hears it only if it
/// keeps the pair's steps itself ([`peer_keeps_steps`]).
fn pair_step(f: &Facts, p: &mut Plan, report: &Report, edit: impl Fn(bool) -> Edit) {
    pair_to(f, p, report, edit, peer_keeps_steps(f));
}

/// Whether the peer must hear each step as it is done: only a standing
/// offer's request, which holds its pair's steps itself. Any other peer
/// hears of the pair at its phase changes; its Completed write copies the
/// source object's steps, with their times, and its `Authorized` and
/// `Rebound` conditions (`status::apply_change`). No decision reads a
/// peer's steps or conditions, so each step is one write, not two.
fn peer_keeps_steps(f: &Facts) -> bool {
    is_standing_pair(&f.source)
}

fn pair_to(f: &Facts, p: &mut Plan, report: &Report, edit: impl Fn(bool) -> Edit, peer: bool) {
    let s = &f.source;
    let d = other(f).filter(|_| peer);
    // The peer's write: its words, and the source object as its peer.
    let to_peer = |peer_phase: PeerPhase| Write::Status {
        on: On::Peer,
        change: StatusChange {
            say: Some((report.reason, report.destination.clone())),
            edit: edit(false),
            peer_of: Some(On::Source),
            peer_phase: Some(peer_phase),
        },
    };
    if is_standing_pair(s) {
        if d.is_some() {
            // The view carries the offer's own phase (`standing_view`).
            let offer_phase = s.status.as_ref().and_then(|st| st.peer_phase);
            p.writes.push(to_peer(PeerPhase::Known(offer_phase)));
        }
        return;
    }
    let itself = role_of(s) == Some(Role::Both);
    p.writes.push(Write::Status {
        on: On::Source,
        change: StatusChange {
            say: Some((report.reason, report.source.clone())),
            edit: edit(true),
            peer_of: if d.is_some() {
                Some(On::Peer)
            } else if itself {
                Some(On::Source)
            } else {
                None
            },
            peer_phase: Some(PeerPhase::Own),
        },
    });
    if d.is_some() {
        p.writes.push(to_peer(PeerPhase::Written));
    }
}

/// A finished phase on the pair, each side with the words it may read; a
/// pair without its peer writes the source object alone (a standing offer's
/// pair without its request: nothing, the offer goes on).
fn finish(f: &Facts, p: &mut Plan, phase: Phase, report: &Report) {
    let s = &f.source;
    let edit = Edit::Finished {
        phase,
        reason: report.reason,
    };
    if peer_or_self(f).is_some() {
        pair(f, p, report, |_| edit.clone());
    } else if !is_standing_pair(s) {
        p.writes.push(Write::Status {
            on: On::Source,
            change: finished_alone(s, phase, report),
        });
    }
}

/// A finished phase on `t` alone (no peer to write), in the words its
/// side may read.
pub(super) fn finished_alone(t: &NamespaceTransfer, phase: Phase, report: &Report) -> StatusChange {
    let text = if role_of(t) == Some(Role::Destination) {
        &report.destination
    } else {
        &report.source
    };
    StatusChange {
        say: Some((report.reason, text.clone())),
        edit: Edit::Finished {
            phase,
            reason: report.reason,
        },
        peer_of: None,
        peer_phase: None,
    }
}

/// R1's memory: for a standing offer's pair, first the offer's record of
/// the pair and its count of the clone (one write, under the offer's
/// lock); then the pair's state, and the Event on the locked claim.
fn record_source(f: &Facts, p: &mut Plan, snapshot: &SourceClaimSnapshot) {
    let s = &f.source;
    let source_ns = s.source_namespace();
    let d = peer_or_self(f);
    if let (true, Some(d)) = (is_standing_pair(s), d) {
        p.writes.push(Write::Status {
            on: On::Source,
            change: StatusChange {
                say: None,
                edit: Edit::PairRecord(Box::new(PairRecord {
                    request: reference(d, s),
                    source_claim: snapshot.clone(),
                })),
                peer_of: None,
                peer_phase: None,
            },
        });
        p.point(R1_COUNT);
    }
    let volume = &snapshot.volume_name;
    let report = Report::new(
        REASON_LOCKED,
        format!(
            "locked PersistentVolumeClaim {source_ns}/{}; moving volume {volume}",
            snapshot.name
        ),
    );
    let released = format!(
        "no pod uses PersistentVolumeClaim {source_ns}/{}",
        snapshot.name
    );
    pair(f, p, &report, |is_source| Edit::Locked {
        snapshot: is_source.then(|| snapshot.clone()),
        // The claim freed is the clone in Clone mode: the destination reads
        // only that the source's is free.
        released: if is_source {
            released.clone()
        } else {
            "no pod in the source namespace uses the source claim".to_owned()
        },
    });
    p.point(Step::Lock.name());
    if let Some(claim) = &f.moved_claim {
        let (dest_ns, dest_name) = d.map_or((source_ns, ""), |d| destination_of(s, d));
        p.event(
            claim_reference(source_ns, &claim.name, Some(&claim.uid)),
            Severity::Normal,
            REASON_LOCKED,
            Step::Lock.action(),
            format!(
                "locked for NamespaceTransfer {}: its volume {volume} moves to {dest_ns}/{dest_name}",
                object_key(s)
            ),
        );
    }
}

/// R3's memory, on the object that holds the pair's record (the source
/// object, or a standing offer's request): from now on only that claim is
/// the destination.
fn record_destination(f: &Facts, p: &mut Plan, reference: ClaimReference) {
    let on = if is_standing_pair(&f.source) {
        if peer_or_self(f).is_none() {
            return;
        }
        On::Peer
    } else {
        On::Source
    };
    p.writes.push(Write::Status {
        on,
        change: StatusChange {
            say: None,
            edit: Edit::Destination(reference),
            peer_of: None,
            peer_phase: None,
        },
    });
}

/// R3 for a populating request: the adopted claim recorded on the source
/// object (the pair's memory) and on the request (which serves it, in its
/// own namespace); the claim is told, and so is every other claim that
/// named the request, which serves one.
fn adopt(f: &Facts, p: &mut Plan, reference: &ClaimReference) {
    record_destination(f, p, reference.clone());
    p.point(Step::CreateDestination.name());
    let Some(d) = other(f) else { return };
    // A standing offer's pair keeps its record on the request already.
    if !is_standing_pair(&f.source) {
        p.writes.push(Write::Status {
            on: On::Peer,
            change: StatusChange {
                say: None,
                edit: Edit::Destination(reference.clone()),
                peer_of: None,
                peer_phase: None,
            },
        });
    }
    let (ns, request) = (d.own_namespace(), name_of(d));
    p.event(
        claim_reference(ns, &reference.name, Some(&reference.uid)),
        Severity::Normal,
        "Adopted",
        "Adopt",
        format!(
            "NamespaceTransfer {ns}/{request} adopted this claim to receive {}",
            received_from(&f.source)
        ),
    );
    let charged = super::decide::charged(f);
    let misfit = |c: &Claim| {
        f.volume
            .as_ref()
            .and_then(|v| super::decide::misfit(c, v, charged))
    };
    for other in f.claimants.iter().filter(|c| c.uid != reference.uid) {
        match misfit(other) {
            Some(why) => tell_misfit(p, d, other, &why),
            None => p.event(
                claim_reference(ns, &other.name, Some(&other.uid)),
                Severity::Warning,
                super::waiting::REASON_NOT_ADOPTED,
                "Adopt",
                format!(
                    "NamespaceTransfer {ns}/{request} moves one volume, and adopted PersistentVolumeClaim {}, an older claim that names it",
                    reference.name
                ),
            ),
        }
    }
}

/// A Warning on `claim`, which names the request `d` and does not fit the
/// volume: `why`.
fn tell_misfit(p: &mut Plan, d: &NamespaceTransfer, claim: &Claim, why: &str) {
    let (ns, request) = (d.own_namespace(), name_of(d));
    p.event(
        claim_reference(ns, &claim.name, Some(&claim.uid)),
        Severity::Warning,
        REASON_CLAIM_MISMATCH,
        "Adopt",
        format!("NamespaceTransfer {ns}/{request} cannot give this claim its volume: {why}"),
    );
}

/// A populating request that waits for a claim: every claim that names it
/// and does not fit the volume is told why.
fn claims_told(f: &Facts, p: &mut Plan) {
    let (Some(d), Some(volume)) = (other(f), &f.volume) else {
        return;
    };
    for (claim, why) in misfits(f, volume) {
        tell_misfit(p, d, claim, &why);
    }
}

/// `step` recorded on the pair (a standing offer's pair on the request
/// alone), leaving reason and message as they are.
fn mark_step(f: &Facts, p: &mut Plan, step: StepName) {
    if !is_standing_pair(&f.source) {
        p.writes.push(Write::Status {
            on: On::Source,
            change: step_change(step),
        });
    }
    if other(f).is_some() && peer_keeps_steps(f) {
        p.writes.push(Write::Status {
            on: On::Peer,
            change: step_change(step),
        });
    }
}

fn step_change(step: StepName) -> StatusChange {
    StatusChange {
        say: None,
        edit: Edit::Step(step),
        peer_of: None,
        peer_phase: None,
    }
}

#[cfg(test)]
mod tests;
