//! Moving a VolumeSnapshot to another namespace, end to end (DESIGN §2.1.7):
//! the CSI mock driver snapshots a claim the external-provisioner made, the
//! real snapshot controller and csi-snapshotter bind the snapshots our
//! controller makes, and the driver's own call log is the last word on
//! whether the backend snapshot was ever deleted. The move, a restore from
//! the moved snapshot in the destination, the opt-in, rights at create,
//! a taken name, a snapshot being restored from, a refused create and its
//! rollback.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

mod scenario;

use std::time::Duration;

use scenario::*;
use serde_json::Value;
use sta_testenv::csi::DRIVER;
use sta_testenv::{shared, ControlPlane, Kubectl, Namespace};

const WAIT: Duration = Duration::from_secs(60);
/// A VolumeSnapshotClass that allows transfers.
const SNAP_ALLOWED: &str = "snapshots-transferable";
/// One that does not.
const SNAP_PLAIN: &str = "snapshots-plain";
/// One that allows them, but whose snapshotter secret is the snapshot's
/// namespace's own.
const SNAP_PER_NAMESPACE_SECRET: &str = "snapshots-secret-per-namespace";
/// A CSI StorageClass that provisions only for a pod: a claim restored in
/// it stays Pending, so its snapshot stays "being restored from".
const WAIT_FOR_CONSUMER: &str = "transfer-allowed-wffc";

fn cp() -> &'static ControlPlane {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    static CLASSES: std::sync::Once = std::sync::Once::new();
    CLASSES.call_once(|| {
        ensure_classes(cp.kubectl());
        let allow = "storage.transfer.k8s.io/allow-namespace-transfer: \"true\"";
        let class = |name: &str, annotations: &str, parameters: &str| {
            format!(
                "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\ndriver: {DRIVER}\ndeletionPolicy: Delete\nparameters: {{{parameters}}}\n"
            )
        };
        let yaml = [
            class(SNAP_ALLOWED, allow, ""),
            class(SNAP_PLAIN, "", ""),
            class(
                SNAP_PER_NAMESPACE_SECRET,
                allow,
                "csi.storage.k8s.io/snapshotter-secret-name: snap-secret, csi.storage.k8s.io/snapshotter-secret-namespace: \"${volumesnapshot.namespace}\"",
            ),
            format!(
                "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {WAIT_FOR_CONSUMER}\n  annotations: {{{allow}}}\nprovisioner: {DRIVER}\nreclaimPolicy: Delete\nvolumeBindingMode: WaitForFirstConsumer\n"
            ),
        ]
        .join("---\n");
        cp.kubectl().apply(&yaml).unwrap();
    });
    cp
}

fn admin() -> &'static Kubectl {
    cp().kubectl()
}

/// A source namespace with a claim and a ready snapshot `nightly` of it in
/// `class`, and a destination namespace.
struct Setup {
    src: Namespace,
    dst: Namespace,
    /// The snapshot's uid, its content and the backend snapshot's id.
    uid: String,
    content: String,
    handle: String,
}

