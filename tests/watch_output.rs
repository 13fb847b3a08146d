//! Watch events in every output a client may ask for, checked against
//! kube-apiserver's for the CRD twin of NamespaceTransfer (issue 15): a
//! metadata-only watch (what client-go's metadata informers and the
//! garbage collector run) and Table watches (`kubectl get -w`) get their
//! BOOKMARK events, the `k8s.io/initial-events-end` one included, in that
//! output too, and an ERROR event is a Status in any output.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sta_testenv::http::HttpClient;
use sta_testenv::{crd, ControlPlane, Options};

const OURS: &str = sta_testenv::GROUP;
const TWIN: &str = crd::GROUP;

struct Env {
    cp: ControlPlane,
    http: HttpClient,
    ns: String,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut opts = Options::for_tests(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
        // Nothing but the test writes the objects, on either side.
        opts.server_args
            .push("--controllers=-namespacetransfer,-ephemeralclaim".into());
        let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
        let openapi = crd::checked_in_openapi().unwrap();
        let path = cp.dir.join("crd.json");
        std::fs::write(&path, crd::namespace_transfer_crd(&openapi).to_string()).unwrap();
        cp.kubectl().ok(&["apply", "-f", &path.display().to_string()]);
        cp.kubectl().ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/namespacetransfers.{TWIN}"),
        ]);
        let ns = "watch-output".to_owned();
        cp.kubectl().ok(&["create", "namespace", &ns]);
        let http = cp.apiserver_http().unwrap();
        for group in [OURS, TWIN] {
            let url = collection(group, &ns);
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let body = json!({
                    "apiVersion": format!("{group}/v1alpha1"),
                    "kind": "NamespaceTransfer",
                    "metadata": {"name": "a"},
                    "spec": {"mode": "Move",
                             "source": {"kind": "PersistentVolumeClaim", "name": "a", "namespace": ns},
                             "destination": {"name": "a", "namespace": "dev"}},
                });
                let resp = http
                    .request(
                        "POST",
                        &url,
                        &[("Content-Type", "application/json")],
                        body.to_string().as_bytes(),
                    )
                    .unwrap();
                if resp.status == 201 {
                    break;
                }
                assert!(Instant::now() < deadline, "{url}: {}", resp.text());
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        // Compact etcd's history up to now: a watch from an early
        // resourceVersion then gets 410 from both sides (ours would resume
        // from one etcd still has, and kube's watch cache answers 410 for
        // anything before its own start either way).
        let etcd_url = cp.etcd_url.clone();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let mut etcd = etcd_client::Client::connect([etcd_url.as_str()], None)
                    .await
                    .unwrap();
                let now = etcd.get("x", None).await.unwrap().header().unwrap().revision();
                etcd.compact(now, None).await.unwrap();
            });
        Env { cp, http, ns }
    })
}

fn collection(group: &str, ns: &str) -> String {
    format!("/apis/{group}/v1alpha1/namespaces/{ns}/namespacetransfers")
}

