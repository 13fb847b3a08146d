//! The audit trail of a transfer (DESIGN §3.1): our server's audit log
//! (`--audit-log-path`, `audit.k8s.io/v1` Event lines) shows the tenants'
//! creates, and every PV and PVC write the controller makes for them,
//! annotated with the transfer and both tenants; kube-apiserver's own audit
//! log has each of those writes under the same audit ID, with a User-Agent
//! that names the transfer.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use sta_testenv::http::HttpClient;
use sta_testenv::scenario::*;
use sta_testenv::{shared, ControlPlane, SERVICE_NAME, SERVICE_NAMESPACE};

fn cp() -> &'static ControlPlane {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    static CLASSES: std::sync::Once = std::sync::Once::new();
    CLASSES.call_once(|| ensure_classes(cp.kubectl()));
    cp
}

/// Every event in an audit log file.
fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn annotation<'a>(event: &'a Value, key: &str) -> &'a str {
    event["annotations"][key].as_str().unwrap_or_default()
}

/// A client straight to our server (not through the aggregator) on
/// 127.0.0.1, presenting `cert` and `key`.
fn straight_to_the_server(cert: &std::path::Path, key: &std::path::Path) -> HttpClient {
    HttpClient::new(
        cp().server_port,
        &cp().pki.serving_ca.cert,
        &format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc"),
        Some((cert, key)),
    )
    .unwrap()
}

/// Lists transfers in a fresh namespace with `headers` and a fresh
/// `Audit-ID`, and returns the `sourceIPs` of the request's event.
fn source_ips_of_a_list(client: &HttpClient, headers: &[(&str, &str)]) -> Value {
    let ns = cp().namespace("audit-ips").unwrap();
    let audit_id = unique("source-ips");
    let mut sent = vec![("Audit-ID", audit_id.as_str())];
    sent.extend_from_slice(headers);
    let path = format!(
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{}/namespacetransfers",
        ns.name
    );
    let resp = client.request("GET", &path, &sent, b"").unwrap();
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let log = cp().server_audit_log(cp().server_port);
    let mut found = Value::Null;
    eventually("the list in the audit log", Duration::from_secs(30), || {
        found = events(&log)
            .into_iter()
            .find(|e| e["auditID"] == audit_id.as_str())
            .map_or(Value::Null, |e| e["sourceIPs"].clone());
        !found.is_null()
    });
    found
}

#[test]
fn a_direct_client_s_forged_forwarded_for_is_logged_as_its_real_address() {
    let pki = &cp().pki;
    let admin = straight_to_the_server(&pki.admin.cert, &pki.admin.key);
    let ips = source_ips_of_a_list(
        &admin,
        &[
            ("X-Forwarded-For", "203.0.113.66"),
            ("X-Real-Ip", "203.0.113.67"),
        ],
    );
    assert_eq!(ips, serde_json::json!(["127.0.0.1"]));
}

#[test]
fn the_front_proxy_s_forwarded_for_is_logged_before_its_own_address() {
    let pki = &cp().pki;
    let proxy = straight_to_the_server(&pki.front_proxy_client.cert, &pki.front_proxy_client.key);
    let ips = source_ips_of_a_list(
        &proxy,
        &[
            ("X-Remote-User", "audit-ips-admin"),
            ("X-Remote-Group", "system:masters"),
            ("X-Forwarded-For", "203.0.113.66"),
        ],
    );
    assert_eq!(ips, serde_json::json!(["203.0.113.66", "127.0.0.1"]));
}

