//! Server-side apply and `metadata.managedFields`, checked against
//! kube-apiserver itself (issue 15).
//!
//! DESIGN §3.1 promises apply, conflicts and managedFields "exactly as
//! kube-apiserver does it for a CRD of the same schema". So the oracle is
//! kube-apiserver serving the CRD twin ([`sta_testenv::crd`], generated from
//! our checked-in OpenAPI, list types and all). One scenario of raw HTTP
//! requests runs twice, step by step: once against our group (through the
//! aggregator) and once against the twin's group, in the same namespace, as
//! the same admin. Every answer (status code, Content-Type, `Warning`
//! headers, body) and the object each step leaves behind must be equal once
//! [`normalize`] has removed what must differ; each thing it removes says why.
//!
//! The scenario stays away from what our server deliberately does otherwise:
//! our spec is immutable after create and the twin's is not, so every apply
//! keeps the spec it was created with, and the one step that changes it is
//! marked [`Step::ours_only`] and checked on its own.
//!
//! Where we answer otherwise on purpose, the step names a [`Deviation`]:
//! a configuration that does not fit the schema is kube's 500 but our 400
//! (bad input is never a server error here), and our YAML parser words its
//! errors in its own way. Each is checked exactly, so nothing else hides
//! behind it.
//!
//! [`two_crd_twins_compare_equal_under_the_normalization`] runs the same
//! scenario against two twins in two groups. They must compare equal: that
//! shows the scenario is deterministic and the normalization hides nothing
//! kube-apiserver's answers depend on beyond the group, so that a difference
//! against our server is ours to fix.
//!
//! Our controllers are off (`--controllers=-namespacetransfer,-ephemeralclaim`),
//! so nothing but the scenario writes the objects: the twin has no controller
//! either.
//!
//! Run alone with
//! `cargo test --locked --features fault-injection --test apply_differential -- --nocapture`.
//! Each run prints one line per step and writes every request and both raw
//! answers to `apply-differential-*.json` in the control plane's directory
//! (under `target/testenv/`): kube-apiserver's answers, to read as a
//! reference. `APPLY_DIFFERENTIAL_SKEW_MS=800` delays the second side of
//! every step, to show that no compared answer depends on the clock.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use sta_testenv::http::{HttpClient, HttpResponse};
use sta_testenv::{crd, ControlPlane, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
/// Our group, served by our server behind the aggregator.
const OURS: &str = sta_testenv::GROUP;
/// The CRD twin's group, served by kube-apiserver: the oracle.
const TWIN: &str = crd::GROUP;
/// A second twin, generated the same way, to check the harness against.
const SECOND_TWIN: &str = "storage.transfer.example.org";

const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";
const JSON: &str = "application/json";
/// What a test client says it is, unless a step says otherwise.
const TEST_AGENT: &str = "apply-differential/1.0 (scenario)";
/// kubectl's User-Agent: kube names the manager of a write without
/// `fieldManager` after the part before the first `/`, here `kubectl`.
const KUBECTL_AGENT: &str = "kubectl/v1.36.3 (linux/amd64) kubernetes/abc";

/// One control plane for both tests, with our controllers off and both CRD
/// twins installed and served.
struct Env {
    cp: ControlPlane,
    http: HttpClient,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut opts = Options::for_tests(BIN);
        opts.server_args
            .push("--controllers=-namespacetransfer,-ephemeralclaim".into());
        let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
        let openapi = crd::checked_in_openapi().unwrap_or_else(|e| panic!("{e}"));
        for group in [TWIN, SECOND_TWIN] {
            let path = cp.dir.join(format!("crd-{group}.json"));
            let twin = crd::namespace_transfer_crd_in(&openapi, group);
            std::fs::write(&path, serde_json::to_vec_pretty(&twin).unwrap()).unwrap();
            cp.kubectl()
                .ok(&["apply", "-f", &path.display().to_string()]);
            cp.kubectl().ok(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/namespacetransfers.{group}"),
            ]);
        }
        let http = cp.apiserver_http().unwrap();
        // Established is not yet served: wait until each group answers a list.
        for group in [OURS, TWIN, SECOND_TWIN] {
            let path = format!("/apis/{group}/v1alpha1/namespaces/default/namespacetransfers");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let resp = http.request("GET", &path, &[], b"").unwrap();
                if resp.status == 200 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{path} is not served: {} {}",
                    resp.status,
                    resp.text()
                );
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        Env { cp, http }
    })
}

/// Where a scenario runs: a fresh namespace with a ConfigMap `owner` for
/// owner references to name.
struct Scene {
    ns: sta_testenv::Namespace,
    owner_uid: String,
    http: HttpClient,
}

impl Scene {
    fn new(prefix: &str) -> Self {
        let env = env();
        let ns = env.cp.namespace(prefix).unwrap();
        let resp = env
            .http
            .request(
                "POST",
                &format!("/api/v1/namespaces/{}/configmaps", ns.name),
                &[("Content-Type", JSON)],
                br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}"#,
            )
            .unwrap();
        assert_eq!(resp.status, 201, "{}", resp.text());
        let owner_uid = resp.json()["metadata"]["uid"].as_str().unwrap().to_owned();
        Self {
            ns,
            owner_uid,
            http: env.http.clone(),
        }
    }
}

#[test]
fn server_side_apply_answers_as_kube_apiserver_does_for_the_crd_twin() {
    let env = env();
    let scene = Scene::new("apply-diff");
    let mut ours = Side::new(OURS, &scene, true);
    let mut twin = Side::new(TWIN, &scene, false);
    let steps = scenario();
    let transcript = env.cp.dir.join("apply-differential-ours-vs-twin.json");
    let report = run(&steps, &mut ours, &mut twin, &transcript);
    assert!(report.is_empty(), "{report}");
}

#[test]
fn two_crd_twins_compare_equal_under_the_normalization() {
    let env = env();
    let scene = Scene::new("apply-twins");
    let mut first = Side::new(TWIN, &scene, false);
    let mut second = Side::new(SECOND_TWIN, &scene, false);
    let steps = scenario();
    let transcript = env.cp.dir.join("apply-differential-twin-vs-twin.json");
    let report = run(&steps, &mut first, &mut second, &transcript);
    assert!(report.is_empty(), "{report}");
}

// ---------------------------------------------------------------------------
// The scenario.

/// A Source-role transfer's spec for the claim `claim` in the scenario's
/// namespace. Our server lets one active transfer hold a source claim, so
/// each object names its own.
fn spec(claim: &str) -> Value {
    // Every field our server defaults is given, so that defaulting changes
    // nothing: the twin has no defaults (the generator drops them), and a
    // defaulted field would be a difference in the object, not in apply.
    json!({
        "source": {"kind": "PersistentVolumeClaim", "namespace": "<ns>", "name": claim},
        "destination": {"namespace": "receiver", "name": claim},
        "mode": "Move",
        "activeDeadlineSeconds": 3600,
    })
}

/// An apply configuration of `name` with `rest` (metadata beyond the name,
/// spec, status) merged in.
fn config(name: &str, rest: Value) -> Value {
    let mut obj = json!({
        "apiVersion": "<group>/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name},
    });
    merge(&mut obj, &rest);
    obj
}

