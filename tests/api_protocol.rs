//! Protocol details clients rely on, straight over HTTPS: Table watches,
//! sendInitialEvents, metadata-only lists, finalizers, dry-run deletes and
//! /metrics.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use serde_json::{json, Value};
use sta_testenv::http::HttpClient;
use sta_testenv::{shared, ControlPlane};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

const JSON: (&str, &str) = ("Content-Type", "application/json");
const TABLE: (&str, &str) = ("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io");

fn base(ns: &str) -> String {
    format!("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{ns}/namespacetransfers")
}

fn create(http: &HttpClient, ns: &str, name: &str, extra: Value) -> Value {
    let mut body = json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name},
        "spec": {"source": {"name": name}, "destination": {"namespace": "dev"}},
    });
    if let (Some(b), Some(e)) = (body["metadata"].as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let resp = http
        .request(
            "POST",
            &base(ns),
            &[JSON],
            &serde_json::to_vec(&body).unwrap(),
        )
        .unwrap();
    assert_eq!(resp.status, 201, "{}", resp.text());
    resp.json()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_table_watch_sends_one_row_tables() {
    let ns = cp().namespace("table-watch").unwrap();
    let http = cp().server_http().unwrap();
    create(&http, &ns.name, "a", json!({}));
    let resp = http
        .request(
            "GET",
            &format!("{}?watch=true&timeoutSeconds=1", base(&ns.name)),
            &[TABLE],
            b"",
        )
        .unwrap();
    let events = lines(&resp.text());
    // The controller may write a status meanwhile: MODIFIED rows may follow.
    assert!(!events.is_empty(), "{events:?}");
    assert_eq!(events[0]["type"], "ADDED");
    for event in &events {
        assert_eq!(
            event["object"]["rows"].as_array().unwrap().len(),
            1,
            "{event}"
        );
    }
    let table = &events[0]["object"];
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"].as_array().unwrap().len(), 1);
    assert_eq!(table["rows"][0]["cells"][0], "a");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Name",
            "Role",
            "Mode",
            "Source",
            "Destination",
            "Phase",
            "Age"
        ]
    );
}

#[test]
fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let ns = cp().namespace("initial").unwrap();
    let http = cp().server_http().unwrap();
    create(&http, &ns.name, "a", json!({}));
    create(&http, &ns.name, "b", json!({}));
    let q = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";
    let resp = http
        .request("GET", &format!("{}?{q}", base(&ns.name)), &[], b"")
        .unwrap();
    let events = lines(&resp.text());
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(&types[..3], ["ADDED", "ADDED", "BOOKMARK"], "{events:?}");
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    let bad = http
        .request(
            "GET",
            &format!("{}?watch=true&sendInitialEvents=true", base(&ns.name)),
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.text());
}

#[test]
fn metadata_informers_get_partial_object_metadata_lists() {
    let ns = cp().namespace("meta").unwrap();
    let http = cp().server_http().unwrap();
    create(&http, &ns.name, "a", json!({"labels": {"x": "y"}}));
    let accept = (
        "Accept",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    );
    let list = http
        .request("GET", &base(&ns.name), &[accept], b"")
        .unwrap()
        .json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(list["items"][0]["metadata"]["labels"]["x"], "y");
    assert!(list["items"][0].get("spec").is_none());
}

#[test]
fn a_finalizer_holds_a_deletion_until_it_is_removed() {
    let ns = cp().namespace("finalize").unwrap();
    let http = cp().server_http().unwrap();
    create(
        &http,
        &ns.name,
        "held",
        json!({"finalizers": ["example.com/hold"]}),
    );
    let url = format!("{}/held", base(&ns.name));
    let resp = http.request("DELETE", &url, &[], b"").unwrap();
    assert_eq!(resp.status, 200);
    assert!(
        resp.json()["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        resp.text()
    );
    assert_eq!(
        http.request("GET", &url, &[], b"").unwrap().status,
        200,
        "still there"
    );
    let patch = http
        .request(
            "PATCH",
            &url,
            &[("Content-Type", "application/merge-patch+json")],
            br#"{"metadata":{"finalizers":null}}"#,
        )
        .unwrap();
    assert_eq!(patch.status, 200, "{}", patch.text());
    assert_eq!(
        http.request("GET", &url, &[], b"").unwrap().status,
        404,
        "gone with its last finalizer"
    );
}

#[test]
fn a_dry_run_delete_deletes_nothing() {
    let ns = cp().namespace("dry-delete").unwrap();
    let http = cp().server_http().unwrap();
    create(&http, &ns.name, "a", json!({}));
    let url = format!("{}/a", base(&ns.name));
    let resp = http
        .request("DELETE", &format!("{url}?dryRun=All"), &[], b"")
        .unwrap();
    assert_eq!(resp.status, 200);
    let resp = http
        .request(
            "DELETE",
            &url,
            &[JSON],
            br#"{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}"#,
        )
        .unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(http.request("GET", &url, &[], b"").unwrap().status, 200);
    let gone = http.request("DELETE", &url, &[], b"").unwrap();
    assert_eq!(gone.json()["status"], "Success", "{}", gone.text());
}

#[test]
fn metrics_count_requests_by_verb_resource_and_code() {
    let ns = cp().namespace("metrics").unwrap();
    let http = cp().server_http().unwrap();
    create(&http, &ns.name, "a", json!({}));
    http.request("GET", &format!("{}/missing", base(&ns.name)), &[], b"")
        .unwrap();
    let text = http.request("GET", "/metrics", &[], b"").unwrap().text();
    assert!(
        text.contains("# TYPE apiserver_request_total counter"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(r#"apiserver_request_total{verb="CREATE",group="storage.transfer.k8s.io",version="v1alpha1",resource="namespacetransfers",subresource="",code="201"}"#)),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(r#"verb="GET""#) && l.contains(r#"code="404""#)),
        "{text}"
    );
    assert!(
        text.contains("apiserver_request_duration_seconds_bucket{"),
        "{text}"
    );
}

#[test]
fn readyz_lists_etcd_and_the_watch_caches() {
    let http = cp().server_http().unwrap();
    let text = http
        .request("GET", "/readyz?verbose", &[], b"")
        .unwrap()
        .text();
    assert!(text.contains("[+]etcd ok"), "{text}");
    assert!(text.contains("[+]watch-cache-sync ok"), "{text}");
}
