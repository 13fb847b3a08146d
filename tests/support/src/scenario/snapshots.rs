//! Building blocks of the VolumeSnapshot scenarios (DESIGN §2.1.7): the
//! snapshot classes, a ready snapshot of a claim the CSI stack provisioned,
//! the two consents, reads of snapshots and contents, and the driver's
//! `DeleteSnapshot` calls, the last word on whether a backend snapshot was
//! ever deleted.

use crate::csi::DRIVER;
use crate::{ControlPlane, Csi, CsiCall, Kubectl, Namespace};
use serde_json::Value;

use super::{provisioned_volume, ALLOWED_CLASS};

/// A VolumeSnapshotClass that allows transfers.
pub const SNAP_ALLOWED: &str = "snapshots-transferable";
/// One that does not.
pub const SNAP_PLAIN: &str = "snapshots-plain";
/// One that allows them, but whose snapshotter secret is the snapshot's
/// namespace's own.
pub const SNAP_PER_NAMESPACE_SECRET: &str = "snapshots-secret-per-namespace";

/// Makes the snapshot classes (idempotent).
pub fn ensure_snapshot_classes(k: &Kubectl) {
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
    ]
    .join("---\n");
    k.apply(&yaml).unwrap();
}

/// A source namespace with a claim and a ready snapshot `nightly` of it in
/// a snapshot class, and a destination namespace.
#[derive(Debug)]
pub struct SnapshotSetup {
    pub src: Namespace,
    pub dst: Namespace,
    /// The snapshot's uid, its content and the backend snapshot's id.
    pub uid: String,
    pub content: String,
    pub handle: String,
}

impl SnapshotSetup {
    pub fn new(cp: &ControlPlane, class: &str) -> Self {
        let k = cp.kubectl();
        let src = cp.namespace("snap-src").unwrap();
        let dst = cp.namespace("snap-dst").unwrap();
        if class == SNAP_PER_NAMESPACE_SECRET {
            k.ok(&[
                "create",
                "secret",
                "generic",
                "snap-secret",
                "-n",
                &src.name,
                "--from-literal=k=v",
            ]);
        }
        provisioned_volume(k, ALLOWED_CLASS, &src.name, "db", "1Gi");
        snapshot_of(k, &src.name, "nightly", "db", class);
        let x = snapshot_json(k, &src.name, "nightly").unwrap();
        let content = x["status"]["boundVolumeSnapshotContentName"]
            .as_str()
            .unwrap()
            .to_owned();
        let c = content_json(k, &content).unwrap();
        Self {
            uid: x["metadata"]["uid"].as_str().unwrap().to_owned(),
            handle: c["status"]["snapshotHandle"].as_str().unwrap().to_owned(),
            content,
            src,
            dst,
        }
    }

    /// Both consents: `dst/take` receives `nightly`, `src/give` gives it.
    /// The request first: until the offer exists the source side writes
    /// nothing, so a server set to crash at its first write of the move
    /// crashes only once both are in.
    pub fn consent(&self, k: &Kubectl) {
        take_snapshot(k, &self.dst.name, "take", &self.src.name, "nightly");
        give_snapshot(k, &self.src.name, "give", "nightly", &self.dst.name);
    }

    /// The source snapshot and its content are as before the transfer:
    /// bound to each other, unlocked, unmarked, under `Delete`; the backend
    /// snapshot never deleted.
    #[track_caller]
    pub fn assert_source_untouched(&self, k: &Kubectl, csi: &Csi, wait: std::time::Duration) {
        super::eventually("the rollback to take its marks off", wait, || {
            let x = snapshot_json(k, &self.src.name, "nightly").unwrap();
            let c = content_json(k, &self.content).unwrap();
            x["metadata"]["annotations"]
                .get("storage.transfer.k8s.io/transfer")
                .is_none()
                && c["metadata"]["annotations"]
                    .get("storage.transfer.k8s.io/transfer")
                    .is_none()
                && c["spec"]["deletionPolicy"] == "Delete"
        });
        let x = snapshot_json(k, &self.src.name, "nightly").unwrap();
        assert_eq!(x["metadata"]["uid"], self.uid.as_str());
        assert_eq!(x["status"]["boundVolumeSnapshotContentName"], self.content);
        assert_eq!(x["status"]["readyToUse"], true);
        self.assert_backend_kept(csi);
    }