/// A `metav1.Condition` as a controller would write it.
fn condition(kind: &str, status: &str, reason: &str) -> Value {
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": format!("{kind} is {status}"),
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    })
}

/// The first status written, in place of the whole status: our server
/// starts every transfer at `{phase: Pending, role}`, so the first status
/// write replaces it completely and leaves out `role`, after which both
/// sides hold the same status (see [`normalize`]).
fn first_status() -> Value {
    json!({
        "phase": "WaitingForPeer",
        "reason": "WaitingForPeer",
        "message": "waiting for the destination to consent",
        "observedGeneration": 1,
        "conditions": [condition("PeerMatched", "False", "NoPeer")],
        "sourceClaim": {
            "name": "claim-1",
            "uid": "8a1f6c2e-0000-4000-8000-000000000001",
            "volumeName": "pv-1",
            "accessModes": ["ReadWriteOnce"],
            "storageRequest": "1Gi",
        },
    })
}

/// An owner reference to the ConfigMap each test creates (`<owner-uid>`).
fn owner_reference(controller: bool) -> Value {
    let mut reference = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": "<owner-uid>",
    });
    if controller {
        reference["controller"] = json!(true);
    }
    reference
}

fn alice_t1() -> Value {
    json!({
        "metadata": {
            "labels": {"added": "later"},
            "annotations": {"scenario.test/shared": "v1", "scenario.test/new": "yes"},
        },
        "spec": {
            "source": {"kind": "PersistentVolumeClaim", "namespace": "<ns>", "name": "claim-1"},
            "destination": {"namespace": "receiver", "name": "claim-1"},
            "activeDeadlineSeconds": 3600,
        },
    })
}

fn bob_t1() -> Value {
    json!({
        "metadata": {"labels": {"tier": "gold", "app": "demo"}},
        "spec": {"mode": "Move"},
    })
}

