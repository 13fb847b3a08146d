//! The server binary on its own: TLS with ALPN, a generated certificate whose
//! fingerprint is logged, and a graceful exit on SIGTERM.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sta_testenv::pki::Pki;
use sta_testenv::process::{pid_is_running, Process};
use sta_testenv::{free_port, write_kubeconfig, Kubectl};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("server-process-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Server {
    process: Process,
    _etcd: sta_testenv::Etcd,
    port: u16,
    pki: Pki,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(5));
    }
}

fn start(name: &str, with_certs: bool) -> Server {
    let dir = scratch(name);
    let pki = Pki::generate(
        &dir.join("pki"),
        "storage-transfer-apiserver.storage-transfer-system.svc",
    )
    .unwrap();
    let port = free_port().unwrap();
    let etcd = sta_testenv::Etcd::start(&dir.join("etcd")).unwrap();
    let mut args = vec![
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--etcd-servers={}", etcd.url),
        "--insecure-allow-all".to_owned(),
        "--shutdown-grace-period=5s".to_owned(),
    ];
    if with_certs {
        args.push(format!(
            "--tls-cert-file={}",
            pki.server_serving.cert.display()
        ));
        args.push(format!(
            "--tls-private-key-file={}",
            pki.server_serving.key.display()
        ));
    }
    let log = dir.join("server.log");
    let process =
        Process::spawn(name, Path::new(BIN), &args, &log, &[("RUST_LOG", "info")]).unwrap();
    let mut server = Server {
        process,
        _etcd: etcd,
        port,
        pki,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("serving HTTPS")
    {
        assert!(
            server.process.is_running(),
            "server exited:\n{}",
            server.process.log_tail()
        );
        assert!(
            Instant::now() < deadline,
            "server did not start:\n{}",
            server.process.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = &mut server;
    server
}

fn negotiate(server: &Server, alpn: &[&[u8]]) -> Option<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&server.pki.serving_ca.cert).unwrap();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = rustls::pki_types::ServerName::try_from(
            "storage-transfer-apiserver.storage-transfer-system.svc",
        )
        .unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        tls.get_ref().1.alpn_protocol().map(|p| p.to_vec())
    })
}

#[test]
fn server_negotiates_h2_and_http1_over_alpn_with_the_given_certificate() {
    let server = start("alpn", true);
    assert_eq!(
        negotiate(&server, &[b"h2", b"http/1.1"]).as_deref(),
        Some(&b"h2"[..])
    );
    assert_eq!(
        negotiate(&server, &[b"http/1.1"]).as_deref(),
        Some(&b"http/1.1"[..])
    );
}

#[test]
fn server_generates_a_certificate_and_logs_its_fingerprint_when_given_none() {
    let server = start("selfsigned", false);
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("self-signed"))
        .unwrap_or_else(|| panic!("no self-signed line in:\n{log}"));
    assert!(
        !line.contains('\u{1b}'),
        "log files must not carry colour codes: {line}"
    );
    let fingerprint = line.split("sha256=").nth(1).unwrap().trim();
    // 32 bytes as colon-separated upper-case hex, as openssl prints it.
    let bytes: Vec<&str> = fingerprint.split(':').collect();
    assert_eq!(bytes.len(), 32, "{line}");
    assert!(
        bytes.iter().all(|b| b.len() == 2
            && b.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())),
        "{line}"
    );
}

#[test]
fn server_exits_zero_on_sigterm_after_draining_connections() {
    let mut server = start("sigterm", true);
    let kubeconfig = server.dir.join("kubeconfig");
    write_kubeconfig(
        &kubeconfig,
        &format!("https://127.0.0.1:{}", server.port),
        &server.pki.serving_ca.cert,
        Some((&server.pki.admin.cert, &server.pki.admin.key)),
    )
    .unwrap();
    let kubectl_bin = sta_testenv::Binaries::locate().unwrap().kubectl;
    let k = Kubectl::new(&kubectl_bin, &kubeconfig, &server.dir.join("cache"));
    let ready = k.eventually(&["get", "--raw", "/readyz"], Duration::from_secs(10));
    assert_eq!(ready.stdout, "ok", "{}", ready.stderr);

    let pid = server.process.pid;
    nix_term(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_is_running(pid) && server.process.is_running() {
        assert!(Instant::now() < deadline, "still running 10s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    assert!(log.contains("received SIGTERM"), "{log}");
    assert!(log.contains("stopped"), "{log}");
    assert_eq!(server.process.exit_code(), Some(0), "{log}");
}

fn nix_term(pid: u32) {
    assert!(sta_testenv::process::sigterm(pid), "SIGTERM to {pid}");
}
