//! The CSI stack under every dynamically provisioned volume of the control
//! plane, as a cluster runs it (DESIGN §4):
//!
//! - `csi-mock-driver`: Kubernetes' e2e CSI mock driver behind a small `main`
//!   (`hack/csi/mock-driver`), on a unix socket, appending every CSI call to
//!   `logs/csi-calls.jsonl`;
//! - `csi-provisioner`: the external-provisioner, which creates a volume for
//!   each claim of a class whose provisioner is [`DRIVER`], clones one when the
//!   claim has a `dataSource`, and calls `DeleteVolume` when a PV under
//!   `Delete` is Released;
//! - `snapshot-controller` and `csi-snapshotter`: VolumeSnapshots.
//!
//! Each runs with its own ServiceAccount token and the least-privilege RBAC
//! of `hack/csi/rbac.yaml`. Binaries and the snapshot CRDs come from
//! `hack/build-csi.sh` (pinned, cached outside the tree).
//!
//! [`Csi::calls`] reads the driver's call log, so that a test can say "the
//! moved volume was never deleted" from what the driver was actually asked.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The CSI driver name, which StorageClasses name as their `provisioner`.
pub const DRIVER: &str = "csi-mock.storage.transfer.k8s.io";
/// The namespace the CSI components' ServiceAccounts live in.
pub const NAMESPACE: &str = "storage-transfer-csi";
/// The ServiceAccount, log name and pid-file name of each component, in the
/// order they start.
pub(crate) const MOCK_DRIVER: &str = "csi-mock-driver";
pub const PROVISIONER: &str = "csi-provisioner";
pub const SNAPSHOT_CONTROLLER: &str = "snapshot-controller";
pub const SNAPSHOTTER: &str = "csi-snapshotter";

/// A StorageClass parameter that makes the mock driver's `CreateVolume` fail
/// with the parameter's value as its message.
pub const FAIL_CREATE_PARAMETER: &str = "fail-create-volume";

/// The CSI binaries and the snapshot CRDs, from `hack/build-csi.sh`.
#[derive(Debug, Clone)]
pub struct CsiBinaries {
    pub mock_driver: PathBuf,
    pub provisioner: PathBuf,
    pub snapshot_controller: PathBuf,
    pub snapshotter: PathBuf,
    /// The directory of the VolumeSnapshot CRDs of the pinned release.
    pub crds: PathBuf,
}

impl CsiBinaries {
    /// The layout `hack/build-csi.sh` prints: `<out>/bin/*` and `<out>/crd/`.
    pub(crate) fn under(out: &Path) -> Self {
        let bin = out.join("bin");
        Self {
            mock_driver: bin.join(MOCK_DRIVER),
            provisioner: bin.join(PROVISIONER),
            snapshot_controller: bin.join(SNAPSHOT_CONTROLLER),
            snapshotter: bin.join(SNAPSHOTTER),
            crds: out.join("crd"),
        }
    }
}

/// Where a control plane's CSI driver listens and logs.
#[derive(Debug, Clone)]
pub struct Csi {
    /// The driver's unix socket.
    pub socket: PathBuf,
    /// One JSON line per CSI call the driver answered.
    pub call_log: PathBuf,
}

/// One CSI call, as the mock driver logged it.
#[derive(Debug, Clone)]
pub struct CsiCall {
    /// The short method name: `CreateVolume`, `DeleteVolume`, …
    pub method: String,
    pub request: Value,
    /// `null` when the call failed.
    pub response: Value,
    /// Empty when the call succeeded.
    pub error: String,
    /// For `DeleteVolume`: whether the volume existed when the call came. The
    /// external-provisioner may repeat a deletion (CSI calls are
    /// idempotent); only the call that found the volume deleted it.
    pub existed: Option<bool>,
}

impl CsiCall {
    /// The volume a call names: the request's `volume_id`, or for
    /// `CreateVolume` the id the driver answered with.
    pub fn volume_id(&self) -> Option<&str> {
        self.request["volume_id"]
            .as_str()
            .or_else(|| self.response["volume"]["volume_id"].as_str())
    }

    /// Whether the driver answered without an error.
    pub fn succeeded(&self) -> bool {
        self.error.is_empty()
    }
}

impl Csi {
    /// Every call of `method` (`"DeleteVolume"`), in the order the driver
    /// answered them; every call when `method` is empty.
    pub fn calls(&self, method: &str) -> Vec<CsiCall> {
        let text = std::fs::read_to_string(&self.call_log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|v| {
                let full = v["method"].as_str()?;
                let short = full.rsplit('/').next().unwrap_or(full).to_owned();
                Some(CsiCall {
                    method: short,
                    request: v["request"].clone(),
                    response: v["response"].clone(),
                    error: v["error"].as_str().unwrap_or_default().to_owned(),
                    existed: v["existed"].as_bool(),
                })
            })
            .filter(|c| method.is_empty() || c.method == method)
            .collect()
    }

    /// The `DeleteVolume` calls for `volume_id` (a PV's
    /// `spec.csi.volumeHandle`), failed ones included.
    pub fn deletions_of(&self, volume_id: &str) -> Vec<CsiCall> {
        self.calls("DeleteVolume")
            .into_iter()
            .filter(|c| c.volume_id() == Some(volume_id))
            .collect()
    }

