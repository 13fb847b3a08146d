//! The Helm chart, `deploy/helm/storage-transfer-apiserver`, checked with the
//! pinned Helm v4 (`hack/build-helm.sh`) against what it stands in for: the
//! kustomize base in `deploy/`, its overlays and `apiservice/`.
//!
//! - `helm lint --strict` passes with the default values and with every
//!   toggle flipped;
//! - what `helm template` renders for each of those passes the test
//!   kube-apiserver's server-side validation (a dry run: nothing is made);
//! - with values that mirror the kustomize base, the chart renders the same
//!   objects, field by field, and with an overlay's toggle on, the base plus
//!   that overlay;
//! - installed into another namespace, every reference follows it (the
//!   APIService's Service, the etcd and certificate DNS names, the
//!   ServiceMonitor's server name, and `--pod-fence`, whose default names
//!   `storage-transfer-system`);
//! - a values file of the wrong shape fails `helm template` and `helm lint`
//!   with the path of the bad value (`values.schema.json`).
//!
//! The deliberate differences from kustomize, the only ones the comparison
//! allows: Helm's own labels ([`HELM_LABELS`]) on every object; the
//! Namespace rendered only with `namespace.create` (`helm install
//! --create-namespace` makes it otherwise, and Helm refuses to adopt a
//! Namespace it did not create); and the APIService of `apiservice/`
//! rendered by the chart itself (`apiService.enabled`), where the kustomize
//! base leaves it to a second `kubectl apply`.
//!
//! Kinds whose CRDs the test kube-apiserver lacks: the Prometheus Operator's
//! ServiceMonitor and PrometheusRule are validated against that project's
//! real CRDs, taken from its Go module at [`PROMETHEUS_OPERATOR`] and
//! installed for the one test that needs them. cert-manager's and the
//! VolumePopulator's are validated only where their CRDs are installed, as
//! `tests/manifests.rs` does; elsewhere the comparison with kustomize is
//! what checks them.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::{json, Value};
use sta_testenv::{repo_root, shared, Binaries, ControlPlane, Kubectl};

/// The chart, from the repository root.
const CHART: &str = "deploy/helm/storage-transfer-apiserver";
/// The release and namespace the README installs with.
const RELEASE: &str = "storage-transfer-apiserver";
const NAMESPACE: &str = "storage-transfer-system";

/// The labels the chart adds to every object's metadata for Helm's
/// bookkeeping (`sta.helmLabels` in `templates/_helpers.tpl`). Nothing else
/// is stripped before comparing with kustomize.
const HELM_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// The Prometheus Operator's Go module, whose `example/prometheus-operator-crd/`
/// holds its CRDs: the newest release of the main module the Go module proxy
/// serves (its later tags are published for `pkg/apis/monitoring` only).
const PROMETHEUS_OPERATOR: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";

/// The API groups of kinds the test kube-apiserver does not serve, and the
/// CRD that would serve each kind.
const CRD_KINDS: &[(&str, &str, &str)] = &[
    (
        "cert-manager.io",
        "Certificate",
        "certificates.cert-manager.io",
    ),
    ("cert-manager.io", "Issuer", "issuers.cert-manager.io"),
    (
        "populator.storage.k8s.io",
        "VolumePopulator",
        "volumepopulators.populator.storage.k8s.io",
    ),
    (
        "monitoring.coreos.com",
        "ServiceMonitor",
        "servicemonitors.monitoring.coreos.com",
    ),
    (
        "monitoring.coreos.com",
        "PrometheusRule",
        "prometheusrules.monitoring.coreos.com",
    ),
];

/// One set of values for the chart, and what it turns on or off.
#[derive(Debug, Clone, Copy)]
struct Toggle {
    name: &'static str,
    values: &'static str,
}

