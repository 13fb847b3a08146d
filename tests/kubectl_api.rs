//! The API as users drive it: the real kubectl, through kube-apiserver's
//! aggregator, against our server on real etcd.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sta_testenv::{shared, ControlPlane, Kubectl};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

fn transfer_yaml(ns: &str, name: &str, labels: &str) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{labels}}}\nspec:\n  source:\n    name: {name}\n  destination:\n    namespace: dev\n"
    )
}

fn claim_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: EphemeralClaim\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  owner: {{apiVersion: v1, kind: Pod, name: runner}}\n  claimTemplate:\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

/// `kubectl get nst <name> -n <ns> -o jsonpath=<path>`.
fn nst_field(k: &Kubectl, ns: &str, name: &str, path: &str) -> String {
    k.ok(&[
        "get",
        "nst",
        name,
        "-n",
        ns,
        "-o",
        &format!("jsonpath={path}"),
    ])
}

fn apply(k: &Kubectl, yaml: &str) -> String {
    k.apply(yaml).unwrap()
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn kubectl_get_prints_the_table_columns_in_one_namespace_and_across_all() {
    let ns = cp().namespace("table").unwrap();
    let k = cp().kubectl();
    apply(k, &transfer_yaml(&ns.name, "db-to-dev", ""));
    let out = k.ok(&["get", "nst", "-n", &ns.name]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "ROLE",
            "MODE",
            "SOURCE",
            "DESTINATION",
            "PHASE",
            "AGE"
        ]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..5],
        [
            "db-to-dev",
            "Source",
            "Move",
            &format!("{}/db-to-dev", ns.name),
            "dev/*"
        ]
    );
    assert_eq!(row.len(), 7, "phase and age: {out}");
    assert!(row[6].ends_with('s'), "age like 3s: {out}");

    let all = k.ok(&["get", "namespacetransfers", "-A"]);
    let header: Vec<&str> = all.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "ROLE",
            "MODE",
            "SOURCE",
            "DESTINATION",
            "PHASE",
            "AGE"
        ]
    );
    assert!(
        all.lines()
            .any(|l| l.starts_with(&ns.name) && l.contains("db-to-dev")),
        "{all}"
    );
}

#[test]
fn kubectl_get_ec_as_yaml_shows_the_stored_object() {
    let ns = cp().namespace("ec-yaml").unwrap();
    let k = cp().kubectl();
    apply(k, &claim_yaml(&ns.name, "scratch"));
    let yaml = k.ok(&["get", "ec", "scratch", "-n", &ns.name, "-o", "yaml"]);
    for expected in [
        "kind: EphemeralClaim",
        "apiVersion: storage.transfer.k8s.io/v1alpha1",
        "releasePolicy: Delete",
        "username: admin",
        "- system:masters",
        "resourceVersion:",
        "uid:",
    ] {
        assert!(yaml.contains(expected), "{expected} missing from:\n{yaml}");
    }
}

#[test]
fn kubectl_apply_creates_changes_and_is_idempotent() {
    let ns = cp().namespace("apply").unwrap();
    let k = cp().kubectl();
    let first = write_temp("apply-1", &transfer_yaml(&ns.name, "t", "tier: a"));
    let out = k.ok(&["apply", "-f", first.to_str().unwrap()]);
    assert!(out.contains("created"), "{out}");
    let changed = write_temp("apply-2", &transfer_yaml(&ns.name, "t", "tier: b"));
    let out = k.ok(&["apply", "-f", changed.to_str().unwrap()]);
    assert!(out.contains("configured"), "{out}");
    let rv = nst_field(k, &ns.name, "t", "{.metadata.resourceVersion}");
    let out = k.ok(&["apply", "-f", changed.to_str().unwrap()]);
    assert!(out.contains("unchanged"), "{out}");
    let after = nst_field(
        k,
        &ns.name,
        "t",
        "{.metadata.resourceVersion}|{.metadata.labels.tier}",
    );
    assert_eq!(
        after,
        format!("{rv}|b"),
        "an unchanged apply writes nothing"
    );
}

#[test]
fn kubectl_patch_merges_and_applies_json_patches_and_writes_status() {
    let ns = cp().namespace("patch").unwrap();
    let k = cp().kubectl();
    apply(k, &transfer_yaml(&ns.name, "t", ""));
    k.ok(&[
        "patch",
        "nst",
        "t",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"m":"1"}}}"#,
    ]);
    k.ok(&[
        "patch",
        "nst",
        "t",
        "-n",
        &ns.name,
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/j","value":"2"}]"#,
    ]);
    let labels = nst_field(k, &ns.name, "t", "{.metadata.labels.m}{.metadata.labels.j}");
    assert_eq!(labels, "12");
    let smp = k.run(&[
        "patch",
        "nst",
        "t",
        "-n",
        &ns.name,
        "--type=strategic",
        "-p",
        "{}",
    ]);
    assert!(!smp.success);
    assert!(
        smp.stderr
            .contains("strategic-merge-patch+json is not supported"),
        "{}",
        smp.stderr
    );

    k.ok(&[
        "patch",
        "nst",
        "t",
        "-n",
        &ns.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Failed"}}"#,
    ]);
    assert_eq!(nst_field(k, &ns.name, "t", "{.status.phase}"), "Failed");
    // The main resource ignores status.
    k.ok(&[
        "patch",
        "nst",
        "t",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Completed"}}"#,
    ]);
    assert_eq!(nst_field(k, &ns.name, "t", "{.status.phase}"), "Failed");
}

