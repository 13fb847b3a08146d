//! The snapshot move's decisions as table rows: the facts one reconcile
//! would read, and the one action that follows.

use super::super::decide;
use super::*;
use crate::api::namespace_transfer::{TransferStep, SOURCE_KIND_VOLUME_SNAPSHOT};
use crate::controller::transfer::decide::tests::{fresh, protect};
use crate::controller::transfer::facts::{ClassPolicy, Peer};
use crate::controller::transfer::snapshot::Content;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

const MINE: &str = "uid-give";

fn source_snapshot() -> Snapshot {
    Snapshot {
        namespace: "prod".to_owned(),
        name: "db".to_owned(),
        uid: "snap-1".to_owned(),
        resource_version: "5".to_owned(),
        class: Some("fast".to_owned()),
        bound_content: Some("content-1".to_owned()),
        ready: true,
        restore_size: Some("1Gi".to_owned()),
        ..Snapshot::default()
    }
}

fn old_content() -> Content {
    Content {
        name: "content-1".to_owned(),
        uid: "c-1".to_owned(),
        resource_version: "6".to_owned(),
        deletion_policy: "Delete".to_owned(),
        handle: Some("h-1".to_owned()),
        driver: "csi.example".to_owned(),
        class: Some("fast".to_owned()),
        ref_namespace: "prod".to_owned(),
        ref_name: "db".to_owned(),
        ref_uid: "snap-1".to_owned(),
        ready: true,
        ..Content::default()
    }
}

/// A matched snapshot pair, nothing touched.
fn matched() -> Facts {
    let mut f = fresh();
    f.source.spec.source.kind = SOURCE_KIND_VOLUME_SNAPSHOT.to_owned();
    if let Peer::Found(d) = &mut f.peer {
        d.spec.source.kind = SOURCE_KIND_VOLUME_SNAPSHOT.to_owned();
    }
    f.moved_claim = None;
    f.volume = None;
    f.class = ClassPolicy::Unknown;
    f.snapshot = Some(SnapshotFacts {
        source: Some(source_snapshot()),
        old_content: Some(old_content()),
        ..SnapshotFacts::default()
    });
    f
}

fn sf(f: &mut Facts) -> &mut SnapshotFacts {
    f.snapshot.as_mut().unwrap()
}

/// After R1.
fn locked() -> Facts {
    let mut f = matched();
    protect(&mut f);
    sf(&mut f).source.as_mut().unwrap().lock = Some(MINE.to_owned());
    let st = f.source.status.as_mut().unwrap();
    st.phase = Some(Phase::Rebinding);
    st.source_snapshot = Some(SourceSnapshotRecord {
        name: "db".to_owned(),
        uid: "snap-1".to_owned(),
        content_name: "content-1".to_owned(),
        restore_size: None,
    });
    f
}

/// After R2.
fn retained() -> Facts {
    let mut f = locked();
    let old = sf(&mut f).old_content.as_mut().unwrap();
    old.marker = Some(MINE.to_owned());
    old.original_policy = Some("Delete".to_owned());
    old.deletion_policy = "Retain".to_owned();
    f.rights = Some(Ok(()));
    f
}

fn made_content(f: &Facts) -> Content {
    let s = &f.source;
    let old = f.snapshot.as_ref().unwrap().old_content.clone().unwrap();
    let object = new_content(s, &old, "dev", "db");
    let mut c = Content::from(&serde_json::from_value::<kube::api::DynamicObject>(object).unwrap());
    c.uid = "c-2".to_owned();
    c.resource_version = "30".to_owned();
    c
}

fn made_snapshot(f: &Facts) -> Snapshot {
    Snapshot {
        namespace: "dev".to_owned(),
        name: "db".to_owned(),
        uid: "snap-2".to_owned(),
        resource_version: "31".to_owned(),
        lock: Some(MINE.to_owned()),
        content_source: Some(content_name(&f.source)),
        class: Some("fast".to_owned()),
        ..Snapshot::default()
    }
}

/// After R3, before the snapshot controller's bind.
fn created() -> Facts {
    let mut f = retained();
    let content = made_content(&f);
    let x = made_snapshot(&f);
    f.source.status.as_mut().unwrap().destination_snapshot = Some(SnapshotReference {
        namespace: "dev".to_owned(),
        name: "db".to_owned(),
        uid: x.uid.clone(),
        content_name: content.name.clone(),
    });
    sf(&mut f).new_content = Some(content);
    sf(&mut f).destination = Some(x);
    f
}

/// The snapshot controller bound the destination both ways, and it is ready.
fn bound() -> Facts {
    let mut f = created();
    let c = sf(&mut f).new_content.as_mut().unwrap();
    c.ref_uid = "snap-2".to_owned();
    c.ready = true;
    let name = content_name(&f.source);
    let x = sf(&mut f).destination.as_mut().unwrap();
    x.bound_content = Some(name);
    x.ready = true;
    f
}

