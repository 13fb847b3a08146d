//! The load generator shared by the benchmarks: one HTTP/2 connection over
//! rustls (as client-go talks to an API server), a fixed number of workers,
//! and latency percentiles.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

pub const SERVER_NAME: &str = "storage-transfer-apiserver.storage-transfer-system.svc";

pub type Client = SendRequest<Full<Bytes>>;

pub fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` scaled by `BENCH_SCALE` (default 1), at least 1.
pub fn scaled(n: usize) -> usize {
    ((n as f64) * env_f64("BENCH_SCALE", 1.0)).round().max(1.0) as usize
}

/// An HTTP/2 connection to our server trusting `ca`, presenting `client`
/// (certificate, key) if given.
pub async fn connect(port: u16, ca: &Path, client: Option<(&Path, &Path)>) -> Client {
    connect_to(port, SERVER_NAME, ca, client).await
}

/// An HTTP/2 connection to the server on `port` that presents a certificate
/// for `server_name` signed by `ca`, presenting `client` (certificate, key)
/// if given.
pub async fn connect_to(
    port: u16,
    server_name: &str,
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Client {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => {
            let chain = rustls::pki_types::CertificateDer::pem_file_iter(cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    // The server may still be starting: retry the connection for a while.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let tcp = loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(tcp) => break tcp,
            Err(e) if std::time::Instant::now() > deadline => {
                panic!("connecting to port {port}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    tcp.set_nodelay(true).unwrap();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

/// One request; returns the status and the whole body.
pub async fn call_with(
    client: &Client,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, Bytes) {
    let mut c = client.clone();
    c.ready().await.unwrap();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"));
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = c.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

/// Waits until `/readyz` answers 200.
pub async fn wait_ready(client: &Client) {
    loop {
        let (status, _) = call_with(client, Method::GET, "/readyz", &[], None).await;
        if status == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Latencies of one operation, and the wall time they took together.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub latencies: Vec<Duration>,
    pub wall: Duration,
}

impl Sample {
    /// The latency at quantile `q`, in milliseconds.
    pub fn quantile_ms(&mut self, q: f64) -> f64 {
        self.latencies.sort();
        let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[i].as_secs_f64() * 1000.0
    }

    /// A Markdown row: name, requests, ops/s, p50, p99.
    pub fn row(&mut self) -> String {
        let (p50, p99) = (self.quantile_ms(0.5), self.quantile_ms(0.99));
        format!(
            "| {} | {} | {:.0} | {p50:.2} | {p99:.2} |",
            self.name,
            self.latencies.len(),
            self.latencies.len() as f64 / self.wall.as_secs_f64(),
        )
    }
}

/// Runs `total` calls of `op(i)` over `concurrency` workers.
pub async fn run<F, Fut>(name: &str, total: usize, concurrency: usize, op: F) -> Sample
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (op, next) = (op.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return latencies;
                }
                let t = Instant::now();
                op(i).await;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for w in workers {
        latencies.extend(w.await.unwrap());
    }
    Sample {
        name: name.to_owned(),
        latencies,
        wall: started.elapsed(),
    }
}
