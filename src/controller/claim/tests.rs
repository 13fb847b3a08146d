use super::lifecycle::*;
use super::*;
use crate::api::ephemeral_claim::ReleasePolicy;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

/// A claim that was made, is bound, and waits for its pod.
fn waiting() -> Facts {
    Facts {
        phase: Phase::Bound,
        release_policy: ReleasePolicy::Delete,
        deleting: false,
        has_finalizer: true,
        claim_created: true,
        first_used: false,
        claim: ClaimState::Ours {
            bound: true,
            deleting: false,
        },
        owner: OwnerState::Active,
        users: Users::default(),
    }
}

/// A new EphemeralClaim whose owner pod exists.
fn fresh() -> Facts {
    Facts {
        phase: Phase::Pending,
        has_finalizer: false,
        claim_created: false,
        claim: ClaimState::Absent,
        ..waiting()
    }
}

fn with(base: Facts, edit: impl FnOnce(&mut Facts)) -> Facts {
    let mut f = base;
    edit(&mut f);
    f
}

const OURS_BOUND: ClaimState = ClaimState::Ours {
    bound: true,
    deleting: false,
};
const OURS_UNBOUND: ClaimState = ClaimState::Ours {
    bound: false,
    deleting: false,
};
const OURS_DELETING: ClaimState = ClaimState::Ours {
    bound: true,
    deleting: true,
};

