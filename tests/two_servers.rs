//! Two server processes on one etcd: each sees the other's writes and watch
//! events, and optimistic concurrency and the one-active-transfer-per-claim
//! rule hold between them. Plus what etcd compaction means for a client in the
//! middle of a paged list.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sta_testenv::http::HttpClient;
use sta_testenv::pki::Pki;
use sta_testenv::process::Process;
use sta_testenv::standalone::{offer, Replica, SERVER_NAME};
use sta_testenv::{free_port, Etcd};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("two-servers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn replica(dir: &Path, name: &str, pki: &Pki, etcd: &Etcd) -> Replica {
    Replica::start(Path::new(BIN), dir, name, pki, &etcd.url, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn url(name: Option<&str>) -> String {
    let base = "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/prod/namespacetransfers";
    match name {
        Some(n) => format!("{base}/{n}"),
        None => base.to_owned(),
    }
}

/// An offer of a claim of its own (named like the transfer), from `prod` to `dev`.
fn transfer(name: &str) -> Vec<u8> {
    offer(name, name)
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn two_replicas_share_writes_watches_and_optimistic_concurrency() {
    let dir = scratch("share");
    let pki = Pki::generate(&dir.join("pki"), SERVER_NAME).unwrap();
    let etcd = Etcd::start(&dir.join("etcd")).unwrap();
    let a = replica(&dir, "a", &pki, &etcd);
    let b = replica(&dir, "b", &pki, &etcd);

    let created = a
        .http
        .request("POST", &url(None), &[JSON], &transfer("shared"))
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text());
    let created = created.json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // B reads A's write at once: GET is a linearizable etcd read, and a list
    // waits for B's cache to reach the current revision.
    let seen = b
        .http
        .request("GET", &url(Some("shared")), &[], b"")
        .unwrap()
        .json();
    assert_eq!(seen["metadata"]["uid"], created["metadata"]["uid"]);
    let listed = b.http.request("GET", &url(None), &[], b"").unwrap().json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");

    // A watch on B from A's revision sees A's next write.
    let watch = {
        let http = b.http.clone();
        let path = format!(
            "{}?watch=true&resourceVersion={rv}&timeoutSeconds=3",
            url(None)
        );
        std::thread::spawn(move || http.request("GET", &path, &[], b"").unwrap())
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut labelled = created.clone();
    labelled["metadata"]["labels"] = json!({"by": "a"});
    let updated = a
        .http
        .request(
            "PUT",
            &url(Some("shared")),
            &[JSON],
            &serde_json::to_vec(&labelled).unwrap(),
        )
        .unwrap();
    assert_eq!(updated.status, 200, "{}", updated.text());
    let events: Vec<Value> = watch
        .join()
        .unwrap()
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "MODIFIED" && e["object"]["metadata"]["labels"]["by"] == "a"),
        "{events:?}"
    );

    // B still holds the old resourceVersion: its write must lose.
    let mut stale = created;
    stale["metadata"]["labels"] = json!({"by": "b"});
    let lost = b
        .http
        .request(
            "PUT",
            &url(Some("shared")),
            &[JSON],
            &serde_json::to_vec(&stale).unwrap(),
        )
        .unwrap();
    assert_eq!(lost.status, 409, "{}", lost.text());
    let now = a
        .http
        .request("GET", &url(Some("shared")), &[], b"")
        .unwrap()
        .json();
    assert_eq!(now["metadata"]["labels"]["by"], "a");
}

#[test]
fn the_same_offer_sent_to_both_replicas_at_once_is_created_once_and_refused_once_naming_the_winner()
{
    let dir = scratch("claims");
    let pki = Pki::generate(&dir.join("pki"), SERVER_NAME).unwrap();
    let etcd = Etcd::start(&dir.join("etcd")).unwrap();
    let a = replica(&dir, "a", &pki, &etcd);
    let b = replica(&dir, "b", &pki, &etcd);

    for round in 0..20 {
        let claim = format!("db-{round}");
        let barrier = Arc::new(Barrier::new(2));
        let sends: Vec<_> = [("via-a", &a), ("via-b", &b)]
            .into_iter()
            .map(|(via, replica)| {
                let name = format!("{via}-{round}");
                let body = offer(&name, &claim);
                let (http, barrier) = (replica.http.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let resp = http.request("POST", &url(None), &[JSON], &body).unwrap();
                    (name, resp)
                })
            })
            .collect();
        let mut answers: Vec<_> = sends.into_iter().map(|t| t.join().unwrap()).collect();
        answers.sort_by_key(|(_, resp)| resp.status);
        let statuses: Vec<u16> = answers.iter().map(|(_, r)| r.status).collect();
        assert_eq!(
            statuses,
            [201, 409],
            "round {round}: {:?}",
            answers.iter().map(|(_, r)| r.text()).collect::<Vec<_>>()
        );
        let (winner, _) = &answers[0];
        let (loser, refusal) = &answers[1];
        let status = refusal.json();
        assert_eq!(status["reason"], "Conflict", "{status}");
        assert_eq!(status["details"]["name"], loser.as_str(), "{status}");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "source claim prod/{claim} already has an active NamespaceTransfer: prod/{winner}"
            )),
            "round {round}: {message}"
        );
        let stored = a.http.request("GET", &url(Some(loser)), &[], b"").unwrap();
        assert_eq!(stored.status, 404, "round {round}: the loser was stored");
    }
}

