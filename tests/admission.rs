//! The cluster's admission configuration on our kinds, against the real
//! control plane (DESIGN §3.1): ValidatingAdmissionPolicies and
//! MutatingAdmissionPolicies that kube-apiserver stores but does not run for
//! an aggregated API, run by our server. Each policy is also bound to the
//! CRD twin (the same schema served by kube-apiserver, which runs the
//! policy itself), and the answers must be the same: code, message and
//! warnings.
//!
//! Policies are cluster-wide and tests run in parallel: every binding
//! selects its test's own namespace only.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sta_testenv::http::{HttpClient, HttpResponse};
use sta_testenv::{crd, shared, ControlPlane};

const OURS: &str = "storage.transfer.k8s.io";
const TWIN: &str = crd::GROUP;

struct Env {
    cp: &'static ControlPlane,
    http: HttpClient,
}

/// The shared control plane, with the CRD twin installed and served.
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
        let openapi = crd::checked_in_openapi().unwrap_or_else(|e| panic!("{e}"));
        let path = cp.dir.join(format!("crd-{TWIN}.json"));
        let twin = crd::namespace_transfer_crd_in(&openapi, TWIN);
        std::fs::write(&path, serde_json::to_vec_pretty(&twin).unwrap()).unwrap();
        cp.kubectl()
            .ok(&["apply", "-f", &path.display().to_string()]);
        cp.kubectl().ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/namespacetransfers.{TWIN}"),
        ]);
        let http = cp.apiserver_http().unwrap();
        for group in [OURS, TWIN] {
            let path = format!("/apis/{group}/v1alpha1/namespaces/default/namespacetransfers");
            let deadline = Instant::now() + Duration::from_secs(60);
            while http.request("GET", &path, &[], b"").unwrap().status != 200 {
                assert!(Instant::now() < deadline, "{path} is not served");
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        Env { cp, http }
    })
}

/// A source-side offer of the claim named as the transfer, from `ns` to
/// `to`, in `group` (a claim per transfer: no probe conflicts with another).
fn offer(group: &str, ns: &str, name: &str, to: &str, labels: Value) -> Value {
    json!({
        "apiVersion": format!("{group}/v1alpha1"),
        "kind": "NamespaceTransfer",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"source": {"name": name}, "destination": {"namespace": to}},
    })
}

/// POSTs `obj` in its group (through the aggregator for ours), as the admin.
fn create(obj: &Value, dry_run: bool) -> HttpResponse {
    let group = obj["apiVersion"]
        .as_str()
        .unwrap()
        .trim_end_matches("/v1alpha1");
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let mut path = format!("/apis/{group}/v1alpha1/namespaces/{ns}/namespacetransfers");
    if dry_run {
        path.push_str("?dryRun=All");
    }
    env()
        .http
        .request(
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            obj.to_string().as_bytes(),
        )
        .unwrap()
}

/// What a client sees of an answer, with the twin's group named as ours:
/// code, the Status message (or none) and the warnings.
fn answer(resp: &HttpResponse) -> (u16, String, Vec<String>) {
    let message = if resp.status >= 400 {
        resp.json()["message"]
            .as_str()
            .unwrap_or_default()
            .replace(TWIN, OURS)
    } else {
        String::new()
    };
    let warnings = resp
        .headers_named("Warning")
        .into_iter()
        .map(|w| w.replace(TWIN, OURS))
        .collect();
    (resp.status, message, warnings)
}

fn apply(yaml: &str) {
    let run = env()
        .cp
        .kubectl()
        .run_with_stdin(&["apply", "-f", "-"], Some(yaml));
    assert!(run.success, "{}\n{yaml}", run.stderr);
}

fn delete(kind: &str, name: &str) {
    env()
        .cp
        .kubectl()
        .run(&["delete", kind, name, "--ignore-not-found"]);
}

/// A ValidatingAdmissionPolicy on both groups' namespacetransfers, and its
/// binding to namespace `ns` with `actions`; removed when dropped.
struct Policy {
    name: String,
}

