//! EphemeralClaim end to end (DESIGN §2.2): our controller makes the claim
//! from the template, the CSI stack provisions its volume and the real
//! kube-controller-manager binds it, pods (without a kubelet: `spec.nodeName` set
//! and `status.phase` patched) use it, and the claim is released when its pod
//! is done, never before. Admission, conflicts and bad input too.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::Duration;

use serde_json::{json, Value};
use sta_testenv::ephemeral::*;
use sta_testenv::scenario::{
    claim_json, consistently, delete_pod, events_when, eventually, set_pod_phase,
};
use sta_testenv::{shared, ControlPlane, Kubectl};

const WAIT: Duration = Duration::from_secs(60);

fn cp() -> &'static ControlPlane {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    static CLASS: std::sync::Once = std::sync::Once::new();
    CLASS.call_once(|| ensure_class(cp.kubectl()));
    cp
}

fn admin() -> &'static Kubectl {
    cp().kubectl()
}

#[test]
fn the_claim_is_made_from_the_template_under_a_deterministic_name_with_both_owners() {
    let ns = cp().namespace("ec-template").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    let ec = wait_ec(k, &ns.name, "scratch", |ec| {
        ec["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "ClaimCreated"))
    });
    assert_eq!(ec["status"]["claimName"], "runner-scratch");
    // The CSI provisioner may already have bound it; either way it waits for
    // its pod, which never ran.
    let waiting = (ec["status"]["phase"] == "Pending"
        && ec["status"]["reason"] == "WaitingForBinding")
        || ec["status"]["phase"] == "Bound";
    assert!(waiting, "{}", ec["status"]);
    assert!(ec["status"]["firstUsedTime"].is_null(), "{}", ec["status"]);
    assert_eq!(
        ec["metadata"]["finalizers"],
        json!(["storage.transfer.k8s.io/ephemeral-claim-protection"])
    );

    let claim = claim_json(k, &ns.name, "runner-scratch").expect("the claim was made");
    assert_eq!(
        claim["metadata"]["labels"],
        json!({"purpose": "scratch", "team": "ci"})
    );
    assert_eq!(
        claim["metadata"]["annotations"]["example.com/note"],
        "made from a template"
    );
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(claim["spec"]["storageClassName"], CSI_CLASS);
    assert_eq!(claim["spec"]["volumeMode"], "Filesystem");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");

    let pod_uid = json_of(k, &["get", "pod", "runner", "-n", &ns.name])["metadata"]["uid"].clone();
    assert_eq!(
        claim["metadata"]["ownerReferences"],
        json!([
            {
                "apiVersion": "storage.transfer.k8s.io/v1alpha1",
                "kind": "EphemeralClaim",
                "name": "scratch",
                "uid": ec["metadata"]["uid"],
                "controller": true,
            },
            {"apiVersion": "v1", "kind": "Pod", "name": "runner", "uid": pod_uid},
        ])
    );
    let created = |events: &[String]| {
        events
            .iter()
            .any(|e| e.starts_with("Created: made from the template"))
    };
    let events = events_when(
        k,
        &ns.name,
        "PersistentVolumeClaim",
        "runner-scratch",
        created,
    );
    assert!(created(&events), "a Created event on the claim: {events:?}");
}

#[test]
fn a_claim_waits_for_its_owner_pod_to_exist_before_it_is_made() {
    let ns = cp().namespace("ec-no-owner").unwrap();
    let k = admin();
    apply_ephemeral_claim(k, &ns.name, "scratch", "later", Policy::Delete);
    let ec = wait_ec(k, &ns.name, "scratch", |ec| {
        ec["status"]["reason"] == "WaitingForOwner"
    });
    assert_eq!(ec["status"]["phase"], "Pending");
    assert!(claim_json(k, &ns.name, "later-scratch").is_none());
    create_pod(
        k,
        &ns.name,
        "later",
        "later-scratch",
        Scheduling::Unscheduled,
    );
    eventually("the claim to be made once its pod exists", WAIT, || {
        claim_json(k, &ns.name, "later-scratch").is_some()
    });
}

#[test]
fn a_bound_claim_whose_pod_has_not_started_is_never_deleted() {
    let ns = cp().namespace("ec-patient").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    let ec = wait_phase(k, &ns.name, "scratch", "Bound");
    let (pv, handle) = bound_volume_of(k, &ns.name, "runner-scratch");
    assert_eq!(ec["status"]["volumeName"], pv.as_str());
    assert!(ec["status"]["firstUsedTime"].is_null());
    let uid = claim_json(k, &ns.name, "runner-scratch").unwrap()["metadata"]["uid"].clone();
    // Longer than the controller's resync, so every trigger has fired.
    consistently(
        "the unused claim stays bound",
        Duration::from_secs(35),
        || {
            let claim = claim_json(k, &ns.name, "runner-scratch");
            claim.is_some_and(|c| {
                c["metadata"]["uid"] == uid
                    && c["metadata"]["deletionTimestamp"].is_null()
                    && c["status"]["phase"] == "Bound"
            }) && ec_phase(k, &ns.name, "scratch") == "Bound"
        },
    );
    cp().csi.assert_never_deleted(&handle);
    let bound = |events: &[String]| events.iter().any(|e| e.starts_with("ClaimBound: Bound"));
    let events = events_when(k, &ns.name, "EphemeralClaim", "scratch", bound);
    assert!(bound(&events), "a Bound event: {events:?}");
}

#[test]
fn a_claim_goes_in_use_when_its_pod_runs_and_is_deleted_when_it_succeeds() {
    let ns = cp().namespace("ec-delete").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Scheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");

    set_pod_phase(k, &ns.name, "runner", "Running");
    let ec = wait_phase(k, &ns.name, "scratch", "InUse");
    assert!(ec["status"]["firstUsedTime"].is_string(), "{ec}");
    assert_eq!(ec["status"]["reason"], "PodRunning");
    cp().csi.assert_never_deleted(&handle);

    set_pod_phase(k, &ns.name, "runner", "Succeeded");
    let ec = wait_phase(k, &ns.name, "scratch", "Deleting");
    assert_eq!(ec["status"]["reason"], "OwnerFinished");
    assert!(ec["status"]["releasedTime"].is_string(), "{ec}");
    eventually("the claim to be deleted", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch")
            .is_some_and(|c| c["metadata"]["deletionTimestamp"].is_string())
    });
    // pvc-protection holds the claim while the finished pod still names it:
    // the EphemeralClaim says so, and is not Deleted while it does.
    let ec = wait_ec(k, &ns.name, "scratch", |ec| {
        ec["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("pod(s) runner name it"))
    });
    assert_eq!(ec["status"]["phase"], "Deleting", "{ec}");
    cp().csi.assert_never_deleted(&handle);
    delete_pod(k, &ns.name, "runner");
    let ec = wait_phase(k, &ns.name, "scratch", "Deleted");
    assert_eq!(ec["status"]["reason"], "OwnerFinished");
    assert!(
        claim_json(k, &ns.name, "runner-scratch").is_none(),
        "Deleted means gone"
    );
    // Destroyed on detach: the class's Delete policy reaches the driver.
    cp().csi.assert_deleted_once(&handle, WAIT);

    let phases = ["Bound", "InUse", "Deleting", "Deleted"];
    let events = events_when(k, &ns.name, "EphemeralClaim", "scratch", |events| {
        phases
            .iter()
            .all(|p| events.iter().any(|e| e.contains(&format!(": {p}: "))))
    });
    for phase in phases {
        assert!(
            events.iter().any(|e| e.contains(&format!(": {phase}: "))),
            "an Event for {phase}: {events:?}"
        );
    }
    let phases = ["Bound", "InUse", "Deleting"];
    let events = events_when(
        k,
        &ns.name,
        "PersistentVolumeClaim",
        "runner-scratch",
        |events| {
            phases
                .iter()
                .all(|p| events.iter().any(|e| e.contains(&format!("is {p}: "))))
        },
    );
    for phase in phases {
        assert!(
            events.iter().any(|e| e.contains(&format!("is {phase}: "))),
            "an Event on the claim for {phase}: {events:?}"
        );
    }
}

#[test]
fn under_retain_a_used_claim_is_released_and_kept() {
    let ns = cp().namespace("ec-retain").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Scheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Retain);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");
    let uid = claim_json(k, &ns.name, "runner-scratch").unwrap()["metadata"]["uid"].clone();
    set_pod_phase(k, &ns.name, "runner", "Running");
    wait_phase(k, &ns.name, "scratch", "InUse");
    set_pod_phase(k, &ns.name, "runner", "Succeeded");
    let ec = wait_phase(k, &ns.name, "scratch", "Released");
    assert_eq!(ec["status"]["reason"], "OwnerFinished");
    assert!(ec["status"]["releasedTime"].is_string(), "{ec}");
    delete_pod(k, &ns.name, "runner");
    consistently("the retained claim stays", Duration::from_secs(5), || {
        claim_json(k, &ns.name, "runner-scratch").is_some_and(|c| {
            c["metadata"]["uid"] == uid
                && c["metadata"]["deletionTimestamp"].is_null()
                && c["status"]["phase"] == "Bound"
        }) && ec_phase(k, &ns.name, "scratch") == "Released"
    });
    cp().csi.assert_never_deleted(&handle);
}