fn committed_recorded() -> Facts {
    let mut f = bound();
    f.source.status.as_mut().unwrap().steps.push(TransferStep {
        name: StepName::Committed,
        time: Time(Timestamp::from_second(1_500).unwrap()),
    });
    f
}

fn finished(mut f: Facts, phase: Phase) -> Facts {
    f.source.status.as_mut().unwrap().phase = Some(phase);
    f
}

fn reason(action: &Action) -> &'static str {
    match action {
        Action::Finish { report, .. } | Action::Wait { report, .. } => report.reason,
        other => panic!("not a report: {other:?}"),
    }
}

#[test]
fn a_matched_pair_protects_both_objects_then_locks_the_source_snapshot() {
    assert_eq!(decide(&matched()), Action::Protect);
    let mut f = matched();
    protect(&mut f);
    assert_eq!(
        decide(&f),
        act(SnapshotAction::Lock {
            resource_version: "5".to_owned()
        })
    );
}

#[test]
fn a_locked_snapshot_is_recorded_with_its_content_and_size() {
    let mut f = matched();
    protect(&mut f);
    sf(&mut f).source.as_mut().unwrap().lock = Some(MINE.to_owned());
    let Action::Snapshot(SnapshotAction::RecordSource(record)) = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    assert_eq!(record.content_name, "content-1");
    assert_eq!(record.uid, "snap-1");
    assert_eq!(record.restore_size.map(|q| q.0).as_deref(), Some("1Gi"));
}

#[test]
fn a_member_of_a_group_snapshot_is_refused_with_its_own_reason() {
    let mut f = matched();
    sf(&mut f).source.as_mut().unwrap().group = Some("nightly-group".to_owned());
    assert_eq!(reason(&decide(&f)), REASON_SNAPSHOT_IN_GROUP);
    let mut f = matched();
    sf(&mut f).old_content.as_mut().unwrap().in_group = true;
    assert_eq!(reason(&decide(&f)), REASON_SNAPSHOT_IN_GROUP);
}

#[test]
fn a_snapshot_not_ready_waits_and_a_missing_one_fails() {
    let mut f = matched();
    sf(&mut f).source.as_mut().unwrap().ready = false;
    let action = decide(&f);
    assert!(matches!(action, Action::Wait { .. }), "{action:?}");
    assert_eq!(reason(&action), REASON_SNAPSHOT_NOT_READY);
    let mut f = matched();
    sf(&mut f).source = None;
    assert_eq!(reason(&decide(&f)), super::super::REASON_SOURCE_NOT_FOUND);
}

#[test]
fn a_deletion_secret_in_the_source_namespace_keeps_the_snapshot_from_moving() {
    let mut f = matched();
    sf(&mut f).old_content.as_mut().unwrap().secrets.insert(
        "snapshot.storage.kubernetes.io/deletion-secret-namespace".to_owned(),
        "prod".to_owned(),
    );
    assert_eq!(reason(&decide(&f)), REASON_SNAPSHOT_CLASS_NOT_ALLOWED);
}

#[test]
fn what_the_snapshot_controller_reports_while_binding_is_the_source_sides_to_read() {
    let mut f = created();
    sf(&mut f).destination.as_mut().unwrap().error =
        Some("ListSnapshots of handle h-1 failed".to_owned());
    let Action::Wait { report, .. } = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    assert!(report.source.contains("h-1"), "{}", report.source);
    assert!(
        !report.destination.contains("h-1"),
        "{}",
        report.destination
    );
}

#[test]
fn a_class_that_does_not_opt_in_fails_the_pair_before_anything_is_touched() {
    let mut f = matched();
    sf(&mut f).refused_by_class = Some("not opted in".to_owned());
    let action = decide(&f);
    assert!(matches!(action, Action::Finish { .. }), "{action:?}");
    assert_eq!(reason(&action), REASON_SNAPSHOT_CLASS_NOT_ALLOWED);
}

#[test]
fn a_destination_name_taken_fails_the_pair() {
    let mut f = matched();
    sf(&mut f).destination = Some(Snapshot {
        name: "db".to_owned(),
        namespace: "dev".to_owned(),
        uid: "theirs".to_owned(),
        ..Snapshot::default()
    });
    assert_eq!(reason(&decide(&f)), REASON_DESTINATION_EXISTS);
}