fn setup(class: &str) -> Setup {
    let src = cp().namespace("snap-src").unwrap();
    let dst = cp().namespace("snap-dst").unwrap();
    if class == SNAP_PER_NAMESPACE_SECRET {
        admin().ok(&[
            "create",
            "secret",
            "generic",
            "snap-secret",
            "-n",
            &src.name,
            "--from-literal=k=v",
        ]);
    }
    provisioned_volume(admin(), ALLOWED_CLASS, &src.name, "db", "1Gi");
    snapshot_of(admin(), &src.name, "nightly", "db", class);
    let x = snapshot_json(admin(), &src.name, "nightly").unwrap();
    let content = x["status"]["boundVolumeSnapshotContentName"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = content_json(admin(), &content).unwrap();
    Setup {
        uid: x["metadata"]["uid"].as_str().unwrap().to_owned(),
        handle: c["status"]["snapshotHandle"].as_str().unwrap().to_owned(),
        content,
        src,
        dst,
    }
}

impl Setup {
    fn consent(&self) {
        give_snapshot(admin(), &self.src.name, "give", "nightly", &self.dst.name);
        take_snapshot(admin(), &self.dst.name, "take", &self.src.name, "nightly");
    }

    /// The source snapshot and its content are as before the transfer:
    /// bound to each other, unlocked, unmarked, under `Delete`.
    #[track_caller]
    fn assert_source_untouched(&self) {
        eventually("the rollback to take its marks off", WAIT, || {
            let x = snapshot_json(admin(), &self.src.name, "nightly").unwrap();
            let c = content_json(admin(), &self.content).unwrap();
            x["metadata"]["annotations"]
                .get("storage.transfer.k8s.io/transfer")
                .is_none()
                && c["metadata"]["annotations"]
                    .get("storage.transfer.k8s.io/transfer")
                    .is_none()
                && c["spec"]["deletionPolicy"] == "Delete"
        });
        let x = snapshot_json(admin(), &self.src.name, "nightly").unwrap();
        assert_eq!(x["metadata"]["uid"], self.uid.as_str());
        assert_eq!(x["status"]["boundVolumeSnapshotContentName"], self.content);
        assert_eq!(x["status"]["readyToUse"], true);
        self.assert_backend_kept();
    }

    /// The driver was never asked to delete the backend snapshot.
    #[track_caller]
    fn assert_backend_kept(&self) {
        let deletions = snapshot_deletions(&self.handle);
        assert!(
            deletions.is_empty(),
            "the driver was asked to delete snapshot {}: {deletions:?}",
            self.handle
        );
    }
}

fn snapshot_of(k: &Kubectl, namespace: &str, name: &str, claim: &str, class: &str) {
    k.apply(&format!(
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  volumeSnapshotClassName: {class}\n  source:\n    persistentVolumeClaimName: {claim}\n"
    ))
    .unwrap();
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.readyToUse}=true",
        &format!("volumesnapshot/{name}"),
        "-n",
        namespace,
        "--timeout=60s",
    ]);
}

fn snapshot_json(k: &Kubectl, namespace: &str, name: &str) -> Option<Value> {
    let run = k.run(&["get", "volumesnapshot", name, "-n", namespace, "-o", "json"]);
    run.success
        .then(|| serde_json::from_str(&run.stdout).unwrap())
}

fn content_json(k: &Kubectl, name: &str) -> Option<Value> {
    let run = k.run(&["get", "volumesnapshotcontent", name, "-o", "json"]);
    run.success
        .then(|| serde_json::from_str(&run.stdout).unwrap())
}

/// Every `DeleteSnapshot` the driver answered for `handle`.
fn snapshot_deletions(handle: &str) -> Vec<sta_testenv::CsiCall> {
    cp().csi
        .calls("DeleteSnapshot")
        .into_iter()
        .filter(|c| c.request["snapshot_id"] == handle)
        .collect()
}

fn give_snapshot(k: &Kubectl, namespace: &str, name: &str, snapshot: &str, to: &str) {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  source:\n    kind: VolumeSnapshot\n    name: {snapshot}\n  destination:\n    namespace: {to}\n"
    ))
    .unwrap();
}