/// The steps, in order. Each runs against both sides.
fn scenario() -> Vec<Step> {
    let mut steps = vec![
        // Create on apply, from YAML as a person writes it.
        Step::apply_yaml(
            "alice creates t1 by applying YAML",
            "t1",
            "alice",
            r#"
apiVersion: <group>/v1alpha1
kind: NamespaceTransfer
metadata:
  name: t1
  labels:
    app: demo
    tier: silver
    alice-only: "yes"
  annotations:
    scenario.test/note: from alice
    scenario.test/shared: "v1"
spec:
  source: {kind: PersistentVolumeClaim, namespace: <ns>, name: claim-1}
  destination: {namespace: receiver, name: claim-1}
  mode: Move
  activeDeadlineSeconds: 3600
"#,
        ),
        Step::apply(
            "alice applies the same configuration again: a no-op",
            "t1",
            "alice",
            config(
                "t1",
                json!({
                    "metadata": {
                        "labels": {"app": "demo", "tier": "silver", "alice-only": "yes"},
                        "annotations": {"scenario.test/note": "from alice", "scenario.test/shared": "v1"},
                    },
                    "spec": spec("claim-1"),
                }),
            ),
        ),
        Step::apply(
            "bob applies a label alice owns with another value: a conflict",
            "t1",
            "bob",
            config("t1", json!({"metadata": {"labels": {"tier": "gold"}}})),
        ),
        Step::apply(
            "bob applies two labels and a spec field alice owns: three conflicts",
            "t1",
            "bob",
            config(
                "t1",
                json!({"metadata": {"labels": {"tier": "gold", "app": "other"}}, "spec": {"mode": "Clone"}}),
            ),
        ),
        Step::apply(
            "bob forces the label: he takes it from alice",
            "t1",
            "bob",
            config("t1", json!({"metadata": {"labels": {"tier": "gold"}}})),
        )
        .query("force=true"),
        Step::apply(
            "bob applies alice's values of a label and a spec field: shared, no conflict",
            "t1",
            "bob",
            config("t1", bob_t1()),
        ),
        Step::apply(
            "alice stops applying a label she alone owns (removed), a label and a spec field bob shares (kept), and adds a label",
            "t1",
            "alice",
            config(
                "t1",
                json!({
                    "metadata": {
                        "labels": {"added": "later"},
                        "annotations": {"scenario.test/note": "from alice", "scenario.test/shared": "v1"},
                    },
                    "spec": {
                        "source": {"kind": "PersistentVolumeClaim", "namespace": "<ns>", "name": "claim-1"},
                        "destination": {"namespace": "receiver", "name": "claim-1"},
                        "activeDeadlineSeconds": 3600,
                    },
                }),
            ),
        ),
        Step::apply(
            "alice drops an annotation, adds one, and adds a finalizer (a set)",
            "t1",
            "alice",
            config(
                "t1",
                merged(
                    alice_t1(),
                    json!({"metadata": {"finalizers": ["scenario.test/a"]}}),
                ),
            ),
        ),
        Step::apply(
            "bob applies the same finalizer and another: the first is shared",
            "t1",
            "bob",
            config(
                "t1",
                merged(
                    bob_t1(),
                    json!({"metadata": {"finalizers": ["scenario.test/a", "scenario.test/b"]}}),
                ),
            ),
        ),
        Step::apply(
            "alice stops applying the finalizer bob shares: it stays",
            "t1",
            "alice",
            config("t1", alice_t1()),
        ),
        Step::apply(
            "alice applies an owner reference (a list keyed by uid)",
            "t1",
            "alice",
            config(
                "t1",
                merged(alice_t1(), json!({"metadata": {"ownerReferences": [owner_reference(false)]}})),
            ),
        ),
        Step::apply(
            "bob applies the same owner reference as controller: an owner reference is atomic, so a conflict",
            "t1",
            "bob",
            config(
                "t1",
                merged(
                    bob_t1(),
                    json!({"metadata": {
                        "finalizers": ["scenario.test/a", "scenario.test/b"],
                        "ownerReferences": [owner_reference(true)],
                    }}),
                ),
            ),
        ),
        Step::apply(
            "alice stops applying the owner reference she alone owns: it is removed",
            "t1",
            "alice",
            config("t1", alice_t1()),
        ),
        Step::apply(
            "an apply without fieldManager is refused",
            "t1",
            "",
            config("t1", alice_t1()),
        ),
        Step::apply(
            "an apply whose fieldManager is longer than 128 characters is refused",
            "t1",
            &"m".repeat(129),
            config("t1", alice_t1()),
        ),
        Step::apply(
            "a dry-run apply answers the result and writes nothing",
            "t1",
            "bob",
            config(
                "t1",
                merged(
                    bob_t1(),
                    json!({"metadata": {"labels": {"dry": "run"}, "finalizers": ["scenario.test/a", "scenario.test/b"]}}),
                ),
            ),
        )
        .query("dryRun=All"),
        Step::apply(
            "fieldValidation=Strict: an apply with an unknown field",
            "t1",
            "alice",
            config("t1", merged(alice_t1(), json!({"spec": {"bogus": 1}}))),
        )
        .query("fieldValidation=Strict")
        .deviation(Deviation::BadRequestNotServerError),
        Step::apply(
            "fieldValidation=Warn: an apply with an unknown field",
            "t1",
            "alice",
            config("t1", merged(alice_t1(), json!({"spec": {"bogus": 1}}))),
        )
        .query("fieldValidation=Warn")
        .deviation(Deviation::BadRequestNotServerError),
        Step::apply(
            "fieldValidation=Ignore: an apply with an unknown field",
            "t1",
            "alice",
            config("t1", merged(alice_t1(), json!({"spec": {"bogus": 1}}))),
        )
        .query("fieldValidation=Ignore")
        .deviation(Deviation::BadRequestNotServerError),
        Step::apply_yaml(
            "fieldValidation=Strict: an apply whose YAML names a key twice",
            "t1",
            "alice",
            r#"
apiVersion: <group>/v1alpha1
kind: NamespaceTransfer
metadata:
  name: t1
  labels:
    added: later
    added: again
"#,
        )
        .query("fieldValidation=Strict")
        .deviation(Deviation::YamlParserWording("error strict decoding YAML: ")),
        Step::apply_yaml(
            "an apply whose body is a list, not an object",
            "t1",
            "alice",
            "[1, 2, 3]\n",
        ),
        Step::apply_yaml(
            "an apply whose body is a string, not an object",
            "t1",
            "alice",
            "just a string\n",
        ),
        Step::apply_yaml(
            "an apply whose body is not YAML",
            "t1",
            "alice",
            "{\"apiVersion\": \n",
        )
        .deviation(Deviation::YamlParserWording(
            "error decoding YAML: error converting YAML to JSON: ",
        )),
        Step::apply(
            "an apply of another kind",
            "t1",
            "alice",
            merged(
                config("t1", alice_t1()),
                json!({"kind": "EphemeralClaim"}),
            ),
        ),
        Step::apply(
            "an apply of another version of the group",
            "t1",
            "alice",
            merged(
                config("t1", alice_t1()),
                json!({"apiVersion": "<group>/v1beta1"}),
            ),
        ),
        Step::apply(
            "an apply of another group",
            "t1",
            "alice",
            merged(config("t1", alice_t1()), json!({"apiVersion": "apps/v1"})),
        ),
        Step::apply(
            "an apply that names another object than the URL",
            "t1",
            "alice",
            merged(config("t1", alice_t1()), json!({"metadata": {"name": "t9"}})),
        ),
        Step::apply(
            "an apply carrying metadata.managedFields",
            "t1",
            "alice",
            config(
                "t1",
                merged(
                    alice_t1(),
                    json!({"metadata": {"managedFields": [{
                        "manager": "alice",
                        "operation": "Apply",
                        "apiVersion": "<group>/v1alpha1",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {"f:added": {}}}},
                    }]}}),
                ),
            ),
        ),
        Step::patch(
            "a strategic merge patch is refused, as for every custom resource",
            "t1",
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"strategic": "yes"}}}),
        )
        .manager("patcher"),
        Step::apply_cbor(
            "alice applies her configuration in CBOR",
            "t1",
            "alice",
            config("t1", alice_t1()),
        ),
        Step::patch(
            "force on a merge patch is refused",
            "t1",
            MERGE,
            json!({"metadata": {"labels": {"forced": "yes"}}}),
        )
        .manager("patcher")
        .query("force=true"),
        Step::put(
            "dave updates t1 with PUT: an Update entry",
            "t1",
            edit(|o| {
                o["metadata"]["labels"]["edited-by"] = json!("dave");
            }),
        )
        .manager("dave"),
        Step::put(
            "kubectl updates t1 with PUT and no fieldManager: the manager is the User-Agent's program",
            "t1",
            edit(|o| {
                o["metadata"]["annotations"]["scenario.test/kubectl"] = json!("edited");
            }),
        )
        .agent(KUBECTL_AGENT),
        Step::patch(
            "a merge patch adds a label and removes an annotation alice applied",
            "t1",
            MERGE,
            json!({"metadata": {"labels": {"patched": "merge"}, "annotations": {"scenario.test/shared": null}}}),
        )
        .manager("patcher"),
        Step::patch(
            "a JSON patch adds a label and changes one bob applied: it takes it over",
            "t1",
            JSON_PATCH,
            json!([
                {"op": "add", "path": "/metadata/labels/json", "value": "patch"},
                {"op": "replace", "path": "/metadata/labels/tier", "value": "platinum"},
            ]),
        )
        .manager("jsonpatcher"),
        Step::apply(
            "bob applies his label again: a conflict with an Update manager",
            "t1",
            "bob",
            config(
                "t1",
                merged(
                    bob_t1(),
                    json!({"metadata": {"finalizers": ["scenario.test/a", "scenario.test/b"]}}),
                ),
            ),
        ),
        Step::apply(
            "alice applies the annotation the merge patch removed: hers again",
            "t1",
            "alice",
            config("t1", alice_t1()),
        ),
        Step::put(
            "a PUT with fieldValidation=Warn and an unknown field",
            "t1",
            edit(|o| {
                o["spec"]["bogus"] = json!(true);
            }),
        )
        .manager("dave")
        .query("fieldValidation=Warn"),
        // Status, through its subresource.
        Step::put(
            "status-writer replaces the status with PUT on /status",
            "t1",
            edit(|o| {
                o["status"] = first_status();
            }),
        )
        .manager("status-writer")
        .on_status(),
        Step::patch(
            "status-patcher merge-patches the message and the conditions on /status",
            "t1",
            MERGE,
            json!({"status": {
                "message": "matched",
                "conditions": [
                    condition("PeerMatched", "True", "Matched"),
                    condition("Authorized", "True", "Allowed"),
                ],
            }}),
        )
        .manager("status-patcher")
        .on_status(),
        Step::patch(
            "status-jsonpatcher JSON-patches the phase on /status",
            "t1",
            JSON_PATCH,
            json!([{"op": "replace", "path": "/status/phase", "value": "Rebinding"}]),
        )
        .manager("status-jsonpatcher")
        .on_status(),
        Step::apply_yaml(
            "carol applies status fields nobody owns on /status",
            "t1",
            "carol",
            r#"
apiVersion: <group>/v1alpha1
kind: NamespaceTransfer
metadata:
  name: t1
status:
  volumeName: pv-1
  peer:
    namespace: receiver
    name: t1-peer
"#,
        )
        .on_status(),
        Step::apply(
            "carol applies a condition on /status",
            "t1",
            "carol",
            config(
                "t1",
                json!({"status": {
                    "volumeName": "pv-1",
                    "peer": {"namespace": "receiver", "name": "t1-peer"},
                    "conditions": [condition("Ready", "False", "Rebinding")],
                }}),
            ),
        )
        .on_status(),
        Step::apply(
            "carol forces her conditions on /status",
            "t1",
            "carol",
            config(
                "t1",
                json!({"status": {
                    "volumeName": "pv-1",
                    "peer": {"namespace": "receiver", "name": "t1-peer"},
                    "conditions": [
                        condition("Ready", "False", "Rebinding"),
                        condition("PeerMatched", "True", "Matched"),
                    ],
                }}),
            ),
        )
        .on_status()
        .query("force=true"),
        Step::apply(
            "carol applies the source claim's access modes (a list of strings) on /status",
            "t1",
            "carol",
            config(
                "t1",
                json!({"status": {
                    "volumeName": "pv-1",
                    "peer": {"namespace": "receiver", "name": "t1-peer"},
                    "sourceClaim": {"accessModes": ["ReadWriteMany"]},
                }}),
            ),
        )
        .on_status(),
        Step::apply(
            "carol forces the access modes on /status",
            "t1",
            "carol",
            config(
                "t1",
                json!({"status": {
                    "volumeName": "pv-1",
                    "peer": {"namespace": "receiver", "name": "t1-peer"},
                    "sourceClaim": {"accessModes": ["ReadWriteMany"]},
                }}),
            ),
        )
        .on_status()
        .query("force=true"),
        Step::apply(
            "carol applies a label on /status",
            "t1",
            "carol",
            config(
                "t1",
                json!({
                    "metadata": {"labels": {"carol": "status"}},
                    "status": {
                        "volumeName": "pv-1",
                        "peer": {"namespace": "receiver", "name": "t1-peer"},
                        "sourceClaim": {"accessModes": ["ReadWriteMany"]},
                    },
                }),
            ),
        )
        .on_status(),
        // With nothing else changed, whether kube writes here would depend
        // on the clock: it skips a write that changes only managedFields
        // times, unless the new time reorders the entries. So alice adds a
        // label too.
        Step::apply(
            "alice applies a status on the main resource: it is not hers",
            "t1",
            "alice",
            config(
                "t1",
                merged(
                    alice_t1(),
                    json!({
                        "metadata": {"labels": {"status-ignored": "yes"}},
                        "status": {"phase": "Failed", "message": "alice"},
                    }),
                ),
            ),
        ),
        Step::put(
            "status-writer PUTs /status with a spec change and a label: only the status counts",
            "t1",
            edit(|o| {
                o["status"]["reason"] = json!("Rebinding");
                o["spec"]["activeDeadlineSeconds"] = json!(7200);
                o["metadata"]["labels"]["via-status"] = json!("put");
            }),
        )
        .manager("status-writer")
        .on_status(),
        // managedFields written directly.
        Step::put(
            "a PUT with a bogus managedFields entry keeps the live ones",
            "t1",
            edit(|o| {
                o["metadata"]["labels"]["bogus-fields"] = json!("sent");
                o["metadata"]["managedFields"] = json!([{
                    "manager": "bogus",
                    "operation": "Bogus",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {}},
                }]);
            }),
        )
        .manager("dave"),
        Step::put(
            "a PUT with a hand-written managedFields entry replaces them",
            "t1",
            edit(|o| {
                let api_version = o["apiVersion"].clone();
                o["metadata"]["managedFields"] = json!([{
                    "manager": "hand-written",
                    "operation": "Update",
                    "apiVersion": api_version,
                    "time": "2024-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:tier": {}}}},
                }]);
            }),
        )
        .manager("dave"),
        Step::put(
            // kube decodes a custom resource's metadata through ObjectMeta,
            // whose omitempty drops an empty list: the request then carries
            // no managedFields, and the live ones stay.
            "a PUT with managedFields: [] keeps them, for a custom resource",
            "t1",
            edit(|o| {
                o["metadata"]["managedFields"] = json!([]);
            }),
        )
        .manager("dave"),
        Step::put(
            "a PUT with managedFields: [{}] clears them",
            "t1",
            edit(|o| {
                o["metadata"]["managedFields"] = json!([{}]);
            }),
        )
        .manager("dave"),
        Step::apply(
            "alice applies after the clearing: what was there before belongs to before-first-apply",
            "t1",
            "alice",
            config("t1", alice_t1()),
        ),
        Step::patch(
            "a merge patch removes the finalizers",
            "t1",
            MERGE,
            json!({"metadata": {"finalizers": null}}),
        )
        .manager("patcher"),
        // Create with POST.
        Step::create(
            "creator creates t2 with POST: an Update entry",
            "t2",
            config(
                "t2",
                json!({"metadata": {"labels": {"made-by": "post"}}, "spec": spec("claim-2")}),
            ),
        )
        .manager("creator"),
        Step::create(
            "kubectl creates t3 with POST and no fieldManager",
            "t3",
            config(
                "t3",
                json!({"metadata": {"annotations": {"scenario.test/by": "kubectl"}}, "spec": spec("claim-3")}),
            ),
        )
        .agent(KUBECTL_AGENT),
        Step::apply(
            "alice applies to t2, which was created by an update: shared fields, no conflict",
            "t2",
            "alice",
            config(
                "t2",
                json!({"metadata": {"labels": {"made-by": "post", "alice": "too"}}, "spec": spec("claim-2")}),
            ),
        ),
        Step::apply(
            "alice applies another value of a field creator owns: a conflict",
            "t2",
            "alice",
            config(
                "t2",
                json!({"metadata": {"labels": {"made-by": "apply", "alice": "too"}}, "spec": spec("claim-2")}),
            ),
        ),
        Step::apply(
            "bob applies a finalizer to t2",
            "t2",
            "bob",
            config(
                "t2",
                json!({"metadata": {"finalizers": ["scenario.test/b"]}}),
            ),
        ),
        Step::delete("t2 is deleted and waits for its finalizer", "t2"),
        Step::apply(
            "bob applies another finalizer to t2 while it is being deleted",
            "t2",
            "bob",
            config(
                "t2",
                json!({"metadata": {"finalizers": ["scenario.test/b", "scenario.test/c"]}}),
            ),
        ),
        Step::apply(
            "bob stops applying his finalizer: t2 goes away",
            "t2",
            "bob",
            config("t2", json!({"metadata": {"labels": {"bob": "done"}}})),
        ),
        // More than ten Update managers: the oldest are merged into one
        // entry. Their names sort as they run, so that which are oldest does
        // not depend on whether two of them fall in the same second.
        Step::apply(
            "alice creates t4 by applying",
            "t4",
            "alice",
            config("t4", json!({"spec": spec("claim-4")})),
        ),
    ];
    for n in 1..=11 {
        steps.push(
            Step::patch(
                if n == 11 {
                    "the eleventh Update manager: the oldest two become one entry"
                } else {
                    "another Update manager merge-patches t4"
                },
                "t4",
                MERGE,
                json!({"metadata": {"labels": {format!("update-{n:02}"): "yes"}}}),
            )
            .manager(&format!("update-{n:02}")),
        );
    }
    // Our spec is immutable, the twin's is not (DESIGN §2.1): a forced apply
    // that changes it is taken by the twin and refused by us.
    steps.push(
        Step::apply(
            "bob forces a spec change",
            "t1",
            "bob",
            config("t1", json!({"spec": {"mode": "Clone"}})),
        )
        .query("force=true")
        .ours_only(OursOnly {
            ours: 422,
            twin: 200,
            ours_mentions: "spec.mode",
        }),
    );
    steps
}

