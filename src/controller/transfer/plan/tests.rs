use serde_json::{json, Value};

use super::cluster::provisioner_finalizers;
use super::*;
use crate::api::namespace_transfer::{
    ANNOTATION_DESTINATION_LOST, ANNOTATION_ORIGINAL_RECLAIM_POLICY,
    ANNOTATION_PROVISIONER_FINALIZER, LABEL_CLONED_UNDER, PROVISIONER_FINALIZER,
};
use crate::controller::transfer::facts::VOLUME_MARKER;

fn volume(change: VolumeChange) -> ClusterWrite {
    ClusterWrite::Volume {
        name: "pv-db".to_owned(),
        resource_version: "7".to_owned(),
        change,
        finalizers: None,
    }
}

#[test]
fn r2_remembers_the_policy_marks_the_volume_and_retains_it_at_the_version_decided_on() {
    let retain = volume(VolumeChange::Retain {
        original_policy: "Delete".to_owned(),
        marker: "uid-give".to_owned(),
        cloned_under: None,
    });
    assert_eq!(
        retain.patch(),
        json!({
            "metadata": {
                "resourceVersion": "7",
                "annotations": {
                    "storage.transfer.k8s.io/original-reclaim-policy": "Delete",
                    "storage.transfer.k8s.io/transfer": "uid-give",
                },
            },
            "spec": {"persistentVolumeReclaimPolicy": "Retain"},
        })
    );
    // Clone mode labels the volume with the offer, for good.
    let retain = volume(VolumeChange::Retain {
        original_policy: "Delete".to_owned(),
        marker: "uid-give".to_owned(),
        cloned_under: Some("uid-give".to_owned()),
    });
    assert_eq!(
        retain.patch()["metadata"]["labels"],
        json!({ LABEL_CLONED_UNDER: "uid-give" })
    );
}

#[test]
fn r4_points_the_claim_ref_at_the_destination_claim_and_clears_the_old_claims_version() {
    let commit = volume(VolumeChange::Commit {
        to: ClaimReference {
            namespace: "dev".to_owned(),
            name: "db".to_owned(),
            uid: "uid-dest".to_owned(),
        },
    });
    assert_eq!(
        commit.patch(),
        json!({
            "metadata": {"resourceVersion": "7"},
            "spec": {"claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": "dev",
                "name": "db",
                "uid": "uid-dest",
                "resourceVersion": null,
                "fieldPath": null,
            }},
        })
    );
}

#[test]
fn unmarking_takes_our_annotations_off_and_sets_the_policy_only_when_told() {
    let keep = volume(VolumeChange::Unmark { policy: None }).patch();
    assert_eq!(
        keep,
        json!({"metadata": {
            "resourceVersion": "7",
            "annotations": {
                "storage.transfer.k8s.io/original-reclaim-policy": null,
                "storage.transfer.k8s.io/transfer": null,
                "storage.transfer.k8s.io/provisioner-finalizer": null,
            },
        }})
    );
    let restore = volume(VolumeChange::Unmark {
        policy: Some("Delete".to_owned()),
    })
    .patch();
    assert_eq!(restore["spec"]["persistentVolumeReclaimPolicy"], "Delete");
}

/// A Bound volume with `finalizers`; `took` when R2 took the provisioner's.
fn volume_with(finalizers: &[&str], took: bool) -> crate::controller::transfer::facts::Volume {
    let mut v = crate::controller::transfer::decide::tests::fresh()
        .volume
        .unwrap();
    v.phase = "Bound".to_owned();
    v.finalizers = finalizers.iter().map(|f| (*f).to_owned()).collect();
    v.took_provisioner_finalizer = took;
    v
}

const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

