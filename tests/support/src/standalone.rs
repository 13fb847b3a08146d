//! Our server alone on an etcd, with no kube-apiserver in front of it: every
//! request allowed (`--insecure-allow-all`), served with a test PKI's
//! certificate. For the tests of storage between replicas and of etcd's own
//! failures, where a whole control plane would only add noise.
//!
//! Owns the replica's process and its HTTPS client.

use std::path::Path;
use std::time::Duration;

use crate::http::HttpClient;
use crate::pki::Pki;
use crate::process::Process;
use crate::{free_port, wait_ready, Error};

/// The name the test PKI's serving certificate is for.
pub const SERVER_NAME: &str = "storage-transfer-apiserver.storage-transfer-system.svc";

/// How long a replica may take to answer `/readyz`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// One process of our server: stopped (SIGTERM, then SIGKILL after 5 s)
/// when dropped.
#[derive(Debug)]
pub struct Replica {
    pub process: Process,
    pub http: HttpClient,
}

impl Replica {
    /// Starts `bin` as replica `name` on `etcd_servers` (comma-separated
    /// URLs), with `extra` flags; its log is `<dir>/<name>.log`. Returns
    /// once it answers `/readyz` with 200.
    pub fn start(
        bin: &Path,
        dir: &Path,
        name: &str,
        pki: &Pki,
        etcd_servers: &str,
        extra: &[String],
    ) -> Result<Self, Error> {
        let port = free_port()?;
        let mut args = vec![
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--etcd-servers={etcd_servers}"),
            "--insecure-allow-all".to_owned(),
            format!("--tls-cert-file={}", pki.server_serving.cert.display()),
            format!(
                "--tls-private-key-file={}",
                pki.server_serving.key.display()
            ),
        ];
        args.extend_from_slice(extra);
        let log = dir.join(format!("{name}.log"));
        // The tests read what it logs at info.
        let mut process = Process::spawn(name, bin, &args, &log, &[("RUST_LOG", "info")])?;
        let http = HttpClient::new(port, &pki.serving_ca.cert, SERVER_NAME, None)?;
        wait_ready(&mut process, name, READY_TIMEOUT, &mut || {
            http.request("GET", "/readyz", &[], b"")
                .is_ok_and(|r| r.status == 200)
        })?;
        Ok(Self { process, http })
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(5));
    }
}

/// A NamespaceTransfer offering claim `prod/<claim>` to namespace `dev`, as
/// a create's body: what the standalone tests write.
pub fn offer(name: &str, claim: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name},
        "spec": {"source": {"name": claim}, "destination": {"namespace": "dev"}},
    });
    body.to_string().into_bytes()
}