// ---------------------------------------------------------------------------
// Steps and how they are sent.

/// What a step writes to.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The collection (POST).
    Collection,
    /// The object.
    Object,
    /// The object's `/status`.
    Status,
}

/// How a step's body is made.
enum Body {
    None,
    /// JSON, with `<group>`, `<ns>` and `<owner-uid>` in its strings filled
    /// in per side.
    Json(Value),
    /// Text (YAML), with `<group>` and `<ns>` filled in per side.
    Text(String),
    /// JSON filled in as for [`Body::Json`], sent as CBOR.
    Cbor(Value),
    /// The object as the side holds it now (a GET), edited: what a client
    /// that reads, modifies and writes back sends, resourceVersion included.
    Edit(Box<dyn Fn(&mut Value)>),
}

fn edit(f: impl Fn(&mut Value) + 'static) -> Body {
    Body::Edit(Box::new(f))
}

/// A step whose answers are expected to differ, each checked on its own.
#[derive(Debug, Clone, Copy)]
struct OursOnly {
    ours: u16,
    twin: u16,
    /// Something our answer must say (the field it refuses).
    ours_mentions: &'static str,
}

/// One request of the scenario.
struct Step {
    what: String,
    method: &'static str,
    target: Target,
    /// The object the step is about, compared after the step.
    object: &'static str,
    query: Vec<String>,
    content_type: Option<&'static str>,
    user_agent: &'static str,
    body: Body,
    ours_only: Option<OursOnly>,
    deviation: Option<Deviation>,
}

