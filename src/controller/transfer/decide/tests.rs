//! The protocol's decisions as table rows: each test builds the facts one
//! reconcile would read and checks the one action that follows.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::meta::Requester;
use crate::api::namespace_transfer::ANNOTATION_TRANSFER_LOCK;
use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransferSpec, NamespaceTransferStatus, PeerReference,
    TransferDestination, TransferSource,
};
use crate::api::namespace_transfer::{ANNOTATION_CLONE_OF, REASON_CLONE_FAILED};
use crate::controller::transfer::facts::{Claim, Volume};
use crate::controller::transfer::facts::{ClaimRef, ClaimShape};
use crate::controller::transfer::matching::destination_lock;

const S_UID: &str = "uid-give";
const D_UID: &str = "uid-take";
const CLAIM_UID: &str = "uid-db";
const DEST_UID: &str = "uid-dest";

fn transfer(ns: &str, name: &str, uid: &str, spec: NamespaceTransferSpec) -> NamespaceTransfer {
    NamespaceTransfer {
        metadata: ObjectMeta {
            namespace: Some(ns.to_owned()),
            name: Some(name.to_owned()),
            uid: Some(uid.to_owned()),
            creation_timestamp: Some(Time(Timestamp::from_second(1_000).unwrap())),
            ..ObjectMeta::default()
        },
        spec: NamespaceTransferSpec {
            requester: Some(Requester {
                username: format!("{name}-user"),
                ..Requester::default()
            }),
            ..spec
        },
        ..NamespaceTransfer::default()
    }
}

/// `prod/give` offers `prod/db` to `dev`.
fn offer() -> NamespaceTransfer {
    transfer(
        "prod",
        "give",
        S_UID,
        NamespaceTransferSpec {
            source: TransferSource {
                name: "db".to_owned(),
                ..TransferSource::default()
            },
            destination: TransferDestination {
                namespace: "dev".to_owned(),
                name: String::new(),
                ..TransferDestination::default()
            },
            ..NamespaceTransferSpec::default()
        },
    )
}

/// `dev/take` requests `prod/db` as `dev/db`.
fn request() -> NamespaceTransfer {
    transfer(
        "dev",
        "take",
        D_UID,
        NamespaceTransferSpec {
            source: TransferSource {
                namespace: "prod".to_owned(),
                name: "db".to_owned(),
                ..TransferSource::default()
            },
            destination: TransferDestination {
                namespace: "dev".to_owned(),
                name: "db".to_owned(),
                ..TransferDestination::default()
            },
            ..NamespaceTransferSpec::default()
        },
    )
}

fn claim(name: &str, uid: &str, volume: Option<&str>) -> Claim {
    Claim {
        name: name.to_owned(),
        uid: uid.to_owned(),
        resource_version: "10".to_owned(),
        created: 1_000,
        phase: if volume.is_some() { "Bound" } else { "Pending" }.to_owned(),
        volume_name: volume.map(str::to_owned),
        lock: None,
        clone_for: None,
        populator: None,
        deleting: false,
        bind_completed: volume.is_some(),
        finalizers: Vec::new(),
        shape: ClaimShape {
            storage_class_name: Some("fast".to_owned()),
            access_modes: vec!["ReadWriteOnce".to_owned()],
            volume_mode: Some("Filesystem".to_owned()),
            request: Some("1Gi".to_owned()),
            volume_attributes_class_name: None,
            volume_name: volume.map(str::to_owned),
            data_source_claim: None,
            data_source_snapshot: None,
            extras: false,
            selector_or_limits: false,
        },
    }
}

fn volume(bound_to: Option<(&str, &str, &str)>) -> Volume {
    Volume {
        name: "pv-db".to_owned(),
        uid: "uid-pv".to_owned(),
        resource_version: "20".to_owned(),
        claim_ref: bound_to.map(|(ns, name, uid)| ClaimRef {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        }),
        reclaim_policy: "Delete".to_owned(),
        original_policy: None,
        marker: None,
        destination_lost: None,
        phase: "Bound".to_owned(),
        storage_class_name: Some("fast".to_owned()),
        capacity: Some("2Gi".to_owned()),
        access_modes: vec!["ReadWriteOnce".to_owned()],
        volume_mode: None,
        volume_attributes_class_name: None,
        resizing: false,
        finalizers: Vec::new(),
        deleting: false,
        took_provisioner_finalizer: false,
    }
}