/// The default values, and each toggle flipped on its own (the last row:
/// all of them at once).
const TOGGLES: &[Toggle] = &[
    Toggle {
        name: "the default values",
        values: "",
    },
    Toggle {
        name: "the Namespace rendered",
        values: "namespace: {create: true}",
    },
    Toggle {
        name: "another image",
        values: "image: {repository: storage-transfer-apiserver, tag: 0.2.0, pullPolicy: Always}",
    },
    Toggle {
        name: "three replicas",
        values: "replicas: 3",
    },
    Toggle {
        name: "other resources",
        values: "resources: {requests: {cpu: 200m, memory: 2Gi}, limits: {memory: 4Gi}}",
    },
    Toggle {
        name: "extra server flags",
        values: "extraArgs: [--controller-workers=4]",
    },
    Toggle {
        name: "an external etcd",
        values: "etcd: {mode: external, endpoints: [https://etcd-a.example:2379, https://etcd-b.example:2379], clientSecretName: external-etcd-client}",
    },
    Toggle {
        name: "the bundled etcd on a storage class",
        values: "etcd: {bundled: {storage: 20Gi, storageClassName: fast}}",
    },
    Toggle {
        name: "cert-manager",
        values: "certManager: {enabled: true}",
    },
    Toggle {
        name: "cert-manager with an external etcd",
        values: "certManager: {enabled: true}\netcd: {mode: external, endpoints: [https://etcd-a.example:2379]}",
    },
    Toggle {
        name: "no APIService",
        values: "apiService: {enabled: false}",
    },
    // Base64 in the shape of a CA bundle: kube-apiserver does not read the
    // certificate inside an APIService's caBundle.
    Toggle {
        name: "the APIService's caBundle",
        values: "apiService: {caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=}",
    },
    Toggle {
        name: "no RBAC",
        values: "rbac: {create: false}",
    },
    Toggle {
        name: "no PodDisruptionBudget",
        values: "podDisruptionBudget: {enabled: false}",
    },
    Toggle {
        name: "the NetworkPolicies",
        values: "networkPolicy: {enabled: true, controlPlaneCIDRs: [10.1.0.0/24, 10.2.0.0/24], monitoringNamespace: prometheus}",
    },
    Toggle {
        name: "the VolumePopulator",
        values: "volumePopulator: {enabled: true}",
    },
    Toggle {
        name: "monitoring",
        values: "monitoring: {enabled: true}",
    },
    Toggle {
        name: "every toggle at once",
        values: "namespace: {create: true}\n\
                 replicas: 3\n\
                 etcd: {mode: external, endpoints: [https://etcd-a.example:2379]}\n\
                 certManager: {enabled: true}\n\
                 rbac: {create: false}\n\
                 podDisruptionBudget: {enabled: false}\n\
                 networkPolicy: {enabled: true}\n\
                 volumePopulator: {enabled: true}\n\
                 monitoring: {enabled: true}",
    },
];

// ---------------------------------------------------------------------------
// Helm, kustomize and the objects they render.

fn helm_bin() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| sta_testenv::helm().unwrap_or_else(|e| panic!("{e}")))
}

/// Runs helm with `values` as its values file (`-f -`, on stdin).
fn helm(args: &[&str], values: &str) -> Output {
    let mut child = Command::new(helm_bin())
        .args(args)
        .args(["--values", "-"])
        .current_dir(repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(values.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn chart() -> String {
    repo_root().join(CHART).display().to_string()
}

/// `helm template` of the chart into `namespace`, as the README installs it.
fn try_render(values: &str, namespace: &str) -> Result<String, String> {
    let out = helm(
        &["template", RELEASE, &chart(), "--namespace", namespace],
        values,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{stderr}"))
    }
}

/// The chart's objects with `values`, in [`NAMESPACE`].
#[track_caller]
fn chart_objects(values: &str) -> Vec<Value> {
    match try_render(values, NAMESPACE) {
        Ok(yaml) => objects(&yaml),
        Err(e) => panic!("helm template with {values:?} failed:\n{e}"),
    }
}

/// The objects of a YAML stream, empty documents left out.
fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("not YAML: {e}\n{yaml}"))
        .into_iter()
        .filter(|o| !o.is_null())
        .collect()
}

fn kubectl_bin() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| Binaries::locate().unwrap_or_else(|e| panic!("{e}")).kubectl)
}