#[test]
fn a_claim_stays_in_use_while_another_pod_may_still_use_it() {
    let ns = cp().namespace("ec-shared").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Scheduled,
    );
    create_pod(
        k,
        &ns.name,
        "helper",
        "runner-scratch",
        Scheduling::Scheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    wait_phase(k, &ns.name, "scratch", "Bound");
    set_pod_phase(k, &ns.name, "helper", "Running");
    wait_phase(k, &ns.name, "scratch", "InUse");
    set_pod_phase(k, &ns.name, "helper", "Succeeded");
    // The owner has not run yet and still may: the claim is kept.
    consistently(
        "the claim is kept for its owner",
        Duration::from_secs(5),
        || {
            ec_phase(k, &ns.name, "scratch") == "InUse"
                && claim_json(k, &ns.name, "runner-scratch")
                    .is_some_and(|c| c["metadata"]["deletionTimestamp"].is_null())
        },
    );
    set_pod_phase(k, &ns.name, "runner", "Running");
    set_pod_phase(k, &ns.name, "runner", "Failed");
    // The failed pod still names the claim: Deleting, not yet Deleted.
    let ec = wait_phase(k, &ns.name, "scratch", "Deleting");
    assert_eq!(ec["status"]["reason"], "OwnerFinished");
}

#[test]
fn an_owner_pod_deleted_before_use_releases_and_cleans_up_the_claim() {
    let ns = cp().namespace("ec-unused").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");
    delete_pod(k, &ns.name, "runner");
    let ec = wait_phase(k, &ns.name, "scratch", "Deleted");
    assert_eq!(ec["status"]["reason"], "OwnerGone");
    assert!(ec["status"]["firstUsedTime"].is_null());
    eventually("the claim to be gone", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch").is_none()
    });
    cp().csi.assert_deleted_once(&handle, WAIT);
    eventually("the finalizer to be released", WAIT, || {
        ec_json(k, &ns.name, "scratch").is_some_and(|ec| ec["metadata"]["finalizers"].is_null())
    });
}