#[test]
fn a_snapshot_being_restored_from_waits_before_the_lock() {
    let mut f = matched();
    protect(&mut f);
    f.users = None;
    assert_eq!(decide(&f), Action::Ask(Question::Users));
    f.users = Some(vec!["restoring".to_owned()]);
    let action = decide(&f);
    assert_eq!(reason(&action), REASON_SOURCE_IN_USE);
    let Action::Wait { report, .. } = action else {
        unreachable!()
    };
    assert!(report.source.contains("restoring"), "{}", report.source);
    assert!(
        !report.destination.contains("restoring"),
        "the destination never learns the source's claims: {}",
        report.destination
    );
}

#[test]
fn the_retain_step_comes_only_after_both_rights_are_confirmed() {
    let f = locked();
    assert_eq!(decide(&f), Action::Ask(Question::Rights));
    let mut f = locked();
    f.rights = Some(Err(crate::controller::transfer::facts::Refusal {
        side: Side::Destination,
        message: "no create".to_owned(),
    }));
    assert_eq!(reason(&decide(&f)), REASON_FORBIDDEN);
    let mut f = locked();
    f.rights = Some(Ok(()));
    assert_eq!(
        decide(&f),
        act(SnapshotAction::Retain {
            resource_version: "6".to_owned(),
            policy: "Delete".to_owned()
        })
    );
}

#[test]
fn r3_makes_the_content_then_the_destination_snapshot() {
    let f = retained();
    let Action::Snapshot(SnapshotAction::CreateContent(object)) = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    assert_eq!(object["spec"]["deletionPolicy"], "Retain");
    let mut f = retained();
    sf(&mut f).new_content = Some(made_content(&f));
    assert!(matches!(
        decide(&f),
        Action::Snapshot(SnapshotAction::CreateDestination(_))
    ));
    // A crash after the create: the snapshot is ours, and only recorded.
    sf(&mut f).destination = Some(made_snapshot(&f));
    assert!(matches!(
        decide(&f),
        Action::Snapshot(SnapshotAction::RecordDestination(_))
    ));
}

#[test]
fn a_content_of_our_name_that_we_did_not_make_fails_the_pair() {
    let mut f = retained();
    let mut forged = made_content(&f);
    forged.handle = Some("someone-elses".to_owned());
    sf(&mut f).new_content = Some(forged);
    assert_eq!(reason(&decide(&f)), REASON_VOLUME_CHANGED);
}

#[test]
fn until_the_snapshot_controller_binds_both_ways_the_pair_waits() {
    let action = decide(&created());
    assert_eq!(reason(&action), REASON_WAITING_FOR_BINDING);
    // Bound from the content's side only: not yet committed.
    let mut f = created();
    let c = sf(&mut f).new_content.as_mut().unwrap();
    c.ref_uid = "snap-2".to_owned();
    c.ready = true;
    assert_eq!(reason(&decide(&f)), REASON_WAITING_FOR_BINDING);
}

#[test]
fn after_the_commit_the_source_goes_then_its_content_then_the_policy_comes_back() {
    assert_eq!(decide(&bound()), act(SnapshotAction::Committed));
    let mut f = committed_recorded();
    assert_eq!(
        decide(&f),
        act(SnapshotAction::ReleaseSource {
            uid: "snap-1".to_owned()
        })
    );
    sf(&mut f).source = None;
    // Marked being-deleted first, so that the csi-snapshotter lets it go.
    assert_eq!(
        decide(&f),
        act(SnapshotAction::MarkDeleting {
            old: true,
            resource_version: "6".to_owned()
        })
    );
    sf(&mut f).old_content.as_mut().unwrap().being_deleted = true;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::DeleteOldContent {
            uid: "c-1".to_owned(),
            resource_version: "6".to_owned()
        })
    );
    sf(&mut f).old_content = None;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::Settle {
            resource_version: "30".to_owned(),
            policy: "Delete".to_owned()
        })
    );
    let c = sf(&mut f).new_content.as_mut().unwrap();
    c.marker = None;
    c.deletion_policy = "Delete".to_owned();
    assert_eq!(
        decide(&f),
        act(SnapshotAction::UnlockDestination {
            resource_version: "31".to_owned()
        })
    );
    sf(&mut f).destination.as_mut().unwrap().lock = None;
    assert_eq!(decide(&f), act(SnapshotAction::Complete));
}

#[test]
fn a_cancellation_before_the_commit_is_decided_and_after_it_the_move_goes_on() {
    let mut f = created();
    f.source.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1_900).unwrap()));
    assert!(matches!(
        decide(&f),
        Action::Finish {
            phase: Phase::Cancelled,
            ..
        }
    ));
    let mut f = committed_recorded();
    f.source.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1_900).unwrap()));
    assert!(matches!(
        decide(&f),
        Action::Snapshot(SnapshotAction::ReleaseSource { .. })
    ));
}