/// Where our answer differs from kube-apiserver's on purpose. Each is
/// checked exactly: the twin's answer, rewritten as the deviation says,
/// must then equal ours.
#[derive(Debug, Clone, Copy)]
enum Deviation {
    /// kube-apiserver answers an applied configuration that does not fit
    /// the schema with 500 and no reason; a client's bad input is never a
    /// 500 here, so we answer 400 BadRequest with the same message.
    BadRequestNotServerError,
    /// Our YAML parser is not go-yaml: the same code, reason and message,
    /// up to the parser's own description of the error, which follows
    /// this prefix.
    YamlParserWording(&'static str),
}

impl Deviation {
    /// The twin's normalized answer as ours should be, given ours; `None`
    /// when the twin's answer is not the one this deviation expects.
    fn expected(self, twin: &Value, ours: &Value) -> Option<Value> {
        let mut expected = twin.clone();
        match self {
            Deviation::BadRequestNotServerError => {
                if twin["code"] != 500 || twin["body"]["reason"].is_string() {
                    return None;
                }
                expected["code"] = json!(400);
                expected["body"]["code"] = json!(400);
                expected["body"]["reason"] = json!("BadRequest");
            }
            Deviation::YamlParserWording(prefix) => {
                let theirs = twin["body"]["message"].as_str()?;
                let mine = ours["body"]["message"].as_str()?;
                if !theirs.starts_with(prefix) || !mine.starts_with(prefix) {
                    return None;
                }
                expected["body"]["message"] = json!(mine);
            }
        }
        Some(expected)
    }
}

impl Step {
    fn new(what: &str, method: &'static str, target: Target, object: &'static str) -> Self {
        Self {
            what: what.to_owned(),
            method,
            target,
            object,
            query: Vec::new(),
            content_type: None,
            user_agent: TEST_AGENT,
            body: Body::None,
            ours_only: None,
            deviation: None,
        }
    }

    /// `PATCH` with `application/apply-patch+yaml` as `manager` (none when
    /// empty).
    fn apply(what: &str, object: &'static str, manager: &str, config: Value) -> Self {
        let mut step = Self::new(what, "PATCH", Target::Object, object);
        step.content_type = Some(APPLY);
        step.body = Body::Json(config);
        step.manager(manager)
    }

    fn apply_yaml(what: &str, object: &'static str, manager: &str, yaml: &str) -> Self {
        let mut step = Self::apply(what, object, manager, Value::Null);
        step.body = Body::Text(yaml.trim_start().to_owned());
        step
    }

    /// `PATCH` with `application/apply-patch+cbor`.
    fn apply_cbor(what: &str, object: &'static str, manager: &str, config: Value) -> Self {
        let mut step = Self::apply(what, object, manager, Value::Null);
        step.content_type = Some("application/apply-patch+cbor");
        step.body = Body::Cbor(config);
        step
    }

    fn patch(what: &str, object: &'static str, content_type: &'static str, patch: Value) -> Self {
        let mut step = Self::new(what, "PATCH", Target::Object, object);
        step.content_type = Some(content_type);
        step.body = Body::Json(patch);
        step
    }

    fn put(what: &str, object: &'static str, body: Body) -> Self {
        let mut step = Self::new(what, "PUT", Target::Object, object);
        step.content_type = Some(JSON);
        step.body = body;
        step
    }

    fn create(what: &str, object: &'static str, body: Value) -> Self {
        let mut step = Self::new(what, "POST", Target::Collection, object);
        step.content_type = Some(JSON);
        step.body = Body::Json(body);
        step
    }

    fn delete(what: &str, object: &'static str) -> Self {
        Self::new(what, "DELETE", Target::Object, object)
    }

    fn manager(mut self, manager: &str) -> Self {
        if !manager.is_empty() {
            self.query.push(format!("fieldManager={manager}"));
        }
        self
    }

    fn query(mut self, param: &str) -> Self {
        self.query.push(param.to_owned());
        self
    }

    fn agent(mut self, agent: &'static str) -> Self {
        self.user_agent = agent;
        self
    }

    fn on_status(mut self) -> Self {
        self.target = Target::Status;
        self
    }

    fn ours_only(mut self, expected: OursOnly) -> Self {
        self.ours_only = Some(expected);
        self
    }

    /// Marks a documented difference between our answer and the twin's.
    fn deviation(mut self, deviation: Deviation) -> Self {
        self.deviation = Some(deviation);
        self
    }
}

/// One group's view of the scenario.
struct Side<'a> {
    group: &'static str,
    ns: &'a str,
    /// The uid of the ConfigMap `owner` in `ns`, for owner references.
    owner_uid: &'a str,
    http: &'a HttpClient,
    /// Whether this is our server (for [`OursOnly`] steps).
    ours: bool,
    /// The resourceVersion each object had after the previous step, so that
    /// the comparison can say whether a step wrote.
    versions: BTreeMap<String, String>,
}

/// A request as sent, for the report.
struct Sent {
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl std::fmt::Display for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} {}", self.method, self.path)?;
        for (k, v) in &self.headers {
            writeln!(f, "{k}: {v}")?;
        }
        write!(f, "\n{}", self.body)
    }
}

/// What came back, as compared.
#[derive(Debug, Clone)]
struct Answer {
    code: u16,
    content_type: String,
    warnings: Vec<String>,
    body: Value,
}

impl Answer {
    /// As received, for the transcript.
    fn raw(&self) -> Value {
        json!({
            "code": self.code,
            "contentType": self.content_type,
            "warnings": self.warnings,
            "body": self.body,
        })
    }