/// A matched pair, nothing touched, source bound, nobody using it.
pub(in crate::controller::transfer) fn fresh() -> Facts {
    let mut s = offer();
    let mut d = request();
    s.status = Some(NamespaceTransferStatus {
        phase: Some(Phase::WaitingForRelease),
        peer: Some(PeerReference {
            namespace: "dev".to_owned(),
            name: "take".to_owned(),
            uid: Some(D_UID.to_owned()),
        }),
        ..NamespaceTransferStatus::default()
    });
    d.status = Some(NamespaceTransferStatus {
        phase: Some(Phase::WaitingForRelease),
        peer: Some(PeerReference {
            namespace: "prod".to_owned(),
            name: "give".to_owned(),
            uid: Some(S_UID.to_owned()),
        }),
        ..NamespaceTransferStatus::default()
    });
    Facts {
        now: 2_000,
        allow_all_storage_classes: false,
        source: s,
        peer: Peer::Found(Box::new(d)),
        moved_claim: Some(claim("db", CLAIM_UID, Some("pv-db"))),
        origin_not_ready: None,
        clone_source: None,
        clone_failure: None,
        clone_timeout: 300,
        clone_waits_for_consumer: None,
        at_capacity: false,
        claimants: Vec::new(),
        destination_claim: None,
        volume: Some(volume(Some(("prod", "db", CLAIM_UID)))),
        class: ClassPolicy::Allowed,
        users: Some(Vec::new()),
        lock_holder_active: false,
        rights: None,
        admission: None,
        live: true,
        refused: None,
        snapshot: None,
    }
}

pub(in crate::controller::transfer) fn protect(f: &mut Facts) {
    let finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
    f.source.metadata.finalizers = finalizers.clone();
    if let Peer::Found(d) = &mut f.peer {
        d.metadata.finalizers = finalizers;
    }
}

/// After R1: locked, snapshot recorded.
pub(in crate::controller::transfer) fn locked() -> Facts {
    let mut f = fresh();
    protect(&mut f);
    f.moved_claim.as_mut().unwrap().lock = Some(S_UID.to_owned());
    let snapshot = snapshot_of(f.moved_claim.as_ref().unwrap(), f.volume.as_ref().unwrap());
    f.source.status.as_mut().unwrap().source_claim = Some(snapshot);
    f.source.status.as_mut().unwrap().phase = Some(Phase::Rebinding);
    f
}

/// After R2: the volume is marked and retained.
pub(in crate::controller::transfer) fn retained() -> Facts {
    let mut f = locked();
    let v = f.volume.as_mut().unwrap();
    v.marker = Some(S_UID.to_owned());
    v.original_policy = Some("Delete".to_owned());
    v.reclaim_policy = "Retain".to_owned();
    f
}

/// After R3: the destination claim exists and is recorded.
pub(in crate::controller::transfer) fn created() -> Facts {
    let mut f = retained();
    let mut dest = claim("db", DEST_UID, None);
    dest.lock = Some(destination_lock(&f.source, "dev", "db"));
    dest.finalizers = vec![FINALIZER_TRANSFER_PROTECTION.to_owned()];
    dest.shape.volume_name = Some("pv-db".to_owned());
    dest.shape.request = Some("2Gi".to_owned());
    f.destination_claim = Some(dest);
    f.source.status.as_mut().unwrap().destination_claim = Some(ClaimReference {
        namespace: "dev".to_owned(),
        name: "db".to_owned(),
        uid: DEST_UID.to_owned(),
    });
    f
}

/// After R4: the volume names the destination.
pub(in crate::controller::transfer) fn committed() -> Facts {
    let mut f = created();
    f.volume.as_mut().unwrap().claim_ref = Some(ClaimRef {
        namespace: "dev".to_owned(),
        name: "db".to_owned(),
        uid: DEST_UID.to_owned(),
    });
    f
}

fn finished(f: &mut Facts, phase: Phase) {
    f.source.status.as_mut().unwrap().phase = Some(phase);
}

#[track_caller]
fn assert_finish(action: Action, phase: Phase, reason: &str) -> Report {
    match action {
        Action::Finish { phase: p, report } => {
            assert_eq!(p, phase, "{report:?}");
            assert_eq!(report.reason, reason, "{report:?}");
            report
        }
        other => panic!("expected Finish {phase:?} {reason}, got {other:?}"),
    }
}

/// The wait `action` is, in `phase` for `reason`, with a timer (nothing
/// else wakes a pair that waits on objects it does not watch): its report.
#[track_caller]
pub(in crate::controller::transfer::decide) fn assert_polled_wait(
    action: Action,
    phase: Phase,
    reason: &str,
) -> Report {
    match action {
        Action::Wait {
            phase: p,
            report,
            after,
            ..
        } => {
            assert_eq!(p, phase, "{report:?}");
            assert_eq!(report.reason, reason, "{report:?}");
            assert!(after.is_some(), "a timer wakes it: {report:?}");
            report
        }
        other => panic!("expected Wait {phase:?} {reason}, got {other:?}"),
    }
}