/// The objects `kubectl kustomize DIR` renders (no cluster needed).
fn kustomized(dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl_bin())
        .arg("kustomize")
        .arg(repo_root().join(dir))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    objects(&String::from_utf8_lossy(&out.stdout))
}

/// The objects of one manifest file.
fn file_objects(file: &str) -> Vec<Value> {
    objects(&std::fs::read_to_string(repo_root().join(file)).unwrap())
}

/// What identifies an object: apiVersion, kind, namespace and name.
type Key = (String, String, String, String);

fn key(o: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&o["apiVersion"]),
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

fn show(k: &Key) -> String {
    let (api_version, kind, namespace, name) = k;
    match namespace.as_str() {
        "" => format!("{kind} {name} ({api_version})"),
        ns => format!("{kind} {ns}/{name} ({api_version})"),
    }
}

/// `o` without [`HELM_LABELS`] (and without `labels` when nothing else is
/// left in it).
fn without_helm_labels(mut o: Value) -> Value {
    let metadata = o["metadata"].as_object_mut().unwrap();
    if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        for label in HELM_LABELS {
            labels.remove(*label);
        }
        if labels.is_empty() {
            metadata.remove("labels");
        }
    }
    o
}

/// Every difference between `expected` and `got` below `path`, one line each.
fn field_differences(path: &str, expected: &Value, got: &Value, out: &mut Vec<String>) {
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            let keys: std::collections::BTreeSet<&String> = e.keys().chain(g.keys()).collect();
            for k in keys {
                let (e, g) = (
                    e.get(k).unwrap_or(&Value::Null),
                    g.get(k).unwrap_or(&Value::Null),
                );
                field_differences(&format!("{path}/{k}"), e, g, out);
            }
        }
        (Value::Array(e), Value::Array(g)) if e.len() == g.len() => {
            for (i, (e, g)) in e.iter().zip(g).enumerate() {
                field_differences(&format!("{path}/{i}"), e, g, out);
            }
        }
        (e, g) if e != g => {
            let show = |v: &Value| match v {
                Value::Null => "absent".to_owned(),
                v => {
                    let s = v.to_string();
                    match s.char_indices().nth(200) {
                        Some((cut, _)) => format!("{}...", &s[..cut]),
                        None => s,
                    }
                }
            };
            out.push(format!(
                "  {path}: kustomize {}, chart {}",
                show(e),
                show(g)
            ));
        }
        _ => {}
    }
}

/// Compares two sets of objects by apiVersion, kind, namespace and name, and
/// panics with every object one side lacks and every field that differs.
#[track_caller]
fn assert_same_objects(what: &str, kustomize: Vec<Value>, chart: Vec<Value>) {
    let index = |objects: Vec<Value>, side: &str| {
        let mut map = BTreeMap::new();
        for o in objects {
            let k = key(&o);
            assert!(
                map.insert(k.clone(), o).is_none(),
                "{what}: {side} renders {} twice",
                show(&k)
            );
        }
        map
    };
    let kustomize = index(kustomize, "kustomize");
    let chart = index(
        chart.into_iter().map(without_helm_labels).collect(),
        "the chart",
    );
    let mut report = String::new();
    for (k, e) in &kustomize {
        match chart.get(k) {
            None => writeln!(report, "{}: only kustomize renders it", show(k)).unwrap(),
            Some(g) if g != e => {
                let mut lines = Vec::new();
                field_differences("", e, g, &mut lines);
                writeln!(report, "{} differs:\n{}", show(k), lines.join("\n")).unwrap();
            }
            Some(_) => {}
        }
    }
    for k in chart.keys().filter(|k| !kustomize.contains_key(*k)) {
        writeln!(report, "{}: only the chart renders it", show(k)).unwrap();
    }
    assert!(
        report.is_empty(),
        "{what}: the chart and kustomize differ\n{report}"
    );
}

/// The kustomize base as the chart installs it: `deploy/` and the
/// APIService of `apiservice/`.
fn kustomize_base() -> Vec<Value> {
    [
        kustomized("deploy"),
        file_objects("apiservice/apiservice.yaml"),
    ]
    .concat()
}