#[test]
fn the_lifecycle_takes_the_step_its_facts_call_for() {
    let used = |f: &mut Facts| {
        f.phase = Phase::InUse;
        f.first_used = true;
    };
    let cases: Vec<(&str, Facts, Step)> = vec![
        (
            "a new claim gets the finalizer first",
            fresh(),
            Step::AddFinalizer,
        ),
        (
            "with the finalizer, the claim is made for an existing owner",
            with(fresh(), |f| f.has_finalizer = true),
            Step::CreateClaim,
        ),
        (
            "an owner that does not exist yet is waited for",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.owner = OwnerState::Gone;
            }),
            Step::WaitForOwner,
        ),
        (
            "an owner that finished before the claim was made fails it",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.owner = OwnerState::Finished;
            }),
            Step::FailOwnerFinished,
        ),
        (
            "a claim of the name that is not ours is a conflict",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.claim = ClaimState::Foreign;
            }),
            Step::FailConflict,
        ),
        (
            "our claim found before it was recorded is recorded",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.claim = OURS_UNBOUND;
            }),
            Step::RecordCreated,
        ),
        (
            "a made claim waits to be bound",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.claim_created = true;
                f.claim = OURS_UNBOUND;
            }),
            Step::WaitForBinding,
        ),
        (
            "a bound claim is recorded Bound",
            with(waiting(), |f| f.phase = Phase::Pending),
            Step::RecordBound,
        ),
        (
            "a bound claim whose pod has not started is left alone",
            waiting(),
            Step::Idle,
        ),
        (
            "a pod that references the claim but has not started does not release it",
            with(waiting(), |f| {
                f.users = Users {
                    running: false,
                    active: true,
                }
            }),
            Step::Idle,
        ),
        (
            "a running pod marks the first use",
            with(waiting(), |f| {
                f.users = Users {
                    running: true,
                    active: true,
                }
            }),
            Step::RecordFirstUse,
        ),
        (
            "a claim in use stays while a pod may still run",
            with(waiting(), |f| {
                used(f);
                f.users = Users {
                    running: true,
                    active: true,
                };
            }),
            Step::Idle,
        ),
        (
            "a used claim no pod needs is deleted under Delete",
            with(waiting(), used),
            Step::RecordDeleting(Release::NoLongerUsed),
        ),
        (
            "a used claim no pod needs is released under Retain",
            with(waiting(), |f| {
                used(f);
                f.release_policy = ReleasePolicy::Retain;
            }),
            Step::Retain(Release::NoLongerUsed),
        ),
        (
            "a finished owner releases a claim that was never used",
            with(waiting(), |f| f.owner = OwnerState::Finished),
            Step::RecordDeleting(Release::OwnerFinished),
        ),
        (
            "a vanished owner releases a claim that was never used",
            with(waiting(), |f| f.owner = OwnerState::Gone),
            Step::RecordDeleting(Release::OwnerGone),
        ),
        (
            "a vanished owner releases a claim that was never bound",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.claim_created = true;
                f.claim = OURS_UNBOUND;
                f.owner = OwnerState::Gone;
            }),
            Step::RecordDeleting(Release::OwnerGone),
        ),
        (
            "Deleting is recorded before our claim is deleted; then it is deleted",
            with(waiting(), |f| f.phase = Phase::Deleting),
            Step::DeleteClaim,
        ),
        (
            "a claim held after its deletion is waited on, and the finalizer stays",
            with(waiting(), |f| {
                f.phase = Phase::Deleting;
                f.claim = OURS_DELETING;
            }),
            Step::WaitForClaimGone,
        ),
        (
            "an EphemeralClaim deleted while its claim is held lets go: the claim orphans nothing",
            with(waiting(), |f| {
                f.phase = Phase::Deleting;
                f.claim = OURS_DELETING;
                f.deleting = true;
            }),
            Step::RemoveFinalizer,
        ),
        (
            "Deleted is recorded only once our claim is gone",
            with(waiting(), |f| {
                f.phase = Phase::Deleting;
                f.claim = ClaimState::Absent;
            }),
            Step::RecordDeleted,
        ),
        (
            "Deleted as an older server recorded it, before the deletion: it is deleted",
            with(waiting(), |f| f.phase = Phase::Deleted),
            Step::DeleteClaim,
        ),
        (
            "once our claim is on its way out, the finalizer goes",
            with(waiting(), |f| {
                f.phase = Phase::Deleted;
                f.claim = OURS_DELETING;
            }),
            Step::RemoveFinalizer,
        ),
        (
            "a Deleted claim with nothing left is done",
            with(waiting(), |f| {
                f.phase = Phase::Deleted;
                f.claim = ClaimState::Absent;
                f.has_finalizer = false;
            }),
            Step::Idle,
        ),
        (
            "a made claim that someone else deleted is never made again",
            with(waiting(), |f| f.claim = ClaimState::Absent),
            Step::RecordDeleting(Release::ClaimDeleted),
        ),
        (
            "a made claim replaced by a foreign one is gone, not a conflict",
            with(waiting(), |f| f.claim = ClaimState::Foreign),
            Step::RecordDeleting(Release::ClaimDeleted),
        ),
        (
            "our claim deleted by someone else is recorded Deleted",
            with(waiting(), |f| f.claim = OURS_DELETING),
            Step::RecordDeleting(Release::ClaimDeleted),
        ),
        (
            "a retained claim stays, whatever its pods do",
            with(waiting(), |f| {
                f.phase = Phase::Released;
                f.owner = OwnerState::Gone;
            }),
            Step::Idle,
        ),
        (
            "deleting the EphemeralClaim deletes a retained claim",
            with(waiting(), |f| {
                f.phase = Phase::Released;
                f.deleting = true;
            }),
            Step::RecordDeleting(Release::EphemeralClaimDeleted),
        ),
        (
            "deleting the EphemeralClaim deletes a claim in use",
            with(waiting(), |f| {
                used(f);
                f.deleting = true;
            }),
            Step::RecordDeleting(Release::EphemeralClaimDeleted),
        ),
        (
            "deleting an EphemeralClaim that made nothing only drops the finalizer",
            with(fresh(), |f| {
                f.has_finalizer = true;
                f.deleting = true;
            }),
            Step::RemoveFinalizer,
        ),
        (
            "a Failed claim never touches the conflicting claim, and lets go",
            with(fresh(), |f| {
                f.phase = Phase::Failed;
                f.has_finalizer = true;
                f.claim = ClaimState::Foreign;
                f.deleting = true;
            }),
            Step::RemoveFinalizer,
        ),
        (
            "a claim that lost its volume after being bound is not sent back to Pending",
            with(waiting(), |f| f.claim = OURS_UNBOUND),
            Step::Idle,
        ),
    ];
    for (what, facts, want) in cases {
        assert_eq!(next_step(&facts), want, "{what}: {facts:?}");
    }
}