#[test]
fn kubectl_delete_removes_by_name_and_all() {
    let ns = cp().namespace("delete").unwrap();
    let k = cp().kubectl();
    for name in ["a", "b", "c"] {
        apply(k, &transfer_yaml(&ns.name, name, ""));
    }
    let out = k.ok(&["delete", "nst", "a", "-n", &ns.name]);
    assert!(out.contains("deleted"), "{out}");
    let out = k.ok(&["delete", "nst", "--all", "-n", &ns.name]);
    assert!(
        out.contains("\"b\" deleted") && out.contains("\"c\" deleted"),
        "{out}"
    );
    let left = k.run(&["get", "nst", "-n", &ns.name, "-o", "name"]);
    assert!(left.success && left.stdout.trim().is_empty(), "{left:?}");
}

#[test]
fn kubectl_get_watch_sees_added_modified_and_deleted() {
    let ns = cp().namespace("watch").unwrap();
    let k = cp().kubectl();
    apply(k, &transfer_yaml(&ns.name, "w", ""));
    let mut child = Command::new(k.binary())
        .args([
            &format!("--kubeconfig={}", k.kubeconfig().display()),
            "get",
            "nst",
            "-n",
            &ns.name,
            "--watch",
            "--output-watch-events",
            "-o",
            "jsonpath={.type} {.object.metadata.name}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let expect = |wanted: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.trim() == wanted => return,
                Ok(_) => continue,
                Err(_) => panic!("no {wanted:?} event within 20s"),
            }
        }
    };
    expect("ADDED w");
    k.ok(&["label", "nst", "w", "-n", &ns.name, "seen=yes"]);
    expect("MODIFIED w");
    k.ok(&["delete", "nst", "w", "-n", &ns.name]);
    expect("DELETED w");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn kubectl_create_with_server_dry_run_stores_nothing() {
    let ns = cp().namespace("dry").unwrap();
    let k = cp().kubectl();
    let file = write_temp("dry", &transfer_yaml(&ns.name, "d", ""));
    let out = k.ok(&["create", "--dry-run=server", "-f", file.to_str().unwrap()]);
    assert!(out.contains("server dry run"), "{out}");
    let get = k.run(&["get", "nst", "d", "-n", &ns.name]);
    assert!(!get.success && get.stderr.contains("NotFound"), "{get:?}");
}

#[test]
fn kubectl_wait_for_jsonpath_sees_a_status_change() {
    let ns = cp().namespace("wait").unwrap();
    let k = cp().kubectl();
    apply(k, &transfer_yaml(&ns.name, "t", ""));
    let waiter = {
        let k = k.clone();
        let ns = ns.name.clone();
        std::thread::spawn(move || {
            k.run(&[
                "wait",
                "nst/t",
                "-n",
                &ns,
                "--for=jsonpath={.status.phase}=Cancelled",
                "--timeout=30s",
            ])
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    k.ok(&[
        "patch",
        "nst",
        "t",
        "-n",
        &ns.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Cancelled"}}"#,
    ]);
    let run = waiter.join().unwrap();
    assert!(run.success, "{}", run.stderr);
    assert!(run.stdout.contains("condition met"), "{}", run.stdout);
}

#[test]
fn kubectl_replace_with_a_stale_object_is_a_conflict() {
    let ns = cp().namespace("replace").unwrap();
    let k = cp().kubectl();
    apply(k, &transfer_yaml(&ns.name, "t", ""));
    let stale = k.ok(&["get", "nst", "t", "-n", &ns.name, "-o", "json"]);
    k.ok(&["label", "nst", "t", "-n", &ns.name, "moved=on"]);
    let mut obj: serde_json::Value = serde_json::from_str(&stale).unwrap();
    obj["metadata"]["labels"] = serde_json::json!({"mine": "yes"});
    let file = write_temp("replace", &obj.to_string());
    let run = k.run(&["replace", "-f", file.to_str().unwrap()]);
    assert!(!run.success);
    assert!(
        run.stderr.contains("the object has been modified"),
        "{}",
        run.stderr
    );
    assert_eq!(
        nst_field(k, &ns.name, "t", "{.metadata.labels.moved}"),
        "on"
    );
}

#[test]
fn kubectl_get_by_label_selector_and_category() {
    let ns = cp().namespace("select").unwrap();
    let k = cp().kubectl();
    apply(k, &transfer_yaml(&ns.name, "gold", "tier: gold"));
    apply(k, &transfer_yaml(&ns.name, "lead", "tier: lead"));
    apply(k, &claim_yaml(&ns.name, "scratch"));
    let out = k.ok(&[
        "get",
        "nst",
        "-n",
        &ns.name,
        "-l",
        "tier=gold",
        "-o",
        "name",
    ]);
    assert_eq!(out.trim(), "namespacetransfer.storage.transfer.k8s.io/gold");
    let out = k.ok(&["get", "storage-transfer", "-n", &ns.name, "-o", "name"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let out = k.ok(&[
        "get",
        "nst",
        "-n",
        &ns.name,
        "--field-selector",
        "metadata.name=lead",
        "-o",
        "name",
    ]);
    assert_eq!(out.trim(), "namespacetransfer.storage.transfer.k8s.io/lead");
}

#[test]
fn kubectl_get_chunks_large_lists() {
    let ns = cp().namespace("chunks").unwrap();
    let k = cp().kubectl();
    let docs: Vec<String> = (0..7)
        .map(|i| transfer_yaml(&ns.name, &format!("t{i}"), ""))
        .collect();
    apply(k, &docs.join("---\n"));
    let out = k.ok(&["get", "nst", "-n", &ns.name, "--chunk-size=2", "-o", "name"]);
    assert_eq!(out.lines().count(), 7, "{out}");
}