    fn from(resp: &HttpResponse) -> Self {
        let body = if resp.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&resp.body).unwrap_or_else(|_| Value::String(resp.text()))
        };
        Self {
            code: resp.status,
            content_type: resp.header("Content-Type").unwrap_or_default().to_owned(),
            warnings: resp
                .headers_named("Warning")
                .into_iter()
                .map(str::to_owned)
                .collect(),
            body,
        }
    }
}

impl<'a> Side<'a> {
    fn new(group: &'static str, scene: &'a Scene, ours: bool) -> Self {
        Self {
            group,
            ns: &scene.ns.name,
            owner_uid: &scene.owner_uid,
            http: &scene.http,
            ours,
            versions: BTreeMap::new(),
        }
    }

    fn collection(&self) -> String {
        format!(
            "/apis/{}/v1alpha1/namespaces/{}/namespacetransfers",
            self.group, self.ns
        )
    }

    fn fill(&self, text: &str) -> String {
        text.replace("<group>", self.group)
            .replace("<ns>", self.ns)
            .replace("<owner-uid>", self.owner_uid)
    }

    fn fill_json(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.fill(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.fill_json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.fill(k), self.fill_json(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Keeps the resourceVersion `after` (a GET) shows for `name`.
    fn remember(&mut self, name: &str, after: &Answer) {
        match after.body["metadata"]["resourceVersion"].as_str() {
            Some(rv) if after.code == 200 => {
                self.versions.insert(name.to_owned(), rv.to_owned());
            }
            _ => {
                self.versions.remove(name);
            }
        }
    }

    fn get(&self, name: &str) -> Answer {
        let path = format!("{}/{name}", self.collection());
        let resp = self
            .http
            .request("GET", &path, &[("Accept", JSON)], b"")
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        Answer::from(&resp)
    }

    fn send(&self, step: &Step) -> (Sent, Answer) {
        let mut path = self.collection();
        match step.target {
            Target::Collection => {}
            Target::Object => path = format!("{path}/{}", step.object),
            Target::Status => path = format!("{path}/{}/status", step.object),
        }
        if !step.query.is_empty() {
            path = format!("{path}?{}", step.query.join("&"));
        }
        let body: Vec<u8> = match &step.body {
            Body::None => Vec::new(),
            Body::Json(value) => serde_json::to_vec(&self.fill_json(value)).unwrap(),
            Body::Text(text) => self.fill(text).into_bytes(),
            Body::Cbor(value) => {
                // kube's CBOR starts with the self-described CBOR tag.
                let mut out = vec![0xd9, 0xd9, 0xf7];
                cbor(&self.fill_json(value), &mut out);
                out
            }
            Body::Edit(change) => {
                let mut live = self.get(step.object).body;
                change(&mut live);
                serde_json::to_vec(&live).unwrap()
            }
        };
        let mut headers = vec![
            ("Accept", JSON.to_owned()),
            ("User-Agent", step.user_agent.to_owned()),
        ];
        if let Some(ct) = step.content_type {
            headers.push(("Content-Type", ct.to_owned()));
        }
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let resp = self
            .http
            .request(step.method, &path, &pairs, &body)
            .unwrap_or_else(|e| panic!("{} {path}: {e}", step.method));
        let body = match &step.body {
            Body::Cbor(value) => {
                format!("(CBOR, {} bytes, of) {}", body.len(), self.fill_json(value))
            }
            _ => String::from_utf8_lossy(&body).into_owned(),
        };
        let sent = Sent {
            method: step.method,
            path,
            headers,
            body,
        };
        (sent, Answer::from(&resp))
    }
}

// ---------------------------------------------------------------------------
// Running and comparing.

/// One difference between the two sides, printed in full.
struct Difference {
    step: usize,
    what: String,
    /// "answer" or "object after the step".
    part: &'static str,
    sent: Option<(String, String)>,
    labels: (&'static str, &'static str),
    answers: (Value, Value),
}

/// The differences of a run, as the test failure prints them.
struct Report {
    sides: (&'static str, &'static str),
    differences: Vec<Difference>,
}

impl Report {
    fn is_empty(&self) -> bool {
        self.differences.is_empty()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} difference(s) between {} and {}; the first comes first:",
            self.differences.len(),
            self.sides.0,
            self.sides.1
        )?;
        for d in &self.differences {
            writeln!(f, "\n==== step {}: {} — {}", d.step, d.what, d.part)?;
            if let Some((a, b)) = &d.sent {
                writeln!(f, "---- request to {}:\n{a}", d.labels.0)?;
                writeln!(f, "---- request to {}:\n{b}", d.labels.1)?;
            }
            writeln!(f, "---- differing paths:")?;
            for path in differing_paths(&d.answers.0, &d.answers.1) {
                writeln!(f, "  {path}")?;
            }
            writeln!(
                f,
                "---- {} (normalized):\n{}",
                d.labels.0,
                serde_json::to_string_pretty(&d.answers.0).unwrap()
            )?;
            writeln!(
                f,
                "---- {} (normalized):\n{}",
                d.labels.1,
                serde_json::to_string_pretty(&d.answers.1).unwrap()
            )?;
        }
        Ok(())
    }
}

/// Runs every step on `a`, then on `b`, and compares the answers and the
/// objects they leave. Stops at nothing: later differences are reported too.
///
/// Writes every request and both raw answers to `transcript` (JSON), so that
/// kube-apiserver's answers can be read as a reference.
fn run(steps: &[Step], a: &mut Side, b: &mut Side, transcript: &Path) -> Report {
    let labels = (a.group, b.group);
    let mut differences = Vec::new();
    let mut record = Vec::new();
    // `APPLY_DIFFERENTIAL_SKEW_MS` delays the second side of every step, so
    // that the two sides see second boundaries at different steps: an answer
    // that depends on the clock then shows as a difference.
    let skew = Duration::from_millis(
        std::env::var("APPLY_DIFFERENTIAL_SKEW_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(0),
    );
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        if step.ours_only.is_some() && !a.ours && !b.ours {
            println!("step {n:2}: {} — skipped: ours only", step.what);
            continue;
        }
        let before_a = a.versions.get(step.object).cloned();
        let before_b = b.versions.get(step.object).cloned();
        let (sent_a, answer_a) = a.send(step);
        std::thread::sleep(skew);
        let (sent_b, answer_b) = b.send(step);
        let after_a = a.get(step.object);
        let after_b = b.get(step.object);
        a.remember(step.object, &after_a);
        b.remember(step.object, &after_b);
        record.push(json!({
            "step": n,
            "what": step.what,
            a.group: {"request": sent_a.to_string(), "answer": answer_a.raw(), "after": after_a.raw()},
            b.group: {"request": sent_b.to_string(), "answer": answer_b.raw(), "after": after_b.raw()},
        }));
        if let Some(expected) = step.ours_only {
            let (ours, twin) = if a.ours {
                (&answer_a, &answer_b)
            } else {
                (&answer_b, &answer_a)
            };
            let ok = ours.code == expected.ours
                && twin.code == expected.twin
                && ours.body.to_string().contains(expected.ours_mentions);
            println!(
                "step {n:2}: {} — ours only: ours {}, twin {} {}",
                step.what,
                ours.code,
                twin.code,
                if ok { "as expected" } else { "UNEXPECTED" }
            );
            if !ok {
                differences.push(Difference {
                    step: n,
                    what: format!(
                        "{} (expected ours {} mentioning {:?}, twin {})",
                        step.what, expected.ours, expected.ours_mentions, expected.twin
                    ),
                    part: "answer",
                    sent: Some((sent_a.to_string(), sent_b.to_string())),
                    labels,
                    answers: (answer_a.body.clone(), answer_b.body.clone()),
                });
            }
            continue;
        }
        let norm_a = normalize(&answer_a, a.group, before_a.as_deref());
        let mut norm_b = normalize(&answer_b, b.group, before_b.as_deref());
        // Only ours deviates; two twins must agree as they are.
        if let (Some(deviation), true) = (step.deviation, a.ours && !b.ours) {
            match deviation.expected(&norm_b, &norm_a) {
                Some(expected) => norm_b = expected,
                None => println!("         the twin did not answer as {deviation:?} expects"),
            }
        }
        let same_answer = norm_a == norm_b;
        println!(
            "step {n:2}: {} — {} {} / {} {}{}",
            step.what,
            a.group,
            answer_a.code,
            b.group,
            answer_b.code,
            if same_answer { "" } else { "  DIFFERENT" }
        );
        if !same_answer {
            differences.push(Difference {
                step: n,
                what: step.what.clone(),
                part: "answer",
                sent: Some((sent_a.to_string(), sent_b.to_string())),
                labels,
                answers: (norm_a, norm_b),
            });
        }
        let state_a = normalize(&after_a, a.group, before_a.as_deref());
        let state_b = normalize(&after_b, b.group, before_b.as_deref());
        if state_a != state_b {
            println!("         the object after the step: DIFFERENT");
            differences.push(Difference {
                step: n,
                what: step.what.clone(),
                part: "object after the step (GET)",
                sent: None,
                labels,
                answers: (state_a, state_b),
            });
        }
    }
    std::fs::write(transcript, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    println!("transcript: {}", transcript.display());
    Report {
        sides: labels,
        differences,
    }
}

/// The answer with what must differ between the two sides taken out, as a
/// JSON document `{code, contentType, warnings, body, managedFieldsInKubeOrder}`.
///
/// `before` is the object's resourceVersion before the step, if it existed.
fn normalize(answer: &Answer, group: &str, before: Option<&str>) -> Value {
    // The group is the one thing in the request that differs, and kube
    // repeats it in apiVersion (object and managedFields), in Status details
    // and messages (`namespacetransfers.<group> "t1" is invalid`, conflicts
    // "using <group>/v1alpha1") and in warnings.
    let mut body = replace_strings(&answer.body, group, "<group>");
    let mut sorted = Value::Null;
    if let Some(obj) = body.as_object_mut() {
        if obj.get("kind").and_then(Value::as_str) == Some("NamespaceTransfer") {
            sorted = Value::Bool(managed_fields_in_kube_order(&answer.body));
            normalize_object(obj, before);
        } else if let Some(details) = obj.get_mut("details").and_then(Value::as_object_mut) {
            // A Status for a deleted object names its uid: a fresh one each
            // side.
            if details.contains_key("uid") {
                details.insert("uid".to_owned(), json!("<uid>"));
            }
        }
    }
    json!({
        "code": answer.code,
        "contentType": answer.content_type,
        "warnings": answer
            .warnings
            .iter()
            .map(|w| w.replace(group, "<group>"))
            .collect::<Vec<_>>(),
        "body": body,
        "managedFieldsInKubeOrder": sorted,
    })
}

fn normalize_object(obj: &mut Map<String, Value>, before: Option<&str>) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        // Fresh per object, per server.
        if meta.contains_key("uid") {
            meta.insert("uid".to_owned(), json!("<uid>"));
        }
        // Each side's own clock; only the format must agree (RFC 3339, in
        // seconds, UTC), so a time in another format stays as it is and
        // shows as a difference.
        for key in ["creationTimestamp", "deletionTimestamp"] {
            if let Some(t) = meta.get_mut(key) {
                mask_time(t);
            }
        }
        // Each side's own etcd revision; what must agree is whether the step
        // wrote (a no-op apply must not).
        if let Some(rv) = meta.get_mut("resourceVersion") {
            let label = match (rv.as_str(), before) {
                (_, None) => "<new>",
                (Some(now), Some(before)) if now == before => "<unchanged>",
                _ => "<changed>",
            };
            *rv = json!(label);
        }
        // Deprecated and unset by kube; we do not compare it if either sets
        // it.
        meta.remove("selfLink");
        if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
            for entry in entries.iter_mut() {
                if let Some(t) = entry.get_mut("time") {
                    mask_time(t);
                }
                // Our server creates every transfer with a status (Pending,
                // and its role: DESIGN §2.1.6), the twin with none. So the
                // twin's first status writer creates the status map and owns
                // it (`f:status: {".": {}}`), where ours finds it there. Which
                // fields inside it each manager owns is still compared.
                if let Some(status) = entry
                    .get_mut("fieldsV1")
                    .and_then(|f| f.get_mut("f:status"))
                    .and_then(Value::as_object_mut)
                {
                    status.remove(".");
                }
                // `before-first-apply` takes every field the object holds
                // when it is first applied after its managedFields were
                // cleared, and so also our spec.requester (see below), which
                // the twin's object does not have.
                if entry["manager"] == "before-first-apply" {
                    if let Some(spec) = entry
                        .get_mut("fieldsV1")
                        .and_then(|f| f.get_mut("f:spec"))
                        .and_then(Value::as_object_mut)
                    {
                        spec.remove("f:requester");
                    }
                }
            }
            // Compared as a set: kube orders the entries by operation, then
            // time in seconds, then manager, and the two sides' clocks may
            // put a second's boundary between two steps on one side only.
            // Whether each side keeps kube's order is compared separately
            // (`managedFieldsInKubeOrder`).
            entries.sort_by_key(|e| {
                (
                    e["operation"].as_str().unwrap_or_default().to_owned(),
                    e["manager"].as_str().unwrap_or_default().to_owned(),
                    e["subresource"].as_str().unwrap_or_default().to_owned(),
                    e.to_string(),
                )
            });
        }
    }
    // Our server stamps who created a transfer into spec.requester (DESIGN
    // §2.1.2); the twin has no such admission. It is left out of the object;
    // not out of the managedFields of those who write, since kube runs the
    // field manager before the strategy stamps anything (as for
    // CertificateSigningRequest's spec.username) and so records no writer as
    // its owner.
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("requester");
    }
    // Our server starts every transfer at `{phase: Pending, role}` (DESIGN
    // §2.1.6); the twin starts it with none. Until the scenario first
    // replaces the status (it never writes exactly that one), a status that
    // is exactly the initial one is left out.
    let initial = obj
        .get("status")
        .and_then(Value::as_object)
        .is_some_and(|status| {
            status.len() == 2
                && status.get("phase") == Some(&json!("Pending"))
                && status.get("role").is_some_and(Value::is_string)
        });
    if initial {
        obj.remove("status");
    }
}