impl Policy {
    fn validating(name: &str, ns: &str, spec: Value, binding: Value) -> Self {
        let mut spec = spec;
        spec["matchConstraints"] = json!({
            "resourceRules": [{
                "apiGroups": [OURS, TWIN],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["namespacetransfers"],
            }],
        });
        let mut binding = binding;
        binding["policyName"] = json!(name);
        binding["matchResources"] = json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        });
        apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": spec,
            })
            .to_string(),
        );
        apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": binding,
            })
            .to_string(),
        );
        Self {
            name: name.to_owned(),
        }
    }

    fn mutating(name: &str, ns: &str, spec: Value) -> Self {
        let mut spec = spec;
        spec["matchConstraints"] = json!({
            "resourceRules": [{
                "apiGroups": [OURS, TWIN],
                "apiVersions": ["*"],
                "operations": ["CREATE"],
                "resources": ["namespacetransfers"],
            }],
        });
        apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": spec,
            })
            .to_string(),
        );
        apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "matchResources": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    },
                },
            })
            .to_string(),
        );
        Self {
            name: format!("mutating:{name}"),
        }
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        match self.name.strip_prefix("mutating:") {
            Some(name) => {
                delete("mutatingadmissionpolicybinding", name);
                delete("mutatingadmissionpolicy", name);
            }
            None => {
                delete("validatingadmissionpolicybinding", &self.name);
                delete("validatingadmissionpolicy", &self.name);
            }
        }
    }
}

/// Waits until `probe` (a dry-run create in each group) answers as `ready`
/// says in both groups: the policy has reached kube-apiserver's informers
/// and ours.
fn wait_for(
    what: &str,
    probe: impl Fn(&str) -> HttpResponse,
    ready: impl Fn(&HttpResponse) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for group in [OURS, TWIN] {
        loop {
            let resp = probe(group);
            if ready(&resp) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what} never took effect in {group}: {} {}",
                resp.status,
                resp.text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Creates the same offer in both groups and returns both answers.
fn both(ns: &str, name: &str, to: &str, labels: Value) -> [(u16, String, Vec<String>); 2] {
    [OURS, TWIN].map(|group| answer(&create(&offer(group, ns, name, to, labels.clone()), false)))
}

#[test]
fn a_validating_admission_policy_denies_a_transfer_to_vault_as_kube_apiserver_does_for_the_crd() {
    let ns = env().cp.namespace("vap-deny").unwrap();
    let _policy = Policy::validating(
        &format!("{}-no-vault", ns.name),
        &ns.name,
        json!({
            "validations": [{
                "expression": "object.spec.destination.namespace != 'vault'",
                "message": "nothing may be sent to namespace vault",
            }],
        }),
        json!({"validationActions": ["Deny"]}),
    );
    wait_for(
        "the deny policy",
        |g| create(&offer(g, &ns.name, "probe", "vault", json!({})), true),
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "to-vault", "vault", json!({}));
    assert_eq!(ours, twin);
    // A validation without a `reason` refuses as Invalid, as kube's does.
    assert_eq!(ours.0, 422, "{ours:?}");
    assert!(
        ours.1
            .contains("denied request: nothing may be sent to namespace vault"),
        "{ours:?}"
    );
    // Anything else goes through.
    let [ours, twin] = both(&ns.name, "to-dev", "dev", json!({}));
    assert_eq!((ours.0, twin.0), (201, 201), "{ours:?} {twin:?}");
}

#[test]
fn a_message_expression_and_a_reason_shape_the_refusal_as_for_the_crd() {
    let ns = env().cp.namespace("vap-reason").unwrap();
    let _policy = Policy::validating(
        &format!("{}-reason", ns.name),
        &ns.name,
        json!({
            "validations": [{
                "expression": "object.spec.destination.namespace.startsWith('team-')",
                "messageExpression": "'destination ' + object.spec.destination.namespace + ' is not a team namespace'",
                "reason": "Invalid",
            }],
        }),
        json!({"validationActions": ["Deny"]}),
    );
    wait_for(
        "the reason policy",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "t", "dev", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 422, "{ours:?}");
    assert!(
        ours.1.contains("destination dev is not a team namespace"),
        "{ours:?}"
    );
}

#[test]
fn a_warn_binding_admits_the_write_with_the_policys_warning_as_for_the_crd() {
    let ns = env().cp.namespace("vap-warn").unwrap();
    let _policy = Policy::validating(
        &format!("{}-warn", ns.name),
        &ns.name,
        json!({
            "validations": [{
                "expression": "object.spec.destination.namespace != 'vault'",
                "message": "sending to vault is discouraged",
            }],
        }),
        json!({"validationActions": ["Warn"]}),
    );
    wait_for(
        "the warn policy",
        |g| create(&offer(g, &ns.name, "probe", "vault", json!({})), true),
        |r| !r.headers_named("Warning").is_empty(),
    );
    let [ours, twin] = both(&ns.name, "warned", "vault", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 201, "{ours:?}");
    assert_eq!(ours.2.len(), 1, "{ours:?}");
    assert!(
        ours.2[0].contains("sending to vault is discouraged"),
        "{ours:?}"
    );
}

#[test]
fn a_binding_with_a_param_ref_reads_the_forbidden_namespace_from_a_config_map() {
    let ns = env().cp.namespace("vap-param").unwrap();
    env().cp.kubectl().ok(&[
        "create",
        "configmap",
        "forbidden",
        "-n",
        &ns.name,
        "--from-literal=namespace=secret-place",
    ]);
    let _policy = Policy::validating(
        &format!("{}-param", ns.name),
        &ns.name,
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "validations": [{
                "expression": "object.spec.destination.namespace != params.data.namespace",
                "messageExpression": "'the parameters forbid ' + params.data.namespace",
            }],
        }),
        json!({
            "validationActions": ["Deny"],
            "paramRef": {"name": "forbidden", "namespace": ns.name, "parameterNotFoundAction": "Deny"},
        }),
    );
    wait_for(
        "the param policy",
        |g| {
            create(
                &offer(g, &ns.name, "probe", "secret-place", json!({})),
                true,
            )
        },
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "t", "secret-place", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 422, "{ours:?}");
    assert!(
        ours.1.contains("the parameters forbid secret-place"),
        "{ours:?}"
    );
    let [ours, twin] = both(&ns.name, "ok", "dev", json!({}));
    assert_eq!((ours.0, twin.0), (201, 201), "{ours:?} {twin:?}");

    // The parameter gone, `parameterNotFoundAction: Deny` refuses everything.
    env()
        .cp
        .kubectl()
        .ok(&["delete", "configmap", "forbidden", "-n", &ns.name]);
    wait_for(
        "the missing parameter",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "no-param", "dev", json!({}));
    assert_eq!(ours, twin);
    assert!(ours.0 >= 400, "{ours:?}");
}

