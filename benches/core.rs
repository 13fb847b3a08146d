//! `make bench-core`: our server alone on real etcd, driven over one HTTP/2
//! connection (as client-go drives an API server) at a fixed concurrency.
//!
//! Measures create, get and list (at 10, 1k and 10k objects) throughput and
//! p50/p99 latency, and watch fan-out: how long after a write each of N
//! watchers receives it. Prints a Markdown table. Never asserts on speed.
//!
//! Environment: `BENCH_SCALE` (default 1.0) scales every count, so CI can
//! run it tiny; `BENCH_CONCURRENCY` (default 16).

#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark fails by panicking.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sta_testenv::pki::Pki;
use sta_testenv::process::Process;
use sta_testenv::{free_port, Etcd};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const SERVER_NAME: &str = "storage-transfer-apiserver.storage-transfer-system.svc";

type Client = SendRequest<Full<Bytes>>;

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn scaled(n: usize) -> usize {
    ((n as f64) * env_f64("BENCH_SCALE", 1.0)).round().max(1.0) as usize
}

async fn connect(port: u16, ca: &Path) -> Client {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).unwrap();
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

async fn call(client: &Client, method: Method, path: &str, body: Option<Vec<u8>>) -> (u16, Bytes) {
    let mut c = client.clone();
    c.ready().await.unwrap();
    let req = Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = c.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

fn collection(ns: &str) -> String {
    format!("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{ns}/namespacetransfers")
}

fn transfer(name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name, "labels": {"bench": "core"}},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"}},
    }))
    .unwrap()
}

/// Latencies of one operation, and the wall time they took together.
struct Sample {
    name: String,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Sample {
    fn row(&mut self) -> String {
        self.latencies.sort();
        let pick = |q: f64| {
            let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
            self.latencies[i].as_secs_f64() * 1000.0
        };
        format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} |",
            self.name,
            self.latencies.len(),
            self.latencies.len() as f64 / self.wall.as_secs_f64(),
            pick(0.5),
            pick(0.99)
        )
    }
}

/// Runs `total` calls of `op(i)` over `concurrency` workers.
async fn run<F, Fut>(name: &str, total: usize, concurrency: usize, op: F) -> Sample
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

async fn fill(client: &Client, ns: &str, count: usize, concurrency: usize) {
    let client = client.clone();
    let ns = ns.to_owned();
    run("fill", count, concurrency, move |i| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let (status, body) = call(
                &client,
                Method::POST,
                &collection(&ns),
                Some(transfer(&format!("o-{i:05}"))),
            )
            .await;
            assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        }
    })
    .await;
}

