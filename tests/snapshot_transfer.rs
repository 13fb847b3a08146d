//! Moving a VolumeSnapshot to another namespace, end to end (DESIGN §2.1.7):
//! the CSI mock driver snapshots a claim the external-provisioner made, the
//! real snapshot controller and csi-snapshotter bind the snapshots our
//! controller makes, and the driver's own call log is the last word on
//! whether the backend snapshot was ever deleted. The move, a restore from
//! the moved snapshot in the destination, the opt-in, rights at create,
//! a taken name, a snapshot being restored from, a refused create and its
//! rollback.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::Duration;

use sta_testenv::csi::DRIVER;
use sta_testenv::scenario::snapshots::*;
use sta_testenv::scenario::*;
use sta_testenv::{shared, ControlPlane, Kubectl};

const WAIT: Duration = Duration::from_secs(60);
/// A CSI StorageClass that provisions only for a pod: a claim restored in
/// it stays Pending, so its snapshot stays "being restored from".
const WAIT_FOR_CONSUMER: &str = "transfer-allowed-wffc";

fn cp() -> &'static ControlPlane {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    static CLASSES: std::sync::Once = std::sync::Once::new();
    CLASSES.call_once(|| {
        ensure_classes(cp.kubectl());
        ensure_snapshot_classes(cp.kubectl());
        cp.kubectl()
            .apply(&format!(
                "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {WAIT_FOR_CONSUMER}\n  annotations: {{storage.transfer.k8s.io/allow-namespace-transfer: \"true\"}}\nprovisioner: {DRIVER}\nreclaimPolicy: Delete\nvolumeBindingMode: WaitForFirstConsumer\n"
            ))
            .unwrap();
    });
    cp
}

fn admin() -> &'static Kubectl {
    cp().kubectl()
}

fn setup(class: &str) -> SnapshotSetup {
    SnapshotSetup::new(cp(), class)
}

fn reason(k: &Kubectl, namespace: &str, name: &str) -> String {
    transfer_json(k, namespace, name).unwrap()["status"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_snapshot_moves_to_another_namespace_and_restores_there_without_the_backend_being_touched() {
    let s = setup(SNAP_ALLOWED);
    s.consent(admin());
    let new_content = s.assert_moved(admin(), &cp().csi, WAIT);
    // What the destination reads names nothing of the source's content.
    let take = transfer_json(admin(), &s.dst.name, "take").unwrap();
    let seen = take["status"].to_string();
    assert!(!seen.contains(&s.content), "{seen}");
    assert!(!seen.contains(&s.handle) || s.handle.len() < 3, "{seen}");
    assert!(!seen.contains(&new_content), "{seen}");

    // Restored in the destination: the driver's CreateVolume names the
    // backend snapshot.
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: restored\n  namespace: {}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {ALLOWED_CLASS}\n  resources:\n    requests:\n      storage: 1Gi\n  dataSource: {{apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: nightly}}\n",
            s.dst.name
        ))
        .unwrap();
    wait_bound(admin(), &s.dst.name, "restored");
    let pvc = claim_json(admin(), &s.dst.name, "restored").unwrap();
    let pv = volume_json(admin(), pvc["spec"]["volumeName"].as_str().unwrap()).unwrap();
    let restored = pv["spec"]["csi"]["volumeHandle"].as_str().unwrap();
    let created = cp().csi.creation_of(restored).unwrap();
    assert_eq!(
        created.request["volume_content_source"]["Type"]["Snapshot"]["snapshot_id"],
        s.handle.as_str(),
        "{}",
        created.request
    );
    s.assert_backend_kept(&cp().csi);

    // The destination owns it now: deleting its snapshot under Delete
    // deletes the backend snapshot, exactly once.
    admin().ok(&["delete", "volumesnapshot", "nightly", "-n", &s.dst.name]);
    eventually("the driver to delete the backend snapshot", WAIT, || {
        snapshot_deletions(&cp().csi, &s.handle)
            .iter()
            .any(sta_testenv::CsiCall::succeeded)
    });
    let deletions = snapshot_deletions(&cp().csi, &s.handle);
    assert_eq!(deletions.len(), 1, "{deletions:?}");
}