/// Values that mirror the kustomize base: the defaults, plus the Namespace
/// (see the module's doc).
const MIRROR_BASE: &str = "namespace: {create: true}\n";

// ---------------------------------------------------------------------------
// The test control plane.

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
}

fn kubectl() -> &'static Kubectl {
    cp().kubectl()
}

fn crd_installed(name: &str) -> bool {
    kubectl().run(&["get", "crd", name]).success
}

/// The CRD that serves `o`'s kind, when it is one of [`CRD_KINDS`].
fn crd_of(o: &Value) -> Option<&'static str> {
    let group = o["apiVersion"].as_str()?.split_once('/')?.0;
    CRD_KINDS
        .iter()
        .find(|(g, kind, _)| *g == group && o["kind"] == *kind)
        .map(|(_, _, crd)| *crd)
}

/// `kubectl apply --dry-run=server` of `objects`, as one List.
fn dry_run(k: &Kubectl, objects: &[Value]) -> Result<String, String> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    k.run_with_stdin(
        &["apply", "--dry-run=server", "-o", "name", "-f", "-"],
        Some(&list.to_string()),
    )
    .into_result()
    .map_err(|e| e.to_string())
}

/// The Prometheus Operator's CRDs the chart's kinds need, by plural: the
/// CRD is `<plural>.monitoring.coreos.com`.
const PROMETHEUS_OPERATOR_CRDS: &[&str] = &["servicemonitors", "prometheusrules"];

/// [`PROMETHEUS_OPERATOR_CRDS`], installed from [`PROMETHEUS_OPERATOR`]
/// into the test control plane, and deleted again when dropped.
#[derive(Debug)]
struct PrometheusOperatorCrds;

impl PrometheusOperatorCrds {
    fn install() -> Self {
        let dir = go_module_dir(PROMETHEUS_OPERATOR).join("example/prometheus-operator-crd");
        let installed = Self;
        for plural in PROMETHEUS_OPERATOR_CRDS {
            let file = dir.join(format!("monitoring.coreos.com_{plural}.yaml"));
            // Server-side: the CRDs are too large for the last-applied annotation.
            kubectl().ok(&["apply", "--server-side", "-f", &file.display().to_string()]);
        }
        for plural in PROMETHEUS_OPERATOR_CRDS {
            kubectl().ok(&[
                "wait",
                "--for=condition=Established",
                &format!("crd/{plural}.monitoring.coreos.com"),
                "--timeout=60s",
            ]);
        }
        installed
    }
}

impl Drop for PrometheusOperatorCrds {
    fn drop(&mut self) {
        for plural in PROMETHEUS_OPERATOR_CRDS {
            let _ = kubectl().run(&[
                "delete",
                "crd",
                &format!("{plural}.monitoring.coreos.com"),
                "--wait=false",
                "--ignore-not-found",
            ]);
        }
    }
}

