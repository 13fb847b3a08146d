//! `make bench-auth`: what delegated authentication and authorization cost
//! per request, measured side by side in one run against the real control
//! plane. The same LIST goes to our server:
//!
//! - with no authentication at all (`--insecure-allow-all`, same etcd);
//! - as a `system:masters` user behind the front proxy (authentication only:
//!   masters skip the SubjectAccessReview);
//! - as an ordinary user with the SubjectAccessReview cache warm;
//! - as an ordinary user with it cold (every request in a new namespace, so
//!   every request is a SubjectAccessReview round trip to kube-apiserver).
//!
//! Prints a Markdown table. Never asserts on speed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // A benchmark fails by panicking.

use std::path::Path;
use std::time::Duration;

use http::Method;
use sta_testenv::bench::load::{call_with, connect, env_f64, run, scaled, wait_ready, Client};
use sta_testenv::process::Process;
use sta_testenv::{free_port, ControlPlane, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");

/// Front-proxy headers naming the caller.
type Headers = &'static [(&'static str, &'static str)];

fn path(ns: &str) -> String {
    format!("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{ns}/namespacetransfers")
}

fn main() {
    // Unaudited, so that the figures are authentication's alone.
    let mut opts = Options::for_tests(BIN);
    opts.server_audit = false;
    let cp = ControlPlane::start(opts).unwrap();
    cp.kubectl().ok(&[
        "create",
        "clusterrolebinding",
        "bench-view",
        "--clusterrole=view",
        "--user=bench",
    ]);
    // Let the aggregated view role pick up our resources.
    cp.kubectl()
        .eventually(
            &[
                "auth",
                "can-i",
                "list",
                "namespacetransfers.storage.transfer.k8s.io",
                "--as=bench",
                "-A",
            ],
            Duration::from_secs(30),
        )
        .into_result()
        .unwrap();

    let dir = cp.dir.join("bench-auth");
    std::fs::create_dir_all(&dir).unwrap();
    let open_port = free_port().unwrap();
    let args = vec![
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={open_port}"),
        format!("--etcd-servers={}", cp.etcd_url),
        "--insecure-allow-all".to_owned(),
        format!("--tls-cert-file={}", cp.pki.server_serving.cert.display()),
        format!(
            "--tls-private-key-file={}",
            cp.pki.server_serving.key.display()
        ),
    ];
    let mut open = Process::spawn(
        "open-server",
        Path::new(BIN),
        &args,
        &dir.join("open.log"),
        &[("RUST_LOG", "warn")],
    )
    .unwrap();

    let concurrency = env_f64("BENCH_CONCURRENCY", 8.0) as usize;
    let requests = scaled(2000);
    let cold_requests = scaled(500);
    let proxy = (
        cp.pki.front_proxy_client.cert.as_path(),
        cp.pki.front_proxy_client.key.as_path(),
    );
    let ca = cp.pki.serving_ca.cert.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows = rt.block_on(async {
        let unauthenticated = connect(open_port, &ca, None).await;
        wait_ready(&unauthenticated).await;
        let proxied = connect(cp.server_port, &ca, Some(proxy)).await;
        wait_ready(&proxied).await;

        let masters: &'static [(&str, &str)] = &[
            ("X-Remote-User", "bench-admin"),
            ("X-Remote-Group", "system:masters"),
        ];
        let user: &'static [(&str, &str)] = &[("X-Remote-User", "bench")];
        let mut rows = Vec::new();

        // One request fills the SAR cache for the warm case.
        let (status, _) = call_with(&proxied, Method::GET, &path("bench"), user, None).await;
        assert_eq!(status, 200);
        let scenarios: [(&str, &Client, Headers); 3] = [
            (
                "no authentication (--insecure-allow-all)",
                &unauthenticated,
                &[],
            ),
            (
                "front proxy, system:masters (authn only)",
                &proxied,
                masters,
            ),
            ("front proxy, user, SAR cache warm", &proxied, user),
        ];
        for (name, client, headers) in scenarios {
            let c = client.clone();
            let sample = run(name, requests, concurrency, move |_| {
                let c = c.clone();
                async move {
                    let (status, _) =
                        call_with(&c, Method::GET, &path("bench"), headers, None).await;
                    assert_eq!(status, 200);
                }
            })
            .await;
            rows.push(sample);
        }

        let c = proxied.clone();
        rows.push(
            run(
                "front proxy, user, SAR cache cold",
                cold_requests,
                concurrency,
                move |i| {
                    let c = c.clone();
                    async move {
                        let ns = format!("cold-{i}");
                        assert_eq!(
                            call_with(&c, Method::GET, &path(&ns), user, None).await.0,
                            200
                        )
                    }
                },
            )
            .await,
        );
        rows
    });
    open.stop(Duration::from_secs(5));
    drop(cp);

    let base = rows[0].quantile_ms(0.5);
    println!("\nAuthentication and authorization cost per LIST (empty namespace), concurrency {concurrency}, one HTTP/2 connection\n");
    println!("| path | requests | ops/s | p50 ms | p99 ms | p50 over no-auth ms |");
    println!("|---|---|---|---|---|---|");
    for s in &mut rows {
        let over = s.quantile_ms(0.5) - base;
        println!("{} {over:+.2} |", s.row());
    }
}
