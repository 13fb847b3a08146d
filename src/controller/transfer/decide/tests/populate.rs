//! A populating request (DESIGN §2.3): the claim a tenant wrote, naming
//! the request in `dataSourceRef`, is adopted at R3 instead of created, and
//! every field of it is the tenant's input.

use super::*;
use crate::controller::transfer::facts::PopulatorRef;

const DATA_UID: &str = "uid-data";

/// The request serves the claims that name it.
fn populating(f: &mut Facts) {
    if let Peer::Found(d) = &mut f.peer {
        d.spec.destination = TransferDestination {
            namespace: "dev".to_owned(),
            name: String::new(),
            populate: Some(true),
        };
    }
}

/// A Pending claim `dev/<name>` naming the request `take`, as a
/// StatefulSet or a chart writes it: the volume's class and size.
fn asking(name: &str, uid: &str, created: i64) -> Claim {
    let mut c = claim(name, uid, None);
    c.created = created;
    c.shape.extras = true; // a dataSourceRef R3 never sets
    c.populator = Some(PopulatorRef {
        name: "take".to_owned(),
        namespace: None,
    });
    c
}

fn adopted_ref() -> ClaimReference {
    ClaimReference {
        namespace: "dev".to_owned(),
        name: "data".to_owned(),
        uid: DATA_UID.to_owned(),
    }
}

/// After R3 adopted `dev/data`, and our finalizer is on it.
fn adopted() -> Facts {
    let mut f = retained();
    populating(&mut f);
    let mut data = asking("data", DATA_UID, 1_500);
    data.finalizers = vec![FINALIZER_TRANSFER_PROTECTION.to_owned()];
    f.destination_claim = Some(data);
    f.source.status.as_mut().unwrap().destination_claim = Some(adopted_ref());
    f
}

#[test]
fn a_populating_request_touches_nothing_until_a_claim_names_it() {
    let mut f = fresh();
    protect(&mut f);
    populating(&mut f);
    match decide(&f) {
        Action::Wait { report, after, .. } => {
            assert_eq!(report.reason, REASON_WAITING_FOR_CLAIM);
            assert!(
                report
                    .destination
                    .contains("kind: NamespaceTransfer, name: take"),
                "{report:?}"
            );
            assert_eq!(after, Some(CLAIM_POLL));
        }
        other => panic!("expected a wait for a claim, got {other:?}"),
    }
    f.claimants = vec![asking("data", DATA_UID, 1_500)];
    assert_eq!(
        decide(&f),
        Action::Lock {
            resource_version: "10".to_owned()
        }
    );
}

#[test]
fn a_destination_claim_name_that_exists_is_no_conflict_for_a_populating_request() {
    let mut f = fresh();
    protect(&mut f);
    populating(&mut f);
    f.claimants = vec![asking("db", DATA_UID, 1_500)];
    assert!(
        matches!(decide(&f), Action::Lock { .. }),
        "{:?}",
        decide(&f)
    );
}

#[test]
fn r3_adopts_the_oldest_claim_that_fits_and_skips_those_that_do_not() {
    let mut f = retained();
    populating(&mut f);
    let mut wrong_class = asking("grab", "uid-grab", 1_100);
    wrong_class.shape.storage_class_name = Some("slow".to_owned());
    f.claimants = vec![
        wrong_class,
        asking("data", DATA_UID, 1_200),
        asking("late", "uid-late", 1_300),
    ];
    assert_eq!(decide(&f), Action::Adopt(adopted_ref()));
    // Adopting rests on the claim's fit, which a watch copy may not show.
    f.live = false;
    assert_eq!(decide(&f), Action::Ask(Question::LiveReads));
}

/// A hostile edit of a claim.
type Change = Box<dyn Fn(&mut Claim)>;