#[test]
fn deleting_the_ephemeral_claim_deletes_its_claim() {
    let ns = cp().namespace("ec-remove").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Retain);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");
    k.ok(&[
        "delete",
        "ephemeralclaim",
        "scratch",
        "-n",
        &ns.name,
        "--wait=false",
    ]);
    eventually("the EphemeralClaim to be gone", WAIT, || {
        ec_json(k, &ns.name, "scratch").is_none()
    });
    eventually("its claim to be gone", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch").is_none()
    });
    cp().csi.assert_deleted_once(&handle, WAIT);
}

#[test]
fn a_name_collision_with_an_existing_claim_is_a_claim_conflict_and_that_claim_is_untouched() {
    let ns = cp().namespace("ec-conflict").unwrap();
    let k = admin();
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: runner-scratch\n  namespace: {}\n  labels: {{owner: someone-else}}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: no-such-class\n  resources:\n    requests:\n      storage: 2Gi\n",
        ns.name
    ))
    .unwrap();
    let before = raw_claim(k, &ns.name, "runner-scratch");
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    let ec = wait_phase(k, &ns.name, "scratch", "Failed");
    assert_eq!(ec["status"]["reason"], "ClaimConflict");
    let message = ec["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("runner-scratch")
            && message.contains("not controlled by this EphemeralClaim"),
        "{message}"
    );
    let conflict = |events: &[String]| {
        events
            .iter()
            .any(|e| e.starts_with("ClaimConflict: Failed"))
    };
    let events = events_when(k, &ns.name, "EphemeralClaim", "scratch", conflict);
    assert!(conflict(&events), "{events:?}");
    // Neither the conflict nor deleting the EphemeralClaim changes a byte.
    k.ok(&["delete", "ephemeralclaim", "scratch", "-n", &ns.name]);
    delete_pod(k, &ns.name, "runner");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(raw_claim(k, &ns.name, "runner-scratch"), before);
}