#[test]
fn an_old_content_given_delete_back_after_the_commit_is_held_under_retain_before_anything_goes() {
    for source_gone in [false, true] {
        let mut f = committed_recorded();
        if source_gone {
            sf(&mut f).source = None;
        }
        sf(&mut f).old_content.as_mut().unwrap().deletion_policy = "Delete".to_owned();
        assert_eq!(
            decide(&f),
            act(SnapshotAction::Retain {
                resource_version: "6".to_owned(),
                policy: "Delete".to_owned()
            }),
            "source gone: {source_gone}"
        );
    }
}

#[test]
fn an_old_content_someone_else_marked_after_the_commit_is_never_deleted_nor_its_snapshot() {
    let mut f = committed_recorded();
    sf(&mut f).old_content.as_mut().unwrap().marker = Some("someone".to_owned());
    let action = decide(&f);
    assert!(matches!(action, Action::Wait { .. }), "{action:?}");
    assert_eq!(reason(&action), REASON_VOLUME_CHANGED);
}

#[test]
fn a_rollback_deletes_the_new_content_first_then_the_destination_then_restores_the_old() {
    let mut f = finished(created(), Phase::Cancelled);
    assert_eq!(
        decide(&f),
        act(SnapshotAction::MarkDeleting {
            old: false,
            resource_version: "30".to_owned()
        })
    );
    sf(&mut f).new_content.as_mut().unwrap().being_deleted = true;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::DeleteContent {
            uid: "c-2".to_owned(),
            resource_version: "30".to_owned()
        })
    );
    sf(&mut f).new_content.as_mut().unwrap().deleting = true;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::DeleteDestination {
            uid: "snap-2".to_owned()
        })
    );
    sf(&mut f).destination.as_mut().unwrap().deleting = true;
    // The new content still exists: the old one keeps Retain until it goes.
    assert!(matches!(decide(&f), Action::Nothing { .. }));
    sf(&mut f).new_content = None;
    sf(&mut f).destination = None;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::Unmark {
            resource_version: "6".to_owned(),
            restore: Some("Delete".to_owned())
        })
    );
}

#[test]
fn a_rollback_never_restores_delete_on_a_content_whose_snapshot_went() {
    let mut f = finished(retained(), Phase::Failed);
    sf(&mut f).source = None;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::Unmark {
            resource_version: "6".to_owned(),
            restore: None
        })
    );
}

#[test]
fn a_rollback_fences_a_new_content_that_is_not_under_retain_before_deleting_anything() {
    let mut f = finished(created(), Phase::Failed);
    sf(&mut f).new_content.as_mut().unwrap().deletion_policy = "Delete".to_owned();
    assert_eq!(
        decide(&f),
        act(SnapshotAction::Rehold {
            resource_version: "30".to_owned()
        })
    );
}

#[test]
fn a_destination_deleted_after_the_source_went_is_reported_lost_and_its_content_kept() {
    let mut f = committed_recorded();
    sf(&mut f).source = None;
    sf(&mut f).old_content = None;
    sf(&mut f).destination = None;
    let Action::DestinationLost { report } = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    assert!(report.source.contains("Retain"), "{}", report.source);
    assert!(
        !report.destination.contains("snapcontent"),
        "the destination never learns the content: {}",
        report.destination
    );
}

#[test]
fn a_destination_deleted_before_the_commit_was_recorded_rolls_the_move_back() {
    // Bound, then deleted by its tenant before R4's record: the source keeps
    // its snapshot.
    let mut f = bound();
    sf(&mut f).destination.as_mut().unwrap().deleting = true;
    assert_eq!(reason(&decide(&f)), REASON_VOLUME_CHANGED);
}

#[test]
fn a_destination_deleted_after_the_commit_was_recorded_still_releases_the_source() {
    let mut f = committed_recorded();
    sf(&mut f).destination.as_mut().unwrap().deleting = true;
    sf(&mut f).new_content = None;
    assert_eq!(
        decide(&f),
        act(SnapshotAction::ReleaseSource {
            uid: "snap-1".to_owned()
        })
    );
}

#[test]
fn a_source_snapshot_held_at_r5_by_a_restore_is_said_after_a_few_seconds_not_waited_out_in_silence()
{
    let mut f = committed_recorded();
    let now = f.now;
    let x = sf(&mut f).source.as_mut().unwrap();
    x.deleting = true;
    x.deleted_at = now - 1;
    // Being deleted a moment ago: the snapshot controller is at it.
    assert!(matches!(decide(&f), Action::Nothing { after: Some(_) }));
    sf(&mut f).source.as_mut().unwrap().deleted_at = now - 60;
    let report = crate::controller::transfer::decide::tests::assert_polled_wait(
        decide(&f),
        Phase::Rebinding,
        REASON_SOURCE_IN_USE,
    );
    assert!(report.source.contains("being restored"), "{report:?}");
}