#[test]
fn every_claim_made_to_grab_the_volume_is_refused_for_what_it_asks() {
    let v = volume(Some(("prod", "db", CLAIM_UID)));
    let fits = asking("data", DATA_UID, 1_500);
    assert_eq!(misfit(&fits, &v, Some("1Gi")), None);
    let cases: Vec<(&str, Change)> = vec![
        (
            "storageClassName",
            Box::new(|c| c.shape.storage_class_name = Some("other".to_owned())),
        ),
        (
            "storageClassName",
            Box::new(|c| c.shape.storage_class_name = None),
        ),
        (
            "more than the volume",
            Box::new(|c| c.shape.request = Some("3Gi".to_owned())),
        ),
        ("more than the volume", Box::new(|c| c.shape.request = None)),
        (
            "less than the 1Gi the volume's claim requests",
            Box::new(|c| c.shape.request = Some("512Mi".to_owned())),
        ),
        (
            "access mode ReadWriteMany",
            Box::new(|c| c.shape.access_modes = vec!["ReadWriteMany".to_owned()]),
        ),
        (
            "volumeMode Block",
            Box::new(|c| c.shape.volume_mode = Some("Block".to_owned())),
        ),
        (
            "spec.volumeName",
            Box::new(|c| c.volume_name = Some("pv-other".to_owned())),
        ),
        ("being deleted", Box::new(|c| c.deleting = true)),
        ("Bound", Box::new(|c| c.phase = "Bound".to_owned())),
        ("selector", Box::new(|c| c.shape.selector_or_limits = true)),
        (
            "volumeAttributesClassName",
            Box::new(|c| c.shape.volume_attributes_class_name = Some("gold".to_owned())),
        ),
    ];
    for (said, change) in cases {
        let mut c = fits.clone();
        change(&mut c);
        let why = misfit(&c, &v, Some("1Gi")).unwrap_or_else(|| panic!("{said}: {c:?} fits"));
        assert!(why.contains(said), "{said}: {why}");
    }
    // Exactly the volume's size, a subset of its modes: fits.
    let mut c = fits.clone();
    c.shape.request = Some("2Gi".to_owned());
    c.shape.volume_mode = None;
    assert_eq!(misfit(&c, &v, Some("1Gi")), None);
}

