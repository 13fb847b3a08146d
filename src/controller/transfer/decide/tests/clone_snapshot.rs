//! Clone mode of a VolumeSnapshot (DESIGN §2.1.7): C1 restores the snapshot
//! into a claim beside it, shaped by `restore_shape`, and from then on the
//! claim protocol moves that restore as it moves any clone.

use super::*;
use crate::controller::transfer::decide::{restore_shape, RestoreBasis};
use crate::controller::transfer::matching::receiver_uid;

/// A Clone pair of the VolumeSnapshot `prod/db`, before C1, its restore
/// shaped as the `fast` class's 1Gi claim.
fn snapshot_clone_fresh() -> Facts {
    let mut f = clone_fresh();
    f.source.spec.source.kind = "VolumeSnapshot".to_owned();
    if let Peer::Found(d) = &mut f.peer {
        d.spec.source.kind = "VolumeSnapshot".to_owned();
    }
    let shape = f.clone_source.take().unwrap().shape;
    f.clone_source = Some(Claim::restore_of("db", "uid-snap", shape));
    f
}

#[test]
fn c1_restores_the_snapshot_beside_it_and_names_it_as_the_data_source() {
    let mut f = snapshot_clone_fresh();
    f.rights = Some(Ok(()));
    let Action::CreateClone(pvc) = decide(&f) else {
        panic!("{:?}", decide(&f));
    };
    assert_eq!(pvc.metadata.namespace.as_deref(), Some("prod"));
    let annotations = pvc.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[ANNOTATION_CLONE_OF], "volumesnapshot/prod/db");
    let spec = pvc.spec.clone().unwrap();
    let source = spec.data_source.unwrap();
    assert_eq!(
        (
            source.api_group.as_deref(),
            source.kind.as_str(),
            source.name.as_str()
        ),
        (Some("snapshot.storage.k8s.io"), "VolumeSnapshot", "db")
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    // The restore it made is known again as ours; a clone of the claim
    // `db` under the same name is not.
    let made = Claim::from(pvc.as_ref());
    assert!(is_our_clone(
        &f.source,
        &receiver_uid(&f.source, peer(&f)),
        &made
    ));
    let mut from_claim = made.clone();
    from_claim.shape.data_source_snapshot = None;
    from_claim.shape.data_source_claim = Some("db".to_owned());
    assert!(!is_our_clone(
        &f.source,
        &receiver_uid(&f.source, peer(&f)),
        &from_claim
    ));
}

fn peer(f: &Facts) -> &NamespaceTransfer {
    match &f.peer {
        Peer::Found(d) => d,
        _ => &f.source,
    }
}

#[test]
fn a_snapshot_not_ready_to_use_waits_and_nothing_is_restored() {
    let mut f = snapshot_clone_fresh();
    f.rights = Some(Ok(()));
    f.origin_not_ready = Some("VolumeSnapshot prod/db is not ready to use yet".to_owned());
    let report = assert_polled_wait(decide(&f), Phase::WaitingForRelease, "SnapshotNotReady");
    assert!(report.source.contains("not ready"), "{report:?}");
    assert_eq!(
        report.destination,
        "waiting for the source snapshot to be ready to use"
    );
}