#[test]
fn a_snapshot_whose_class_does_not_opt_in_fails_the_move_and_stays_untouched() {
    let s = setup(SNAP_PLAIN);
    s.consent(admin());
    wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(
        reason(admin(), &s.src.name, "give"),
        "SnapshotClassNotAllowed"
    );
    let take = wait_phase(admin(), &s.dst.name, "take", "Failed", WAIT);
    assert_eq!(
        take["status"]["message"],
        "refused: the snapshot's VolumeSnapshotClass does not allow transfers"
    );
    s.assert_source_untouched(admin(), &cp().csi, WAIT);
    assert!(snapshot_json(admin(), &s.dst.name, "nightly").is_none());
}

#[test]
fn a_snapshot_whose_deletion_secret_is_its_own_namespace_is_refused() {
    let s = setup(SNAP_PER_NAMESPACE_SECRET);
    s.consent(admin());
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "SnapshotClassNotAllowed");
    let message = give["status"]["message"].as_str().unwrap();
    assert!(message.contains("${volumesnapshot.namespace}"), "{message}");
    s.assert_source_untouched(admin(), &cp().csi, WAIT);
}

#[test]
fn a_destination_snapshot_name_already_taken_fails_the_move() {
    let s = setup(SNAP_ALLOWED);
    // Someone else's snapshot of that name in the destination.
    provisioned_volume(admin(), ALLOWED_CLASS, &s.dst.name, "theirs", "1Gi");
    snapshot_of(admin(), &s.dst.name, "nightly", "theirs", SNAP_ALLOWED);
    let theirs = snapshot_json(admin(), &s.dst.name, "nightly").unwrap();
    s.consent(admin());
    wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(reason(admin(), &s.src.name, "give"), "DestinationExists");
    s.assert_source_untouched(admin(), &cp().csi, WAIT);
    let still = snapshot_json(admin(), &s.dst.name, "nightly").unwrap();
    assert_eq!(still["metadata"]["uid"], theirs["metadata"]["uid"]);
}

#[test]
fn a_tenant_who_may_not_delete_the_snapshot_may_not_offer_it() {
    let src = cp().namespace("snap-rights").unwrap();
    let user = editor(cp(), &unique("snap-giver"), &src.name);
    let refused = user
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  source:\n    kind: VolumeSnapshot\n    name: nightly\n  destination:\n    namespace: elsewhere\n",
            src.name
        ))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("delete volumesnapshots.snapshot.storage.k8s.io \"nightly\""),
        "{refused}"
    );
    assert!(transfer_json(admin(), &src.name, "give").is_none());
}

#[test]
fn a_moved_snapshot_received_into_a_claim_is_refused_with_the_field_named() {
    let dst = cp().namespace("snap-populate").unwrap();
    let refused = admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: take\n  namespace: {}\nspec:\n  source:\n    kind: VolumeSnapshot\n    namespace: elsewhere\n    name: nightly\n  destination:\n    populate: true\n",
            dst.name
        ))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("spec.destination.populate"), "{refused}");
    assert!(refused.contains("mode: Clone"), "{refused}");
    assert!(transfer_json(admin(), &dst.name, "take").is_none());
}

#[test]
fn a_snapshot_being_restored_from_waits_until_the_restore_is_done() {
    let s = setup(SNAP_ALLOWED);
    // A restore that stays Pending: its class provisions only for a pod.
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: restoring\n  namespace: {}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {WAIT_FOR_CONSUMER}\n  resources:\n    requests:\n      storage: 1Gi\n  dataSource: {{apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: nightly}}\n",
            s.src.name
        ))
        .unwrap();
    s.consent(admin());
    let waiting = wait_status(
        admin(),
        &s.src.name,
        "give",
        "wait for the restore",
        WAIT,
        |t| t["status"]["reason"] == "SourceInUse",
    );
    let message = waiting["status"]["message"].as_str().unwrap();
    assert!(message.contains("restoring"), "{message}");
    let take = transfer_json(admin(), &s.dst.name, "take").unwrap();
    let told = take["status"]["message"].as_str().unwrap_or_default();
    assert!(
        !told.contains("restoring"),
        "the destination never learns the source's claims: {told}"
    );
    // Nothing is touched while it waits.
    let x = snapshot_json(admin(), &s.src.name, "nightly").unwrap();
    assert!(x["metadata"]["annotations"]
        .get("storage.transfer.k8s.io/transfer")
        .is_none());
    admin().ok(&["delete", "pvc", "restoring", "-n", &s.src.name]);
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    s.assert_backend_kept(&cp().csi);
}