#[test]
fn with_only_misfits_the_request_waits_and_says_what_is_wrong_with_each() {
    let mut f = fresh();
    protect(&mut f);
    populating(&mut f);
    let mut big = asking("big", "uid-big", 1_100);
    big.shape.request = Some("10Gi".to_owned());
    f.claimants = vec![big];
    match decide(&f) {
        Action::Wait { report, .. } => {
            assert_eq!(report.reason, REASON_WAITING_FOR_CLAIM);
            assert!(
                report.destination.contains("big: it requests 10Gi"),
                "{report:?}"
            );
            // The destination's claims are not the source's to read.
            assert!(!report.source.contains("big"), "{report:?}");
        }
        other => panic!("expected a wait, got {other:?}"),
    }
    // However many claims a tenant writes, the message stays bounded.
    f.claimants = (0..50)
        .map(|i| {
            let mut c = asking(&format!("big-{i}"), &format!("uid-big-{i}"), 1_100);
            c.shape.request = Some("10Gi".to_owned());
            c
        })
        .collect();
    match decide(&f) {
        Action::Wait { report, .. } => {
            assert!(report.destination.contains("45 more"), "{report:?}");
            assert!(!report.destination.contains("big-5:"), "{report:?}");
        }
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn a_claim_that_went_after_the_lock_fails_the_pair_instead_of_keeping_the_source_locked() {
    let mut f = retained();
    populating(&mut f);
    let report = assert_finish(decide(&f), Phase::Failed, REASON_CLAIM_MISMATCH);
    assert!(!report.source.contains("take"), "{report:?}");
    // Between the lock and its record too.
    let mut f = fresh();
    protect(&mut f);
    populating(&mut f);
    f.moved_claim.as_mut().unwrap().lock = Some(S_UID.to_owned());
    assert_finish(decide(&f), Phase::Failed, REASON_CLAIM_MISMATCH);
}

#[test]
fn a_claim_naming_another_namespaces_request_is_never_a_candidate() {
    let mut c = asking("data", DATA_UID, 1_500);
    assert!(c.names_request("dev", "take"));
    assert!(!c.names_request("dev", "other"));
    c.populator.as_mut().unwrap().namespace = Some("dev".to_owned());
    assert!(c.names_request("dev", "take"));
    c.populator.as_mut().unwrap().namespace = Some("prod".to_owned());
    assert!(!c.names_request("dev", "take"));
}

#[test]
fn r4_points_the_volume_at_the_adopted_claims_uid_after_fresh_rights() {
    let mut f = adopted();
    f.destination_claim.as_mut().unwrap().finalizers.clear();
    f.destination_claim.as_mut().unwrap().volume_name = None;
    // Held and pinned to the volume in one write, at the version decided on.
    assert_eq!(
        decide(&f),
        Action::ProtectDestination {
            resource_version: "10".to_owned(),
            finalizers: vec![FINALIZER_TRANSFER_PROTECTION.to_owned()],
            volume_name: Some("pv-db".to_owned()),
        }
    );
    // Held but not pinned (a hold from before pinning): pinned, keeping
    // the finalizers as they are.
    f.destination_claim.as_mut().unwrap().finalizers =
        vec![FINALIZER_TRANSFER_PROTECTION.to_owned()];
    assert_eq!(
        decide(&f),
        Action::ProtectDestination {
            resource_version: "10".to_owned(),
            finalizers: vec![FINALIZER_TRANSFER_PROTECTION.to_owned()],
            volume_name: Some("pv-db".to_owned()),
        }
    );
    f.destination_claim.as_mut().unwrap().volume_name = Some("pv-db".to_owned());
    assert_eq!(decide(&f), Action::Ask(Question::Rights));
    f.rights = Some(Ok(()));
    assert_eq!(
        decide(&f),
        Action::Commit {
            resource_version: "20".to_owned(),
            destination: adopted_ref(),
        }
    );
}

#[test]
fn an_adopted_claim_bound_elsewhere_or_swapped_before_the_commit_fails_the_pair() {
    let mut f = adopted();
    f.rights = Some(Ok(()));
    f.destination_claim.as_mut().unwrap().volume_name = Some("pv-other".to_owned());
    assert_finish(decide(&f), Phase::Failed, REASON_CLAIM_MISMATCH);
    let mut f = adopted();
    f.destination_claim.as_mut().unwrap().uid = "uid-same-name".to_owned();
    assert_finish(decide(&f), Phase::Failed, REASON_VOLUME_CHANGED);
    let mut f = adopted();
    f.destination_claim.as_mut().unwrap().deleting = true;
    assert_finish(decide(&f), Phase::Failed, REASON_VOLUME_CHANGED);
}

#[test]
fn a_rollback_lets_an_adopted_claim_go_and_never_deletes_it() {
    let mut f = adopted();
    finished(&mut f, Phase::Failed);
    let v = f.volume.as_mut().unwrap();
    v.marker = None;
    v.original_policy = None;
    assert!(
        matches!(decide(&f), Action::UnprotectDestination { ref finalizers, .. } if finalizers.is_empty()),
        "{:?}",
        decide(&f)
    );
    f.destination_claim.as_mut().unwrap().finalizers.clear();
    assert_eq!(
        decide(&f),
        Action::Unlock {
            resource_version: "10".to_owned()
        }
    );
    // Without the request to ask, a claim without R3's lock is the tenant's.
    let mut g = adopted();
    finished(&mut g, Phase::Cancelled);
    g.volume.as_mut().unwrap().marker = None;
    g.peer = Peer::Gone;
    assert!(
        matches!(decide(&g), Action::UnprotectDestination { .. }),
        "{:?}",
        decide(&g)
    );
}

#[test]
fn after_the_commit_an_adopted_claim_is_waited_on_and_never_unlocked() {
    let mut f = adopted();
    f.volume.as_mut().unwrap().claim_ref = Some(ClaimRef {
        namespace: "dev".to_owned(),
        name: "data".to_owned(),
        uid: DATA_UID.to_owned(),
    });
    f.moved_claim = None; // R5 done
    assert!(
        matches!(decide(&f), Action::Wait { ref report, .. } if report.reason == REASON_WAITING_FOR_BINDING),
        "{:?}",
        decide(&f)
    );
}

// ----- Clone: a request made for one claim ---------------------------------------

/// A Clone pair whose request serves the claims that name it, nothing made.
fn clone_populating() -> Facts {
    let mut f = clone_fresh();
    populating(&mut f);
    f.rights = Some(Ok(()));
    f
}

#[test]
fn a_clone_is_made_only_for_a_claim_that_a_clone_of_the_source_fits() {
    let mut f = clone_populating();
    f.claimants = vec![asking("data", DATA_UID, 1_500)];
    assert!(
        matches!(decide(&f), Action::CreateClone(_)),
        "{:?}",
        decide(&f)
    );
    // Bigger than the source, whose size the clone gets: nothing is made.
    let mut big = asking("data", DATA_UID, 1_500);
    big.shape.request = Some("5Gi".to_owned());
    f.claimants = vec![big];
    match decide(&f) {
        Action::Finish { phase, report } => {
            assert_eq!(phase, Phase::Failed);
            assert_eq!(report.reason, REASON_CLAIM_MISMATCH);
            assert!(
                report
                    .destination
                    .contains("dev/data cannot receive a clone"),
                "{report:?}"
            );
            assert!(
                !report.source.contains("5Gi"),
                "the source side reads no claim: {report:?}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Another class, or a claim that went: nothing is made either.
    let mut other_class = asking("data", DATA_UID, 1_500);
    other_class.shape.storage_class_name = Some("slow".to_owned());
    f.claimants = vec![other_class];
    assert!(matches!(decide(&f), Action::Finish { .. }));
    f.claimants = Vec::new();
    match decide(&f) {
        Action::Finish { report, .. } => {
            assert!(
                report.destination.contains("nothing was cloned"),
                "{report:?}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_request_made_for_a_claim_that_went_after_its_clone_was_made_fails_instead_of_keeping_the_clone(
) {
    let mut f = clone_populating();
    // Made by the standing request `clones` for `dev/data` alone.
    if let Peer::Found(d) = &mut f.peer {
        let parent = ObjectMeta {
            name: Some("clones".to_owned()),
            uid: Some("uid-clones".to_owned()),
            ..ObjectMeta::default()
        };
        d.metadata.owner_references = Some(vec![crate::api::meta::controller_ref(
            &crate::api::NAMESPACE_TRANSFERS,
            &parent,
        )]);
        d.metadata.annotations = Some(
            [(
                crate::api::namespace_transfer::ANNOTATION_SERVES_CLAIM.to_owned(),
                DATA_UID.to_owned(),
            )]
            .into_iter()
            .collect(),
        );
    }
    let mut data = asking("data", DATA_UID, 1_500);
    data.populator = Some(PopulatorRef {
        name: "clones".to_owned(),
        namespace: None,
    });
    f.claimants = vec![data];
    // The clone made and bound; the claim still there: on to the lock.
    let mut clone = made_clone(&f);
    clone.phase = "Bound".to_owned();
    clone.volume_name = Some("pv-db".to_owned());
    clone.shape.volume_name = clone.volume_name.clone();
    f.volume = Some(volume(Some(("prod", &clone.name, &clone.uid))));
    f.moved_claim = Some(clone);
    assert!(
        !matches!(decide(&f), Action::Finish { .. } | Action::Wait { .. }),
        "{:?}",
        decide(&f)
    );
    // The claim went: C1 made the clone locked, so the pair ends (and its
    // rollback deletes the clone) rather than wait for a claim that can
    // never come.
    assert_eq!(f.moved_claim.as_ref().unwrap().lock.as_deref(), Some(S_UID));
    f.claimants = Vec::new();
    let report = assert_finish(decide(&f), Phase::Failed, REASON_CLAIM_MISMATCH);
    assert!(report.destination.contains("went"), "{report:?}");
    assert!(!report.source.contains("data"), "{report:?}");
}
