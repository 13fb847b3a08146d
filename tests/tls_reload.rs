//! The serving certificate is reloaded from its files while the server runs:
//! a pair issued by another CA is served to new connections within a few
//! seconds, by the same process.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sta_testenv::http::HttpClient;
use sta_testenv::pki::{Ca, Usage};
use sta_testenv::process::Process;
use sta_testenv::{free_port, Etcd};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const SERVER_NAME: &str = "storage-transfer-apiserver.storage-transfer-system.svc";

struct Server {
    process: Process,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(5));
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tls-reload-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Issues the serving pair `<serving>/tls.crt` and `tls.key` from `ca`,
/// overwriting whatever is there in place.
fn issue_serving_pair(ca: &Ca, serving: &Path) {
    ca.issue(
        serving,
        "tls",
        SERVER_NAME,
        &[],
        &[SERVER_NAME, "localhost", "127.0.0.1"],
        Usage::Server,
    )
    .unwrap();
}

/// Whether a new client trusting only `ca` gets through to `/readyz`. Each
/// check makes its own client: one that resumed an earlier TLS session would
/// not see the certificate again.
fn verifies_with(port: u16, ca: &Ca) -> bool {
    let client = HttpClient::new(port, &ca.cert, SERVER_NAME, None).unwrap();
    matches!(client.request("GET", "/readyz", &[], b""), Ok(resp) if resp.status == 200)
}

#[test]
fn a_serving_certificate_from_a_new_ca_is_served_without_a_restart() {
    let dir = scratch("rotate");
    let pki = dir.join("pki");
    let serving = dir.join("serving");
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::create_dir_all(&serving).unwrap();
    let ca1 = Ca::create(&pki, "ca1", "tls-reload-test-ca-1").unwrap();
    let ca2 = Ca::create(&pki, "ca2", "tls-reload-test-ca-2").unwrap();
    issue_serving_pair(&ca1, &serving);
    let etcd = Etcd::start(&dir.join("etcd")).unwrap();

    let port = free_port().unwrap();
    let args = vec![
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--etcd-servers={}", etcd.url),
        "--insecure-allow-all".to_owned(),
        format!("--tls-cert-file={}", serving.join("tls.crt").display()),
        format!(
            "--tls-private-key-file={}",
            serving.join("tls.key").display()
        ),
        "--tls-reload-interval=200ms".to_owned(),
    ];
    let process = Process::spawn(
        "server",
        Path::new(BIN),
        &args,
        &dir.join("server.log"),
        &[],
    )
    .unwrap();
    let mut server = Server { process };
    let pid = server.process.pid;

    let deadline = Instant::now() + Duration::from_secs(20);
    while !verifies_with(port, &ca1) {
        assert!(
            server.process.is_running(),
            "the server exited:\n{}",
            server.process.log_tail()
        );
        assert!(
            Instant::now() < deadline,
            "the server never became ready:\n{}",
            server.process.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !verifies_with(port, &ca2),
        "a client trusting only CA2 must not verify CA1's certificate"
    );

    issue_serving_pair(&ca2, &serving);

    let deadline = Instant::now() + Duration::from_secs(10);
    while !verifies_with(port, &ca2) {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served:\n{}",
            server.process.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !verifies_with(port, &ca1),
        "CA1's certificate is still served"
    );
    assert!(server.process.is_running(), "{}", server.process.log_tail());
    assert_eq!(server.process.pid, pid);
    let log = std::fs::read_to_string(&server.process.log).unwrap();
    assert!(log.contains("serving certificate reloaded"), "{log}");
}