#[test]
fn a_user_who_may_create_pods_but_not_claims_is_refused_naming_the_missing_right() {
    let ns = cp().namespace("ec-rights").unwrap();
    let user = tenant(cp(), &ns.name, "pod-maker");
    create_pod(
        &user,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    let refused = user
        .apply(&ephemeral_claim_yaml(
            &ns.name,
            "scratch",
            "runner",
            Policy::Delete,
            "",
        ))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!(
            "User \"pod-maker\" cannot create persistentvolumeclaims in namespace \"{}\", which creating the claim requires",
            ns.name
        )),
        "{refused}"
    );
    assert!(ec_json(admin(), &ns.name, "scratch").is_none());
}

#[test]
fn a_claim_is_not_made_for_a_requester_who_lost_the_right_to_create_claims() {
    let ns = cp().namespace("ec-revoked").unwrap();
    let user = tenant(cp(), &ns.name, "revoked");
    grant(
        cp(),
        &ns.name,
        "revoked",
        "create",
        "persistentvolumeclaims",
    );
    // The owner does not exist yet, so the claim waits and is not made.
    eventually("the grant to take effect", WAIT, || {
        user.apply(&ephemeral_claim_yaml(
            &ns.name,
            "scratch",
            "runner",
            Policy::Delete,
            "",
        ))
        .is_ok()
    });
    wait_ec(admin(), &ns.name, "scratch", |ec| {
        ec["status"]["reason"] == "WaitingForOwner"
    });
    admin().ok(&["delete", "rolebinding", "revoked-create", "-n", &ns.name]);
    create_pod(
        admin(),
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    let ec = wait_phase(admin(), &ns.name, "scratch", "Failed");
    assert_eq!(ec["status"]["reason"], "Forbidden");
    let message = ec["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("User \"revoked\", who created EphemeralClaim")
            && message.contains("can no longer create persistentvolumeclaims"),
        "{message}"
    );
    assert!(claim_json(admin(), &ns.name, "runner-scratch").is_none());
}

#[test]
fn a_clone_source_is_carried_onto_the_claim_and_the_driver_clones_it() {
    let ns = cp().namespace("ec-clone").unwrap();
    let k = admin();
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: fixture\n  namespace: {}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {CSI_CLASS}\n  resources:\n    requests:\n      storage: 1Gi\n",
        ns.name
    ))
    .unwrap();
    eventually("the fixture to be Bound", WAIT, || {
        claim_json(k, &ns.name, "fixture").is_some_and(|c| c["status"]["phase"] == "Bound")
    });
    let (_, fixture) = bound_volume_of(k, &ns.name, "fixture");
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    k.apply(&ephemeral_claim_yaml(
        &ns.name,
        "scratch",
        "runner",
        Policy::Delete,
        "dataSourceRef: {kind: PersistentVolumeClaim, name: fixture}",
    ))
    .unwrap();
    eventually("the clone to be made", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch").is_some()
    });
    let claim = claim_json(k, &ns.name, "runner-scratch").unwrap();
    let source = &claim["spec"]["dataSourceRef"];
    assert_eq!(source["kind"], "PersistentVolumeClaim", "{source}");
    assert_eq!(source["name"], "fixture", "{source}");
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, clone) = bound_volume_of(k, &ns.name, "runner-scratch");
    assert_ne!(clone, fixture);
    let created = cp()
        .csi
        .creation_of(&clone)
        .expect("the driver logged the clone's CreateVolume");
    assert_eq!(
        created.request["volume_content_source"]["Type"]["Volume"]["volume_id"],
        fixture.as_str(),
        "the clone's content source is the fixture's volume: {}",
        created.request
    );
    cp().csi.assert_never_deleted(&fixture);
}