/// Every combination of facts in which the owner may still run and the claim
/// was never used: no step releases or deletes it, unless the EphemeralClaim
/// itself is being deleted or the claim is already gone.
#[test]
fn a_claim_is_never_released_before_use_while_its_owner_may_run() {
    let phases = [Phase::Pending, Phase::Bound];
    let claims = [
        ClaimState::Absent,
        ClaimState::Foreign,
        OURS_BOUND,
        OURS_UNBOUND,
        OURS_DELETING,
    ];
    let mut checked = 0;
    for phase in phases {
        for claim in claims {
            for policy in [ReleasePolicy::Delete, ReleasePolicy::Retain] {
                for (has_finalizer, claim_created, active) in [
                    (true, true, true),
                    (true, true, false),
                    (true, false, true),
                    (true, false, false),
                    (false, true, false),
                    (false, false, false),
                ] {
                    let facts = Facts {
                        phase,
                        release_policy: policy,
                        deleting: false,
                        has_finalizer,
                        claim_created,
                        first_used: false,
                        claim,
                        owner: OwnerState::Active,
                        users: Users {
                            running: false,
                            active,
                        },
                    };
                    let step = next_step(&facts);
                    let gone = (claim_created && !matches!(claim, ClaimState::Ours { .. }))
                        || claim == OURS_DELETING;
                    match step {
                        Step::Retain(_) | Step::DeleteClaim => {
                            panic!("{step:?} before use: {facts:?}")
                        }
                        Step::RecordDeleting(why) => assert!(
                            gone && why == Release::ClaimDeleted,
                            "{step:?} before use: {facts:?}"
                        ),
                        _ => {}
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 5 * 2 * 6);
}

#[test]
fn release_needs_use_or_a_finished_owner() {
    let cases = [
        (OwnerState::Active, false, false, None),
        (OwnerState::Active, true, true, None),
        (OwnerState::Active, true, false, Some(Release::NoLongerUsed)),
        (
            OwnerState::Finished,
            false,
            true,
            Some(Release::OwnerFinished),
        ),
        (OwnerState::Gone, false, true, Some(Release::OwnerGone)),
    ];
    for (owner, first_used, active, want) in cases {
        let facts = with(waiting(), |f| {
            f.owner = owner;
            f.first_used = first_used;
            f.users.active = active;
        });
        assert_eq!(release(&facts), want, "{facts:?}");
    }
}

fn pvc(value: Value) -> PersistentVolumeClaim {
    serde_json::from_value(value).unwrap()
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

#[test]
fn only_a_claim_whose_controller_is_this_ephemeral_claim_is_ours() {
    let owned = |controller: bool, uid: &str| {
        pvc(json!({
            "metadata": {"name": "runner-scratch", "ownerReferences": [{
                "apiVersion": "storage.transfer.k8s.io/v1alpha1", "kind": "EphemeralClaim",
                "name": "scratch", "uid": uid, "controller": controller,
            }]},
            "status": {"phase": "Bound"},
        }))
    };
    assert_eq!(claim_state(None, "u1"), ClaimState::Absent);
    assert_eq!(claim_state(Some(&owned(true, "u1")), "u1"), OURS_BOUND);
    assert_eq!(
        claim_state(Some(&owned(true, "u2")), "u1"),
        ClaimState::Foreign
    );
    assert_eq!(
        claim_state(Some(&owned(false, "u1")), "u1"),
        ClaimState::Foreign
    );
    let plain = pvc(json!({"metadata": {"name": "runner-scratch"}}));
    assert_eq!(claim_state(Some(&plain), "u1"), ClaimState::Foreign);
    assert_eq!(claim_state(Some(&owned(true, "")), ""), ClaimState::Foreign);
}

#[test]
fn the_owner_is_the_pod_whose_uid_the_claim_names() {
    let pods = vec![
        pod(json!({"metadata": {"name": "runner", "uid": "p2"}, "status": {"phase": "Pending"}})),
        pod(json!({"metadata": {"name": "done", "uid": "p3"}, "status": {"phase": "Succeeded"}})),
        pod(json!({"metadata": {"name": "leaving", "uid": "p4",
            "deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {"phase": "Running"}})),
    ];
    assert_eq!(owner_state(&pods, "runner", None), OwnerState::Active);
    assert_eq!(
        owner_state(&pods, "runner", Some(Some("p2"))),
        OwnerState::Active
    );
    assert_eq!(
        owner_state(&pods, "runner", Some(Some("p1"))),
        OwnerState::Gone,
        "a new pod of the same name is not the owner"
    );
    assert_eq!(
        owner_state(&pods, "runner", Some(None)),
        OwnerState::Gone,
        "a reference the garbage collector removed means the owner is gone"
    );
    assert_eq!(owner_state(&pods, "missing", None), OwnerState::Gone);
    assert_eq!(owner_state(&pods, "done", None), OwnerState::Finished);
    assert_eq!(owner_state(&pods, "leaving", None), OwnerState::Finished);
}

#[test]
fn users_are_the_pods_that_name_the_claim_and_may_still_run() {
    let using = |name: &str, phase: &str, deleting: bool| {
        let mut meta = json!({"name": name});
        if deleting {
            meta["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        pod(json!({
            "metadata": meta,
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "runner-scratch"}}
            ]},
            "status": {"phase": phase},
        }))
    };
    let other = pod(json!({
        "metadata": {"name": "other"},
        "spec": {"containers": [], "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "something-else"}}
        ]},
        "status": {"phase": "Running"},
    }));
    let cases = [
        (vec![], false, false),
        (vec![other.clone()], false, false),
        (vec![using("a", "Pending", false)], false, true),
        (vec![using("a", "Running", false)], true, true),
        (vec![using("a", "Running", true)], true, false),
        (vec![using("a", "Succeeded", false)], false, false),
        (vec![using("a", "Failed", false), other], false, false),
    ];
    for (pods, running, active) in cases {
        let (got, names) = users(&pods, "runner-scratch");
        assert_eq!(got, Users { running, active }, "{pods:?}");
        assert_eq!(!names.is_empty(), running);
    }
}

#[test]
fn the_claim_is_made_from_the_template_owned_by_the_ephemeral_claim_and_the_pod() {
    let ec: EphemeralClaim = serde_json::from_value(json!({
        "metadata": {"name": "scratch", "namespace": "ci", "uid": "ec-uid"},
        "spec": {
            "owner": {"apiVersion": "v1", "kind": "Pod", "name": "runner"},
            "claimTemplate": {
                "metadata": {"labels": {"team": "ci"}, "annotations": {"note": "x"}},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "fast",
                    "resources": {"requests": {"storage": "1Gi"}},
                    "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "fixture"},
                },
            },
        },
    }))
    .unwrap();
    let claim = claim_from_template(&ec, "pod-uid");
    let got = serde_json::to_value(&claim).unwrap();
    assert_eq!(
        got,
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "runner-scratch",
                "namespace": "ci",
                "labels": {"team": "ci"},
                "annotations": {"note": "x"},
                "ownerReferences": [
                    {"apiVersion": "storage.transfer.k8s.io/v1alpha1", "kind": "EphemeralClaim",
                     "name": "scratch", "uid": "ec-uid", "controller": true},
                    {"apiVersion": "v1", "kind": "Pod", "name": "runner", "uid": "pod-uid"},
                ],
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "fast",
                "resources": {"requests": {"storage": "1Gi"}},
                "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "fixture"},
            },
        })
    );
    assert_eq!(claim_state(Some(&claim), "ec-uid"), OURS_UNBOUND);
    assert_eq!(recorded_owner_uid(&claim, "runner"), Some("pod-uid"));
}