#[test]
fn a_destination_snapshot_the_quota_refuses_rolls_the_move_back() {
    let s = setup(SNAP_ALLOWED);
    quota(
        admin(),
        &s.dst.name,
        "{count/volumesnapshots.snapshot.storage.k8s.io: \"0\", persistentvolumeclaims: \"10\"}",
        WAIT,
    );
    s.consent(admin());
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "DestinationRefused");
    s.assert_source_untouched(admin(), &cp().csi, WAIT);
    let made = format!(
        "snapcontent-transfer-{}",
        give["metadata"]["uid"].as_str().unwrap()
    );
    eventually(
        "the content made for the refused snapshot to go",
        WAIT,
        || content_json(admin(), &made).is_none(),
    );
    // And the source can still be moved once the quota allows it.
    admin().ok(&["delete", "resourcequota", "--all", "-n", &s.dst.name]);
    admin().ok(&["delete", "nst", "give", "-n", &s.src.name]);
    admin().ok(&["delete", "nst", "take", "-n", &s.dst.name]);
    s.consent(admin());
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    s.assert_backend_kept(&cp().csi);
}

#[test]
fn kubectl_get_shows_a_snapshot_transfer_by_its_kind() {
    let s = setup(SNAP_ALLOWED);
    s.consent(admin());
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    let table = admin().ok(&["get", "nst", "give", "-n", &s.src.name]);
    assert!(table.contains("volumesnapshot/"), "{table}");
}

#[test]
fn a_snapshot_is_cloned_across_namespaces_as_a_restore_beside_it_and_the_snapshot_stays() {
    let s = setup(SNAP_ALLOWED);
    let k = admin();
    s.clone_consent(k);
    // The restore was made in the class of the claim the snapshot was taken
    // from, at the snapshot's size, and moved; nothing of it is left beside
    // the snapshot.
    s.assert_cloned(k, &cp().csi, WAIT);
    let copy = claim_json(k, &s.dst.name, "copy").unwrap();
    assert_eq!(copy["spec"]["storageClassName"], ALLOWED_CLASS);
    // kubectl shows what was cloned.
    let row = k.ok(&["get", "nst", "give", "-n", &s.src.name, "--no-headers"]);
    assert!(
        row.contains(&format!("volumesnapshot/{}/nightly", s.src.name))
            && row.contains(&format!(" {}/copy", s.dst.name)),
        "{row}"
    );
}

