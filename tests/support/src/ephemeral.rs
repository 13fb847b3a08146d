//! Building blocks of the EphemeralClaim scenarios: a StorageClass of the CSI
//! mock driver under reclaim policy Delete (so the external-provisioner makes
//! each claim's volume, and deletes it for real once the claim goes), pods
//! without a kubelet, EphemeralClaims from one template, tenants with chosen
//! rights, and waiting on phases.

#![allow(clippy::unwrap_used)] // Test helpers fail by panicking.

use std::time::{Duration, Instant};

use crate::csi::storage_class_yaml;
use crate::{ControlPlane, Kubectl};
use serde_json::Value;

/// The CSI mock driver's class the templates use: reclaim policy Delete.
pub const CSI_CLASS: &str = "ephemeral-csi";

const WAIT: Duration = Duration::from_secs(60);

/// Makes the test StorageClass (idempotent).
pub fn ensure_class(k: &Kubectl) {
    k.apply(&storage_class_yaml(CSI_CLASS, "{}", "{}")).unwrap();
}

/// The volume bound to `namespace/claim`: its PV name and CSI volume id.
pub fn bound_volume_of(k: &Kubectl, namespace: &str, claim: &str) -> (String, String) {
    let pvc = json_of(k, &["get", "pvc", claim, "-n", namespace]);
    let pv = pvc["spec"]["volumeName"]
        .as_str()
        .unwrap_or_else(|| panic!("{namespace}/{claim} is not bound: {}", pvc["status"]))
        .to_owned();
    let volume = json_of(k, &["get", "pv", &pv]);
    let handle = volume["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap_or_else(|| panic!("PV {pv} is not a CSI volume"))
        .to_owned();
    (pv, handle)
}

/// Whether a pod is on a node (as if scheduled: KCM's pvc-protection counts it
/// as a user of its claims) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduling {
    Scheduled,
    Unscheduled,
}

/// A pod that mounts `claim`. There is no kubelet: it stays without a phase
/// until a test sets one.
pub fn create_pod(k: &Kubectl, namespace: &str, name: &str, claim: &str, at: Scheduling) {
    k.apply(&pod_yaml(namespace, name, claim, at))
        .unwrap_or_else(|e| panic!("pod {namespace}/{name}: {e}"));
}

/// The pod of [`create_pod`], as YAML.
pub fn pod_yaml(namespace: &str, name: &str, claim: &str, at: Scheduling) -> String {
    let node = match at {
        Scheduling::Scheduled => "  nodeName: test-node\n",
        Scheduling::Unscheduled => "",
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n{node}  containers:\n  - name: app\n    image: registry.invalid/app\n    volumeMounts:\n    - name: data\n      mountPath: /data\n  volumes:\n  - name: data\n    persistentVolumeClaim:\n      claimName: {claim}\n"
    )
}

/// `spec.releasePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Delete,
    Retain,
}

/// An EphemeralClaim `name` owned by pod `owner`: 1Gi, ReadWriteOnce, of the
/// CSI class, with two labels and an annotation; `extra` is one more line
/// of the template's spec (or empty).
pub fn ephemeral_claim_yaml(
    namespace: &str,
    name: &str,
    owner: &str,
    policy: Policy,
    extra: &str,
) -> String {
    let policy = match policy {
        Policy::Delete => "Delete",
        Policy::Retain => "Retain",
    };
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!("      {extra}\n")
    };
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: EphemeralClaim\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  owner: {{apiVersion: v1, kind: Pod, name: {owner}}}\n  releasePolicy: {policy}\n  claimTemplate:\n    metadata:\n      labels: {{team: ci, purpose: scratch}}\n      annotations: {{example.com/note: made from a template}}\n    spec:\n      accessModes: [ReadWriteOnce]\n      storageClassName: {CSI_CLASS}\n      volumeMode: Filesystem\n      resources: {{requests: {{storage: 1Gi}}}}\n{extra}"
    )
}