#[test]
fn no_claim_is_made_from_an_unsafe_template_stored_before_validation_refused_it() {
    let ec = |template_spec: Value| -> EphemeralClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "scratch", "namespace": "ci"},
            "spec": {
                "owner": {"apiVersion": "v1", "kind": "Pod", "name": "runner"},
                "claimTemplate": {"spec": template_spec},
            },
        }))
        .unwrap()
    };
    let safe = ec(json!({"accessModes": ["ReadWriteOnce"]}));
    assert_eq!(unsafe_template(&safe), None);
    let stealing = ec(json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-of-prod"}));
    let why = unsafe_template(&stealing).expect("refused");
    assert!(
        why.starts_with(
            "no claim is made from this template: spec.claimTemplate.spec.volumeName: Forbidden"
        ),
        "{why}"
    );
}

/// `ci/scratch`, owned by pod `runner`, cloning `prod/db`, with `status`.
fn cross_namespace(status: Value) -> EphemeralClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "scratch", "namespace": "ci", "uid": "ec-uid", "generation": 1},
        "spec": {
            "owner": {"apiVersion": "v1", "kind": "Pod", "name": "runner"},
            "claimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "dataSourceRef": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"},
            }},
            "requester": {"username": "alice"},
        },
        "status": status,
    }))
    .unwrap()
}