#[test]
fn a_volume_snapshot_in_the_same_namespace_restores_into_the_claim_through_the_driver() {
    let ns = cp().namespace("ec-restore").unwrap();
    let k = admin();
    k.apply(&sta_testenv::csi::snapshot_class_yaml("ec-snapshots"))
        .unwrap();
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: fixture\n  namespace: {ns}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {CSI_CLASS}\n  resources:\n    requests:\n      storage: 1Gi\n---\napiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: fixture-snap\n  namespace: {ns}\nspec:\n  volumeSnapshotClassName: ec-snapshots\n  source:\n    persistentVolumeClaimName: fixture\n",
        ns = ns.name
    ))
    .unwrap();
    eventually("the snapshot to be ready", WAIT, || {
        k.run(&[
            "get",
            "volumesnapshot",
            "fixture-snap",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.status.readyToUse}",
        ])
        .stdout
            == "true"
    });
    let (_, fixture) = bound_volume_of(k, &ns.name, "fixture");
    let snapshot_id = cp()
        .csi
        .calls("CreateSnapshot")
        .into_iter()
        .find(|c| c.succeeded() && c.request["source_volume_id"] == fixture.as_str())
        .and_then(|c| {
            c.response["snapshot"]["snapshot_id"]
                .as_str()
                .map(str::to_owned)
        })
        .expect("the driver snapshotted the fixture");
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    k.apply(&ephemeral_claim_yaml(
        &ns.name,
        "scratch",
        "runner",
        Policy::Delete,
        "dataSourceRef: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: fixture-snap}",
    ))
    .unwrap();
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, restored) = bound_volume_of(k, &ns.name, "runner-scratch");
    let created = cp()
        .csi
        .creation_of(&restored)
        .expect("the driver logged the restore's CreateVolume");
    assert_eq!(
        created.request["volume_content_source"]["Type"]["Snapshot"]["snapshot_id"],
        snapshot_id.as_str(),
        "the new volume is restored from the fixture's snapshot: {}",
        created.request
    );
    cp().csi.assert_never_deleted(&fixture);
}

#[test]
fn a_requester_who_may_not_read_the_clone_source_is_refused() {
    let ns = cp().namespace("ec-clone-rights").unwrap();
    let user = tenant(cp(), &ns.name, "cloner");
    grant(cp(), &ns.name, "cloner", "create", "persistentvolumeclaims");
    let refused = user
        .apply(&ephemeral_claim_yaml(
            &ns.name,
            "scratch",
            "runner",
            Policy::Delete,
            "dataSourceRef: {kind: PersistentVolumeClaim, name: fixture}",
        ))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!(
            "User \"cloner\" cannot get persistentvolumeclaims \"fixture\" in namespace \"{}\", which cloning from it requires",
            ns.name
        )),
        "{refused}"
    );
}

#[test]
fn bad_input_is_unprocessable_and_names_the_field() {
    let ns = cp().namespace("ec-bad").unwrap();
    let http = cp().server_http().unwrap();
    let url = format!(
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{}/ephemeralclaims",
        ns.name
    );
    let claim = |name: &str, owner: Value| {
        json!({
            "apiVersion": "storage.transfer.k8s.io/v1alpha1",
            "kind": "EphemeralClaim",
            "metadata": {"name": name},
            "spec": {
                "owner": owner,
                "claimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                }},
            },
        })
    };
    let long_owner = "o".repeat(127);
    let long_name = "n".repeat(126);
    let cases = [
        (
            "no owner",
            claim("a", Value::Null),
            "spec.owner",
            "Required value",
        ),
        (
            "an owner that is not a Pod",
            claim(
                "b",
                json!({"apiVersion": "v1", "kind": "Deployment", "name": "web"}),
            ),
            "spec.owner.kind",
            "Unsupported value: \"Deployment\": supported values: \"Pod\"",
        ),
        (
            "a claim name of 254 characters",
            claim(
                &long_name,
                json!({"apiVersion": "v1", "kind": "Pod", "name": long_owner}),
            ),
            "metadata.name",
            "is not a valid PersistentVolumeClaim name",
        ),
    ];
    for (what, body, field, says) in cases {
        let resp = http
            .request(
                "POST",
                &url,
                &[("Content-Type", "application/json")],
                &serde_json::to_vec(&body).unwrap(),
            )
            .unwrap();
        let status = resp.json();
        assert_eq!(resp.status, 422, "{what}: {}", resp.text());
        assert_eq!(status["reason"], "Invalid", "{what}");
        let causes = status["details"]["causes"].as_array().unwrap();
        assert!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["message"].as_str().unwrap().contains(says)),
            "{what}: {causes:?}"
        );
    }
    let list = http.request("GET", &url, &[], b"").unwrap().json();
    assert_eq!(list["items"], json!([]), "nothing was stored");
}