#[test]
fn a_continue_token_from_before_a_compaction_is_expired() {
    let dir = scratch("compaction");
    let pki = Pki::generate(&dir.join("pki"), SERVER_NAME).unwrap();
    let etcd = Etcd::start(&dir.join("etcd")).unwrap();
    let a = replica(&dir, "a", &pki, &etcd);
    for i in 0..4 {
        let r = a
            .http
            .request("POST", &url(None), &[JSON], &transfer(&format!("t{i}")))
            .unwrap();
        assert_eq!(r.status, 201);
    }
    let page = a
        .http
        .request("GET", &format!("{}?limit=2", url(None)), &[], b"")
        .unwrap()
        .json();
    let token = page["metadata"]["continue"].as_str().unwrap().to_owned();
    assert_eq!(page["metadata"]["remainingItemCount"], 2);

    // One more write, then compact everything before it.
    a.http
        .request("POST", &url(None), &[JSON], &transfer("late"))
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect([etcd.url.as_str()], None)
            .await
            .unwrap();
        let revision = client
            .get("x", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        client.compact(revision, None).await.unwrap();
    });

    let resp = a
        .http
        .request(
            "GET",
            &format!("{}?limit=2&continue={token}", url(None)),
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(resp.status, 410, "{}", resp.text());
    assert_eq!(resp.json()["reason"], "Expired");
    // A fresh list still works.
    let fresh = a.http.request("GET", &url(None), &[], b"").unwrap().json();
    assert_eq!(fresh["items"].as_array().unwrap().len(), 5);
}

#[test]
fn the_server_reaches_etcd_over_mutual_tls_and_only_with_its_client_certificate() {
    let dir = scratch("etcd-tls");
    let pki = Pki::generate(&dir.join("pki"), SERVER_NAME).unwrap();
    let (etcd, tls) = Etcd::start_tls(&dir.join("etcd")).unwrap();
    let start = |name: &str, with_client_cert: bool| {
        let port = free_port().unwrap();
        let mut args = vec![
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--etcd-servers={}", etcd.url),
            format!("--etcd-cafile={}", tls.ca.cert.display()),
            "--insecure-allow-all".to_owned(),
            format!("--tls-cert-file={}", pki.server_serving.cert.display()),
            format!(
                "--tls-private-key-file={}",
                pki.server_serving.key.display()
            ),
        ];
        if with_client_cert {
            args.push(format!("--etcd-certfile={}", tls.client.cert.display()));
            args.push(format!("--etcd-keyfile={}", tls.client.key.display()));
        }
        let process = Process::spawn(
            name,
            Path::new(BIN),
            &args,
            &dir.join(format!("{name}.log")),
            &[],
        )
        .unwrap();
        let http = HttpClient::new(port, &pki.serving_ca.cert, SERVER_NAME, None).unwrap();
        Replica { process, http }
    };
    let ready = |r: &Replica| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(resp) = r.http.request("GET", "/readyz?verbose", &[], b"") {
                if resp.status == 200 {
                    return true;
                }
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    let good = start("with-cert", true);
    assert!(ready(&good), "{}", good.process.log_tail());
    let created = good
        .http
        .request("POST", &url(None), &[JSON], &transfer("over-tls"))
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.text());

    let bad = start("without-cert", false);
    std::thread::sleep(Duration::from_secs(3));
    let resp = bad
        .http
        .request("GET", "/readyz?verbose", &[], b"")
        .unwrap();
    assert_eq!(resp.status, 500, "{}", resp.text());
    assert!(resp.text().contains("[-]etcd failed"), "{}", resp.text());
}