fn transfer(value: Value) -> crate::api::namespace_transfer::NamespaceTransfer {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_waiting_claims_rights_are_reviewed_when_new_or_changed_and_always_before_its_request() {
    let ec = cross_namespace(json!({}));
    let same = across::Reviewed::of(&ec);
    let mut respecified = ec.clone();
    respecified.metadata.generation = Some(2);
    let mut recreated = ec.clone();
    recreated.metadata.uid = Some("new-uid".to_owned());
    for (case, last, offered, due) in [
        ("first look, no offer", None, false, true),
        ("unchanged, no offer", Some(same.clone()), false, false),
        ("unchanged, an offer", Some(same.clone()), true, true),
        (
            "spec changed",
            Some(across::Reviewed::of(&respecified)),
            false,
            true,
        ),
        (
            "a new object of the name",
            Some(across::Reviewed::of(&recreated)),
            false,
            true,
        ),
    ] {
        assert_eq!(
            across::rights_review_due(last.as_ref(), &ec, offered),
            due,
            "{case}"
        );
    }
}

#[test]
fn a_transfer_wakes_the_claim_whose_request_it_is_and_those_waiting_for_its_offer() {
    let offer = |ns: &str, source: &str, to: &str, name: &str| {
        transfer(json!({
            "metadata": {"name": "fixtures", "namespace": ns},
            "spec": {"mode": "Clone", "source": {"name": source},
                     "destination": {"namespace": to, "name": name}},
        }))
    };
    let request = transfer(json!({
        "metadata": {"name": "scratch", "namespace": "ci"},
        "spec": {"mode": "Clone", "source": {"namespace": "prod", "name": "db"},
                 "destination": {"name": "runner-scratch"}},
    }));
    let waiting = cross_namespace(json!({"phase": "Pending", "reason": "WaitingForConsent"}));
    let cloning = cross_namespace(json!({"phase": "Pending", "reason": "Cloning"}));
    let bound = cross_namespace(json!({"phase": "Bound"}));
    let same_namespace: EphemeralClaim = serde_json::from_value(json!({
        "metadata": {"name": "scratch", "namespace": "ci"},
        "spec": {"owner": {"apiVersion": "v1", "kind": "Pod", "name": "runner"},
                 "claimTemplate": {"spec": {}}},
    }))
    .unwrap();
    for (case, ec, t, wakes) in [
        (
            "its offer, waiting",
            &waiting,
            offer("prod", "db", "ci", ""),
            true,
        ),
        (
            "its offer, never looked at",
            &cross_namespace(json!(null)),
            offer("prod", "db", "ci", ""),
            true,
        ),
        (
            "its offer, already cloning",
            &cloning,
            offer("prod", "db", "ci", ""),
            false,
        ),
        (
            "its offer, bound",
            &bound,
            offer("prod", "db", "ci", ""),
            false,
        ),
        (
            "an offer of another claim",
            &waiting,
            offer("prod", "cache", "ci", ""),
            false,
        ),
        (
            "an offer from another namespace",
            &waiting,
            offer("staging", "db", "ci", ""),
            false,
        ),
        (
            "an offer to another namespace",
            &waiting,
            offer("prod", "db", "qa", ""),
            false,
        ),
        (
            "a one-shot offer",
            &waiting,
            offer("prod", "db", "ci", "runner-scratch"),
            false,
        ),
        ("its request", &cloning, request.clone(), true),
        ("its request, bound", &bound, request.clone(), true),
        (
            "a claim of its own namespace",
            &same_namespace,
            request.clone(),
            false,
        ),
    ] {
        assert_eq!(watch::transfer_concerns(ec, &t), wakes, "{case}");
        // The index finds it: the claim is filed under a tag the transfer's
        // change names.
        let filed = watch::claim_tags(ec);
        let named = watch::transfer_tags(&t);
        assert!(
            !wakes || filed.iter().any(|tag| named.contains(tag)),
            "{case}: filed under {filed:?}, the change names {named:?}"
        );
    }
}

#[test]
fn a_pod_wakes_only_the_claims_it_owns_or_uses() {
    let ec = cross_namespace(json!({"phase": "Pending", "reason": "WaitingForConsent"}));
    let deleted_ec = cross_namespace(json!({"phase": "Deleted"}));
    let mut deleting = deleted_ec.clone();
    deleting.metadata.deletion_timestamp = Some(now());
    let pod_named = |ns: &str, name: &str, claim: &str| {
        pod(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
            ]},
        }))
    };
    for (case, ec, p, wakes) in [
        ("its owner", &ec, pod_named("ci", "runner", "other"), true),
        (
            "a user of its claim",
            &ec,
            pod_named("ci", "helper", "runner-scratch"),
            true,
        ),
        (
            "another pod of its namespace",
            &ec,
            pod_named("ci", "helper", "other"),
            false,
        ),
        (
            "a pod of that name elsewhere",
            &ec,
            pod_named("qa", "runner", "runner-scratch"),
            false,
        ),
        (
            "its owner, once it is finished",
            &deleted_ec,
            pod_named("ci", "runner", "x"),
            false,
        ),
        (
            "its owner, while it is deleted",
            &deleting,
            pod_named("ci", "runner", "x"),
            true,
        ),
    ] {
        assert_eq!(watch::pod_concerns(ec, &p), wakes, "{case}");
        let named = watch::namespace_tags(p.metadata.namespace.as_deref().unwrap());
        assert!(
            !wakes || watch::claim_tags(ec).iter().any(|tag| named.contains(tag)),
            "{case}: the index finds it"
        );
    }
}