#[test]
fn a_match_condition_that_is_false_skips_the_policy() {
    let ns = env().cp.namespace("vap-skip").unwrap();
    let _policy = Policy::validating(
        &format!("{}-skip", ns.name),
        &ns.name,
        json!({
            "matchConditions": [{
                "name": "not-exempt",
                "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)",
            }],
            "validations": [{"expression": "object.spec.destination.namespace != 'vault'"}],
        }),
        json!({"validationActions": ["Deny"]}),
    );
    wait_for(
        "the policy with a match condition",
        |g| create(&offer(g, &ns.name, "probe", "vault", json!({})), true),
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "plain", "vault", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 422, "{ours:?}");
    assert!(
        ours.1
            .contains("failed expression: object.spec.destination.namespace != 'vault'"),
        "{ours:?}"
    );
    let [ours, twin] = both(&ns.name, "exempt", "vault", json!({"exempt": "yes"}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 201, "{ours:?}");
}

#[test]
fn a_policy_whose_expression_errors_refuses_under_fail_and_admits_under_ignore() {
    let ns = env().cp.namespace("vap-error").unwrap();
    // `spec.nothing` does not exist: the expression errors on every object.
    let failing = Policy::validating(
        &format!("{}-fail", ns.name),
        &ns.name,
        json!({
            "failurePolicy": "Fail",
            "validations": [{"expression": "object.spec.nothing == 'x'"}],
        }),
        json!({"validationActions": ["Deny"]}),
    );
    wait_for(
        "the failing policy",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "refused", "dev", json!({}));
    assert_eq!(ours, twin);
    assert!(ours.0 >= 400, "{ours:?}");
    assert!(ours.1.contains("no such key"), "{ours:?}");
    drop(failing);

    let _ignoring = Policy::validating(
        &format!("{}-ignore", ns.name),
        &ns.name,
        json!({
            "failurePolicy": "Ignore",
            "validations": [{"expression": "object.spec.nothing == 'x'"}],
        }),
        json!({"validationActions": ["Deny"]}),
    );
    wait_for(
        "the ignoring policy",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status == 201,
    );
    let [ours, twin] = both(&ns.name, "admitted", "dev", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 201, "{ours:?}");
}

#[test]
fn a_mutating_admission_policy_labels_the_transfer_as_for_the_crd() {
    let ns = env().cp.namespace("map-label").unwrap();
    let _policy = Policy::mutating(
        &format!("{}-label", ns.name),
        &ns.name,
        json!({
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {
                    "expression": "Object{metadata: Object.metadata{labels: {'governed-by': 'policy'}}}",
                },
            }, {
                "patchType": "JSONPatch",
                "jsonPatch": {
                    "expression": "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'checked': object.spec.destination.namespace}}]",
                },
            }],
        }),
    );
    wait_for(
        "the mutating policy",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.json()["metadata"]["labels"]["governed-by"] == "policy",
    );
    for group in [OURS, TWIN] {
        let resp = create(
            &offer(group, &ns.name, "t", "dev", json!({"team": "a"})),
            false,
        );
        assert_eq!(resp.status, 201, "{group}: {}", resp.text());
        let obj = resp.json();
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"team": "a", "governed-by": "policy"}),
            "{group}"
        );
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"checked": "dev"}),
            "{group}"
        );
        // What the server stamps is not the mutation's to change.
        if group == OURS {
            assert_eq!(obj["spec"]["requester"]["username"], "admin", "{obj}");
        }
    }
}

