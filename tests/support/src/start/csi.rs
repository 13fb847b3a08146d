//! Starting the CSI stack for a control plane: the RBAC and snapshot CRDs
//! it needs, then the helpers of [`crate::csi`] as processes: the mock
//! driver on its unix socket, the external-provisioner, the snapshot
//! controller and the csi-snapshotter, each sidecar with a ServiceAccount
//! token of its own.

use std::path::Path;
use std::time::Duration;

use crate::csi;
use crate::{io_err, repo_root, ControlPlane, Error};

impl ControlPlane {
    /// Starts the CSI stack of [`csi`]: its RBAC and the snapshot CRDs, then
    /// the mock driver, the external-provisioner, the snapshot controller and
    /// the csi-snapshotter, each with its own ServiceAccount token.
    pub(crate) fn start_csi(&self) -> Result<(), Error> {
        let rbac = repo_root().join("hack/csi/rbac.yaml");
        self.admin
            .eventually(
                &["apply", "-f", &rbac.display().to_string()],
                Duration::from_secs(30),
            )
            .into_result()?;
        let crds = self.bins.csi.crds.display().to_string();
        self.admin.try_ok(&["apply", "-f", &crds])?;
        self.admin.try_ok(&[
            "wait",
            "--for=condition=Established",
            "-f",
            &crds,
            "--timeout=60s",
        ])?;

        let dir = self.dir.join("csi");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        if let Some(parent) = self.csi.socket.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        let _ = std::fs::remove_file(&self.csi.socket);
        let socket = self.csi.socket.clone();
        let endpoint = format!("unix://{}", socket.display());
        let call_log = self.csi.call_log.display().to_string();
        self.start_component(
            csi::MOCK_DRIVER,
            &self.bins.csi.mock_driver,
            || {
                Ok(vec![
                    format!("--endpoint={endpoint}"),
                    format!("--driver-name={}", csi::DRIVER),
                    format!("--call-log={call_log}"),
                    "--v=2".to_owned(),
                ])
            },
            &[],
            Duration::from_secs(30),
            || std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        )?;

        let sidecars: [(&str, &Path, &[&str], &str); 3] = [
            (
                csi::PROVISIONER,
                &self.bins.csi.provisioner,
                // No topology, no capacity tracking: there are no nodes. The
                // claim's name and namespace go into CreateVolume's
                // parameters, so that the call log says whose volume it is.
                &["--extra-create-metadata", "--timeout=30s"],
                "Started provisioner controller",
            ),
            // Neither uses volume group snapshots, whose CRDs are not
            // installed: with the gate on (its default), the snapshot
            // controller retries listing them for 30 s before it starts,
            // which was three quarters of every control plane's start.
            (
                csi::SNAPSHOT_CONTROLLER,
                &self.bins.csi.snapshot_controller,
                &["--feature-gates=CSIVolumeGroupSnapshot=false"],
                "Starting snapshot controller",
            ),
            (
                csi::SNAPSHOTTER,
                &self.bins.csi.snapshotter,
                &[
                    "--timeout=30s",
                    "--feature-gates=CSIVolumeGroupSnapshot=false",
                ],
                "Starting CSI snapshotter",
            ),
        ];
        for (name, program, extra, started) in sidecars {
            let kubeconfig = dir.join(format!("{name}.kubeconfig"));
            self.service_account_kubeconfig(csi::NAMESPACE, name, &kubeconfig)?;
            let mut args = vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                "--leader-election=false".to_owned(),
                "--v=2".to_owned(),
            ];
            if name != csi::SNAPSHOT_CONTROLLER {
                args.push(format!("--csi-address={}", socket.display()));
            }
            args.extend(extra.iter().map(|a| (*a).to_owned()));
            let log = self.log_path(name);
            self.start_component(
                name,
                program,
                || Ok(args.clone()),
                &[],
                Duration::from_secs(60),
                || std::fs::read_to_string(&log).is_ok_and(|l| l.contains(started)),
            )?;
        }
        Ok(())
    }
}