async fn watch_fanout(
    port: u16,
    ca: &Path,
    client: &Client,
    watchers: usize,
    writes: usize,
) -> Sample {
    let ns = "fanout";
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut ready = Vec::new();
    for _ in 0..watchers.div_ceil(100) {
        // Up to 100 streams per HTTP/2 connection, as servers commonly allow.
        ready.push(connect(port, ca).await);
    }
    let (_, listed) = call(client, Method::GET, &collection(ns), None).await;
    let rv = serde_json::from_slice::<serde_json::Value>(&listed).unwrap()["metadata"]
        ["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    for w in 0..watchers {
        let conn = ready[w / 100].clone();
        let tx = tx.clone();
        let path = format!(
            "{}?watch=true&resourceVersion={rv}&timeoutSeconds=600",
            collection(ns)
        );
        tokio::spawn(async move {
            let mut c = conn;
            c.ready().await.unwrap();
            let req = Request::builder()
                .uri(format!("https://127.0.0.1{path}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let mut body = c.send_request(req).await.unwrap().into_body();
            let mut buffered = Vec::new();
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { return };
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                buffered.extend_from_slice(data);
                while let Some(nl) = buffered.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffered.drain(..=nl).collect();
                    let event: serde_json::Value = serde_json::from_slice(&line).unwrap();
                    let name = event["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default();
                    if let Some(i) = name.strip_prefix("w-").and_then(|n| n.parse().ok()) {
                        let _ = tx.send((i, Instant::now()));
                    }
                }
            }
        });
    }
    drop(tx);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::with_capacity(watchers * writes);
    let started = Instant::now();
    for i in 0..writes {
        let sent = Instant::now();
        let (status, _) = call(
            client,
            Method::POST,
            &collection(ns),
            Some(transfer(&format!("w-{i}"))),
        )
        .await;
        assert_eq!(status, 201);
        for _ in 0..watchers {
            let (j, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("a watcher missed an event")
                .unwrap();
            assert_eq!(j, i);
            latencies.push(at - sent);
        }
    }
    Sample {
        name: format!("watch fan-out: {watchers} watchers, write → each delivery"),
        latencies,
        wall: started.elapsed(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-core-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = Pki::generate(&dir.join("pki"), SERVER_NAME).unwrap();
    let etcd = Etcd::start(&dir.join("etcd")).unwrap();
    let port = free_port().unwrap();
    let args = vec![
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--etcd-servers={}", etcd.url),
        "--insecure-allow-all".to_owned(),
        format!("--tls-cert-file={}", pki.server_serving.cert.display()),
        format!(
            "--tls-private-key-file={}",
            pki.server_serving.key.display()
        ),
    ];
    let mut server = Process::spawn(
        "server",
        Path::new(BIN),
        &args,
        &dir.join("server.log"),
        &[("RUST_LOG", "warn")],
    )
    .unwrap();
    let concurrency = env_f64("BENCH_CONCURRENCY", 16.0) as usize;

    let rows = rt.block_on(async {
        let client = loop {
            if let Ok(Ok(tcp)) = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(("127.0.0.1", port)),
            )
            .await
            {
                drop(tcp);
                break connect(port, &pki.serving_ca.cert).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        loop {
            let (status, _) = call(&client, Method::GET, "/readyz", None).await;
            if status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut rows = Vec::new();

        let creates = scaled(2000);
        let c = client.clone();
        rows.push(
            run("create", creates, concurrency, move |i| {
                let c = c.clone();
                async move {
                    let (status, _) = call(
                        &c,
                        Method::POST,
                        &collection("create"),
                        Some(transfer(&format!("c-{i:06}"))),
                    )
                    .await;
                    assert_eq!(status, 201);
                }
            })
            .await
            .row(),
        );
        let c = client.clone();
        rows.push(
            run("get", scaled(5000), concurrency, move |i| {
                let c = c.clone();
                let name = format!("c-{:06}", i % creates);
                async move {
                    let (status, _) = call(
                        &c,
                        Method::GET,
                        &format!("{}/{name}", collection("create")),
                        None,
                    )
                    .await;
                    assert_eq!(status, 200);
                }
            })
            .await
            .row(),
        );
        for (size, lists) in [(10usize, 2000usize), (1000, 200), (10_000, 20)] {
            let size = scaled(size);
            let ns = format!("list-{size}");
            fill(&client, &ns, size, concurrency).await;
            let c = client.clone();
            rows.push(
                run(
                    &format!("list {size} objects"),
                    scaled(lists),
                    concurrency.min(4),
                    move |_| {
                        let (c, ns) = (c.clone(), ns.clone());
                        async move {
                            let (status, body) =
                                call(&c, Method::GET, &collection(&ns), None).await;
                            assert_eq!(status, 200);
                            assert!(body.len() > size * 100);
                        }
                    },
                )
                .await
                .row(),
            );
        }
        rows.push(
            watch_fanout(port, &pki.serving_ca.cert, &client, scaled(100), scaled(20))
                .await
                .row(),
        );
        rows
    });
    server.stop(Duration::from_secs(5));
    drop(etcd);

    println!("\nstorage-transfer-apiserver alone on etcd (Debian etcd-server), concurrency {concurrency}, one HTTP/2 connection\n");
    println!("| operation | requests | ops/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