#[test]
fn a_template_the_api_refuses_fails_the_claim_with_the_apis_own_message() {
    let ns = cp().namespace("ec-invalid").unwrap();
    let k = admin();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    // Each access mode is one we know; kube-apiserver alone knows that
    // ReadWriteOncePod does not mix with others.
    k.apply(
        &ephemeral_claim_yaml(&ns.name, "scratch", "runner", Policy::Delete, "").replace(
            "accessModes: [ReadWriteOnce]",
            "accessModes: [ReadWriteOncePod, ReadWriteOnce]",
        ),
    )
    .unwrap();
    let ec = wait_phase(k, &ns.name, "scratch", "Failed");
    assert_eq!(ec["status"]["reason"], "ClaimRefused");
    let message = ec["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("PersistentVolumeClaim \"runner-scratch\" is invalid")
            && message.contains("spec.accessModes"),
        "kube-apiserver's validation message: {message}"
    );
    assert!(claim_json(k, &ns.name, "runner-scratch").is_none());
    eventually("the finalizer to be released", WAIT, || {
        ec_json(k, &ns.name, "scratch").is_some_and(|ec| ec["metadata"]["finalizers"].is_null())
    });
}

#[test]
fn a_template_naming_another_namespaces_volume_is_refused_and_nothing_is_made() {
    let victim = cp().namespace("ec-victim").unwrap();
    let ns = cp().namespace("ec-thief").unwrap();
    let k = admin();
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: db\n  namespace: {}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {CSI_CLASS}\n  resources:\n    requests:\n      storage: 1Gi\n",
        victim.name
    ))
    .unwrap();
    eventually("the victim's claim to be Bound", WAIT, || {
        claim_json(k, &victim.name, "db").is_some_and(|c| c["status"]["phase"] == "Bound")
    });
    let (pv, _) = bound_volume_of(k, &victim.name, "db");
    let claim_ref = json_of(k, &["get", "pv", &pv])["spec"]["claimRef"].clone();

    // A tenant who may make claims in its own namespace, and nothing more.
    let thief = tenant(cp(), &ns.name, "volume-thief");
    grant(
        cp(),
        &ns.name,
        "volume-thief",
        "create",
        "persistentvolumeclaims",
    );
    create_pod(
        &thief,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    let steal = ephemeral_claim_yaml(
        &ns.name,
        "scratch",
        "runner",
        Policy::Delete,
        &format!("volumeName: {pv}"),
    );
    let mut refused = String::new();
    eventually(
        "the grant to take effect and the claim to be refused",
        WAIT,
        || {
            refused = match thief.apply(&steal) {
                Ok(out) => panic!("the template was accepted: {out}"),
                Err(e) => e.to_string(),
            };
            !refused.contains("cannot create")
        },
    );
    assert!(
        refused.contains("spec.claimTemplate.spec.volumeName")
            && refused.contains("Forbidden")
            && refused.contains("is invalid"),
        "a 422 naming the field: {refused}"
    );
    assert!(
        ec_json(k, &ns.name, "scratch").is_none(),
        "no EphemeralClaim"
    );
    consistently("no claim to be made", Duration::from_secs(3), || {
        claim_json(k, &ns.name, "runner-scratch").is_none()
    });
    assert_eq!(
        json_of(k, &["get", "pv", &pv])["spec"]["claimRef"],
        claim_ref,
        "the victim's volume is still bound to the victim's claim"
    );
}

#[test]
fn an_update_that_adds_a_volume_name_to_the_template_is_refused_naming_the_field() {
    let ns = cp().namespace("ec-update-unsafe").unwrap();
    let k = admin();
    apply_ephemeral_claim(k, &ns.name, "scratch", "later", Policy::Delete);
    let http = cp().server_http().unwrap();
    let resp = http
        .request(
            "PATCH",
            &format!(
                "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{}/ephemeralclaims/scratch",
                ns.name
            ),
            &[("Content-Type", "application/merge-patch+json")],
            br#"{"spec":{"claimTemplate":{"spec":{"volumeName":"pv-of-someone-else"}}}}"#,
        )
        .unwrap();
    assert_eq!(resp.status, 422, "{}", resp.text());
    let causes = resp.json()["details"]["causes"].clone();
    assert!(
        causes.as_array().unwrap().iter().any(|c| {
            c["field"] == "spec.claimTemplate.spec.volumeName"
                && c["reason"] == "FieldValueForbidden"
        }),
        "{causes}"
    );
}

/// A CSI class that allows transfers, for the source of cross-namespace
/// clones.
const TRANSFERABLE_CLASS: &str = "ephemeral-csi-transferable";

