//! The server binary on its own: TLS with ALPN, a generated certificate whose
//! fingerprint is logged, a graceful exit on SIGTERM, and connections that
//! cannot be held open for nothing while long watches keep working.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::io::{Read, Write};
use std::net::TcpStream;
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

impl Server {
    /// A client with no credentials, trusting the server's CA.
    fn http(&self) -> sta_testenv::http::HttpClient {
        sta_testenv::http::HttpClient::new(self.port, &self.pki.serving_ca.cert, SERVER_NAME, None)
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(5));
    }
}

fn start(name: &str, with_certs: bool) -> Server {
    start_with(name, with_certs, &[])
}

/// The server of [`start`], with `extra` flags.
fn start_with(name: &str, with_certs: bool, extra: &[&str]) -> Server {
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
    args.extend(extra.iter().map(|a| (*a).to_owned()));
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

const SERVER_NAME: &str = "storage-transfer-apiserver.storage-transfer-system.svc";

/// How long a connection that sends nothing useful may stay open, at most.
const CLOSED_WITHIN: Duration = Duration::from_secs(15);

fn client_config(server: &Server, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&server.pki.serving_ca.cert).unwrap();
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
    Arc::new(config)
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `server` whose handshake is complete, offering `alpn`.
fn tls_connect(server: &Server, alpn: &[&[u8]]) -> TlsStream {
    let mut tcp = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    tcp.set_read_timeout(Some(CLOSED_WITHIN)).unwrap();
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    let mut conn = rustls::ClientConnection::new(client_config(server, alpn), name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    rustls::StreamOwned::new(conn, tcp)
}

/// Reads (and drops) whatever `stream` sends until the server closes it;
/// `Err` with what happened if it is still open after `limit`.
fn closed_within(stream: &mut impl Read, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(started.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("still open after {:?}", started.elapsed()));
            }
            // Reset, or closed without a TLS close_notify: closed either way.
            Err(_) => return Ok(started.elapsed()),
        }
        if started.elapsed() > limit {
            return Err(format!("still sending after {limit:?}"));
        }
    }
}

#[test]
fn a_connection_that_never_starts_tls_is_closed() {
    let server = start("silent-tcp", true);
    let mut tcp = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    tcp.set_read_timeout(Some(CLOSED_WITHIN)).unwrap();
    if let Err(open) = closed_within(&mut tcp, CLOSED_WITHIN) {
        panic!(
            "a TCP connection that never starts TLS is {open}:\n{}",
            server.process.log_tail()
        );
    }
}