/// Where `go mod download` put `module@version` (once per machine; later
/// from the module cache).
fn go_module_dir(module_at_version: &str) -> PathBuf {
    let out = Command::new("go")
        .args(["mod", "download", "-json", module_at_version])
        .current_dir(std::env::temp_dir())
        .env("GOWORK", "off")
        .env("GOFLAGS", "-mod=mod")
        .output()
        .unwrap_or_else(|e| panic!("cannot run go (needed for {module_at_version}'s CRDs): {e}"));
    let info: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "go mod download {module_at_version}: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    match info["Dir"].as_str() {
        Some(dir) if out.status.success() => PathBuf::from(dir),
        _ => panic!("go mod download {module_at_version}: {info}"),
    }
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
fn the_chart_lints_with_the_default_values_and_with_every_toggle_flipped() {
    let mut failures = String::new();
    for toggle in TOGGLES {
        let out = helm(&["lint", "--strict", &chart()], toggle.values);
        if !out.status.success() {
            writeln!(
                failures,
                "with {}:\n{}{}",
                toggle.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
            .unwrap();
        }
    }
    assert!(failures.is_empty(), "helm lint failed\n{failures}");
}

#[test]
fn every_toggle_renders_objects_the_test_kube_apiserver_accepts() {
    let _crds = PrometheusOperatorCrds::install();
    let mut failures = String::new();
    for toggle in TOGGLES {
        let all = chart_objects(toggle.values);
        // Kinds without their CRD here are left to the kustomize comparison.
        let served: Vec<Value> = all
            .into_iter()
            .filter(|o| crd_of(o).is_none_or(crd_installed))
            .collect();
        if let Err(e) = dry_run(kubectl(), &served) {
            writeln!(failures, "with {}: {e}", toggle.name).unwrap();
        }
    }
    // The dry run checks the CRDs' schemas, not only that the kinds exist.
    let mut monitor = chart_objects("monitoring: {enabled: true}")
        .into_iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .unwrap();
    monitor["spec"]["endpoints"][0]["scrapeEvery"] = json!("30s");
    let refused = dry_run(kubectl(), &[monitor]).unwrap_err();
    assert!(refused.contains("scrapeEvery"), "{refused}");
    assert!(
        failures.is_empty(),
        "the test kube-apiserver refused the chart's objects\n{failures}"
    );
}

#[test]
fn the_chart_renders_the_same_objects_as_the_kustomize_base() {
    assert_same_objects("the base", kustomize_base(), chart_objects(MIRROR_BASE));
    // The defaults differ from the base by the Namespace alone.
    let namespace = (
        "v1".to_owned(),
        "Namespace".to_owned(),
        String::new(),
        NAMESPACE.to_owned(),
    );
    let without_namespace: Vec<Value> = chart_objects(MIRROR_BASE)
        .into_iter()
        .filter(|o| key(o) != namespace)
        .collect();
    assert_eq!(without_namespace, chart_objects(""));
}

#[test]
fn with_an_overlay_toggled_on_the_chart_renders_the_base_plus_that_overlay() {
    for (overlay, values) in [
        ("deploy/network-policy", "networkPolicy: {enabled: true}"),
        ("deploy/populator", "volumePopulator: {enabled: true}"),
        ("deploy/monitoring", "monitoring: {enabled: true}"),
    ] {
        assert_same_objects(
            overlay,
            [kustomize_base(), kustomized(overlay)].concat(),
            chart_objects(&format!("{MIRROR_BASE}{values}")),
        );
    }
}

#[test]
fn with_cert_manager_on_the_chart_renders_both_cert_manager_overlays() {
    // apiservice/cert-manager/ replaces apiservice/apiservice.yaml: the same
    // APIService, with cert-manager's CA injection annotation.
    let base: Vec<Value> = kustomized("deploy");
    assert_same_objects(
        "cert-manager",
        [
            base,
            kustomized("deploy/cert-manager"),
            kustomized("apiservice/cert-manager"),
        ]
        .concat(),
        chart_objects(&format!("{MIRROR_BASE}certManager: {{enabled: true}}")),
    );
}

#[test]
fn with_a_part_toggled_off_the_chart_renders_the_base_less_that_part() {
    let base = kustomize_base();
    let less = |drop: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        base.iter().filter(|o| !drop(o)).cloned().collect()
    };
    for (what, values, expected) in [
        (
            "no RBAC",
            "rbac: {create: false}",
            less(&|o| {
                o["apiVersion"]
                    .as_str()
                    .unwrap()
                    .starts_with("rbac.authorization.k8s.io/")
            }),
        ),
        (
            "no PodDisruptionBudget",
            "podDisruptionBudget: {enabled: false}",
            less(&|o| {
                o["kind"] == "PodDisruptionBudget"
                    && o["metadata"]["name"] == "storage-transfer-apiserver"
            }),
        ),
        (
            "no APIService",
            "apiService: {enabled: false}",
            less(&|o| o["kind"] == "APIService"),
        ),
    ] {
        assert_same_objects(
            what,
            expected,
            chart_objects(&format!("{MIRROR_BASE}{values}")),
        );
    }
}