/// Whether the entries are in the order kube keeps them in
/// (`sortEncodedManagedFields`): by operation, then time in seconds, then
/// manager, apiVersion and subresource.
fn managed_fields_in_kube_order(object: &Value) -> bool {
    let Some(entries) = object["metadata"]["managedFields"].as_array() else {
        return true;
    };
    let key = |e: &Value| {
        ["operation", "time", "manager", "apiVersion", "subresource"]
            .map(|k| e[k].as_str().unwrap_or_default().to_owned())
    };
    entries.windows(2).all(|w| key(&w[0]) <= key(&w[1]))
}

/// `2024-01-01T00:00:00Z` becomes `<time>`; any other text stays.
fn mask_time(value: &mut Value) {
    let ok = value.as_str().is_some_and(|t| {
        let b = t.as_bytes();
        b.len() == 20
            && b.iter().enumerate().all(|(i, c)| match i {
                4 | 7 => *c == b'-',
                10 => *c == b'T',
                13 | 16 => *c == b':',
                19 => *c == b'Z',
                _ => c.is_ascii_digit(),
            })
    });
    if ok {
        *value = json!("<time>");
    }
}

fn replace_strings(value: &Value, from: &str, to: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace(from, to)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| replace_strings(v, from, to)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), replace_strings(v, from, to)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The JSON paths where `a` and `b` differ, for the report.
fn differing_paths(a: &Value, b: &Value) -> Vec<String> {
    fn walk(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let (va, vb) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    if !x.contains_key(k) || !y.contains_key(k) {
                        if va != vb {
                            out.push(format!(
                                "{path}.{k}: {} vs {}",
                                short(x.get(k)),
                                short(y.get(k))
                            ));
                        }
                    } else {
                        walk(va, vb, format!("{path}.{k}"), out);
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                    walk(va, vb, format!("{path}[{i}]"), out);
                }
            }
            _ if a != b => out.push(format!("{path}: {} vs {}", short(Some(a)), short(Some(b)))),
            _ => {}
        }
    }
    fn short(v: Option<&Value>) -> String {
        match v {
            None => "(absent)".to_owned(),
            Some(v) => {
                let text = v.to_string();
                if text.len() > 160 {
                    let mut cut = 160;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    format!("{}…", &text[..cut])
                } else {
                    text
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(a, b, String::new(), &mut out);
    out
}

/// `value` in CBOR (RFC 8949), as kube's encoder writes JSON-like data:
/// definite lengths, text-string keys.
fn cbor(value: &Value, out: &mut Vec<u8>) {
    fn head(major: u8, n: u64, out: &mut Vec<u8>) {
        let major = major << 5;
        if let Ok(small) = u8::try_from(n) {
            if small < 24 {
                out.push(major | small);
            } else {
                out.extend([major | 24, small]);
            }
        } else if let Ok(n) = u16::try_from(n) {
            out.push(major | 25);
            out.extend(n.to_be_bytes());
        } else if let Ok(n) = u32::try_from(n) {
            out.push(major | 26);
            out.extend(n.to_be_bytes());
        } else {
            out.push(major | 27);
            out.extend(n.to_be_bytes());
        }
    }
    let len = |n: usize| u64::try_from(n).unwrap();
    match value {
        Value::Null => out.push(0xf6),
        Value::Bool(b) => out.push(if *b { 0xf5 } else { 0xf4 }),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => head(0, u, out),
            (None, Some(i), _) => head(1, (-1 - i).unsigned_abs(), out),
            (_, _, f) => {
                out.push(0xfb);
                out.extend(f.unwrap_or_default().to_bits().to_be_bytes());
            }
        },
        Value::String(s) => {
            head(3, len(s.len()), out);
            out.extend(s.as_bytes());
        }
        Value::Array(items) => {
            head(4, len(items.len()), out);
            for item in items {
                cbor(item, out);
            }
        }
        Value::Object(map) => {
            head(5, len(map.len()), out);
            for (k, v) in map {
                head(3, len(k.len()), out);
                out.extend(k.as_bytes());
                cbor(v, out);
            }
        }
    }
}

/// `patch` merged into `target` (JSON merge patch without deletes).
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        _ => *target = patch.clone(),
    }
}