/// The events of a two-second watch, as JSON values.
fn watch(group: &str, query: &str, accept: &str) -> Vec<Value> {
    let e = env();
    let url = format!(
        "{}?watch=true&timeoutSeconds=2&{query}",
        collection(group, &e.ns)
    );
    let resp = e
        .http
        .request("GET", &url, &[("Accept", accept)], b"")
        .unwrap();
    assert_eq!(resp.status, 200, "{url}: {}", resp.text());
    resp.text()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// What must agree between the two servers: resourceVersions, uids, times
/// and the group differ by nature.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "resourceVersion" | "uid" | "creationTimestamp" => json!("<varies>"),
                        _ => normalize(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::String(s) => {
            let s = s.replace(OURS, "<group>").replace(TWIN, "<group>");
            if !s.starts_with("too old resource version") {
                return Value::String(s);
            }
            // "too old resource version: 1 (345)": each server's revisions.
            Value::String(
                s.chars()
                    .map(|c| if c.is_ascii_digit() { '9' } else { c })
                    .collect::<String>(),
            )
        }
        other => other.clone(),
    }
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const TABLE: &str = "application/json;as=Table;g=meta.k8s.io;v=v1";
const WATCH_LIST: &str =
    "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

#[test]
fn a_metadata_watch_gets_its_bookmarks_as_kube_apiserver_sends_them() {
    for query in [
        WATCH_LIST,
        "allowWatchBookmarks=true&resourceVersion=0",
        "allowWatchBookmarks=true",
    ] {
        let ours = watch(OURS, query, METADATA);
        let twin = watch(TWIN, query, METADATA);
        for event in ours.iter().chain(&twin) {
            assert_eq!(
                event["object"]["kind"], "PartialObjectMetadata",
                "{query}: {event}"
            );
        }
        let (a, b) = (of_type(&ours, "BOOKMARK"), of_type(&twin, "BOOKMARK"));
        // The initial-events-end bookmark, at least, on both.
        assert!(!b.is_empty() || query != WATCH_LIST, "{twin:?}");
        let end = |events: &[&Value]| {
            events
                .iter()
                .find(|e| {
                    e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
                })
                .map(|e| normalize(e))
        };
        assert_eq!(end(&a), end(&b), "{query}:\nours {ours:?}\ntwin {twin:?}");
    }
}

#[test]
fn a_table_watch_gets_its_bookmarks_as_kube_apiserver_sends_them() {
    for include in [
        "",
        "&includeObject=None",
        "&includeObject=Metadata",
        "&includeObject=Object",
    ] {
        let query = format!("{WATCH_LIST}{include}");
        let ours = watch(OURS, &query, TABLE);
        let twin = watch(TWIN, &query, TABLE);
        for event in ours.iter().chain(&twin) {
            assert_eq!(event["object"]["kind"], "Table", "{query}: {event}");
        }
        let bookmark = |events: &[Value]| -> Value {
            let b = of_type(events, "BOOKMARK");
            let b = b
                .last()
                .unwrap_or_else(|| panic!("{query}: no bookmark in {events:?}"));
            // The columns are each server's own (ours print Source and
            // Destination as namespace/name); the row's object is the same.
            normalize(&json!({
                "apiVersion": b["object"]["apiVersion"],
                "metadata": b["object"]["metadata"],
                "rows": b["object"]["rows"].as_array().map(|rows| rows
                    .iter()
                    .map(|r| json!({
                        "object": r["object"],
                        // A cell for each of the server's own columns.
                        "cells": r["cells"].as_array().map(Vec::len)
                            == b["object"]["columnDefinitions"].as_array().map(Vec::len)
                            || b["object"]["columnDefinitions"].is_null(),
                    }))
                    .collect::<Vec<_>>()),
            }))
        };
        let (a, b) = (bookmark(&ours), bookmark(&twin));
        assert_eq!(a, b, "{query}:\nours {ours:?}\ntwin {twin:?}");
    }
}

#[test]
fn an_error_event_is_a_status_in_every_output() {
    for accept in ["application/json", METADATA, TABLE] {
        let errors = |group| {
            let events = watch(group, "resourceVersion=1", accept);
            of_type(&events, "ERROR")
                .into_iter()
                .map(normalize)
                .collect::<Vec<_>>()
        };
        let (ours, twin) = (errors(OURS), errors(TWIN));
        assert!(!twin.is_empty(), "{accept}: kube sent no ERROR");
        for e in ours.iter().chain(&twin) {
            assert_eq!(e["object"]["kind"], "Status", "{accept}: {e}");
            assert_eq!(e["object"]["code"], 410, "{accept}: {e}");
        }
        assert_eq!(
            ours.iter()
                .map(|e| &e["object"]["reason"])
                .collect::<Vec<_>>(),
            twin.iter()
                .map(|e| &e["object"]["reason"])
                .collect::<Vec<_>>(),
            "{accept}"
        );
    }
    let _ = &env().cp;
}