#[test]
fn with_an_external_etcd_the_chart_renders_what_the_readme_recipe_makes_of_the_base() {
    // deploy/README.md, "Using an existing etcd": drop etcd.yaml and point
    // --etcd-servers at the existing endpoints; the client Secret keeps its
    // name.
    let endpoints = "https://etcd-a.example:2379,https://etcd-b.example:2379";
    let etcd: Vec<Key> = file_objects("deploy/etcd.yaml").iter().map(key).collect();
    let mut expected: Vec<Value> = kustomize_base()
        .into_iter()
        .filter(|o| !etcd.contains(&key(o)))
        .collect();
    let deployment = expected
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap();
    let servers = args
        .iter_mut()
        .find(|a| a.as_str().unwrap().starts_with("--etcd-servers="))
        .unwrap();
    *servers = Value::from(format!("--etcd-servers={endpoints}"));

    assert_same_objects(
        "an external etcd",
        expected,
        chart_objects(&format!(
            "{MIRROR_BASE}etcd: {{mode: external, endpoints: [{}]}}",
            endpoints.replace(',', ", ")
        )),
    );
}

#[test]
fn the_chart_reads_the_monitoring_overlay_through_symlinks_not_copies() {
    let files = repo_root().join(CHART).join("files");
    let mut linked = Vec::new();
    for entry in std::fs::read_dir(&files).unwrap() {
        let path = entry.unwrap().path();
        let target = std::fs::read_link(&path)
            .unwrap_or_else(|_| panic!("{} is a copy, not a symlink", path.display()));
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(
            target,
            Path::new("../../../monitoring").join(&name),
            "{} points elsewhere",
            path.display()
        );
        assert!(
            path.is_file(),
            "{} -> {} is dangling",
            path.display(),
            target.display()
        );
        linked.push(name);
    }
    linked.sort();
    assert_eq!(
        linked,
        [
            "dashboard.json",
            "prometheusrule.yaml",
            "servicemonitor.yaml"
        ]
    );
}

#[test]
fn installed_in_another_namespace_every_reference_follows_the_namespace() {
    let ns = cp().namespace("helm").unwrap();
    let values = "certManager: {enabled: true}\n\
                  networkPolicy: {enabled: true}\n\
                  monitoring: {enabled: true}";
    let yaml = try_render(values, &ns.name).unwrap();
    let stray: Vec<&str> = yaml.lines().filter(|l| l.contains(NAMESPACE)).collect();
    assert!(
        stray.is_empty(),
        "still names {NAMESPACE}:\n{}",
        stray.join("\n")
    );

    let rendered = objects(&yaml);
    let deployment = rendered.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array().unwrap().contains(&Value::from(format!(
            "--pod-fence={}/storage-transfer-fence",
            ns.name
        ))),
        "{args}"
    );
    let served: Vec<Value> = rendered
        .into_iter()
        .filter(|o| crd_of(o).is_none())
        .collect();
    dry_run(kubectl(), &served).unwrap();
}

#[test]
fn values_of_the_wrong_shape_fail_template_and_lint_with_the_path_of_the_bad_value() {
    for (values, message) in [
        ("replicas: two", "at '/replicas': got string, want integer"),
        (
            "etcd: {mode: embedded}",
            "at '/etcd/mode': value must be one of 'bundled', 'external'",
        ),
        (
            "etcd: {mode: external}",
            "at '/etcd/endpoints': minItems: got 0, want 1",
        ),
        (
            "etcd: {mode: external, endpoints: [http://etcd:2379]}",
            "at '/etcd/endpoints/0'",
        ),
        (
            "monitoring: {enable: true}",
            "at '/monitoring': additional properties 'enable' not allowed",
        ),
        (
            "certManager: {enabled: yes please}",
            "at '/certManager/enabled'",
        ),
    ] {
        match try_render(values, NAMESPACE) {
            Ok(_) => panic!("helm template accepted {values:?}"),
            Err(e) => assert!(e.contains(message), "{values:?}: {e}"),
        }
        let lint = helm(&["lint", &chart()], values);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&lint.stdout),
            String::from_utf8_lossy(&lint.stderr)
        );
        assert!(!lint.status.success(), "helm lint accepted {values:?}");
        assert!(said.contains(message), "{values:?}: {said}");
    }
}