#[test]
fn an_audit_binding_admits_the_write_and_records_the_failure_in_the_audit_log() {
    let ns = env().cp.namespace("vap-audit").unwrap();
    let name = format!("{}-audit", ns.name);
    let _policy = Policy::validating(
        &name,
        &ns.name,
        json!({
            "validations": [{
                "expression": "object.spec.destination.namespace != 'vault'",
                "message": "vault is watched",
            }],
            "auditAnnotations": [{
                "key": "destination",
                "valueExpression": "string(object.spec.destination.namespace)",
            }],
        }),
        json!({"validationActions": ["Audit"]}),
    );
    let log = env().cp.server_audit_log(env().cp.server_port);
    let events = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    // An Audit action changes nothing a client sees: wait for its
    // annotation on a create of ours.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let event = loop {
        let probe = format!("audited-{n}");
        n += 1;
        let resp = create(&offer(OURS, &ns.name, &probe, "vault", json!({})), false);
        assert_eq!(resp.status, 201, "{}", resp.text());
        assert!(
            resp.headers_named("Warning").is_empty(),
            "{:?}",
            resp.headers
        );
        std::thread::sleep(Duration::from_millis(300));
        let found = events().into_iter().find(|e| {
            e["objectRef"]["name"] == probe.as_str()
                && e["stage"] == "ResponseComplete"
                && e["annotations"]
                    .get("validation.policy.admission.k8s.io/validation_failure")
                    .is_some()
        });
        if let Some(e) = found {
            break e;
        }
        assert!(Instant::now() < deadline, "no audited failure in {log:?}");
    };
    let failure: Value = serde_json::from_str(
        event["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(failure[0]["message"], "vault is watched", "{failure}");
    assert_eq!(failure[0]["policy"], name.as_str(), "{failure}");
    assert_eq!(failure[0]["binding"], name.as_str(), "{failure}");
    assert_eq!(
        failure[0]["validationActions"],
        json!(["Audit"]),
        "{failure}"
    );
    assert_eq!(
        event["annotations"][format!("{name}/destination")],
        "vault",
        "{event}"
    );
}

// ---------------------------------------------------------------------------
// Webhooks: a real HTTPS webhook started by the test, with its own CA,
// registered in kube-apiserver for both groups.

use sta_testenv::webhook::{Reply, WebhookServer};

/// A webhook configuration with one webhook, for both groups'
/// namespacetransfers in namespace `ns`; removed when dropped.
struct Hook {
    kind: &'static str,
    name: String,
}

impl Hook {
    /// `kind` is `Validating` or `Mutating`; `webhook` is merged over the
    /// standard webhook (clientConfig from `url` and `ca`).
    fn install(
        kind: &'static str,
        name: &str,
        ns: &str,
        url: &str,
        ca: &str,
        webhook: Value,
    ) -> Self {
        let mut hook = json!({
            "name": format!("{name}.admission.test"),
            "clientConfig": {"url": url, "caBundle": sta_testenv::base64(ca.as_bytes())},
            "rules": [{
                "apiGroups": [OURS, TWIN],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["namespacetransfers"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "timeoutSeconds": 5,
        });
        for (k, v) in webhook.as_object().unwrap() {
            hook[k] = v.clone();
        }
        apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": format!("{kind}WebhookConfiguration"),
                "metadata": {"name": name},
                "webhooks": [hook],
            })
            .to_string(),
        );
        Self {
            kind,
            name: name.to_owned(),
        }
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        delete(
            &format!("{}webhookconfiguration", self.kind.to_ascii_lowercase()),
            &self.name,
        );
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn a_validating_webhook_refuses_and_a_mutating_webhook_labels_as_for_the_crd() {
    let ns = env().cp.namespace("hook-basic").unwrap();
    let validator = WebhookServer::start(|req| {
        if req["object"]["spec"]["destination"]["namespace"] == "vault" {
            Reply::deny(403, "the vault is closed")
        } else {
            Reply::warn(&["checked by the test webhook"])
        }
    })
    .unwrap();
    let mutator = WebhookServer::start(|req| {
        if req["object"]["metadata"]["labels"].is_object() {
            Reply::patch(
                json!([{"op": "add", "path": "/metadata/labels/webhooked", "value": "yes"}]),
            )
        } else {
            Reply::patch(
                json!([{"op": "add", "path": "/metadata/labels", "value": {"webhooked": "yes"}}]),
            )
        }
    })
    .unwrap();
    let _v = Hook::install(
        "Validating",
        &format!("{}-v", ns.name),
        &ns.name,
        &validator.url("/validate"),
        validator.ca_bundle_pem(),
        json!({}),
    );
    let _m = Hook::install(
        "Mutating",
        &format!("{}-m", ns.name),
        &ns.name,
        &mutator.url("/mutate"),
        mutator.ca_bundle_pem(),
        json!({}),
    );
    wait_for(
        "the webhooks",
        |g| create(&offer(g, &ns.name, "probe", "vault", json!({})), true),
        |r| r.status != 201,
    );
    wait_for(
        "the mutating webhook",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.json()["metadata"]["labels"]["webhooked"] == "yes",
    );
    let [ours, twin] = both(&ns.name, "to-vault", "vault", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 403, "{ours:?}");
    assert!(
        ours.1.contains("denied the request: the vault is closed"),
        "{ours:?}"
    );
    for group in [OURS, TWIN] {
        let resp = create(
            &offer(group, &ns.name, "t", "dev", json!({"team": "a"})),
            false,
        );
        assert_eq!(resp.status, 201, "{group}: {}", resp.text());
        assert_eq!(
            resp.json()["metadata"]["labels"],
            json!({"team": "a", "webhooked": "yes"}),
            "{group}"
        );
        let (_, _, warnings) = answer(&resp);
        assert_eq!(warnings.len(), 1, "{group}: {warnings:?}");
        assert!(
            warnings[0].contains("checked by the test webhook"),
            "{warnings:?}"
        );
    }
    // Both webhooks saw our objects, with the requester's identity: the
    // validator after the mutator, so with its label.
    let seen: Vec<Value> = validator
        .requests()
        .into_iter()
        .filter(|r| r["kind"]["group"] == OURS && r["name"] == "t")
        .collect();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0]["operation"], "CREATE");
    assert_eq!(seen[0]["userInfo"]["username"], "admin");
    assert_eq!(seen[0]["resource"]["resource"], "namespacetransfers");
    assert_eq!(seen[0]["object"]["metadata"]["labels"]["webhooked"], "yes");
}

#[test]
fn a_webhook_that_times_out_fails_closed_under_fail_and_open_under_ignore() {
    let ns = env().cp.namespace("hook-slow").unwrap();
    let slow =
        WebhookServer::start(|_| Reply::sleep(Duration::from_secs(4), Reply::allow())).unwrap();
    let name = format!("{}-slow", ns.name);
    let install = |policy: &str| {
        Hook::install(
            "Validating",
            &name,
            &ns.name,
            &slow.url("/slow"),
            slow.ca_bundle_pem(),
            json!({"timeoutSeconds": 1, "failurePolicy": policy}),
        )
    };
    let hook = install("Fail");
    wait_for(
        "the slow webhook",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status != 201,
    );
    let started = Instant::now();
    let resp = create(&offer(OURS, &ns.name, "refused", "dev", json!({})), false);
    let took = started.elapsed();
    let twin = create(&offer(TWIN, &ns.name, "refused", "dev", json!({})), false);
    assert_eq!(
        (resp.status, twin.status),
        (500, 500),
        "{} / {}",
        resp.text(),
        twin.text()
    );
    let message = resp.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.starts_with(&format!(
            "Internal error occurred: failed calling webhook \"{name}.admission.test\""
        )),
        "{message}"
    );
    // Bounded by the webhook's timeout, not by its four seconds.
    assert!(took < Duration::from_secs(4), "took {took:?}");

    std::mem::forget(hook); // replaced in place below
    let _hook = install("Ignore");
    wait_for(
        "the ignored slow webhook",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status == 201,
    );
    let [ours, twin] = both(&ns.name, "admitted", "dev", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 201, "{ours:?}");
}