fn take_snapshot(k: &Kubectl, namespace: &str, name: &str, from: &str, snapshot: &str) {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  source:\n    kind: VolumeSnapshot\n    namespace: {from}\n    name: {snapshot}\n"
    ))
    .unwrap();
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
    s.consent();
    let done = wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    wait_phase(admin(), &s.dst.name, "take", "Completed", WAIT);
    let dest = &done["status"]["destinationSnapshot"];
    let new_content = dest["contentName"].as_str().unwrap().to_owned();

    // The destination's snapshot is ready, bound to a content of the same
    // backend snapshot, which has the class's policy back.
    let x = snapshot_json(admin(), &s.dst.name, "nightly").unwrap();
    assert_eq!(x["status"]["readyToUse"], true, "{}", x["status"]);
    assert_eq!(x["status"]["boundVolumeSnapshotContentName"], new_content);
    assert_eq!(x["metadata"]["uid"], dest["uid"]);
    assert!(
        x["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none(),
        "unlocked at R6: {}",
        x["metadata"]
    );
    let c = content_json(admin(), &new_content).unwrap();
    assert_eq!(c["spec"]["source"]["snapshotHandle"], s.handle.as_str());
    assert_eq!(c["spec"]["deletionPolicy"], "Delete");
    assert_eq!(c["spec"]["volumeSnapshotRef"]["uid"], dest["uid"]);
    // The source's snapshot and content are gone, and the backend is not.
    assert!(snapshot_json(admin(), &s.src.name, "nightly").is_none());
    eventually("the old content to go", WAIT, || {
        content_json(admin(), &s.content).is_none()
    });
    s.assert_backend_kept();
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
    s.assert_backend_kept();

    // The destination owns it now: deleting its snapshot under Delete
    // deletes the backend snapshot, exactly once.
    admin().ok(&["delete", "volumesnapshot", "nightly", "-n", &s.dst.name]);
    eventually("the driver to delete the backend snapshot", WAIT, || {
        snapshot_deletions(&s.handle)
            .iter()
            .any(sta_testenv::CsiCall::succeeded)
    });
    let deletions = snapshot_deletions(&s.handle);
    assert_eq!(deletions.len(), 1, "{deletions:?}");
}

#[test]
fn a_snapshot_whose_class_does_not_opt_in_fails_the_move_and_stays_untouched() {
    let s = setup(SNAP_PLAIN);
    s.consent();
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
    s.assert_source_untouched();
    assert!(snapshot_json(admin(), &s.dst.name, "nightly").is_none());
}

#[test]
fn a_snapshot_whose_deletion_secret_is_its_own_namespace_is_refused() {
    let s = setup(SNAP_PER_NAMESPACE_SECRET);
    s.consent();
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "SnapshotClassNotAllowed");
    let message = give["status"]["message"].as_str().unwrap();
    assert!(message.contains("${volumesnapshot.namespace}"), "{message}");
    s.assert_source_untouched();
}

#[test]
fn a_destination_snapshot_name_already_taken_fails_the_move() {
    let s = setup(SNAP_ALLOWED);
    // Someone else's snapshot of that name in the destination.
    provisioned_volume(admin(), ALLOWED_CLASS, &s.dst.name, "theirs", "1Gi");
    snapshot_of(admin(), &s.dst.name, "nightly", "theirs", SNAP_ALLOWED);
    let theirs = snapshot_json(admin(), &s.dst.name, "nightly").unwrap();
    s.consent();
    wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(reason(admin(), &s.src.name, "give"), "DestinationExists");
    s.assert_source_untouched();
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
fn a_snapshot_mode_other_than_move_is_refused_with_the_field_named() {
    let src = cp().namespace("snap-clone").unwrap();
    let refused = admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  mode: Clone\n  source:\n    kind: VolumeSnapshot\n    name: nightly\n  destination:\n    namespace: elsewhere\n",
            src.name
        ))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("spec.mode"), "{refused}");
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
    s.consent();
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
    s.assert_backend_kept();
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
    s.consent();
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "DestinationRefused");
    s.assert_source_untouched();
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
    s.consent();
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    s.assert_backend_kept();
}

#[test]
fn kubectl_get_shows_a_snapshot_transfer_by_its_kind() {
    let s = setup(SNAP_ALLOWED);
    s.consent();
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    let table = admin().ok(&["get", "nst", "give", "-n", &s.src.name]);
    assert!(table.contains("volumesnapshot/"), "{table}");
}
