//! The shipped manifests, checked against the real kube-apiserver of the test
//! control plane: `deploy/`, `apiservice/` and their cert-manager variants pass
//! server-side validation, the server's Deployment keeps its security and
//! availability settings, and `hack/gen-certs.sh` issues certificates that
//! verify and writes them where `deploy/` expects them. Nothing here changes the
//! cluster: every apply is a dry run.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sta_testenv::{repo_root, shared, ControlPlane, Kubectl};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

fn kubectl() -> &'static Kubectl {
    cp().kubectl()
}

fn path(relative: &str) -> String {
    repo_root().join(relative).display().to_string()
}

/// Every object a kustomization renders, as JSON (client-side, so only for
/// kinds the cluster knows).
fn rendered(dir: &str) -> Vec<Value> {
    let out = kubectl().ok(&["apply", "--dry-run=client", "-o", "json", "-k", &path(dir)]);
    let list: Value = serde_json::from_str(&out).unwrap();
    match list["kind"].as_str() {
        Some("List") => list["items"].as_array().unwrap().clone(),
        _ => vec![list],
    }
}

fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn server_deployment() -> Value {
    object(
        &rendered("deploy"),
        "Deployment",
        "storage-transfer-apiserver",
    )
    .clone()
}

fn server_container(deployment: &Value) -> Value {
    deployment["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The YAML documents of `kubectl kustomize DIR` (which needs no CRDs).
fn kustomize_documents(dir: &str) -> Vec<String> {
    kubectl()
        .ok(&["kustomize", &path(dir)])
        .split("\n---\n")
        .map(str::to_owned)
        .collect()
}

fn cert_manager_installed() -> bool {
    kubectl()
        .run(&["get", "crd", "certificates.cert-manager.io"])
        .success
}

fn scratch(name: &str) -> PathBuf {
    let dir = cp().dir.join("manifests-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn gen_certs(dir: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let kubectl = kubectl();
    let out = Command::new(repo_root().join("hack/gen-certs.sh"))
        .arg(dir)
        .current_dir(repo_root())
        .env("KUBECTL", kubectl.binary())
        .env("KUBECONFIG", kubectl.kubeconfig())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gen-certs.sh failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn openssl_verify(ca: &Path, cert: &Path, extra: &[&str]) {
    let out = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ca)
        .args(extra)
        .arg(cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl verify {} {extra:?}: {}{}",
        cert.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn deploy_passes_server_side_validation() {
    kubectl().ok(&["apply", "--dry-run=server", "-k", &path("deploy")]);
}

#[test]
fn the_example_network_policies_pass_server_side_validation_and_select_the_shipped_pods() {
    kubectl().ok(&[
        "apply",
        "--dry-run=server",
        "-k",
        &path("deploy/network-policy"),
    ]);
    let policies = rendered("deploy/network-policy");
    let deployed = rendered("deploy");
    for (policy, workload) in [
        (
            "storage-transfer-apiserver",
            ("Deployment", "storage-transfer-apiserver"),
        ),
        (
            "storage-transfer-etcd",
            ("StatefulSet", "storage-transfer-etcd"),
        ),
    ] {
        let selects =
            &object(&policies, "NetworkPolicy", policy)["spec"]["podSelector"]["matchLabels"];
        let labels =
            &object(&deployed, workload.0, workload.1)["spec"]["template"]["metadata"]["labels"];
        for (key, value) in selects.as_object().unwrap() {
            assert_eq!(&labels[key], value, "{policy} selects {workload:?}'s pods");
        }
    }
}

#[test]
fn deploy_installs_the_server_the_etcd_cluster_and_the_rbac_the_harness_tests() {
    let objects = rendered("deploy");
    for (kind, name) in [
        ("Namespace", "storage-transfer-system"),
        ("ServiceAccount", "storage-transfer-apiserver"),
        ("ClusterRole", "storage-transfer-apiserver:controller"),
        ("Deployment", "storage-transfer-apiserver"),
        ("Service", "storage-transfer-apiserver"),
        ("PodDisruptionBudget", "storage-transfer-apiserver"),
        ("StatefulSet", "storage-transfer-etcd"),
        ("Service", "storage-transfer-etcd"),
        ("Service", "storage-transfer-etcd-peer"),
    ] {
        object(&objects, kind, name);
    }
    let rbac = rendered("deploy/rbac");
    assert!(rbac.iter().all(|o| objects.contains(o)));
    assert!(rbac.iter().all(|o| o["kind"] != "Deployment"));

    let etcd = object(&objects, "StatefulSet", "storage-transfer-etcd");
    assert_eq!(etcd["spec"]["replicas"], 3);
    let service = object(&objects, "Service", "storage-transfer-apiserver");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    let pdb = object(
        &objects,
        "PodDisruptionBudget",
        "storage-transfer-apiserver",
    );
    assert_eq!(pdb["spec"]["minAvailable"], 1);
}

#[test]
fn the_fence_pod_is_never_scheduled_and_the_server_may_patch_it_alone() {
    let objects = rendered("deploy/rbac");
    let pod = object(&objects, "Pod", "storage-transfer-fence");
    assert_eq!(pod["metadata"]["namespace"], "storage-transfer-system");
    assert!(
        pod["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty()),
        "{pod}"
    );
    // What `--pod-fence` names by default.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout)
            .contains("storage-transfer-system/storage-transfer-fence"),
        "the flag's default names the shipped pod"
    );
    // No selector of the server's picks it up.
    let deployed = rendered("deploy");
    let selected = |selector: &Value| {
        selector
            .as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| &pod["metadata"]["labels"][k] == v)
    };
    for (kind, name, selector) in [
        ("Service", "storage-transfer-apiserver", "/spec/selector"),
        (
            "PodDisruptionBudget",
            "storage-transfer-apiserver",
            "/spec/selector/matchLabels",
        ),
        (
            "Deployment",
            "storage-transfer-apiserver",
            "/spec/selector/matchLabels",
        ),
    ] {
        let o = object(&deployed, kind, name);
        assert!(
            !selected(o.pointer(selector).unwrap()),
            "{kind} {name} selects the fence pod"
        );
    }
    let role = object(&objects, "Role", "storage-transfer-apiserver:pod-fence");
    assert_eq!(
        role["rules"],
        serde_json::json!([{
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": ["storage-transfer-fence"],
            "verbs": ["patch"],
        }])
    );
    kubectl().ok(&["apply", "--dry-run=server", "-k", &path("deploy/rbac")]);
}

#[test]
fn server_deployment_runs_two_replicas_spread_over_nodes() {
    let d = server_deployment();
    assert_eq!(d["spec"]["replicas"], 2);
    let term = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
}

#[test]
fn server_deployment_runs_unprivileged_on_a_read_only_root() {
    let d = server_deployment();
    let pod = &d["spec"]["template"]["spec"];
    let c = server_container(&d);
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);

    // The uid matches the image's USER.
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    let uid = user.split(':').next().unwrap().trim();
    assert_eq!(sc["runAsUser"].to_string(), uid);
    for mount in c["volumeMounts"].as_array().unwrap() {
        assert_eq!(mount["readOnly"], true, "{mount}");
    }
}

#[test]
fn server_deployment_probes_readiness_and_liveness_over_https() {
    let c = server_container(&server_deployment());
    for (probe, path) in [
        ("startupProbe", "/readyz"),
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/livez"),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(get["scheme"], "HTTPS", "{probe}");
    }
    assert!(c["resources"]["requests"].is_object());
    assert!(c["resources"]["limits"].is_object());
}

#[test]
fn server_deployment_memory_is_what_the_sizing_table_documents() {
    let c = server_container(&server_deployment());
    let request = c["resources"]["requests"]["memory"].as_str().unwrap();
    let limit = c["resources"]["limits"]["memory"].as_str().unwrap();
    let docs = std::fs::read_to_string(path("docs/operations.md")).unwrap();
    let documented = format!(
        "`deploy/deployment.yaml` requests `memory: {request}` and is limited to\n`memory: {limit}`"
    );
    assert!(
        docs.contains(&documented),
        "docs/operations.md does not say {documented:?}"
    );
}

#[test]
fn server_deployment_drains_before_it_is_killed_and_names_itself_for_leader_election() {
    let d = server_deployment();
    let c = server_container(&d);
    let grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let shutdown = args
        .iter()
        .find_map(|a| a.strip_prefix("--shutdown-grace-period="))
        .unwrap_or("30s");
    let shutdown: u64 = shutdown.trim_end_matches('s').parse().unwrap();
    assert!(grace > shutdown, "{grace}s <= {shutdown}s");
    let env = c["env"].as_array().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "POD_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"));
    assert!(args
        .iter()
        .any(|a| a.starts_with("--etcd-servers=https://")));
}

#[test]
fn apiservice_passes_server_side_validation() {
    kubectl().ok(&[
        "apply",
        "--dry-run=server",
        "-f",
        &path("apiservice/apiservice.yaml"),
    ]);
}

#[test]
fn cert_manager_apiservice_is_the_plain_one_plus_the_ca_injection_annotation() {
    let as_json = |file: &str| -> Value {
        let out = kubectl().ok(&[
            "create",
            "--dry-run=client",
            "-o",
            "json",
            "-f",
            &path(file),
        ]);
        serde_json::from_str(&out).unwrap()
    };
    let plain = as_json("apiservice/apiservice.yaml");
    let injected = as_json("apiservice/cert-manager/apiservice.yaml");
    assert_eq!(plain["spec"], injected["spec"]);
    assert_eq!(plain["metadata"]["name"], injected["metadata"]["name"]);
    assert_eq!(plain["metadata"]["labels"], injected["metadata"]["labels"]);
    assert_eq!(
        injected["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "storage-transfer-system/storage-transfer-apiserver-serving"
    );
}

#[test]
fn cert_manager_variants_pass_server_side_validation_or_render_their_certificates() {
    if cert_manager_installed() {
        for dir in ["deploy/cert-manager", "apiservice/cert-manager"] {
            kubectl().ok(&["apply", "--dry-run=server", "-k", &path(dir)]);
        }
        return;
    }
    // Without cert-manager's CRDs: the built-in objects pass the server, and
    // the certificates the Deployment and etcd mount are all rendered.
    let docs = kustomize_documents("apiservice/cert-manager");
    let apiservice = docs
        .iter()
        .find(|d| d.contains("kind: APIService"))
        .unwrap();
    let out = kubectl()
        .run_with_stdin(
            &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
            Some(apiservice),
        )
        .into_result()
        .unwrap();
    let applied: Value = serde_json::from_str(&out).unwrap();
    assert!(applied["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_string());

    let all = [docs, kustomize_documents("deploy/cert-manager")].concat();
    for secret in [
        "storage-transfer-apiserver-serving",
        "storage-transfer-etcd-server",
        "storage-transfer-etcd-peer",
        "storage-transfer-etcd-client",
    ] {
        assert!(
            all.iter().any(|d| d.contains("kind: Certificate")
                && d.contains(&format!("secretName: {secret}\n"))),
            "no Certificate for Secret {secret}"
        );
    }
    assert!(all.iter().any(|d| d.contains("kind: Issuer")));
}

#[test]
fn gen_certs_issues_a_serving_certificate_for_the_service_and_etcd_certificates() {
    let dir = scratch("gen-certs");
    gen_certs(&dir, &[("CERTS_ONLY", "1")]);
    let f = |name: &str| dir.join(name);
    openssl_verify(
        &f("apiserver-ca.crt"),
        &f("apiserver-serving.crt"),
        &[
            "-purpose",
            "sslserver",
            "-verify_hostname",
            "storage-transfer-apiserver.storage-transfer-system.svc",
        ],
    );
    for (cert, host) in [
        (
            "etcd-server.crt",
            "storage-transfer-etcd.storage-transfer-system.svc",
        ),
        (
            "etcd-peer.crt",
            "storage-transfer-etcd-2.storage-transfer-etcd-peer.storage-transfer-system.svc",
        ),
    ] {
        openssl_verify(
            &f("etcd-ca.crt"),
            &f(cert),
            &["-purpose", "sslserver", "-verify_hostname", host],
        );
        openssl_verify(&f("etcd-ca.crt"), &f(cert), &["-purpose", "sslclient"]);
    }
    openssl_verify(
        &f("etcd-ca.crt"),
        &f("etcd-client.crt"),
        &["-purpose", "sslclient"],
    );
}

#[test]
fn gen_certs_renews_leaf_certificates_under_the_same_ca() {
    let dir = scratch("gen-certs-renew");
    gen_certs(&dir, &[("CERTS_ONLY", "1")]);
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let (ca, leaf) = (read("apiserver-ca.crt"), read("apiserver-serving.crt"));
    gen_certs(&dir, &[("CERTS_ONLY", "1")]);
    assert_eq!(read("apiserver-ca.crt"), ca);
    assert_ne!(read("apiserver-serving.crt"), leaf);
    openssl_verify(
        &dir.join("apiserver-ca.crt"),
        &dir.join("apiserver-serving.crt"),
        &[],
    );
}

#[test]
fn gen_certs_writes_the_secrets_and_ca_bundle_the_cluster_accepts() {
    // A server-side dry run: the real Secrets and APIService stay untouched.
    let dir = scratch("gen-certs-dry-run");
    let out = gen_certs(&dir, &[("DRY_RUN", "server")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "secret/storage-transfer-apiserver-serving",
        "secret/storage-transfer-etcd-server",
        "secret/storage-transfer-etcd-peer",
        "secret/storage-transfer-etcd-client",
        "apiservice.apiregistration.k8s.io/v1alpha1.storage.transfer.k8s.io",
    ] {
        assert!(stdout.contains(expected), "{expected} not in:\n{stdout}");
    }
}

#[test]
fn gen_certs_puts_the_ca_beside_the_serving_pair_for_the_service_monitor() {
    // deploy/monitoring's ServiceMonitor trusts the server through the
    // serving Secret's ca.crt, as cert-manager writes it. A kubectl that
    // keeps what is applied, then hands it to the real one (a client-side
    // dry run: nothing is written).
    let dir = scratch("gen-certs-ca");
    let applied = dir.join("applied.yaml");
    let shim = dir.join("kubectl");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nif [ \"$1\" = apply ]; then printf -- '---\\n' >> '{0}'; tee -a '{0}' | '{1}' \"$@\"; exit; fi\nexec '{1}' \"$@\"\n",
            applied.display(),
            kubectl().binary().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(repo_root().join("hack/gen-certs.sh"))
        .arg(dir.join("pki"))
        .current_dir(repo_root())
        .env("KUBECTL", &shim)
        .env("KUBECONFIG", kubectl().kubeconfig())
        .env("DRY_RUN", "client")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = std::fs::read_to_string(&applied).unwrap();
    let serving: Value = yaml
        .split("---\n")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .find(|o| o["metadata"]["name"] == "storage-transfer-apiserver-serving")
        .unwrap_or_else(|| panic!("no serving Secret in:\n{yaml}"));
    assert_eq!(serving["type"], "kubernetes.io/tls");
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(serving["data"][key].is_string(), "{key} missing: {serving}");
    }
}

#[test]
fn the_populator_overlay_registers_namespace_transfers_as_a_volume_populator() {
    // Rendered without the cluster: it has no VolumePopulator CRD (nor the
    // validator that reads it).
    let yaml = kubectl().ok(&["kustomize", &path("deploy/populator")]);
    let object: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(object["apiVersion"], "populator.storage.k8s.io/v1beta1");
    assert_eq!(object["kind"], "VolumePopulator");
    assert_eq!(object["sourceKind"]["group"], "storage.transfer.k8s.io");
    assert_eq!(object["sourceKind"]["kind"], "NamespaceTransfer");
    // The kind it names is the one this server serves.
    let resources = kubectl().ok(&[
        "api-resources",
        "--api-group=storage.transfer.k8s.io",
        "-o",
        "name",
    ]);
    assert!(
        resources
            .lines()
            .any(|r| r == "namespacetransfers.storage.transfer.k8s.io"),
        "{resources}"
    );
}