#[test]
fn a_missing_snapshot_fails_the_clone_in_the_words_of_a_snapshot() {
    let mut f = snapshot_clone_fresh();
    f.clone_source = None;
    match decide(&f) {
        Action::Finish { phase, report } => {
            assert_eq!(phase, Phase::Failed);
            assert_eq!(report.reason, REASON_SOURCE_NOT_FOUND);
            assert_eq!(report.source, "VolumeSnapshot prod/db does not exist");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_restore_that_cannot_be_shaped_fails_before_anything_is_made() {
    let mut f = snapshot_clone_fresh();
    f.class = ClassPolicy::Refused("VolumeSnapshot prod/db cannot be restored: no class".into());
    assert_finish(decide(&f), Phase::Failed, REASON_STORAGE_CLASS_NOT_ALLOWED);
}

fn claim_shaped(class: &str, modes: &[&str], mode: Option<&str>, request: &str) -> Claim {
    let mut c = claim("x", "uid-x", None);
    c.shape.storage_class_name = Some(class.to_owned());
    c.shape.access_modes = modes.iter().map(|m| (*m).to_owned()).collect();
    c.shape.volume_mode = mode.map(str::to_owned);
    c.shape.request = Some(request.to_owned());
    c
}

#[test]
fn a_restore_lands_in_the_sources_class_and_takes_the_size_and_modes_of_the_claim_it_is_for() {
    let wants = claim_shaped("gold", &["ReadWriteMany"], Some("Block"), "9Gi");
    let taken_from = claim_shaped("fast", &["ReadWriteOncePod"], None, "10Gi");
    let basis = RestoreBasis {
        restore_size: Some("8Gi"),
        source_volume_mode: Some("Filesystem"),
        claimant: Some(&wants),
        taken_from: Some(&taken_from),
        default_class: Some("standard"),
    };
    // The class of the claim the snapshot was taken from, never the one a
    // destination's claim asks for; the snapshot's own volumeMode; the
    // modes and (larger) size of the claim it is for.
    let shape = restore_shape(&basis).unwrap();
    assert_eq!(shape.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(shape.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(shape.access_modes, vec!["ReadWriteMany".to_owned()]);
    assert_eq!(shape.request.as_deref(), Some("9Gi"));
    // Without that claim: the default class; never below the restoreSize.
    let small = claim_shaped("gold", &[], None, "1Gi");
    let shape = restore_shape(&RestoreBasis {
        claimant: Some(&small),
        taken_from: None,
        ..basis
    })
    .unwrap();
    assert_eq!(shape.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(shape.access_modes, vec!["ReadWriteOnce".to_owned()]);
    assert_eq!(shape.request.as_deref(), Some("8Gi"));
    // Only when the source has neither does the claim it is for name the
    // class.
    let shape = restore_shape(&RestoreBasis {
        taken_from: None,
        default_class: None,
        ..basis
    })
    .unwrap();
    assert_eq!(shape.storage_class_name.as_deref(), Some("gold"));
    // From the origin alone: its class and modes, the snapshot's size.
    let shape = restore_shape(&RestoreBasis {
        claimant: None,
        ..basis
    })
    .unwrap();
    assert_eq!(
        (
            shape.storage_class_name.as_deref(),
            shape.access_modes.clone(),
            shape.request.as_deref()
        ),
        (
            Some("fast"),
            vec!["ReadWriteOncePod".to_owned()],
            Some("8Gi")
        )
    );
    // Nothing to go by, or no size: refused, saying why.
    let none = restore_shape(&RestoreBasis {
        restore_size: Some("8Gi"),
        ..RestoreBasis::default()
    })
    .unwrap_err();
    assert!(none.contains("no default StorageClass"), "{none}");
    let sizeless = restore_shape(&RestoreBasis {
        default_class: Some("standard"),
        ..RestoreBasis::default()
    })
    .unwrap_err();
    assert!(sizeless.contains("restoreSize"), "{sizeless}");
}

#[test]
fn a_snapshot_deleted_once_its_restore_exists_does_not_fail_the_clone() {
    let mut f = snapshot_clone_fresh();
    f.rights = Some(Ok(()));
    let mut made = made_clone(&f);
    made.phase = "Bound".to_owned();
    f.moved_claim = Some(made);
    f.clone_source = None;
    assert!(
        !matches!(decide(&f), Action::Finish { .. }),
        "{:?}",
        decide(&f)
    );
    // Before C1 a missing snapshot fails it, in the snapshot's words on
    // both sides.
    f.moved_claim = None;
    let report = assert_finish(decide(&f), Phase::Failed, REASON_SOURCE_NOT_FOUND);
    assert_eq!(
        report.destination,
        "refused: the source snapshot does not exist"
    );
}
