//! Server-side apply and field ownership as kubectl drives them, through
//! the aggregator: `apply --server-side` (with and without
//! `--force-conflicts`), client-side `apply` and its handover to
//! server-side apply, `diff` (client and server side) and `edit`.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use serde_json::Value;
use sta_testenv::{shared, ControlPlane, Kubectl};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

fn transfer(ns: &str, name: &str, tier: &str) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{tier: {tier}}}\nspec:\n  source:\n    name: {name}\n  destination:\n    namespace: dev\n"
    )
}

fn get(k: &Kubectl, ns: &str, name: &str) -> Value {
    serde_json::from_str(&k.ok(&[
        "get",
        "nst",
        name,
        "-n",
        ns,
        "-o",
        "json",
        "--show-managed-fields",
    ]))
    .unwrap()
}

/// (manager, operation) of every entry but the controller's (which writes
/// status as soon as a transfer exists).
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e["manager"] != "storage-transfer-apiserver")
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_owned(),
                        e["operation"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entry(manager: &str, operation: &str) -> (String, String) {
    (manager.to_owned(), operation.to_owned())
}

#[test]
fn kubectl_apply_server_side_creates_conflicts_and_forces() {
    let ns = cp().namespace("ssa").unwrap();
    let k = cp().kubectl();
    let run = k.run_with_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some(&transfer(&ns.name, "t", "a")),
    );
    assert!(run.success, "{}", run.stderr);
    assert!(run.stdout.contains("serverside-applied"), "{}", run.stdout);
    let obj = get(k, &ns.name, "t");
    assert_eq!(managers(&obj), [entry("kubectl", "Apply")]);
    assert_eq!(
        obj["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"],
        serde_json::json!({"f:tier": {}})
    );

    // Another manager may not change the label kubectl owns…
    let other = transfer(&ns.name, "t", "b");
    let run = k.run_with_stdin(
        &["apply", "--server-side", "--field-manager=flux", "-f", "-"],
        Some(&other),
    );
    assert!(!run.success);
    assert!(
        run.stderr.contains("conflict") && run.stderr.contains(".metadata.labels.tier"),
        "{}",
        run.stderr
    );
    assert_eq!(get(k, &ns.name, "t")["metadata"]["labels"]["tier"], "a");

    // …unless it forces, as Flux does: then the label is its own.
    let run = k.run_with_stdin(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=flux",
            "-f",
            "-",
        ],
        Some(&other),
    );
    assert!(run.success, "{}", run.stderr);
    let obj = get(k, &ns.name, "t");
    assert_eq!(obj["metadata"]["labels"]["tier"], "b");
    assert!(managers(&obj).contains(&entry("flux", "Apply")));
}

/// Each side diffs the object its own `apply` made: a server-side diff of
/// an object applied client-side shows the last-applied annotation kubectl
/// would rewrite, in kube-apiserver as here.
#[test]
fn kubectl_diff_shows_a_change_on_either_side_and_writes_nothing() {
    let ns = cp().namespace("diff").unwrap();
    let k = cp().kubectl();
    for server_side in [false, true] {
        let name = if server_side { "server" } else { "client" };
        let mut apply = vec!["apply", "-f", "-"];
        let mut args = vec!["diff", "-f", "-"];
        if server_side {
            apply.push("--server-side");
            args.push("--server-side");
        }
        k.run_with_stdin(&apply, Some(&transfer(&ns.name, name, "a")))
            .into_result()
            .unwrap();
        let before = get(k, &ns.name, name);
        let run = k.run_with_stdin(&args, Some(&transfer(&ns.name, name, "b")));
        // kubectl diff exits 1 when there are differences, >1 on errors.
        assert_eq!(
            run.stdout.is_empty(),
            run.success,
            "server-side {server_side}: {}",
            run.stderr
        );
        assert!(
            run.stdout.contains("tier: b") && run.stdout.contains("tier: a"),
            "server-side {server_side}: {}\n{}",
            run.stdout,
            run.stderr
        );
        assert!(!run.stderr.contains("panic"), "{}", run.stderr);
        let same = k.run_with_stdin(&args, Some(&transfer(&ns.name, name, "a")));
        assert!(
            same.success,
            "server-side {server_side}: {}\n{}",
            same.stdout, same.stderr
        );
        // Nothing written: the controller may have written status since,
        // so compare what the diffs could have changed.
        let after = get(k, &ns.name, name);
        assert_eq!(before["metadata"]["labels"], after["metadata"]["labels"]);
        assert_eq!(managers(&before), managers(&after));
    }
}