    /// Both sides Completed; the destination's snapshot ready, bound to a
    /// content of the same backend snapshot under `Delete`, unlocked and
    /// unmarked; nothing of the source left; the backend never deleted.
    /// The destination's snapshot's content.
    #[track_caller]
    pub fn assert_moved(&self, k: &Kubectl, csi: &Csi, wait: std::time::Duration) -> String {
        let done = super::wait_phase(k, &self.src.name, "give", "Completed", wait);
        super::wait_phase(k, &self.dst.name, "take", "Completed", wait);
        let dest = &done["status"]["destinationSnapshot"];
        let new_content = dest["contentName"].as_str().unwrap().to_owned();
        let x = snapshot_json(k, &self.dst.name, "nightly").unwrap();
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
        let c = content_json(k, &new_content).unwrap();
        assert_eq!(c["spec"]["source"]["snapshotHandle"], self.handle.as_str());
        assert_eq!(c["spec"]["deletionPolicy"], "Delete");
        assert_eq!(c["spec"]["volumeSnapshotRef"]["uid"], dest["uid"]);
        assert!(c["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none());
        assert!(snapshot_json(k, &self.src.name, "nightly").is_none());
        super::eventually("the old content to go", wait, || {
            content_json(k, &self.content).is_none()
        });
        self.assert_backend_kept(csi);
        new_content
    }

    /// Both consents of a Clone of `nightly`: `dst/take` receives a restore
    /// of it as `copy`, `src/give` gives it (the request first, as in
    /// [`SnapshotSetup::consent`]).
    pub fn clone_consent(&self, k: &Kubectl) {
        snapshot_clone(
            k,
            &self.dst.name,
            "take",
            &self.src.name,
            "nightly",
            "{name: copy}",
        );
        snapshot_clone(
            k,
            &self.src.name,
            "give",
            "",
            "nightly",
            &format!("{{namespace: {}, name: copy}}", self.dst.name),
        );
    }

    /// Both sides of [`SnapshotSetup::clone_consent`] Completed: `dst/copy`
    /// Bound to a restore of the backend snapshot, nothing of the restore
    /// left beside the snapshot, and the snapshot as it was. The source
    /// side's transfer.
    #[track_caller]
    pub fn assert_cloned(&self, k: &Kubectl, csi: &Csi, wait: std::time::Duration) -> Value {
        let done = super::wait_phase(k, &self.src.name, "give", "Completed", wait);
        super::wait_phase(k, &self.dst.name, "take", "Completed", wait);
        self.restored_volume(k, csi, &self.dst.name, "copy");
        let restore = done["status"]["sourceClaim"]["name"].as_str().unwrap();
        assert!(
            super::claim_json(k, &self.src.name, restore).is_none(),
            "{restore}"
        );
        self.assert_snapshot_stays(k, csi);
        done
    }

    /// The backend volume `namespace/claim` is bound to, checked to be a
    /// restore of the backend snapshot by the driver's own CreateVolume.
    #[track_caller]
    pub fn restored_volume(&self, k: &Kubectl, csi: &Csi, namespace: &str, claim: &str) -> String {
        let pvc = super::claim_json(k, namespace, claim).unwrap();
        assert_eq!(pvc["status"]["phase"], "Bound", "{pvc}");
        let pv = super::volume_json(k, pvc["spec"]["volumeName"].as_str().unwrap()).unwrap();
        let volume = pv["spec"]["csi"]["volumeHandle"]
            .as_str()
            .unwrap()
            .to_owned();
        let created = csi.creation_of(&volume).unwrap();
        assert_eq!(
            created.request["volume_content_source"]["Type"]["Snapshot"]["snapshot_id"],
            self.handle.as_str(),
            "{namespace}/{claim} is a restore of {}: {}",
            self.handle,
            created.request
        );
        volume
    }

    /// The source snapshot is where it was, as it was: same uid, bound to
    /// its content, ready, unlocked; the content unmarked and under
    /// `Delete`; the backend snapshot never deleted.
    #[track_caller]
    pub fn assert_snapshot_stays(&self, k: &Kubectl, csi: &Csi) {
        let x = snapshot_json(k, &self.src.name, "nightly").unwrap();
        assert_eq!(x["metadata"]["uid"], self.uid.as_str());
        assert_eq!(x["status"]["readyToUse"], true);
        assert_eq!(x["status"]["boundVolumeSnapshotContentName"], self.content);
        assert!(x["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none());
        let c = content_json(k, &self.content).unwrap();
        assert_eq!(c["spec"]["deletionPolicy"], "Delete");
        assert!(c["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none());
        self.assert_backend_kept(csi);
    }

    /// The driver was never asked to delete the backend snapshot.
    #[track_caller]
    pub fn assert_backend_kept(&self, csi: &Csi) {
        let deletions = snapshot_deletions(csi, &self.handle);
        assert!(
            deletions.is_empty(),
            "the driver was asked to delete snapshot {}: {deletions:?}",
            self.handle
        );
    }
}

/// Takes a snapshot `name` of `claim` in `class`, and waits until it is
/// ready.
pub fn snapshot_of(k: &Kubectl, namespace: &str, name: &str, claim: &str, class: &str) {
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

pub fn snapshot_json(k: &Kubectl, namespace: &str, name: &str) -> Option<Value> {
    let run = k.run(&["get", "volumesnapshot", name, "-n", namespace, "-o", "json"]);
    run.success
        .then(|| serde_json::from_str(&run.stdout).unwrap())
}

pub fn content_json(k: &Kubectl, name: &str) -> Option<Value> {
    let run = k.run(&["get", "volumesnapshotcontent", name, "-o", "json"]);
    run.success
        .then(|| serde_json::from_str(&run.stdout).unwrap())
}

/// Every `DeleteSnapshot` the driver answered for `handle`.
pub fn snapshot_deletions(csi: &Csi, handle: &str) -> Vec<CsiCall> {
    csi.calls("DeleteSnapshot")
        .into_iter()
        .filter(|c| c.request["snapshot_id"] == handle)
        .collect()
}

/// The source side's consent: give the snapshot `snapshot` to `to`.
pub fn give_snapshot(k: &Kubectl, namespace: &str, name: &str, snapshot: &str, to: &str) {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  source:\n    kind: VolumeSnapshot\n    name: {snapshot}\n  destination:\n    namespace: {to}\n"
    ))
    .unwrap();
}

/// The destination side's consent: receive `from/snapshot` under its name.
pub fn take_snapshot(k: &Kubectl, namespace: &str, name: &str, from: &str, snapshot: &str) {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  source:\n    kind: VolumeSnapshot\n    namespace: {from}\n    name: {snapshot}\n"
    ))
    .unwrap();
}

/// A NamespaceTransfer `namespace/name` of mode Clone whose source is the
/// VolumeSnapshot `from/snapshot` (`from` empty: its own namespace), with
/// `destination` as the body of its `spec.destination` (flow YAML).
pub fn snapshot_clone(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    from: &str,
    snapshot: &str,
    destination: &str,
) {
    let from = if from.is_empty() {
        String::new()
    } else {
        format!("    namespace: {from}\n")
    };
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  mode: Clone\n  source:\n    kind: VolumeSnapshot\n{from}    name: {snapshot}\n  destination: {destination}\n"
    ))
    .unwrap_or_else(|e| panic!("snapshot clone {namespace}/{name}: {e}"));
}