/// `prod/db` of the transferable class, Bound; its CSI volume id.
fn transferable_fixture(k: &Kubectl, prod: &str) -> String {
    k.apply(&sta_testenv::csi::storage_class_yaml(
        TRANSFERABLE_CLASS,
        "{storage.transfer.k8s.io/allow-namespace-transfer: \"true\"}",
        "{}",
    ))
    .unwrap();
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: db\n  namespace: {prod}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {TRANSFERABLE_CLASS}\n  resources:\n    requests:\n      storage: 1Gi\n"
    ))
    .unwrap();
    eventually("prod/db to be Bound", WAIT, || {
        claim_json(k, prod, "db").is_some_and(|c| c["status"]["phase"] == "Bound")
    });
    bound_volume_of(k, prod, "db").1
}

/// An EphemeralClaim `name` of pod `owner` in `ns` cloning `prod/db`.
fn cross_namespace_claim(k: &Kubectl, ns: &str, name: &str, owner: &str, prod: &str) {
    create_pod(
        k,
        ns,
        owner,
        &format!("{owner}-{name}"),
        Scheduling::Scheduled,
    );
    k.apply(&ephemeral_claim_yaml(
        ns,
        name,
        owner,
        Policy::Delete,
        &format!("dataSourceRef: {{kind: PersistentVolumeClaim, namespace: {prod}, name: db}}"),
    ))
    .unwrap();
}

/// Waits until the EphemeralClaim `ns/name` waits for `prod`'s consent.
fn wait_for_consent(k: &Kubectl, ns: &str, name: &str) {
    eventually("the claim to wait for consent", WAIT, || {
        ec_json(k, ns, name).is_some_and(|ec| {
            ec["status"]["reason"] == "WaitingForConsent"
                && ec["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "SourceConsented" && c["status"] == "False")
                })
        })
    });
}

/// The CSI volume `ns/claim` is bound to, checked to be a clone of `source`.
fn clone_volume(k: &Kubectl, ns: &str, claim: &str, source: &str) -> String {
    let (_, handle) = bound_volume_of(k, ns, claim);
    let created = cp().csi.creation_of(&handle).unwrap();
    assert_eq!(
        created.request["volume_content_source"]["Type"]["Volume"]["volume_id"], source,
        "{ns}/{claim} is a clone of prod/db: {}",
        created.request
    );
    handle
}

#[test]
fn ephemeral_clones_of_another_namespaces_claim_wait_for_its_offer_and_are_destroyed_after_use() {
    let prod = cp().namespace("ec-prod").unwrap();
    let ci = cp().namespace("ec-ci").unwrap();
    let k = admin();
    let source = transferable_fixture(k, &prod.name);
    cross_namespace_claim(k, &ci.name, "first", "runner", &prod.name);
    // No consent yet: it waits, and says what prod must create.
    wait_for_consent(k, &ci.name, "first");
    let says = |events: &[String]| events.iter().any(|e| e.contains("mode: Clone"));
    let events = events_when(k, &ci.name, "EphemeralClaim", "first", says);
    assert!(
        says(&events),
        "an Event says what prod must create: {events:?}"
    );
    assert!(claim_json(k, &ci.name, "runner-first").is_none());
    // prod offers two clones alive at a time.
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: fixtures\n  namespace: {}\nspec:\n  mode: Clone\n  maxClones: 2\n  source:\n    name: db\n  destination:\n    namespace: {}\n",
        prod.name, ci.name
    ))
    .unwrap();
    let ec = wait_phase(k, &ci.name, "first", "Bound");
    assert!(
        ec["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "SourceConsented" && c["status"] == "True"),
        "{ec}"
    );
    let claim = claim_json(k, &ci.name, "runner-first").unwrap();
    let owners = claim["metadata"]["ownerReferences"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        owners
            .iter()
            .any(|o| o["kind"] == "EphemeralClaim" && o["controller"] == true),
        "{owners:?}"
    );
    assert!(owners.iter().any(|o| o["kind"] == "Pod"), "{owners:?}");
    let first = clone_volume(k, &ci.name, "runner-first", &source);
    // A second pod gets its own clone; the third waits while two are alive.
    cross_namespace_claim(k, &ci.name, "second", "helper", &prod.name);
    wait_phase(k, &ci.name, "second", "Bound");
    let second = clone_volume(k, &ci.name, "helper-second", &source);
    assert_ne!(second, first);
    cross_namespace_claim(k, &ci.name, "third", "checker", &prod.name);
    eventually("the third request to wait for capacity", WAIT, || {
        k.run(&[
            "get",
            "nst",
            "third",
            "-n",
            &ci.name,
            "-o",
            "jsonpath={.status.reason}",
        ])
        .stdout
            == "WaitingForCapacity"
    });
    consistently("the third keeps waiting", Duration::from_secs(3), || {
        claim_json(k, &ci.name, "checker-third").is_none()
    });
    // Used and released, the first clone is destroyed, once; the third comes.
    set_pod_phase(k, &ci.name, "runner", "Running");
    wait_phase(k, &ci.name, "first", "InUse");
    set_pod_phase(k, &ci.name, "runner", "Succeeded");
    wait_phase(k, &ci.name, "first", "Deleting");
    delete_pod(k, &ci.name, "runner");
    wait_phase(k, &ci.name, "first", "Deleted");
    cp().csi.assert_deleted_once(&first, WAIT);
    wait_phase(k, &ci.name, "third", "Bound");
    let third = clone_volume(k, &ci.name, "checker-third", &source);
    assert!(third != first && third != second);
    // Deleting the offer stops new clones and leaves the made ones alone.
    k.ok(&[
        "delete",
        "nst",
        "fixtures",
        "-n",
        &prod.name,
        "--wait=false",
    ]);
    eventually("the offer to be gone", WAIT, || {
        let get = k.run(&["get", "nst", "fixtures", "-n", &prod.name]);
        !get.success && get.stderr.contains("NotFound")
    });
    cross_namespace_claim(k, &ci.name, "fourth", "late", &prod.name);
    wait_for_consent(k, &ci.name, "fourth");
    consistently("no clone after the offer", Duration::from_secs(3), || {
        claim_json(k, &ci.name, "late-fourth").is_none()
    });
    for (name, claim) in [("second", "helper-second"), ("third", "checker-third")] {
        wait_phase(k, &ci.name, name, "Bound");
        assert_eq!(
            claim_json(k, &ci.name, claim).unwrap()["status"]["phase"],
            "Bound"
        );
    }
    for kept in [&second, &third, &source] {
        cp().csi.assert_never_deleted(kept);
    }
    let prod_claim = claim_json(k, &prod.name, "db").unwrap();
    assert_eq!(prod_claim["status"]["phase"], "Bound");
}