#[test]
fn a_standing_snapshot_offer_restores_a_copy_for_a_request_a_claim_that_names_one_and_an_ephemeral_claim(
) {
    let s = setup(SNAP_ALLOWED);
    let k = admin();
    let (src, dst) = (&s.src.name, &s.dst.name);
    snapshot_clone(
        k,
        src,
        "nightly-to-ci",
        "",
        "nightly",
        &format!("{{namespace: {dst}}}"),
    );
    // A request for a claim of its own name.
    snapshot_clone(k, dst, "one", src, "nightly", "{name: copy-one}");
    // A populating request, and a claim that names it: the restore takes
    // that claim's size (larger than the snapshot's).
    snapshot_clone(k, dst, "fill", src, "nightly", "{populate: true}");
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: {dst}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {ALLOWED_CLASS}\n  resources: {{requests: {{storage: 2Gi}}}}\n  dataSourceRef: {{apiGroup: storage.transfer.k8s.io, kind: NamespaceTransfer, name: fill}}\n"
    ))
    .unwrap();
    // An EphemeralClaim of a pod, whose template names the snapshot.
    k.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: runner\n  namespace: {dst}\nspec:\n  nodeName: test-node\n  containers:\n  - name: app\n    image: registry.invalid/app\n    volumeMounts: [{{name: data, mountPath: /data}}]\n  volumes:\n  - name: data\n    persistentVolumeClaim: {{claimName: runner-scratch}}\n"
    ))
    .unwrap();
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: EphemeralClaim\nmetadata:\n  name: scratch\n  namespace: {dst}\nspec:\n  owner: {{apiVersion: v1, kind: Pod, name: runner}}\n  claimTemplate:\n    spec:\n      accessModes: [ReadWriteOnce]\n      storageClassName: {ALLOWED_CLASS}\n      resources: {{requests: {{storage: 1Gi}}}}\n      dataSourceRef: {{apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, namespace: {src}, name: nightly}}\n"
    ))
    .unwrap();
    wait_phase(k, dst, "one", "Completed", WAIT);
    // A populating request stands, serving each claim that names it.
    eventually(
        "the claim that names the request to be served",
        WAIT,
        || {
            transfer_json(k, dst, "fill").is_some_and(|t| {
                t["status"]["message"].as_str().is_some_and(|m| {
                    m.contains("a restore of VolumeSnapshot") && m.contains("1 served")
                })
            })
        },
    );
    eventually("the EphemeralClaim's restore to arrive", WAIT, || {
        k.run(&[
            "get",
            "ephemeralclaim",
            "scratch",
            "-n",
            dst,
            "-o",
            "jsonpath={.status.phase}",
        ])
        .stdout
            == "Bound"
    });
    let volumes = ["copy-one", "data", "runner-scratch"]
        .map(|claim| s.restored_volume(k, &cp().csi, dst, claim));
    assert!(
        volumes[0] != volumes[1] && volumes[1] != volumes[2] && volumes[0] != volumes[2],
        "three restores of their own: {volumes:?}"
    );
    let data = claim_json(k, dst, "data").unwrap();
    assert_eq!(data["status"]["capacity"]["storage"], "2Gi", "{data}");
    // The offer still stands, and the snapshot is where it was.
    let offer = transfer_json(k, src, "nightly-to-ci").unwrap();
    assert!(
        !matches!(
            offer["status"]["phase"].as_str(),
            Some("Completed" | "Failed" | "Cancelled")
        ),
        "{offer}"
    );
    s.assert_snapshot_stays(k, &cp().csi);
}

#[test]
fn a_clone_of_a_snapshot_that_is_not_ready_waits_and_restores_nothing() {
    let s = setup(SNAP_ALLOWED);
    let k = admin();
    // A snapshot of a claim that does not exist is never ready.
    k.apply(&format!(
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: pending\n  namespace: {}\nspec:\n  volumeSnapshotClassName: {SNAP_ALLOWED}\n  source:\n    persistentVolumeClaimName: nowhere\n",
        s.src.name
    ))
    .unwrap();
    snapshot_clone(
        k,
        &s.dst.name,
        "take",
        &s.src.name,
        "pending",
        "{name: copy}",
    );
    snapshot_clone(
        k,
        &s.src.name,
        "give",
        "",
        "pending",
        &format!("{{namespace: {}, name: copy}}", s.dst.name),
    );
    eventually("the clone to wait for the snapshot", WAIT, || {
        reason(k, &s.src.name, "give") == "SnapshotNotReady"
    });
    let said = transfer_json(k, &s.dst.name, "take").unwrap();
    assert_eq!(said["status"]["reason"], "SnapshotNotReady", "{said}");
    let claims = k.ok(&["get", "pvc", "-n", &s.src.name, "-o", "name"]);
    assert_eq!(claims.trim(), "persistentvolumeclaim/db", "{claims}");
    assert!(claim_json(k, &s.dst.name, "copy").is_none());
}