#[test]
fn r2_and_the_rehold_take_the_provisioners_finalizer_off_with_the_policy_and_say_so() {
    let retain = VolumeChange::Retain {
        original_policy: "Delete".to_owned(),
        marker: "uid-give".to_owned(),
        cloned_under: None,
    };
    let rehold = VolumeChange::Rehold {
        original_policy: "Delete".to_owned(),
        marker: "uid-give".to_owned(),
        lost: "uid-dest".to_owned(),
    };
    let v = volume_with(&[PV_PROTECTION, PROVISIONER_FINALIZER], false);
    for change in [retain.clone(), rehold] {
        let finalizers = provisioner_finalizers(&v, &change);
        assert_eq!(
            finalizers,
            Some(vec![PV_PROTECTION.to_owned()]),
            "{change:?}"
        );
        let write = ClusterWrite::Volume {
            name: "pv-db".to_owned(),
            resource_version: "7".to_owned(),
            change,
            finalizers,
        };
        let patch = write.patch();
        assert_eq!(patch["metadata"]["finalizers"], json!([PV_PROTECTION]));
        assert_eq!(
            patch["metadata"]["annotations"][ANNOTATION_PROVISIONER_FINALIZER],
            "taken"
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    }
    // A volume without it: the finalizers and the annotation stay as they are.
    let v = volume_with(&[PV_PROTECTION], false);
    assert_eq!(provisioner_finalizers(&v, &retain), None);
    let patch = volume(retain).patch();
    assert!(patch["metadata"].get("finalizers").is_none());
    assert!(patch["metadata"]["annotations"]
        .get(ANNOTATION_PROVISIONER_FINALIZER)
        .is_none());
}

#[test]
fn the_provisioners_finalizer_goes_back_with_delete_only_where_r2_took_it_on_a_bound_volume_not_being_deleted(
) {
    let restore = VolumeChange::Unmark {
        policy: Some("Delete".to_owned()),
    };
    let put_back = Some(vec![
        PV_PROTECTION.to_owned(),
        PROVISIONER_FINALIZER.to_owned(),
    ]);
    let took = volume_with(&[PV_PROTECTION], true);
    assert_eq!(provisioner_finalizers(&took, &restore), put_back);
    let write = ClusterWrite::Volume {
        name: "pv-db".to_owned(),
        resource_version: "7".to_owned(),
        change: restore.clone(),
        finalizers: put_back,
    };
    let patch = write.patch();
    assert_eq!(
        patch["metadata"]["finalizers"],
        json!([PV_PROTECTION, PROVISIONER_FINALIZER])
    );
    assert_eq!(
        patch["metadata"]["annotations"][ANNOTATION_PROVISIONER_FINALIZER],
        Value::Null
    );
    // Not taken by R2; kept under Retain; already there; being deleted;
    // not Bound: left to the provisioner.
    let mut deleting = took.clone();
    deleting.deleting = true;
    let mut released = took.clone();
    released.phase = "Released".to_owned();
    let cases = [
        (
            "not taken",
            volume_with(&[PV_PROTECTION], false),
            restore.clone(),
        ),
        (
            "kept Retain",
            took.clone(),
            VolumeChange::Unmark { policy: None },
        ),
        (
            "restored Retain",
            took.clone(),
            VolumeChange::Unmark {
                policy: Some("Retain".to_owned()),
            },
        ),
        (
            "already there",
            volume_with(&[PROVISIONER_FINALIZER], true),
            restore.clone(),
        ),
        ("being deleted", deleting, restore.clone()),
        ("released", released, restore),
    ];
    for (why, v, change) in cases {
        assert_eq!(provisioner_finalizers(&v, &change), None, "{why}");
    }
}

#[test]
fn a_rehold_retains_the_volume_again_naming_the_lost_claim() {
    let rehold = volume(VolumeChange::Rehold {
        original_policy: "Delete".to_owned(),
        marker: "uid-give".to_owned(),
        lost: "uid-dest".to_owned(),
    })
    .patch();
    let annotations = &rehold["metadata"]["annotations"];
    assert_eq!(annotations[ANNOTATION_DESTINATION_LOST], "uid-dest");
    assert_eq!(annotations[VOLUME_MARKER], "uid-give");
    assert_eq!(annotations[ANNOTATION_ORIGINAL_RECLAIM_POLICY], "Delete");
    assert_eq!(rehold["spec"]["persistentVolumeReclaimPolicy"], "Retain");
}

#[test]
fn claim_writes_carry_a_version_only_when_they_are_conditional() {
    let claim = |resource_version: Option<&str>, change| ClusterWrite::Claim {
        namespace: "prod".to_owned(),
        name: "db".to_owned(),
        resource_version: resource_version.map(str::to_owned),
        change,
    };
    let lock = claim(Some("3"), ClaimChange::Lock("uid-give".to_owned()));
    assert!(lock.is_conditional());
    assert_eq!(
        lock.patch(),
        json!({"metadata": {
            "resourceVersion": "3",
            "annotations": {"storage.transfer.k8s.io/transfer": "uid-give"},
        }})
    );
    let unlock = claim(None, ClaimChange::Unlock);
    assert!(!unlock.is_conditional());
    assert_eq!(
        unlock.patch(),
        json!({"metadata": {"annotations": {"storage.transfer.k8s.io/transfer": null}}})
    );
    let finalizers = claim(
        Some("4"),
        ClaimChange::Finalizers(vec!["kubernetes.io/pvc-protection".to_owned()]),
    );
    assert_eq!(
        finalizers.patch(),
        json!({"metadata": {
            "resourceVersion": "4",
            "finalizers": ["kubernetes.io/pvc-protection"],
        }})
    );
    let delete = ClusterWrite::DeleteClaim {
        namespace: "prod".to_owned(),
        name: "db".to_owned(),
        uid: "uid-db".to_owned(),
    };
    assert!(
        delete.is_conditional(),
        "a delete is conditional on the uid"
    );
    assert!(volume(VolumeChange::Unmark { policy: None }).is_conditional());
}

/// The status writes of `p` to the peer.
fn peer_writes(p: &Plan) -> Vec<&StatusChange> {
    p.writes
        .iter()
        .filter_map(|w| match w {
            Write::Status {
                on: On::Peer,
                change,
            } => Some(change),
            _ => None,
        })
        .collect()
}

/// R2 to R5 on `f` (R3 as the create of `claim`).
fn steps_without_a_phase(f: &Facts) -> Vec<Action> {
    vec![
        Action::Retain {
            resource_version: "7".to_owned(),
            policy: "Delete".to_owned(),
        },
        Action::CreateDestination(Box::default()),
        Action::Commit {
            resource_version: "9".to_owned(),
            destination: ClaimReference {
                namespace: "dev".to_owned(),
                name: "db".to_owned(),
                uid: "uid-dest".to_owned(),
            },
        },
        Action::ReleaseSource {
            uid: f
                .moved_claim
                .as_ref()
                .map(|c| c.uid.clone())
                .unwrap_or_default(),
        },
    ]
}

#[test]
fn a_step_that_changes_no_phase_writes_the_source_object_alone() {
    use crate::controller::transfer::decide::tests::committed;
    let f = committed();
    for action in steps_without_a_phase(&f) {
        let p = plan(&f, &action);
        // R2's and R5's steps ride on the next record (the test below).
        let records = !matches!(action, Action::Retain { .. } | Action::ReleaseSource { .. });
        assert_eq!(
            p.writes
                .iter()
                .any(|w| matches!(w, Write::Status { on: On::Source, .. })),
            records,
            "{action:?} records its step on the source object, if it has a record: {p:?}"
        );
        assert!(peer_writes(&p).is_empty(), "{action:?}: {p:?}");
    }
    // The phase changes still reach both.
    let p = plan(&f, &Action::Complete);
    assert_eq!(peer_writes(&p).len(), 1, "{p:?}");
}

#[test]
fn a_standing_offers_request_hears_each_step_as_it_keeps_them_itself() {
    use crate::controller::transfer::decide::tests::{clone_fresh, fresh};
    let mut f = clone_fresh();
    f.moved_claim = fresh().moved_claim;
    f.volume = fresh().volume;
    assert!(peer_keeps_steps(&f));
    let commit = steps_without_a_phase(&f)
        .into_iter()
        .find(|a| matches!(a, Action::Commit { .. }))
        .unwrap();
    let p = plan(&f, &commit);
    assert_eq!(peer_writes(&p).len(), 1, "{p:?}");
    assert!(matches!(peer_writes(&p)[0].edit, Edit::Committed { .. }));
}

#[test]
fn r2_writes_the_volume_alone_and_r5_the_claims_alone_their_steps_ride_on_the_next_record() {
    use crate::controller::transfer::decide::tests::{clone_fresh, committed, fresh};
    let retain = Action::Retain {
        resource_version: "7".to_owned(),
        policy: "Delete".to_owned(),
    };
    let mut standing = clone_fresh();
    standing.moved_claim = fresh().moved_claim;
    standing.volume = fresh().volume;
    for (what, f) in [("a pair", fresh()), ("a standing offer's pair", standing)] {
        let p = plan(&f, &retain);
        assert!(!p.writes.is_empty(), "{what}: {p:?}");
        assert!(
            p.writes.iter().all(|w| matches!(w, Write::Cluster(_))),
            "{what}: R2 writes the volume and nothing of ours: {p:?}"
        );
    }
    let f = committed();
    let uid = f.moved_claim.as_ref().map(|c| c.uid.clone()).unwrap();
    let p = plan(&f, &Action::ReleaseSource { uid });
    assert!(
        p.writes.iter().any(|w| matches!(w, Write::Cluster(_))),
        "{p:?}"
    );
    assert!(
        !p.writes.iter().any(|w| matches!(w, Write::Status { .. })),
        "R5 records nothing of its own: {p:?}"
    );
}

/// The objects whose status write also sets our finalizer, and to what.
fn finalizers_set(p: &Plan) -> Vec<(On, bool)> {
    p.writes
        .iter()
        .filter_map(|w| match w {
            Write::Status { on, change } => change.finalizer().map(|present| (*on, present)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_match_protects_both_objects_in_its_own_writes_and_the_completion_lets_only_the_peer_go() {
    use crate::controller::transfer::decide::tests::{committed, fresh};
    let mut f = fresh();
    f.source.status = None;
    let p = plan(&f, &Action::RecordMatch);
    assert_eq!(
        finalizers_set(&p),
        [(On::Source, true), (On::Peer, true)],
        "{p:?}"
    );
    assert!(
        !p.writes
            .iter()
            .any(|w| matches!(w, Write::Finalizer { .. })),
        "no finalizer write of its own: {p:?}"
    );

    let f = committed();
    for action in steps_without_a_phase(&f) {
        let p = plan(&f, &action);
        assert_eq!(finalizers_set(&p), [], "{action:?}: {p:?}");
    }
    // The source object holds the pair's record, and its finalizer, until
    // `tidy` has let the destination claim go; the peer goes with its
    // Completed write, after the source object's.
    let p = plan(&f, &Action::Complete);
    assert_eq!(finalizers_set(&p), [(On::Peer, false)], "{p:?}");
    let statuses: Vec<On> = p
        .writes
        .iter()
        .filter_map(|w| match w {
            Write::Status { on, .. } => Some(*on),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [On::Source, On::Peer], "{p:?}");
}

#[test]
fn a_standing_offers_request_keeps_its_finalizer_through_the_completion() {
    use crate::controller::transfer::decide::tests::{clone_fresh, committed};
    let mut f = clone_fresh();
    let done = committed();
    f.moved_claim = done.moved_claim;
    f.volume = done.volume;
    f.destination_claim = done.destination_claim;
    let dest = crate::controller::transfer::decide::recorded_destination(&done.source).cloned();
    f.source
        .status
        .get_or_insert_with(Default::default)
        .destination_claim = dest.clone();
    if let crate::controller::transfer::facts::Peer::Found(d) = &mut f.peer {
        d.status
            .get_or_insert_with(Default::default)
            .destination_claim = dest;
    }
    let p = plan(&f, &Action::Complete);
    assert!(!peer_writes(&p).is_empty(), "the request hears it: {p:?}");
    assert_eq!(finalizers_set(&p), [], "{p:?}");
}

/// `Commit` to the destination claim of `decide::tests::created`.
fn commit_to_dest() -> Action {
    Action::Commit {
        resource_version: "20".to_owned(),
        destination: ClaimReference {
            namespace: "dev".to_owned(),
            name: "db".to_owned(),
            uid: "uid-dest".to_owned(),
        },
    }
}

/// R3's claim as the facts show it: Pending, pre-bound to the volume.
fn created_pre_bound() -> Facts {
    let mut f = crate::controller::transfer::decide::tests::created();
    if let Some(c) = f.destination_claim.as_mut() {
        c.volume_name = Some("pv-db".to_owned());
    }
    f
}

#[test]
fn the_commit_binds_the_destination_claim_as_the_binder_would_in_one_status_write_at_the_version_decided_on(
) {
    let f = created_pre_bound();
    let writes = cluster_writes(&f, &commit_to_dest());
    assert_eq!(
        writes.len(),
        3,
        "the commit, the binding, the source Lost: {writes:?}"
    );
    assert!(matches!(
        &writes[0],
        ClusterWrite::Volume {
            change: VolumeChange::Commit { .. },
            ..
        }
    ));
    let bind = &writes[1];
    let ClusterWrite::Claim {
        resource_version,
        change,
        ..
    } = bind
    else {
        panic!("{bind:?}");
    };
    assert_eq!(resource_version.as_deref(), Some("10"));
    assert_eq!(
        *change,
        ClaimChange::Bind(BoundStatus {
            access_modes: vec!["ReadWriteOnce".to_owned()],
            capacity: "2Gi".to_owned(),
            volume_attributes_class_name: None,
        })
    );
    assert!(change.is_status() && bind.is_for_the_binder() && bind.is_conditional());
    // What the binder's updateClaimStatus would set, bound-by-controller (so
    // that a binder whose copy of the volume lags retries rather than make
    // the claim Pending), never bind-completed, and our lock off.
    assert_eq!(
        bind.patch(),
        json!({
            "metadata": {
                "resourceVersion": "10",
                "annotations": {
                    "storage.transfer.k8s.io/transfer": null,
                    "pv.kubernetes.io/bound-by-controller": "yes",
                },
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "2Gi"},
                "currentVolumeAttributesClassName": null,
            },
        })
    );
    // The volume's attributes class becomes the claim's current one.
    let mut f = created_pre_bound();
    f.volume.as_mut().unwrap().volume_attributes_class_name = Some("gold".to_owned());
    let writes = cluster_writes(&f, &commit_to_dest());
    assert_eq!(
        writes[1].patch()["status"]["currentVolumeAttributesClassName"],
        "gold"
    );
}

#[test]
fn the_commit_leaves_to_the_binder_a_claim_it_would_not_bind_as_a_pending_pre_bound_one_and_only_unlocks_it(
) {
    let unlock_only = |f: &Facts, why: &str| {
        let writes = cluster_writes(f, &commit_to_dest());
        assert_eq!(
            writes[1],
            ClusterWrite::Claim {
                namespace: "dev".to_owned(),
                name: "db".to_owned(),
                resource_version: None,
                change: ClaimChange::Unlock,
            },
            "{why}"
        );
        assert!(!writes[1].is_for_the_binder(), "{why}");
    };
    let mut f = created_pre_bound();
    f.volume.as_mut().unwrap().resizing = true;
    unlock_only(
        &f,
        "a resize under way: the binder takes the capacity from an annotation",
    );
    let mut f = created_pre_bound();
    f.volume.as_mut().unwrap().capacity = None;
    unlock_only(&f, "a volume without a capacity");
    for phase in ["Lost", "Bound", ""] {
        let mut f = created_pre_bound();
        f.destination_claim.as_mut().unwrap().phase = phase.to_owned();
        unlock_only(&f, phase);
    }
    let mut f = created_pre_bound();
    f.destination_claim.as_mut().unwrap().deleting = true;
    unlock_only(&f, "a deleting claim");
    let mut f = created_pre_bound();
    f.destination_claim.as_mut().unwrap().volume_name = Some("pv-other".to_owned());
    unlock_only(&f, "pre-bound to another volume");
    let mut f = created_pre_bound();
    f.destination_claim.as_mut().unwrap().uid = "uid-impostor".to_owned();
    unlock_only(&f, "not the claim the commit names");
}

#[test]
fn the_commit_makes_the_source_claim_lost_right_after_the_binding_at_the_version_decided_on() {
    let f = created_pre_bound();
    let writes = cluster_writes(&f, &commit_to_dest());
    let lose = writes.last().expect("writes");
    assert_eq!(
        *lose,
        ClusterWrite::Claim {
            namespace: "prod".to_owned(),
            name: "db".to_owned(),
            resource_version: Some("10".to_owned()),
            change: ClaimChange::Lose,
        },
        "{writes:?}"
    );
    // Refused, the plan goes on and R5 makes it Lost; never before the
    // commit, whose refusal ends the plan.
    assert!(lose.is_for_the_binder() && lose.is_conditional());
    assert!(matches!(
        &writes[0],
        ClusterWrite::Volume {
            change: VolumeChange::Commit { .. },
            ..
        }
    ));
    // Lost already, a binding the binder never completed, another claim
    // than the one R1 locked, or one pre-bound to another volume: the
    // binder would not make it Lost, and neither does the commit.
    let no_lose = |f: &Facts, why: &str| {
        let writes = cluster_writes(f, &commit_to_dest());
        assert_eq!(writes.len(), 2, "{why}: {writes:?}");
        assert!(
            !writes.iter().any(|w| matches!(
                w,
                ClusterWrite::Claim {
                    change: ClaimChange::Lose,
                    ..
                }
            )),
            "{why}"
        );
    };
    let mut f = created_pre_bound();
    f.moved_claim.as_mut().unwrap().phase = "Lost".to_owned();
    no_lose(&f, "Lost already");
    let mut f = created_pre_bound();
    f.moved_claim.as_mut().unwrap().bind_completed = false;
    no_lose(&f, "no bind-completed");
    let mut f = created_pre_bound();
    f.moved_claim.as_mut().unwrap().uid = "uid-impostor".to_owned();
    no_lose(&f, "not the claim R1 locked");
    let mut f = created_pre_bound();
    f.moved_claim.as_mut().unwrap().volume_name = Some("pv-other".to_owned());
    no_lose(&f, "pre-bound to another volume");
}

#[test]
fn r5_makes_the_source_claim_lost_as_the_binder_would_then_deletes_it() {
    let f = crate::controller::transfer::decide::tests::committed();
    let release = Action::ReleaseSource {
        uid: "uid-db".to_owned(),
    };
    let writes = cluster_writes(&f, &release);
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes[0].is_for_the_binder());
    // What the binder's updateClaimStatus(Lost) sets and clears.
    assert_eq!(
        writes[0].patch(),
        json!({
            "metadata": {"resourceVersion": "10"},
            "status": {
                "phase": "Lost",
                "accessModes": null,
                "capacity": null,
                "currentVolumeAttributesClassName": null,
            },
        })
    );
    assert!(matches!(&writes[1], ClusterWrite::DeleteClaim { uid, .. } if uid == "uid-db"));
    // Lost already, a binding the binder never completed, or a volume that
    // still names it (no commit): only the delete, as before.
    let only_delete = |f: &Facts, why: &str| {
        let writes = cluster_writes(f, &release);
        assert_eq!(writes.len(), 1, "{why}: {writes:?}");
        assert!(
            matches!(&writes[0], ClusterWrite::DeleteClaim { .. }),
            "{why}"
        );
    };
    let mut lost = crate::controller::transfer::decide::tests::committed();
    lost.moved_claim.as_mut().unwrap().phase = "Lost".to_owned();
    only_delete(&lost, "Lost already");
    let mut unbound = crate::controller::transfer::decide::tests::committed();
    unbound.moved_claim.as_mut().unwrap().bind_completed = false;
    only_delete(&unbound, "no bind-completed");
    let uncommitted = crate::controller::transfer::decide::tests::created();
    only_delete(&uncommitted, "the volume still names it");
}