#[test]
fn a_clone_request_a_tenant_forges_under_an_ephemeral_claims_name_is_never_adopted_from() {
    let prod = cp().namespace("ec-forge-prod").unwrap();
    let ci = cp().namespace("ec-forge-ci").unwrap();
    let k = admin();
    transferable_fixture(k, &prod.name);
    cross_namespace_claim(k, &ci.name, "scratch", "runner", &prod.name);
    let ec = ec_json(k, &ci.name, "scratch").unwrap();
    let uid = ec["metadata"]["uid"].as_str().unwrap().to_owned();
    // Another user of ci makes a request under the claim's name, claiming
    // to be controlled by it.
    let mallory = "mallory-ec";
    grant(
        cp(),
        &ci.name,
        mallory,
        "create,get,list",
        "namespacetransfers.storage.transfer.k8s.io,persistentvolumeclaims",
    );
    let forger = cp().user(mallory, None).unwrap();
    forger
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: scratch\n  namespace: {ci}\n  ownerReferences:\n  - {{apiVersion: storage.transfer.k8s.io/v1alpha1, kind: EphemeralClaim, name: scratch, uid: {uid}, controller: true}}\nspec:\n  mode: Clone\n  source: {{namespace: {prod}, name: db}}\n  destination: {{name: runner-scratch}}\n",
            ci = ci.name,
            prod = prod.name
        ))
        .unwrap();
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: fixtures\n  namespace: {}\nspec:\n  mode: Clone\n  source:\n    name: db\n  destination:\n    namespace: {}\n",
        prod.name, ci.name
    ))
    .unwrap();
    let ec = wait_phase(k, &ci.name, "scratch", "Failed");
    assert_eq!(ec["status"]["reason"], "ClaimConflict", "{ec}");
    // Whatever the forged request brings is never this claim's.
    eventually("the forged request to finish", WAIT, || {
        k.run(&[
            "get",
            "nst",
            "scratch",
            "-n",
            &ci.name,
            "-o",
            "jsonpath={.status.phase}",
        ])
        .stdout
            == "Completed"
    });
    let claim = claim_json(k, &ci.name, "runner-scratch").unwrap();
    let owners = &claim["metadata"]["ownerReferences"];
    assert!(
        owners
            .as_array()
            .is_none_or(|o| o.iter().all(|o| o["kind"] != "EphemeralClaim")),
        "the forged request's claim was adopted: {owners}"
    );
}