    /// The `DeleteVolume` calls that found `volume_id` and succeeded: the
    /// ones that really deleted it (more than one would be a driver bug).
    pub fn destructions_of(&self, volume_id: &str) -> Vec<CsiCall> {
        self.deletions_of(volume_id)
            .into_iter()
            .filter(|c| c.succeeded() && c.existed == Some(true))
            .collect()
    }

    /// Panics if the driver was ever asked to delete `volume_id`.
    #[track_caller]
    pub fn assert_never_deleted(&self, volume_id: &str) {
        let deletions = self.deletions_of(volume_id);
        assert!(
            deletions.is_empty(),
            "the CSI driver was asked to delete volume {volume_id}: {deletions:?}"
        );
    }

    /// Waits up to `timeout` until the driver has deleted `volume_id`, then
    /// panics unless exactly one call found and deleted it. The provisioner
    /// may repeat the call, as CSI allows; a repeat finds no volume.
    #[track_caller]
    pub fn assert_deleted_once(&self, volume_id: &str, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        while self.destructions_of(volume_id).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the CSI driver did not delete volume {volume_id} within {timeout:?}: {:?}",
                self.deletions_of(volume_id)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // A second deletion of a live volume would show up within a moment.
        std::thread::sleep(std::time::Duration::from_secs(1));
        let destroyed = self.destructions_of(volume_id);
        assert_eq!(
            destroyed.len(),
            1,
            "one DeleteVolume found volume {volume_id}: {:?}",
            self.deletions_of(volume_id)
        );
    }

    /// The successful `CreateVolume` call that made `volume_id`.
    pub fn creation_of(&self, volume_id: &str) -> Option<CsiCall> {
        self.calls("CreateVolume")
            .into_iter()
            .find(|c| c.succeeded() && c.volume_id() == Some(volume_id))
    }
}

/// The socket path for a run directory. A unix socket path may not exceed 107
/// bytes, and a deep `CARGO_TARGET_DIR` can make the run directory longer; the
/// fallback is a name under the system's temporary directory, derived from the
/// run directory so that it stays unique.
pub fn socket_path(run: &Path) -> PathBuf {
    let preferred = run.join("csi").join("csi.sock");
    if preferred.as_os_str().len() <= 100 {
        return preferred;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in run.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    std::env::temp_dir().join(format!("sta-csi-{hash:016x}.sock"))
}

/// The manifest of a StorageClass `name` provisioned by the mock driver, with
/// reclaim policy Delete and immediate binding; `annotations` and `parameters`
/// as YAML flow mappings (`{}` for none).
pub fn storage_class_yaml(name: &str, annotations: &str, parameters: &str) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {name}\n  annotations: {annotations}\nprovisioner: {DRIVER}\nreclaimPolicy: Delete\nvolumeBindingMode: Immediate\nallowVolumeExpansion: true\nparameters: {parameters}\n"
    )
}

/// The manifest of a VolumeSnapshotClass `name` for the mock driver.
pub fn snapshot_class_yaml(name: &str) -> String {
    format!(
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata:\n  name: {name}\ndriver: {DRIVER}\ndeletionPolicy: Delete\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_directory_holds_its_own_socket() {
        let run = Path::new("/work/target/testenv/transfer-1-2-0");
        assert_eq!(
            socket_path(run),
            Path::new("/work/target/testenv/transfer-1-2-0/csi/csi.sock")
        );
    }

    #[test]
    fn a_deep_run_directory_gets_a_short_socket_path_of_its_own() {
        let deep = PathBuf::from(format!("/{}/run-a", "d".repeat(120)));
        let other = PathBuf::from(format!("/{}/run-b", "d".repeat(120)));
        let (a, b) = (socket_path(&deep), socket_path(&other));
        assert!(a.as_os_str().len() <= 100, "{}", a.display());
        assert_ne!(a, b);
        assert_eq!(a, socket_path(&deep));
    }

    #[test]
    fn calls_are_read_from_the_log_by_short_method_name() {
        let dir = std::env::temp_dir().join(format!("sta-csi-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("calls.jsonl");
        std::fs::write(
            &log,
            concat!(
                r#"{"method":"/csi.v1.Controller/CreateVolume","request":{"name":"pvc-1"},"response":{"volume":{"volume_id":"4"}},"error":""}"#,
                "\n",
                r#"{"method":"/csi.v1.Controller/DeleteVolume","request":{"volume_id":"4"},"response":{},"error":"","existed":true}"#,
                "\n",
                r#"{"method":"/csi.v1.Controller/DeleteVolume","request":{"volume_id":"4"},"response":{},"error":"","existed":false}"#,
                "\n",
                r#"{"method":"/csi.v1.Controller/DeleteVolume","request":{"volume_id":"5"},"response":null,"error":"rpc error"}"#,
                "\n",
                "not json\n",
            ),
        )
        .unwrap();
        let csi = Csi {
            socket: dir.join("csi.sock"),
            call_log: log,
        };
        assert_eq!(csi.calls("").len(), 4);
        assert_eq!(csi.deletions_of("4").len(), 2);
        assert!(csi.deletions_of("4")[0].succeeded());
        assert_eq!(
            csi.destructions_of("4").len(),
            1,
            "the repeat found nothing"
        );
        assert!(!csi.deletions_of("5")[0].succeeded());
        assert!(csi.deletions_of("6").is_empty());
        assert_eq!(
            csi.creation_of("4").unwrap().request["name"],
            Value::from("pvc-1")
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