#[test]
fn a_tls_connection_that_never_sends_a_whole_request_is_closed() {
    let server = start("silent-tls", true);
    type Client = (&'static str, &'static [&'static [u8]], &'static [u8]);
    let clients: [Client; 5] = [
        ("HTTP/1.1 that sends nothing", &[b"http/1.1"], b""),
        ("no ALPN that sends nothing", &[], b""),
        ("h2 that sends nothing", &[b"h2"], b""),
        (
            "HTTP/1.1 that never ends its headers",
            &[b"http/1.1"],
            b"GET /readyz HTTP/1.1\r\nHost: x\r\n",
        ),
        (
            "no ALPN that stops within the HTTP/2 preface",
            &[],
            b"PRI * HTTP/2.0\r\n",
        ),
    ];
    // In parallel: each waits out the same timeout.
    let results: Vec<(&str, Result<Duration, String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter()
            .map(|&(what, alpn, sends)| {
                let server = &server;
                scope.spawn(move || {
                    let mut tls = tls_connect(server, alpn);
                    tls.write_all(sends).unwrap();
                    tls.flush().unwrap();
                    (what, closed_within(&mut tls, CLOSED_WITHIN))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let open: Vec<String> = results
        .iter()
        .filter_map(|(what, r)| r.as_ref().err().map(|e| format!("{what}: {e}")))
        .collect();
    assert!(
        open.is_empty(),
        "connections left open: {open:#?}\n{}",
        server.process.log_tail()
    );
}

/// Flags that make every idle-connection timeout short, so that a test can
/// outlast them all.
const SHORT_TIMEOUTS: &[&str] = &[
    "--tls-handshake-timeout=1s",
    "--read-header-timeout=1s",
    "--http2-read-idle-timeout=1s",
    "--http2-ping-timeout=1s",
    "--idle-connection-timeout=1s",
];

/// Longer than every timeout of [`SHORT_TIMEOUTS`] together.
const IDLE: Duration = Duration::from_secs(4);

const TRANSFERS: &str =
    "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/default/namespacetransfers";

/// Creates a transfer `name` through a connection of its own.
fn create_transfer(port: u16, ca: &Path, name: &str) {
    let http = sta_testenv::http::HttpClient::new(port, ca, SERVER_NAME, None).unwrap();
    let body = serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"}},
    });
    let resp = http
        .request(
            "POST",
            TRANSFERS,
            &[("Content-Type", "application/json")],
            &serde_json::to_vec(&body).unwrap(),
        )
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.text());
}

#[test]
fn an_http1_watch_idle_past_every_timeout_still_receives_the_next_event() {
    let server = start_with("idle-watch-h1", true, SHORT_TIMEOUTS);
    let mut tls = tls_connect(&server, &[b"http/1.1"]);
    write!(
        tls,
        "GET {TRANSFERS}?watch=1&timeoutSeconds=30 HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    std::thread::sleep(IDLE);
    create_transfer(server.port, &server.pki.serving_ca.cert, "after-idle");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(&seen).contains("\"after-idle\"") {
        assert!(Instant::now() < deadline, "no event yet");
        match tls.read(&mut buf) {
            Ok(0) => panic!(
                "the watch was closed after {IDLE:?} idle: {}\n{}",
                String::from_utf8_lossy(&seen),
                server.process.log_tail()
            ),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the watch: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"type\":\"ADDED\""), "{text}");
}

#[test]
fn an_http2_watch_idle_past_every_timeout_still_receives_the_next_event() {
    use http_body_util::{BodyExt, Empty};
    let server = start_with("idle-watch-h2", true, SHORT_TIMEOUTS);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        let connector = tokio_rustls::TlsConnector::from(client_config(&server, &[b"h2"]));
        let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .unwrap();
        // The connection task answers the server's pings while the test waits.
        tokio::spawn(conn);
        let request = http::Request::get(format!(
            "https://{SERVER_NAME}{TRANSFERS}?watch=1&timeoutSeconds=30"
        ))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
        let resp = sender.send_request(request).await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        tokio::time::sleep(IDLE).await;
        let port = server.port;
        let ca = server.pki.serving_ca.cert.clone();
        tokio::task::spawn_blocking(move || create_transfer(port, &ca, "after-idle"))
            .await
            .unwrap();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("\"after-idle\"") {
            let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
                .await
                .expect("no event within 20s");
            match frame {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        seen.extend_from_slice(data);
                    }
                }
                Some(Err(e)) => panic!("the watch broke after {IDLE:?} idle: {e}"),
                None => panic!(
                    "the watch ended after {IDLE:?} idle: {}",
                    String::from_utf8_lossy(&seen)
                ),
            }
        }
        assert!(String::from_utf8_lossy(&seen).contains("\"type\":\"ADDED\""));
    });
}

#[test]
fn an_http2_connection_that_stops_answering_pings_is_closed() {
    let server = start_with("h2-no-pong", true, SHORT_TIMEOUTS);
    let mut tls = tls_connect(&server, &[b"h2"]);
    // By hand, so that nothing answers the server's pings: the preface, empty
    // SETTINGS, and one request (HEADERS on stream 1, END_STREAM|END_HEADERS,
    // HPACK: GET, https, :path "/readyz").
    let mut frames = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frames.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    let block = [&[0x82, 0x87, 0x04, 0x07][..], b"/readyz"].concat();
    frames.extend_from_slice(&[0, 0, block.len() as u8, 0x1, 0x5, 0, 0, 0, 1]);
    frames.extend_from_slice(&block);
    tls.write_all(&frames).unwrap();
    tls.flush().unwrap();
    // The request is answered; then the connection idles, is pinged, and
    // closes when no answer comes. Without pings it would stay open.
    if let Err(open) = closed_within(&mut tls, CLOSED_WITHIN) {
        panic!(
            "an HTTP/2 connection that ignores pings is {open}:\n{}",
            server.process.log_tail()
        );
    }
}