#[test]
fn only_a_claim_known_to_wait_for_an_offer_is_resynced_slowly() {
    let mut deleting = cross_namespace(json!({"phase": "Pending", "reason": "WaitingForConsent"}));
    deleting.metadata.deletion_timestamp = Some(now());
    for (case, ec, slowly) in [
        (
            "waiting for consent",
            cross_namespace(json!({"phase": "Pending", "reason": "WaitingForConsent"})),
            true,
        ),
        ("never looked at", cross_namespace(json!(null)), false),
        (
            "cloning",
            cross_namespace(json!({"phase": "Pending", "reason": "Cloning"})),
            false,
        ),
        ("being deleted", deleting, false),
        (
            "failed",
            cross_namespace(json!({"phase": "Failed", "reason": "WaitingForConsent"})),
            false,
        ),
    ] {
        assert_eq!(watch::waits_for_consent(&ec), slowly, "{case}");
    }
}

#[test]
fn a_deleted_claim_is_held_by_every_scheduled_pod_that_names_it_even_a_finished_one() {
    let named = |name: &str, node: Option<&str>, phase: &str| {
        pod(json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "containers": [],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "runner-scratch"}}],
            },
            "status": {"phase": phase},
        }))
    };
    let pods = vec![
        named("done", Some("node-1"), "Succeeded"),
        named("failed", Some("node-1"), "Failed"),
        named("unscheduled", None, "Pending"),
        pod(
            json!({"metadata": {"name": "other"}, "spec": {"nodeName": "node-1", "containers": []}}),
        ),
    ];
    assert_eq!(
        lifecycle::holders(&pods, "runner-scratch"),
        ["done", "failed"]
    );
    assert!(lifecycle::holders(&pods, "another-claim").is_empty());
}

#[test]
fn a_claim_whose_release_is_decided_is_deleted_without_reading_pods() {
    let owners = [OwnerState::Gone, OwnerState::Active, OwnerState::Finished];
    let users = [
        Users::default(),
        Users {
            running: true,
            active: true,
        },
    ];
    for phase in [
        Phase::Deleting,
        Phase::Deleted,
        Phase::Released,
        Phase::Failed,
    ] {
        for claim in [
            ClaimState::Absent,
            ClaimState::Foreign,
            OURS_BOUND,
            OURS_UNBOUND,
            OURS_DELETING,
        ] {
            for deleting in [false, true] {
                let reads = reads_pods(phase, claim, deleting);
                assert_eq!(
                    reads,
                    phase == Phase::Deleting && claim == OURS_DELETING && !deleting,
                    "{phase:?} {claim:?} deleting {deleting}"
                );
                if reads {
                    continue;
                }
                // Without pods, the owner reads Gone and no pod uses the
                // claim: the step must be the one any pods would give.
                let unread = with(waiting(), |f| {
                    f.phase = phase;
                    f.claim = claim;
                    f.deleting = deleting;
                    f.owner = OwnerState::Gone;
                    f.users = Users::default();
                });
                for owner in owners {
                    for users in users {
                        let read = with(unread.clone(), |f| {
                            f.owner = owner;
                            f.users = users;
                        });
                        assert_eq!(
                            next_step(&read),
                            next_step(&unread),
                            "{phase:?} {claim:?} deleting {deleting} {owner:?} {users:?}"
                        );
                    }
                }
            }
        }
    }
}