#[test]
fn a_webhook_that_is_down_fails_closed_under_fail_and_open_under_ignore() {
    let ns = env().cp.namespace("hook-down").unwrap();
    let name = format!("{}-down", ns.name);
    let url = format!("https://127.0.0.1:{}/down", closed_port());
    // Any CA will do: nothing answers.
    let ca = WebhookServer::start(|_| Reply::allow()).unwrap();
    let install = |policy: &str| {
        Hook::install(
            "Validating",
            &name,
            &ns.name,
            &url,
            ca.ca_bundle_pem(),
            json!({"failurePolicy": policy}),
        )
    };
    let hook = install("Fail");
    wait_for(
        "the webhook that is down",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status != 201,
    );
    let [ours, twin] = both(&ns.name, "refused", "dev", json!({}));
    assert_eq!((ours.0, twin.0), (500, 500), "{ours:?} {twin:?}");
    assert!(ours.1.contains("failed calling webhook"), "{ours:?}");
    assert!(ours.1.contains("connection refused"), "{ours:?}");
    std::mem::forget(hook);
    let _hook = install("Ignore");
    wait_for(
        "the ignored webhook that is down",
        |g| create(&offer(g, &ns.name, "probe", "dev", json!({})), true),
        |r| r.status == 201,
    );
    let [ours, twin] = both(&ns.name, "admitted", "dev", json!({}));
    assert_eq!(ours, twin);
    assert_eq!(ours.0, 201, "{ours:?}");
}