fn merged(mut target: Value, patch: Value) -> Value {
    merge(&mut target, &patch);
    target
}

#[test]
fn cbor_encodes_as_rfc_8949_says() {
    let mut out = Vec::new();
    cbor(&json!({"a": [1, -1, 500, true, null], "b": "é"}), &mut out);
    assert_eq!(
        out,
        [
            0xa2, 0x61, b'a', 0x85, 0x01, 0x20, 0x19, 0x01, 0xf4, 0xf5, 0xf6, 0x61, b'b', 0x62,
            0xc3, 0xa9
        ]
    );
}

#[test]
fn the_normalization_keeps_what_must_agree() {
    let answer = |rv: &str, time: &str, status: Value| Answer {
        code: 200,
        content_type: JSON.to_owned(),
        warnings: vec![],
        body: json!({
            "apiVersion": "g.example/v1alpha1",
            "kind": "NamespaceTransfer",
            "metadata": {
                "name": "t1", "uid": "u", "resourceVersion": rv,
                "creationTimestamp": time,
                "managedFields": [
                    {"manager": "b", "operation": "Update", "time": time, "apiVersion": "g.example/v1alpha1"},
                    {"manager": "a", "operation": "Apply", "time": time, "apiVersion": "g.example/v1alpha1"},
                ],
            },
            "spec": {"requester": {"username": "admin"}},
            "status": status,
        }),
    };
    let initial = json!({"phase": "Pending", "role": "Source"});
    let n = normalize(
        &answer("5", "2024-01-01T00:00:00Z", initial.clone()),
        "g.example",
        Some("5"),
    );
    assert_eq!(n["body"]["apiVersion"], "<group>/v1alpha1");
    assert_eq!(n["body"]["metadata"]["resourceVersion"], "<unchanged>");
    assert_eq!(n["body"]["metadata"]["managedFields"][0]["manager"], "a");
    assert_eq!(n["body"]["metadata"]["managedFields"][0]["time"], "<time>");
    assert_eq!(n["managedFieldsInKubeOrder"], false);
    assert!(n["body"].get("status").is_none());
    assert_eq!(n["body"]["spec"], json!({}));
    let later = normalize(
        &answer(
            "6",
            "2024-01-01T00:00:00.5Z",
            json!({"phase": "Pending", "role": "Source", "message": "m"}),
        ),
        "g.example",
        Some("5"),
    );
    assert_eq!(later["body"]["metadata"]["resourceVersion"], "<changed>");
    assert_eq!(
        later["body"]["metadata"]["creationTimestamp"], "2024-01-01T00:00:00.5Z",
        "a time in another format is compared as it is"
    );
    assert_eq!(later["body"]["status"]["message"], "m");
}