/// A connection with a watch open on it (so not idle), whose response head
/// has been read.
fn open_watch(server: &Server) -> TlsStream {
    let mut tls = tls_connect(server, &[b"http/1.1"]);
    write!(
        tls,
        "GET {TRANSFERS}?watch=1&timeoutSeconds=60 HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    let mut head = [0u8; 12];
    tls.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    tls
}

#[test]
fn past_max_connections_a_new_connection_waits_until_a_busy_one_closes() {
    let server = start_with(
        "max-connections",
        true,
        &["--max-connections=2", "--read-header-timeout=60s"],
    );
    let first = open_watch(&server);
    let _second = open_watch(&server);
    // The third is not accepted: its handshake gets no answer...
    let mut tcp = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
    let mut conn =
        rustls::ClientConnection::new(client_config(&server, &[b"http/1.1"]), name).unwrap();
    let waiting = conn
        .complete_io(&mut tcp)
        .and_then(|_| conn.complete_io(&mut tcp));
    assert!(
        waiting.is_err() && conn.is_handshaking(),
        "the third connection was served while two were busy"
    );
    // ...until one of the two closes.
    drop(first);
    tcp.set_read_timeout(Some(CLOSED_WITHIN)).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    let mut third = rustls::StreamOwned::new(conn, tcp);
    third
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = third.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    assert!(log.contains("--max-connections are open"), "{log}");
}

#[test]
fn past_max_connections_the_longest_idle_connection_makes_room_for_a_new_one() {
    let server = start_with(
        "max-connections-idle",
        true,
        &["--max-connections=2", "--read-header-timeout=60s"],
    );
    let config = client_config(&server, &[b"h2"]);
    let rt = multi_thread_runtime();
    rt.block_on(async {
        let limit = Duration::from_secs(5);
        let oldest = hold_http2_connection(server.port, config.clone(), limit)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let younger = hold_http2_connection(server.port, config.clone(), limit)
            .await
            .unwrap();
        let third = hold_http2_connection(server.port, config.clone(), limit).await;
        assert!(third.is_ok(), "{:?}", third.err());
        tokio::time::timeout(CLOSED_WITHIN, oldest.task)
            .await
            .expect("the longest idle connection was closed")
            .unwrap();
        assert!(!younger.task.is_finished(), "only one was closed");
    });
}

#[test]
fn a_watch_open_at_sigterm_runs_to_its_end_and_the_server_drains() {
    let mut server = start_with("drain-watch", true, SHORT_TIMEOUTS);
    let mut tls = tls_connect(&server, &[b"http/1.1"]);
    write!(
        tls,
        "GET {TRANSFERS}?watch=1&timeoutSeconds=3 HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    tls.flush().unwrap();
    // The response head says the watch is being served.
    let mut head = [0u8; 12];
    tls.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    nix_term(server.process.pid);
    let mut rest = Vec::new();
    match tls.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("reading the watch: {e}"),
    }
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.ends_with("0\r\n\r\n"),
        "the watch ended with its last chunk, not cut: {text:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.process.is_running() {
        assert!(Instant::now() < deadline, "still running 10s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    assert!(log.contains("all connections drained"), "{log}");
    assert_eq!(server.process.exit_code(), Some(0), "{log}");
}

/// An HTTP/2 connection that has sent one `GET /healthz` and had its answer,
/// kept open: its task answers the server's pings and ends when the server
/// closes the connection.
struct HeldConnection {
    task: tokio::task::JoinHandle<()>,
    _sender: hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
}

/// Opens a [`HeldConnection`], or says why it could not within `limit`.
async fn hold_http2_connection(
    port: u16,
    config: Arc<rustls::ClientConfig>,
    limit: Duration,
) -> Result<HeldConnection, String> {
    let open = async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let request = http::Request::get(format!("https://{SERVER_NAME}/healthz"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = sender
            .send_request(request)
            .await
            .map_err(|e| format!("GET /healthz: {e}"))?;
        if resp.status() != 200 {
            return Err(format!("GET /healthz: {}", resp.status()));
        }
        Ok(HeldConnection {
            task,
            _sender: sender,
        })
    };
    tokio::time::timeout(limit, open)
        .await
        .unwrap_or_else(|_| Err(format!("not answered within {limit:?}")))
}

fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn two_thousand_idle_http2_connections_without_credentials_do_not_lock_out_a_new_client() {
    // The defaults: 1,024 connections, idle ones closed after 90s.
    let server = start("idle-flood", true);
    let config = client_config(&server, &[b"h2"]);
    let rt = multi_thread_runtime();
    rt.block_on(async {
        // The attacker: 2,000 connections, 50 opened at a time, each of which
        // asks for /healthz (no credentials needed) and then only answers
        // pings.
        let mut held = Vec::new();
        let mut refused = 0usize;
        for _ in 0..40 {
            let batch = (0..50).map(|_| {
                hold_http2_connection(server.port, config.clone(), Duration::from_secs(5))
            });
            for result in futures::future::join_all(batch).await {
                match result {
                    Ok(conn) => held.push(conn),
                    Err(_) => refused += 1,
                }
            }
        }
        // A new client is still answered.
        let newcomer =
            hold_http2_connection(server.port, config.clone(), Duration::from_secs(5)).await;
        assert!(
            newcomer.is_ok(),
            "a new client's /healthz while 2,000 idle connections were held ({refused} of them never answered): {:?}\\n{}",
            newcomer.err(),
            server.process.log_tail()
        );
        let closed = held.iter().filter(|c| c.task.is_finished()).count();
        assert!(
            closed > 0,
            "the server made room by closing idle connections ({} held)",
            held.len()
        );
    });
    let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap();
    assert!(
        log.contains("closing the longest idle connections"),
        "the log says why connections were closed: {log}"
    );
}

#[test]
fn idle_http2_connections_are_closed_after_the_idle_timeout() {
    let server = start_with("idle-timeout", true, SHORT_TIMEOUTS);
    let config = client_config(&server, &[b"h2"]);
    let rt = multi_thread_runtime();
    rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(
                hold_http2_connection(server.port, config.clone(), Duration::from_secs(5))
                    .await
                    .unwrap(),
            );
        }
        // Pings are answered, so only the idle timeout (1s) closes them.
        let deadline = Instant::now() + CLOSED_WITHIN;
        while held.iter().any(|c| !c.task.is_finished()) {
            assert!(
                Instant::now() < deadline,
                "{} of 20 idle connections still open after {CLOSED_WITHIN:?}",
                held.iter().filter(|c| !c.task.is_finished()).count()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn a_body_that_does_not_arrive_within_the_request_timeout_is_answered_504_timeout() {
    let server = start_with("slow-body", true, &["--request-timeout=2s"]);
    let body = br#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1","kind":"NamespaceTransfer","metadata":{"name":"slow"},"spec":{"source":{"name":"slow"},"destination":{"namespace":"dev"}}}"#;
    let mut tls = tls_connect(&server, &[b"http/1.1"]);
    write!(
        tls,
        "POST {TRANSFERS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    tls.write_all(&body[..body.len() / 2]).unwrap();
    tls.flush().unwrap();
    // Never sends the rest: the answer comes at the deadline, not never.
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&raw).contains("\"code\":504") {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "no answer within {CLOSED_WITHIN:?}: {e}\n{}",
                server.process.log_tail()
            ),
        }
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    assert!(text.contains("\"reason\":\"Timeout\""), "{text}");
    assert!(
        text.contains("request did not complete within requested timeout"),
        "{text}"
    );
    // Nothing was stored.
    let http = server.http();
    let got = http
        .request("GET", &format!("{TRANSFERS}/slow"), &[], b"")
        .unwrap();
    assert_eq!(got.status, 404, "{}", got.text());
}

#[test]
fn in_blocking_strict_mode_a_request_whose_audit_event_cannot_be_written_fails_and_in_blocking_mode_it_goes_on(
) {
    let dir = scratch("audit-policy");
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let policy_flag = format!("--audit-policy-file={}", policy.display());
    // Every write to /dev/full fails, as on a full disk.
    for (mode, want) in [("blocking-strict", 500), ("blocking", 200), ("batch", 200)] {
        let mode_flag = format!("--audit-log-mode={mode}");
        let server = start_with(
            &format!("audit-{mode}"),
            true,
            &[&policy_flag, "--audit-log-path=/dev/full", &mode_flag],
        );
        let http = server.http();
        let got = http.request("GET", TRANSFERS, &[], b"").unwrap();
        assert_eq!(got.status, want, "{mode}: {}", got.text());
        if want == 500 {
            let status = got.json();
            assert_eq!(status["kind"], "Status", "{status}");
            assert_eq!(status["reason"], "InternalError", "{status}");
            assert!(
                status["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("failed to store audit event")),
                "{status}"
            );
        }
    }
}