#[test]
fn client_side_apply_hands_over_to_server_side_apply_without_conflicts() {
    let ns = cp().namespace("csa").unwrap();
    let k = cp().kubectl();
    k.apply(&transfer(&ns.name, "t", "a")).unwrap();
    let obj = get(k, &ns.name, "t");
    assert!(
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    assert_eq!(
        managers(&obj),
        [entry("kubectl-client-side-apply", "Update")]
    );
    // A second client-side apply changes the label through a patch.
    k.apply(&transfer(&ns.name, "t", "b")).unwrap();
    assert_eq!(get(k, &ns.name, "t")["metadata"]["labels"]["tier"], "b");
    // Moving to server-side apply: kubectl may take over what it applied.
    let run = k.run_with_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some(&transfer(&ns.name, "t", "c")),
    );
    assert!(run.success, "{}", run.stderr);
    let obj = get(k, &ns.name, "t");
    assert_eq!(obj["metadata"]["labels"]["tier"], "c");
    assert!(managers(&obj).contains(&entry("kubectl", "Apply")));
    let last = obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .unwrap();
    assert!(last.contains("\"tier\":\"c\""), "{last}");
}

#[test]
fn kubectl_edit_records_its_change_under_kubectl_edit() {
    let ns = cp().namespace("edit").unwrap();
    let k = cp().kubectl();
    k.apply(&transfer(&ns.name, "t", "a")).unwrap();
    let editor = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("editor-{}.sh", std::process::id()));
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/tier: a/tier: edited/' \"$1\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = std::process::Command::new(k.binary())
        .args(["--kubeconfig"])
        .arg(k.kubeconfig())
        .args(["edit", "nst", "t", "-n", &ns.name])
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let obj = get(k, &ns.name, "t");
    assert_eq!(obj["metadata"]["labels"]["tier"], "edited");
    let edit = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kubectl-edit")
        .unwrap_or_else(|| panic!("no kubectl-edit entry: {obj}"));
    assert_eq!(edit["operation"], "Update");
    assert_eq!(
        edit["fieldsV1"]["f:metadata"]["f:labels"],
        serde_json::json!({"f:tier": {}})
    );
}

/// A controller (as Flux's kustomize-controller does it) applies with
/// kube-rs' `Patch::Apply` and `force`, over a field kubectl set.
#[test]
fn kube_rs_patch_apply_creates_and_takes_over_with_force() {
    use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};

    let ns = cp().namespace("kube-rs").unwrap();
    let k = cp().kubectl();
    k.run_with_stdin(
        &["apply", "--server-side", "-f", "-"],
        Some(&transfer(&ns.name, "owned", "a")),
    )
    .into_result()
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(k.kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let resource = ApiResource {
            group: "storage.transfer.k8s.io".to_owned(),
            version: "v1alpha1".to_owned(),
            api_version: "storage.transfer.k8s.io/v1alpha1".to_owned(),
            kind: "NamespaceTransfer".to_owned(),
            plural: "namespacetransfers".to_owned(),
        };
        let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(
            kube::Client::try_from(config).unwrap(),
            &ns.name,
            &resource,
        );
        let doc = |name: &str, tier: &str| -> serde_json::Value {
            serde_saphyr::from_str(&transfer(&ns.name, name, tier)).unwrap()
        };
        // Create on apply.
        let created = api
            .patch(
                "fresh",
                &PatchParams::apply("kustomize-controller"),
                &Patch::Apply(doc("fresh", "a")),
            )
            .await
            .unwrap();
        assert!(created.metadata.uid.is_some());
        // Without force, kubectl's label is not the controller's to change.
        let err = api
            .patch(
                "owned",
                &PatchParams::apply("kustomize-controller"),
                &Patch::Apply(doc("owned", "b")),
            )
            .await
            .unwrap_err();
        match err {
            kube::Error::Api(status) => assert_eq!(status.code, 409, "{status:?}"),
            other => panic!("not a conflict: {other}"),
        }
        let forced = api
            .patch(
                "owned",
                &PatchParams::apply("kustomize-controller").force(),
                &Patch::Apply(doc("owned", "b")),
            )
            .await
            .unwrap();
        assert_eq!(forced.metadata.labels.unwrap()["tier"], "b");
        let managers: Vec<String> = forced
            .metadata
            .managed_fields
            .unwrap()
            .into_iter()
            .filter_map(|e| e.manager)
            .collect();
        assert!(
            managers.contains(&"kustomize-controller".to_owned()),
            "{managers:?}"
        );
    });
}