#[test]
fn an_unmatched_offer_waits_for_its_peer() {
    let mut f = fresh();
    f.peer = Peer::Unmatched;
    f.source.status = None;
    match decide(&f) {
        Action::Wait { phase, report, .. } => {
            assert_eq!(phase, Phase::WaitingForPeer);
            assert_eq!(report.reason, REASON_WAITING_FOR_PEER);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unmatched_offer_without_a_deadline_waits_for_an_event_not_a_timer() {
    let mut f = fresh();
    f.peer = Peer::Unmatched;
    f.source.status = None;
    f.source.spec.active_deadline_seconds = None;
    match decide(&f) {
        Action::Wait { after, .. } => assert_eq!(after, None),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unmatched_offer_with_a_deadline_looks_again_when_it_passes() {
    let mut f = fresh();
    f.peer = Peer::Unmatched;
    f.source.status = None;
    f.source.spec.active_deadline_seconds = Some(60);
    f.source.metadata.creation_timestamp = Some(Time(Timestamp::from_second(f.now - 10).unwrap()));
    match decide(&f) {
        Action::Wait { after, .. } => assert_eq!(after, Some(Duration::from_secs(50))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_match_is_recorded_on_both_sides_before_anything_else() {
    let mut f = fresh();
    f.source.status = None;
    assert_eq!(decide(&f), Action::RecordMatch);
    // A record without the peer's uid is not a record.
    let mut f = fresh();
    f.source.status.as_mut().unwrap().peer.as_mut().unwrap().uid = None;
    assert_eq!(decide(&f), Action::RecordMatch);
}

#[test]
fn the_preconditions_are_checked_in_order_before_the_lock() {
    let mut f = fresh();
    f.moved_claim = None;
    assert_finish(decide(&f), Phase::Failed, REASON_SOURCE_NOT_FOUND);

    let mut f = fresh();
    f.class = ClassPolicy::Refused("no".to_owned());
    assert_finish(decide(&f), Phase::Failed, REASON_STORAGE_CLASS_NOT_ALLOWED);

    let mut f = fresh();
    f.destination_claim = Some(claim("db", "someone-elses", None));
    assert_finish(decide(&f), Phase::Failed, REASON_DESTINATION_EXISTS);

    let mut f = fresh();
    f.moved_claim.as_mut().unwrap().lock = Some("uid-other".to_owned());
    f.lock_holder_active = true;
    assert!(
        matches!(decide(&f), Action::Wait { report, .. } if report.reason == REASON_SOURCE_LOCKED)
    );

    // The finalizers come first, and need nobody's users listed.
    let mut f = fresh();
    f.users = None;
    assert_eq!(decide(&f), Action::Protect);
    let mut f = fresh();
    protect(&mut f);
    assert_eq!(
        decide(&f),
        Action::Lock {
            resource_version: "10".to_owned()
        }
    );
    f.moved_claim.as_mut().unwrap().lock = Some(S_UID.to_owned());
    assert!(
        matches!(decide(&f), Action::RecordSource(snap) if snap.uid == CLAIM_UID && snap.volume_name == "pv-db")
    );
}

#[test]
fn a_pod_using_the_source_holds_the_pair_and_only_the_source_side_learns_its_name() {
    let mut protected = fresh();
    protect(&mut protected);
    for mut f in [protected, locked(), created()] {
        f.users = Some(vec!["secret-app".to_owned()]);
        match decide(&f) {
            Action::Wait { report, in_use, .. } => {
                assert_eq!(report.reason, REASON_SOURCE_IN_USE);
                assert!(in_use);
                assert!(report.source.contains("secret-app"), "{report:?}");
                assert!(!report.destination.contains("secret-app"), "{report:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_pods_are_listed_before_the_lock_r2_the_commit_and_r5_and_for_no_other_step() {
    let mut before_lock = fresh();
    protect(&mut before_lock);
    for (step, mut f) in [("R1", before_lock), ("R2", locked()), ("R4", created())] {
        f.users = None;
        assert_eq!(decide(&f), Action::Ask(Question::Users), "before {step}");
    }
    // R1's record of the claim it has locked needs no list of its own.
    let mut record = fresh();
    protect(&mut record);
    record.moved_claim.as_mut().unwrap().lock = Some(S_UID.to_owned());
    record.users = None;
    assert!(
        matches!(decide(&record), Action::RecordSource(_)),
        "{:?}",
        decide(&record)
    );
    let mut r3 = retained();
    r3.users = None;
    assert!(
        matches!(decide(&r3), Action::CreateDestination(_)),
        "{:?}",
        decide(&r3)
    );
    // R5 only reports them (the volume is the destination's already), but
    // asks all the same, of a cache: the executor reads nothing.
    let mut r5 = committed();
    r5.users = None;
    assert_eq!(decide(&r5), Action::Ask(Question::ReportedUsers));
    r5.users = Some(vec!["late-app".to_owned()]);
    assert!(
        matches!(decide(&r5), Action::ReleaseSource { .. }),
        "{:?}",
        decide(&r5)
    );
}

#[test]
fn r2_waits_for_fresh_rights_and_admission_whatever_annotations_the_volume_carries() {
    let mut f = locked();
    // A leftover annotation naming no transfer proves nothing.
    f.volume.as_mut().unwrap().original_policy = Some("Delete".to_owned());
    assert_eq!(decide(&f), Action::Ask(Question::Rights));
    f.rights = Some(Ok(()));
    assert_eq!(decide(&f), Action::Ask(Question::Admission));
    f.admission = Some(Admission::Admitted);
    assert_eq!(
        decide(&f),
        Action::Retain {
            resource_version: "20".to_owned(),
            policy: "Delete".to_owned()
        }
    );
}

#[test]
fn a_revoked_right_fails_the_pair_and_the_destination_learns_no_name() {
    let mut f = locked();
    f.rights = Some(Err(Refusal {
        side: Side::Source,
        message: "User \"alice\" can no longer delete".to_owned(),
    }));
    let report = assert_finish(decide(&f), Phase::Failed, REASON_FORBIDDEN);
    assert!(report.source.contains("alice"));
    assert!(!report.destination.contains("alice"));
    // The destination's own refusal is the destination's to read.
    f.rights = Some(Err(Refusal {
        side: Side::Destination,
        message: "User \"bob\" can no longer create".to_owned(),
    }));
    let report = assert_finish(decide(&f), Phase::Failed, REASON_FORBIDDEN);
    assert!(report.destination.contains("bob"));
}

#[test]
fn an_admission_refusal_fails_the_pair_before_the_volume_is_touched() {
    let mut f = locked();
    f.rights = Some(Ok(()));
    f.admission = Some(Admission::SourceReleaseRefused("kept by policy".to_owned()));
    let report = assert_finish(decide(&f), Phase::Failed, REASON_SOURCE_RELEASE_REFUSED);
    assert!(report.source.contains("kept by policy"));
    f.admission = Some(Admission::DestinationRefused("exceeded quota".to_owned()));
    assert_finish(decide(&f), Phase::Failed, REASON_DESTINATION_REFUSED);
}

#[test]
fn r3_makes_a_claim_for_the_whole_volume_in_its_class() {
    let f = retained();
    let Action::CreateDestination(claim) = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    let spec = claim.spec.unwrap();
    assert_eq!(spec.volume_name.as_deref(), Some("pv-db"));
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    let request = &spec.resources.unwrap().requests.unwrap()["storage"];
    assert_eq!(request.0, "2Gi", "max(1Gi requested, 2Gi capacity)");
    assert_eq!(claim.metadata.namespace.as_deref(), Some("dev"));
    assert!(claim.metadata.owner_references.is_none());
}

#[test]
fn a_volume_without_a_class_gets_a_destination_claim_that_names_none() {
    let mut f = retained();
    f.volume.as_mut().unwrap().storage_class_name = None;
    let Action::CreateDestination(claim) = decide(&f) else {
        panic!();
    };
    assert_eq!(
        claim.spec.unwrap().storage_class_name.as_deref(),
        Some(""),
        "explicitly none, so that no default class is chosen"
    );
}

#[test]
fn a_destination_claim_carrying_our_lock_is_adopted_only_when_exactly_as_r3_makes_it() {
    let mut f = created();
    f.source.status.as_mut().unwrap().destination_claim = None;
    // Exactly what R3 makes (a crash right after the create): adopted.
    assert!(matches!(decide(&f), Action::RecordDestination(r) if r.uid == DEST_UID));
    // Adopted without our finalizer, it gets it before the commit.
    let mut g = created();
    g.destination_claim.as_mut().unwrap().finalizers =
        vec!["kubernetes.io/pvc-protection".to_owned()];
    g.rights = Some(Ok(()));
    assert_eq!(
        decide(&g),
        Action::ProtectDestination {
            resource_version: "10".to_owned(),
            finalizers: vec![
                "kubernetes.io/pvc-protection".to_owned(),
                FINALIZER_TRANSFER_PROTECTION.to_owned()
            ],
            volume_name: None,
        }
    );
    // The same with a smaller request: a forgery.
    for forge in [
        |c: &mut Claim| c.shape.request = Some("1Mi".to_owned()),
        |c: &mut Claim| c.shape.storage_class_name = Some("cheap".to_owned()),
        |c: &mut Claim| c.shape.extras = true,
        |c: &mut Claim| c.shape.volume_name = Some("pv-other".to_owned()),
        |c: &mut Claim| c.lock = None,
    ] {
        let mut g = f.clone();
        forge(g.destination_claim.as_mut().unwrap());
        assert_finish(decide(&g), Phase::Failed, REASON_DESTINATION_EXISTS);
    }
}

#[test]
fn the_destination_claim_is_locked_with_nothing_the_destination_could_trace_to_the_source() {
    let f = retained();
    let Action::CreateDestination(claim) = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    let lock = &claim.metadata.annotations.unwrap()[ANNOTATION_TRANSFER_LOCK];
    assert_eq!(lock, &destination_lock(&f.source, "dev", "db"));
    for uid in [S_UID, D_UID, CLAIM_UID] {
        assert!(!lock.contains(uid), "the lock names {uid}");
    }
    // Another claim of the same transfer would carry another lock.
    assert_ne!(lock, &destination_lock(&f.source, "dev", "db2"));
    assert_ne!(lock, &destination_lock(&f.source, "dev2", "db"));
}

#[test]
fn a_destination_claim_an_older_server_locked_with_the_transfers_uid_is_still_ours() {
    // Made and not yet recorded: adopted.
    let mut f = created();
    f.source.status.as_mut().unwrap().destination_claim = None;
    f.destination_claim.as_mut().unwrap().lock = Some(S_UID.to_owned());
    assert!(matches!(decide(&f), Action::RecordDestination(r) if r.uid == DEST_UID));
    // Handed over: unlocked.
    let mut f = committed();
    f.moved_claim = None;
    f.destination_claim.as_mut().unwrap().lock = Some(S_UID.to_owned());
    assert_eq!(decide(&f), Action::UnlockDestination);
    // Another transfer's lock, of either form, is not ours.
    let Peer::Found(d) = &f.peer else {
        panic!("{:?}", f.peer);
    };
    for other in [D_UID.to_owned(), destination_lock(d, "dev", "db")] {
        let mut g = f.clone();
        g.destination_claim.as_mut().unwrap().lock = Some(other.clone());
        assert_ne!(decide(&g), Action::UnlockDestination, "{other}");
    }
}

#[test]
fn r4_commits_only_after_the_rights_are_checked_again() {
    let mut f = created();
    assert_eq!(decide(&f), Action::Ask(Question::Rights));
    f.rights = Some(Ok(()));
    assert_eq!(
        decide(&f),
        Action::Commit {
            resource_version: "20".to_owned(),
            destination: ClaimReference {
                namespace: "dev".to_owned(),
                name: "db".to_owned(),
                uid: DEST_UID.to_owned(),
            }
        }
    );
}

#[test]
fn a_destination_claim_replaced_before_the_commit_fails_the_pair() {
    let mut f = created();
    f.destination_claim.as_mut().unwrap().uid = "uid-impostor".to_owned();
    assert_finish(decide(&f), Phase::Failed, REASON_VOLUME_CHANGED);
    f.destination_claim = None;
    assert_finish(decide(&f), Phase::Failed, REASON_VOLUME_CHANGED);
}

#[test]
fn after_the_commit_only_forward_whatever_the_recorded_phase() {
    for phase in [Phase::Rebinding, Phase::Failed, Phase::Cancelled] {
        let mut f = committed();
        finished(&mut f, phase);
        assert_eq!(
            decide(&f),
            Action::ReleaseSource {
                uid: CLAIM_UID.to_owned()
            },
            "{phase:?}"
        );
    }
    // The peer gone, too: the volume says where it belongs.
    let mut f = committed();
    f.peer = Peer::Gone;
    assert!(matches!(decide(&f), Action::ReleaseSource { .. }));
}

#[test]
fn a_destination_claim_deleted_after_the_commit_keeps_the_volume_retained() {
    let mut f = committed();
    f.moved_claim = None;
    f.destination_claim = None;
    let volume = f.volume.as_mut().unwrap();
    volume.phase = "Released".to_owned();
    match decide(&f) {
        Action::DestinationLost { report } => assert_eq!(report.reason, REASON_DESTINATION_LOST),
        other => panic!("{other:?}"),
    }
    f.source.status.as_mut().unwrap().reason = Some(REASON_DESTINATION_LOST.to_owned());
    assert_eq!(decide(&f), Action::DropFinalizers);
    f.source.metadata.finalizers = None;
    if let Peer::Found(d) = &mut f.peer {
        d.metadata.finalizers = None;
    }
    assert_eq!(decide(&f), Action::Nothing { after: None });
}

#[test]
fn r6_restores_the_policy_once_the_destination_is_bound_then_completes() {
    let mut f = committed();
    f.moved_claim = None;
    assert_eq!(
        decide(&f),
        Action::UnlockDestination,
        "the lock nudges the binder"
    );
    f.destination_claim.as_mut().unwrap().lock = None;
    assert!(
        matches!(decide(&f), Action::Wait { report, .. } if report.reason == REASON_WAITING_FOR_BINDING)
    );
    let dest = f.destination_claim.as_mut().unwrap();
    dest.phase = "Bound".to_owned();
    dest.volume_name = Some("pv-db".to_owned());
    assert_eq!(
        decide(&f),
        Action::Settle {
            resource_version: "20".to_owned(),
            policy: "Delete".to_owned()
        }
    );
    let v = f.volume.as_mut().unwrap();
    v.marker = None;
    v.original_policy = None;
    v.reclaim_policy = "Delete".to_owned();
    assert_eq!(decide(&f), Action::Complete);
    finished(&mut f, Phase::Completed);
    assert!(
        matches!(decide(&f), Action::UnprotectDestination { .. }),
        "then the claim is the destination's alone"
    );
}

#[test]
fn a_destination_claim_deleted_between_the_restore_and_the_completion_gets_retain_back() {
    // Settle restored Delete; then the claim was deleted, held by our
    // finalizer.
    let mut f = committed();
    f.moved_claim = None;
    let dest = f.destination_claim.as_mut().unwrap();
    dest.lock = None;
    dest.phase = "Bound".to_owned();
    dest.volume_name = Some("pv-db".to_owned());
    dest.deleting = true;
    let v = f.volume.as_mut().unwrap();
    v.marker = None;
    v.original_policy = None;
    v.reclaim_policy = "Delete".to_owned();
    assert_eq!(
        decide(&f),
        Action::Rehold {
            resource_version: "20".to_owned()
        }
    );
    let v = f.volume.as_mut().unwrap();
    v.marker = Some(S_UID.to_owned());
    v.reclaim_policy = "Retain".to_owned();
    assert!(
        matches!(decide(&f), Action::Rehold { .. }),
        "the hold names the lost claim, which fences stale decisions"
    );
    f.volume.as_mut().unwrap().destination_lost = Some(DEST_UID.to_owned());
    assert!(matches!(decide(&f), Action::UnprotectDestination { .. }));
    f.destination_claim = None;
    assert!(matches!(decide(&f), Action::DestinationLost { .. }));
}

#[test]
fn a_rollback_fences_the_volume_first_and_restores_delete_only_on_a_bound_source() {
    let mut f = created();
    finished(&mut f, Phase::Failed);
    assert_eq!(
        decide(&f),
        Action::Unmark {
            resource_version: "20".to_owned(),
            restore: Some("Delete".to_owned())
        }
    );
    // The source claim deleted meanwhile: the volume keeps Retain.
    let mut g = f.clone();
    g.moved_claim = None;
    assert_eq!(
        decide(&g),
        Action::Unmark {
            resource_version: "20".to_owned(),
            restore: None
        }
    );
    // A Released volume keeps Retain too.
    let mut g = f.clone();
    g.volume.as_mut().unwrap().phase = "Released".to_owned();
    assert!(matches!(decide(&g), Action::Unmark { restore: None, .. }));
    // Then the destination claim, then the lock, then the finalizers.
    let v = f.volume.as_mut().unwrap();
    v.marker = None;
    v.original_policy = None;
    assert_eq!(
        decide(&f),
        Action::DeleteDestination {
            uid: DEST_UID.to_owned()
        }
    );
    f.destination_claim.as_mut().unwrap().deleting = true;
    assert!(
        matches!(decide(&f), Action::UnprotectDestination { finalizers, .. } if finalizers.is_empty())
    );
    f.destination_claim = None;
    assert_eq!(
        decide(&f),
        Action::Unlock {
            resource_version: "10".to_owned()
        }
    );
    f.moved_claim.as_mut().unwrap().lock = None;
    assert_eq!(decide(&f), Action::Mirror);
    if let Peer::Found(d) = &mut f.peer {
        d.status.as_mut().unwrap().phase = Some(Phase::Failed);
    }
    assert_eq!(decide(&f), Action::DropFinalizers);
}

#[test]
fn a_rollback_never_deletes_a_destination_claim_it_did_not_record() {
    let mut f = created();
    finished(&mut f, Phase::Cancelled);
    f.volume.as_mut().unwrap().marker = None;
    f.destination_claim.as_mut().unwrap().uid = "uid-tenants-own".to_owned();
    assert!(
        !matches!(decide(&f), Action::DeleteDestination { .. }),
        "{:?}",
        decide(&f)
    );
}

#[test]
fn a_claim_r3_made_before_its_record_was_written_is_deleted_by_the_rollback_then_let_go() {
    let mut f = created();
    finished(&mut f, Phase::Failed);
    f.volume.as_mut().unwrap().marker = None;
    // The deadline failed the pair between R3's create and its record.
    f.source.status.as_mut().unwrap().destination_claim = None;
    match decide(&f) {
        Action::DeleteDestination { uid } => assert_eq!(uid, DEST_UID),
        other => panic!("expected the claim deleted, got {other:?}"),
    }
    let p = crate::controller::transfer::plan::plan(&f, &decide(&f));
    assert!(
        format!("{:?}", p.writes).contains("DeleteClaim"),
        "the delete names the claim by the peer: {p:?}"
    );
    f.destination_claim.as_mut().unwrap().deleting = true;
    assert!(
        matches!(decide(&f), Action::UnprotectDestination { .. }),
        "{:?}",
        decide(&f)
    );
}

#[test]
fn a_claim_a_stale_leader_made_after_the_recorded_one_went_is_let_go_but_never_deleted() {
    let mut f = created();
    finished(&mut f, Phase::Cancelled);
    f.volume.as_mut().unwrap().marker = None;
    f.destination_claim.as_mut().unwrap().uid = "uid-made-late".to_owned();
    assert!(
        matches!(decide(&f), Action::UnprotectDestination { .. }),
        "{:?}",
        decide(&f)
    );
    // Without our finalizer it is the tenant's to delete.
    f.destination_claim.as_mut().unwrap().finalizers.clear();
    assert!(
        !matches!(
            decide(&f),
            Action::DeleteDestination { .. } | Action::UnprotectDestination { .. }
        ),
        "{:?}",
        decide(&f)
    );
}

#[test]
fn a_peer_gone_before_the_commit_cancels() {
    let mut f = created();
    f.peer = Peer::Gone;
    assert_finish(decide(&f), Phase::Cancelled, REASON_DELETED);
    let mut f = fresh();
    f.peer = Peer::Unmatched;
    assert_finish(decide(&f), Phase::Cancelled, REASON_DELETED);
}

#[test]
fn a_deletion_before_the_commit_cancels_and_after_it_completes() {
    let mut f = created();
    f.source.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1_500).unwrap()));
    assert_finish(decide(&f), Phase::Cancelled, REASON_DELETED);
    let mut f = committed();
    f.source.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1_500).unwrap()));
    assert!(matches!(decide(&f), Action::ReleaseSource { .. }));
}

#[test]
fn the_destination_text_of_every_reason_names_nothing_of_the_source() {
    for reason in [
        REASON_WAITING_FOR_PEER,
        REASON_SOURCE_NOT_BOUND,
        REASON_SOURCE_IN_USE,
        REASON_SOURCE_LOCKED,
        REASON_FORBIDDEN,
        REASON_SOURCE_RELEASE_REFUSED,
        REASON_VOLUME_CHANGED,
        REASON_DESTINATION_LOST,
        "SomethingNew",
    ] {
        let text = destination_text(reason);
        assert!(!text.is_empty());
        assert!(!text.contains('/'), "{reason}: {text}");
    }
}

// ----- Clone mode (C1, C2, then R1–R6 on the clone) ---------------------------------

/// A matched Clone pair, protected, nothing made yet; the source claim is
/// bound and in use.
pub(in crate::controller::transfer) fn clone_fresh() -> Facts {
    let mut f = fresh();
    protect(&mut f);
    f.source.spec.mode = Some(TransferMode::Clone);
    if let Peer::Found(d) = &mut f.peer {
        d.spec.mode = Some(TransferMode::Clone);
    }
    f.clone_source = f.moved_claim.take();
    f.volume = None;
    f.users = Some(Vec::new());
    f
}

fn clone_name() -> String {
    // `give` + the first five characters of `uid-take`.
    "give-clone-uidta".to_owned()
}

/// The clone as C1 made it, Pending.
fn made_clone(f: &Facts) -> Claim {
    let expected = match decide(&Facts {
        rights: Some(Ok(())),
        ..f.clone()
    }) {
        Action::CreateClone(pvc) => pvc,
        other => panic!("expected CreateClone, got {other:?}"),
    };
    let mut c = Claim::from(expected.as_ref());
    c.uid = "uid-clone".to_owned();
    c.phase = "Pending".to_owned();
    c.created = f.now - 10;
    c
}

#[test]
fn an_unmatched_clone_offer_waits_for_its_peer() {
    let mut f = clone_fresh();
    f.peer = Peer::Unmatched;
    f.source.status = None;
    match decide(&f) {
        Action::Wait { phase, .. } => assert_eq!(phase, Phase::WaitingForPeer),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sides_that_ask_for_different_modes_fail_before_anything_is_recorded() {
    let mut f = fresh();
    f.source.status = None;
    if let Peer::Found(d) = &mut f.peer {
        d.spec.mode = Some(TransferMode::Clone);
    }
    assert_finish(decide(&f), Phase::Failed, REASON_MODE_NOT_SUPPORTED);
}

#[test]
fn c1_makes_the_clone_beside_the_source_after_fresh_rights_and_never_touches_the_source() {
    let mut f = clone_fresh();
    assert_eq!(decide(&f), Action::Ask(Question::Rights));
    f.rights = Some(Ok(()));
    let Action::CreateClone(pvc) = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    assert_eq!(pvc.metadata.name.as_deref(), Some(clone_name().as_str()));
    assert_eq!(pvc.metadata.namespace.as_deref(), Some("prod"));
    let annotations = pvc.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[ANNOTATION_TRANSFER_LOCK], S_UID);
    assert_eq!(annotations[ANNOTATION_CLONE_OF], "prod/db");
    let spec = pvc.spec.clone().unwrap();
    let source = spec.data_source.unwrap();
    assert_eq!(
        (source.kind.as_str(), source.name.as_str()),
        ("PersistentVolumeClaim", "db")
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(
        spec.resources.unwrap().requests.unwrap()["storage"].0,
        "1Gi"
    );
    assert!(spec.volume_name.is_none());
    // A revoked right of the source side (no `create` beside the claim)
    // fails before the clone is made.
    f.rights = Some(Err(Refusal {
        side: Side::Source,
        message: "cannot create persistentvolumeclaims".to_owned(),
    }));
    assert_finish(decide(&f), Phase::Failed, REASON_FORBIDDEN);
    // Unprotected objects get the finalizer first.
    let mut f = clone_fresh();
    f.source.metadata.finalizers = None;
    assert_eq!(decide(&f), Action::Protect);
}

#[test]
fn c2_waits_for_the_clone_and_fails_it_only_once_provisioning_has_failed_past_the_timeout() {
    let mut f = clone_fresh();
    f.moved_claim = Some(made_clone(&f));
    match decide(&f) {
        Action::Wait { report, .. } => assert_eq!(report.reason, REASON_CLONING),
        other => panic!("{other:?}"),
    }
    f.clone_failure = Some("rpc error: code = ResourceExhausted desc = full".to_owned());
    match decide(&f) {
        Action::Wait { report, .. } => {
            assert_eq!(report.reason, REASON_CLONING);
            assert!(report.source.contains("ResourceExhausted"), "{report:?}");
        }
        other => panic!("{other:?}"),
    }
    f.now += f.clone_timeout;
    let report = assert_finish(decide(&f), Phase::Failed, REASON_CLONE_FAILED);
    assert!(report.source.contains("ResourceExhausted"), "{report:?}");
    assert!(!report.destination.contains("prod"), "{report:?}");
}

#[test]
fn a_clone_of_a_wait_for_first_consumer_claim_is_refused_at_once_before_it_is_made() {
    let mut f = clone_fresh();
    f.clone_waits_for_consumer = Some("local".to_owned());
    let report = assert_finish(decide(&f), Phase::Failed, REASON_CLONE_NEEDS_CONSUMER);
    assert!(report.source.contains("\"local\""), "{report:?}");
    assert!(!report.destination.contains("local"), "{report:?}");
}

#[test]
fn a_clone_still_unbound_past_the_timeout_fails_and_is_deleted_whatever_the_reason() {
    // No ProvisioningFailed Event: a WaitForFirstConsumer class, or a
    // provisioner that never answers. The clone holds the source
    // namespace's quota all the same.
    let mut f = clone_fresh();
    let clone = made_clone(&f);
    f.now = clone.created + f.clone_timeout - 1;
    f.moved_claim = Some(clone);
    match decide(&f) {
        Action::Wait { report, .. } => assert_eq!(report.reason, REASON_CLONING),
        other => panic!("{other:?}"),
    }
    f.now += 1;
    let report = assert_finish(decide(&f), Phase::Failed, REASON_CLONE_FAILED);
    assert!(
        report.source.contains("was not bound within 300s"),
        "{report:?}"
    );
    finished(&mut f, Phase::Failed);
    assert_eq!(
        decide(&f),
        Action::DeleteClone {
            name: clone_name(),
            uid: "uid-clone".to_owned()
        }
    );
}

#[test]
fn a_bound_clone_is_moved_by_r1_to_r6_and_the_source_is_never_locked() {
    let mut f = clone_fresh();
    let mut clone = made_clone(&f);
    clone.phase = "Bound".to_owned();
    clone.volume_name = Some("pv-clone".to_owned());
    clone.shape.volume_name = Some("pv-clone".to_owned());
    let mut v = volume(Some(("prod", &clone_name(), "uid-clone")));
    v.name = "pv-clone".to_owned();
    f.moved_claim = Some(clone);
    f.volume = Some(v);
    match decide(&f) {
        Action::RecordSource(snapshot) => {
            assert_eq!(snapshot.name, clone_name());
            assert_eq!(snapshot.uid, "uid-clone");
            assert_eq!(snapshot.volume_name, "pv-clone");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_claim_under_the_clones_name_without_our_lock_is_neither_adopted_nor_deleted() {
    let mut f = clone_fresh();
    let mut look_alike = made_clone(&f);
    look_alike.lock = None;
    f.moved_claim = Some(look_alike.clone());
    assert_finish(decide(&f), Phase::Failed, REASON_CLONE_FAILED);
    finished(&mut f, Phase::Failed);
    assert!(
        !matches!(decide(&f), Action::DeleteClone { .. }),
        "{:?}",
        decide(&f)
    );
    // Made for another receiver under the same name (five characters of a
    // uid may repeat among a standing offer's requests): not ours.
    let mut f = clone_fresh();
    let mut other_pair = made_clone(&f);
    other_pair.clone_for = Some("uid-takeover".to_owned());
    f.moved_claim = Some(other_pair);
    assert_finish(decide(&f), Phase::Failed, REASON_CLONE_FAILED);
    finished(&mut f, Phase::Failed);
    assert!(
        !matches!(decide(&f), Action::DeleteClone { .. }),
        "{:?}",
        decide(&f)
    );
    // Cloned from another claim, with our lock: not ours either.
    let mut f = clone_fresh();
    let mut other = made_clone(&f);
    other.shape.data_source_claim = Some("other".to_owned());
    f.moved_claim = Some(other);
    assert_finish(decide(&f), Phase::Failed, REASON_CLONE_FAILED);
}

#[test]
fn a_clone_pair_ended_before_the_commit_deletes_its_clone_and_leaves_the_source_alone() {
    let mut f = clone_fresh();
    f.moved_claim = Some(made_clone(&f));
    finished(&mut f, Phase::Cancelled);
    assert_eq!(
        decide(&f),
        Action::DeleteClone {
            name: clone_name(),
            uid: "uid-clone".to_owned()
        }
    );
    // With the receiver gone, the clone is still found by the recorded uid
    // of the match.
    f.peer = Peer::Gone;
    assert!(matches!(decide(&f), Action::DeleteClone { .. }));
    // Once it is being deleted, the rest of the rollback goes on.
    f.moved_claim.as_mut().unwrap().deleting = true;
    assert!(!matches!(decide(&f), Action::DeleteClone { .. }));
}

mod clone_snapshot;
mod populate;