pub fn apply_ephemeral_claim(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    owner: &str,
    policy: Policy,
) {
    k.apply(&ephemeral_claim_yaml(namespace, name, owner, policy, ""))
        .unwrap_or_else(|e| panic!("EphemeralClaim {namespace}/{name}: {e}"));
}

/// A user who may create, get and list pods and EphemeralClaims in
/// `namespace`, and nothing else (until [`grant`]ed more).
pub fn tenant(cp: &ControlPlane, namespace: &str, user: &str) -> Kubectl {
    grant(
        cp,
        namespace,
        user,
        "create,get,list",
        "pods,ephemeralclaims.storage.transfer.k8s.io",
    );
    cp.user(user, None).unwrap()
}

/// Grants `user` the `verbs` on `resources` in `namespace`, with a Role and
/// RoleBinding of their own.
pub fn grant(cp: &ControlPlane, namespace: &str, user: &str, verbs: &str, resources: &str) {
    let role = format!("{user}-{}", verbs.replace(',', "-"));
    let k = cp.kubectl();
    k.ok(&[
        "create",
        "role",
        &role,
        "-n",
        namespace,
        &format!("--verb={verbs}"),
        &format!("--resource={resources}"),
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        &role,
        "-n",
        namespace,
        &format!("--role={role}"),
        &format!("--user={user}"),
    ]);
}

/// `kubectl get <args> -o json` as JSON, or `None` once it is gone. Retried
/// for a while: a server that was just restarted takes a moment to be
/// reachable again through the aggregator.
pub fn get_json(k: &Kubectl, args: &[&str]) -> Option<Value> {
    let text = get_raw(k, args);
    (!text.trim().is_empty()).then(|| serde_json::from_str(&text).unwrap())
}

/// `kubectl get <args> -o json`, as text.
fn get_raw(k: &Kubectl, args: &[&str]) -> String {
    let mut args = args.to_vec();
    args.extend(["-o", "json", "--ignore-not-found"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = k.run(&args);
        if run.success {
            return run.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?} kept failing: {}",
            run.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Like [`get_json`], for something that must exist.
pub fn json_of(k: &Kubectl, args: &[&str]) -> Value {
    get_json(k, args).unwrap_or_else(|| panic!("{args:?} does not exist"))
}

/// A claim exactly as kube-apiserver serves it, for byte-for-byte comparison.
pub fn raw_claim(k: &Kubectl, namespace: &str, name: &str) -> String {
    get_raw(k, &["get", "pvc", name, "-n", namespace])
}

pub fn ec_json(k: &Kubectl, namespace: &str, name: &str) -> Option<Value> {
    get_json(k, &["get", "ephemeralclaim", name, "-n", namespace])
}

/// `status.phase` (`""` while unset, `"<gone>"` once deleted).
pub fn ec_phase(k: &Kubectl, namespace: &str, name: &str) -> String {
    match ec_json(k, namespace, name) {
        None => "<gone>".to_owned(),
        Some(ec) => ec["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// Waits until the EphemeralClaim satisfies `done`; panics with its status if
/// it does not within a minute.
#[track_caller]
pub fn wait_ec(k: &Kubectl, namespace: &str, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let ec = ec_json(k, namespace, name);
        if let Some(ec) = &ec {
            if done(ec) {
                return ec.clone();
            }
        }
        if Instant::now() > deadline {
            panic!(
                "EphemeralClaim {namespace}/{name} did not get there in {WAIT:?}; it is:\n{}",
                ec.map(|ec| serde_json::to_string_pretty(&ec).unwrap())
                    .unwrap_or_else(|| "<gone>".to_owned())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the EphemeralClaim's phase is `phase`.
#[track_caller]
pub fn wait_phase(k: &Kubectl, namespace: &str, name: &str, phase: &str) -> Value {
    wait_ec(k, namespace, name, |ec| ec["status"]["phase"] == phase)
}