#[test]
fn the_audit_log_of_one_transfer_shows_the_tenants_creates_and_the_controllers_writes_for_them() {
    let admin = cp().kubectl();
    let src = cp().namespace("audit-src").unwrap();
    let dst = cp().namespace("audit-dst").unwrap();
    provisioned_volume(admin, ALLOWED_CLASS, &src.name, "db", "1Gi");
    let alice = unique("alice");
    let bob = unique("bob");
    let alice_k = editor(cp(), &alice, &src.name);
    let bob_k = editor(cp(), &bob, &dst.name);
    offer(&alice_k, &src.name, "give", "db", &dst.name);
    request(&bob_k, &dst.name, "take", &src.name, "db");
    wait_phase(
        admin,
        &dst.name,
        "take",
        "Completed",
        Duration::from_secs(60),
    );
    wait_phase(
        admin,
        &src.name,
        "give",
        "Completed",
        Duration::from_secs(60),
    );
    let uids: BTreeSet<String> = [(&src.name, "give"), (&dst.name, "take")]
        .iter()
        .map(|(ns, name)| {
            transfer_json(admin, ns, name).unwrap()["metadata"]["uid"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();

    let ours_path = cp().server_audit_log(cp().server_port);
    let mut ours = Vec::new();
    let mut kube = Vec::new();
    // The writer is asynchronous: wait until the controller's last write
    // (the source claim's deletion) is in both logs.
    eventually(
        "both audit logs to have the transfer",
        Duration::from_secs(30),
        || {
            ours = events(&ours_path);
            kube = events(&cp().apiserver_audit_log());
            let deleted = |log: &[Value]| {
                log.iter().any(|e| {
                    e["verb"] == "delete"
                        && e["objectRef"]["resource"] == "persistentvolumeclaims"
                        && e["objectRef"]["namespace"] == src.name.as_str()
                })
            };
            deleted(&ours) && deleted(&kube)
        },
    );

    // The tenants' creates, under their own names, with what they sent.
    for (user, ns, name) in [(&alice, &src.name, "give"), (&bob, &dst.name, "take")] {
        let create = ours
            .iter()
            .find(|e| {
                e["verb"] == "create"
                    && e["stage"] == "ResponseComplete"
                    && e["objectRef"]["resource"] == "namespacetransfers"
                    && e["objectRef"]["namespace"] == ns.as_str()
                    && e["objectRef"]["name"] == name
            })
            .unwrap_or_else(|| panic!("no create of {ns}/{name} in {ours_path:?}"));
        assert_eq!(create["user"]["username"], user.as_str(), "{create}");
        assert_eq!(create["responseStatus"]["code"], 201, "{create}");
        assert_eq!(create["level"], "RequestResponse", "{create}");
        assert_eq!(
            create["requestObject"]["metadata"]["name"], name,
            "{create}"
        );
        assert_eq!(
            create["responseObject"]["metadata"]["name"], name,
            "{create}"
        );
    }

    // The controller's writes to PVs and PVCs: each tied to the transfer
    // and to both tenants.
    let writes: Vec<&Value> = ours
        .iter()
        .filter(|e| {
            matches!(
                e["objectRef"]["resource"].as_str(),
                Some("persistentvolumes" | "persistentvolumeclaims")
            )
        })
        .collect();
    let for_this: Vec<&&Value> = writes
        .iter()
        .filter(|e| uids.contains(annotation(e, "storage.transfer.k8s.io/transfer-uid")))
        .collect();
    assert!(
        for_this.len() >= 4,
        "the controller's writes for this transfer: {for_this:#?}"
    );
    for e in &for_this {
        assert_eq!(
            annotation(e, "storage.transfer.k8s.io/source-requester"),
            alice,
            "{e}"
        );
        assert_eq!(
            annotation(e, "storage.transfer.k8s.io/destination-requester"),
            bob,
            "{e}"
        );
    }
    let verbs: BTreeSet<(String, String)> = for_this
        .iter()
        .map(|e| {
            (
                e["verb"].as_str().unwrap_or_default().to_owned(),
                e["objectRef"]["resource"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    for want in [
        ("patch", "persistentvolumes"),
        ("create", "persistentvolumeclaims"),
        ("delete", "persistentvolumeclaims"),
    ] {
        assert!(
            verbs.contains(&(want.0.to_owned(), want.1.to_owned())),
            "no {want:?} among {verbs:?}"
        );
    }

    // kube-apiserver recorded each of them under the same audit ID, from a
    // client that names the transfer.
    for e in &for_this {
        let id = e["auditID"].as_str().unwrap();
        let theirs = kube
            .iter()
            .find(|k| k["auditID"] == id)
            .unwrap_or_else(|| panic!("kube-apiserver has no event {id} for {e}"));
        assert_eq!(theirs["objectRef"]["resource"], e["objectRef"]["resource"]);
        assert_eq!(theirs["verb"], e["verb"], "{theirs}");
        let agent = theirs["userAgent"].as_str().unwrap_or_default();
        assert!(
            agent.contains("give") || agent.contains("take"),
            "the User-Agent {agent:?} does not name the transfer"
        );
    }
}
