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
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use sta_testenv::bench::load::{
    self, env_f64, run, scaled, wait_ready, Client, Sample, SERVER_NAME,
};
use sta_testenv::pki::Pki;
use sta_testenv::process::Process;
use sta_testenv::{free_port, Etcd};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");

async fn connect(port: u16, ca: &Path) -> Client {
    load::connect(port, ca, None).await
}

async fn call(client: &Client, method: Method, path: &str, body: Option<Vec<u8>>) -> (u16, Bytes) {
    load::call_with(client, method, path, &[], body).await
}

fn collection(ns: &str) -> String {
    format!("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{ns}/namespacetransfers")
}

fn transfer(name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name, "labels": {"bench": "core"}},
        "spec": {"source": {"name": name}, "destination": {"namespace": "dev"}},
    }))
    .unwrap()
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
        let client = connect(port, &pki.serving_ca.cert).await;
        wait_ready(&client).await;
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

    println!("\nstorage-transfer-apiserver alone on etcd (the pinned release, hack/etcd-version), concurrency {concurrency}, one HTTP/2 connection\n");
    println!("| operation | requests | ops/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