#[test]
fn a_dry_run_calls_webhooks_without_side_effects_with_dry_run_set_and_stores_nothing() {
    let ns = env().cp.namespace("hook-dry").unwrap();
    let pure = WebhookServer::start(|_| Reply::allow()).unwrap();
    let careful = WebhookServer::start(|_| Reply::allow()).unwrap();
    let _pure = Hook::install(
        "Validating",
        &format!("{}-pure", ns.name),
        &ns.name,
        &pure.url("/pure"),
        pure.ca_bundle_pem(),
        json!({"sideEffects": "None"}),
    );
    let _careful = Hook::install(
        "Mutating",
        &format!("{}-careful", ns.name),
        &ns.name,
        &careful.url("/careful"),
        careful.ca_bundle_pem(),
        json!({"sideEffects": "NoneOnDryRun"}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for group in [OURS, TWIN] {
        let called = |hook: &WebhookServer| {
            hook.requests()
                .iter()
                .any(|r| r["kind"]["group"] == group && r["dryRun"] == true)
        };
        while !(called(&pure) && called(&careful)) {
            let resp = create(&offer(group, &ns.name, "probe", "dev", json!({})), true);
            assert_eq!(resp.status, 201, "{}", resp.text());
            assert!(
                Instant::now() < deadline,
                "{group}: the webhooks never saw a dry run"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // Nothing was stored.
        let get = env()
            .http
            .request(
                "GET",
                &format!(
                    "/apis/{group}/v1alpha1/namespaces/{}/namespacetransfers/probe",
                    ns.name
                ),
                &[],
                b"",
            )
            .unwrap();
        assert_eq!(get.status, 404, "{}", get.text());
    }
    // A real write calls them without it.
    let [ours, twin] = both(&ns.name, "real", "dev", json!({}));
    assert_eq!((ours.0, twin.0), (201, 201), "{ours:?} {twin:?}");
    assert!(pure
        .requests()
        .iter()
        .any(|r| r["kind"]["group"] == OURS && r["name"] == "real" && r["dryRun"] == false));
    // A webhook with side effects cannot be registered through v1, so no
    // dry run can meet one (the server still refuses it, as kube, should
    // one come from an older configuration: see the unit tests).
    let run = env().cp.kubectl().run_with_stdin(
        &["apply", "-f", "-"],
        Some(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": format!("{}-effects", ns.name)},
                "webhooks": [{
                    "name": "effects.admission.test",
                    "clientConfig": {"url": pure.url("/x"), "caBundle": sta_testenv::base64(pure.ca_bundle_pem().as_bytes())},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "Some",
                }],
            })
            .to_string(),
        ),
    );
    assert!(!run.success);
    assert!(
        run.stderr.contains("Unsupported value: \"Some\""),
        "{}",
        run.stderr
    );
}
