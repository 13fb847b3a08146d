//! Unit tests of the audit log: the policy, the events, the writer, the
//! rotation and the controllers' client.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use super::client::{controller_client, ActingFor, ControllerUser, VolumeWrite};
use super::policy::{Level, Policy, PolicyError, Rule, Stage};
use super::request::{source_ips, Origin};
use super::rotate::{RotatingFile, Rotation};
use super::sink::{Lost, Mode, Sink};
use super::Auditor;
use crate::authn::UserInfo;
use crate::authz::{Attributes, ResourceAttributes};

// ----- helpers ---------------------------------------------------------------------

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        username: name.to_owned(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        ..UserInfo::default()
    }
}

/// A request for `group/resource[/sub]` named `ns/name`, by `who`.
fn on_resource(
    who: UserInfo,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    name: &str,
) -> Attributes {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes {
        user: who,
        verb: verb.to_owned(),
        resource: Some(ResourceAttributes {
            group: group.to_owned(),
            version: "v1alpha1".to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
        }),
        path: String::new(),
    }
}

fn on_path(who: UserInfo, verb: &str, path: &str) -> Attributes {
    Attributes {
        user: who,
        verb: verb.to_owned(),
        resource: None,
        path: path.to_owned(),
    }
}

fn policy(yaml: &str) -> Policy {
    Policy::from_slice(yaml.as_bytes()).unwrap()
}

/// A policy of one rule at Metadata, whose fields are `rule` (YAML lines
/// indented for a list item).
fn one_rule(rule: &str) -> Policy {
    policy(&format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n{rule}"
    ))
}

/// What a sink wrote, shared with the test.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Write for Written {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Written {
    fn events(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn auditor_at(level: Level) -> (Auditor, Written) {
    auditor(Policy::new(vec![Rule::at(level)], vec![], false).unwrap())
}

fn auditor(policy: Policy) -> (Auditor, Written) {
    let out = Written::default();
    let sink = Sink::start(Box::new(out.clone()), Mode::Blocking, 100);
    (Auditor::new(Arc::new(policy), sink), out)
}

/// An authenticated client that connected directly (from an address the
/// test does not care about).
fn signed_in() -> Origin {
    Origin {
        authenticated: true,
        ..Origin::default()
    }
}

/// An authenticated request that the front proxy at 10.0.0.3 forwarded.
fn through_the_front_proxy() -> Origin {
    Origin {
        authenticated: true,
        peer: Some([10, 0, 0, 3].into()),
        front_proxy: true,
    }
}

const OBJECT: &str = r#"{"apiVersion":"storage.transfer.k8s.io/v1alpha1","kind":"NamespaceTransfer","metadata":{"name":"move-data","namespace":"src","managedFields":[{"manager":"kubectl"}]},"spec":{}}"#;

/// Runs a create of [`OBJECT`] through an audit record at `level`, the
/// handler answering `code` with `answer`; returns what the handler read,
/// what the client got, and the events.
async fn create_at(
    auditor: &Auditor,
    out: &Written,
    code: u16,
    answer: &str,
) -> (Bytes, Bytes, Vec<Value>) {
    let req = Request::post(
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/src/namespacetransfers?fieldManager=x",
    )
    .header("content-type", "application/json")
    .header("user-agent", "kubectl/v1.36.0")
    .header("x-forwarded-for", "10.0.0.1, 10.0.0.2")
    .body(Full::new(Bytes::from_static(OBJECT.as_bytes())))
    .unwrap();
    let attributes = on_resource(
        user("alice", &["tenants"]),
        "create",
        "storage.transfer.k8s.io",
        "namespacetransfers",
        "src",
        "",
    );
    let mut record = auditor
        .begin(
            &req,
            &attributes,
            through_the_front_proxy(),
            "id-1",
            super::now(),
        )
        .unwrap();
    record.request_received().await.unwrap();
    record.annotate("authorization.k8s.io/decision", "allow");
    let req = record.capture_request(req, 3 * 1024 * 1024).await;
    let handler_read = req.into_body().collect().await.unwrap().to_bytes();
    let resp = Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(answer.to_owned())))
        .unwrap();
    let resp = record.finish(resp, 1024 * 1024).await;
    let client_got = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(auditor.flush(Duration::from_secs(5)).await);
    (handler_read, client_got, out.events())
}

// ----- the policy ------------------------------------------------------------------

#[test]
fn first_matching_rule_wins() {
    let p = policy(
        r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["system:kube-proxy"]
- level: Metadata
  users: ["alice"]
- level: RequestResponse
"#,
    );
    let level = |who: &str| p.evaluate(&on_path(user(who, &[]), "get", "/apis")).level;
    assert_eq!(level("system:kube-proxy"), Level::None);
    assert_eq!(level("alice"), Level::Metadata);
    assert_eq!(level("bob"), Level::RequestResponse);
}

#[test]
fn a_request_no_rule_matches_is_not_recorded() {
    let p = one_rule("  users: [alice]\n");
    let config = p.evaluate(&on_path(user("bob", &[]), "get", "/apis"));
    assert_eq!(config.level, Level::None);
    assert!(!config.records(Stage::ResponseComplete));
}

#[test]
fn rules_match_as_kube_matches_them() {
    const G: &str = "storage.transfer.k8s.io";
    let alice = || user("alice", &["tenants", "system:authenticated"]);
    let nobody = || UserInfo::default();
    let r = |verb, resource, ns, name| on_resource(alice(), verb, G, resource, ns, name);
    let cases: Vec<(&str, &str, Attributes, bool)> = vec![
        ("users: the user is listed", "  users: [alice]\n", r("get", "namespacetransfers", "a", "x"), true),
        ("users: the user is not listed", "  users: [bob]\n", r("get", "namespacetransfers", "a", "x"), false),
        ("users: an unauthenticated request matches no user", "  users: [\"\"]\n", on_path(nobody(), "get", "/apis"), false),
        ("userGroups: one group is listed", "  userGroups: [tenants]\n", r("get", "namespacetransfers", "a", "x"), true),
        ("userGroups: no group is listed", "  userGroups: [system:masters]\n", r("get", "namespacetransfers", "a", "x"), false),
        ("verbs: listed", "  verbs: [create, update]\n", r("create", "namespacetransfers", "a", ""), true),
        ("verbs: not listed", "  verbs: [create, update]\n", r("watch", "namespacetransfers", "a", ""), false),
        ("resources: the group and resource", "  resources: [{group: storage.transfer.k8s.io, resources: [namespacetransfers]}]\n", r("get", "namespacetransfers", "a", "x"), true),
        ("resources: another group", "  resources: [{group: \"\", resources: [namespacetransfers]}]\n", r("get", "namespacetransfers", "a", "x"), false),
        ("resources: any group", "  resources: [{group: \"*\", resources: [namespacetransfers]}]\n", r("get", "namespacetransfers", "a", "x"), true),
        ("resources: the whole group", "  resources: [{group: storage.transfer.k8s.io}]\n", r("get", "ephemeralclaims", "a", "x"), true),
        ("resources: * matches every resource", "  resources: [{group: storage.transfer.k8s.io, resources: [\"*\"]}]\n", r("get", "ephemeralclaims/status", "a", "x"), true),
        ("resources: a resource does not match its subresource", "  resources: [{group: storage.transfer.k8s.io, resources: [namespacetransfers]}]\n", r("update", "namespacetransfers/status", "a", "x"), false),
        ("resources: x/status matches the subresource", "  resources: [{group: storage.transfer.k8s.io, resources: [namespacetransfers/status]}]\n", r("update", "namespacetransfers/status", "a", "x"), true),
        ("resources: */status matches any status", "  resources: [{group: storage.transfer.k8s.io, resources: [\"*/status\"]}]\n", r("update", "ephemeralclaims/status", "a", "x"), true),
        ("resources: */status does not match the resource", "  resources: [{group: storage.transfer.k8s.io, resources: [\"*/status\"]}]\n", r("update", "ephemeralclaims", "a", "x"), false),
        ("resources: x/* matches x's subresources", "  resources: [{group: storage.transfer.k8s.io, resources: [\"namespacetransfers/*\"]}]\n", r("update", "namespacetransfers/status", "a", "x"), true),
        ("resources: resourceNames listed", "  resources: [{group: storage.transfer.k8s.io, resources: [namespacetransfers], resourceNames: [x]}]\n", r("get", "namespacetransfers", "a", "x"), true),
        ("resources: resourceNames not listed", "  resources: [{group: storage.transfer.k8s.io, resources: [namespacetransfers], resourceNames: [y]}]\n", r("get", "namespacetransfers", "a", "x"), false),
        ("resources: a non-resource request", "  resources: [{group: storage.transfer.k8s.io}]\n", on_path(alice(), "get", "/apis"), false),
        ("namespaces: listed", "  namespaces: [a, b]\n", r("list", "namespacetransfers", "b", ""), true),
        ("namespaces: not listed", "  namespaces: [a, b]\n", r("list", "namespacetransfers", "c", ""), false),
        ("namespaces: \"\" is the cluster scope", "  namespaces: [\"\"]\n", r("list", "namespacetransfers", "", ""), true),
        ("nonResourceURLs: exact", "  nonResourceURLs: [/metrics]\n", on_path(alice(), "get", "/metrics"), true),
        ("nonResourceURLs: a prefix with *", "  nonResourceURLs: [\"/openapi/*\"]\n", on_path(alice(), "get", "/openapi/v3/apis"), true),
        ("nonResourceURLs: * is every path", "  nonResourceURLs: [\"*\"]\n", on_path(alice(), "get", "/livez"), true),
        ("nonResourceURLs: another path", "  nonResourceURLs: [/metrics]\n", on_path(alice(), "get", "/apis"), false),
        ("nonResourceURLs: a resource request", "  nonResourceURLs: [\"*\"]\n", r("get", "namespacetransfers", "a", "x"), false),
    ];
    for (what, rule, attributes, matches) in cases {
        let level = one_rule(rule).evaluate(&attributes).level;
        assert_eq!(level == Level::Metadata, matches, "{what}");
    }
}

#[test]
fn omit_stages_of_the_policy_and_the_rule_are_merged() {
    let p = policy(
        r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  omitStages: [ResponseStarted]
"#,
    );
    let config = p.evaluate(&on_path(user("alice", &[]), "get", "/apis"));
    assert!(!config.records(Stage::RequestReceived));
    assert!(!config.records(Stage::ResponseStarted));
    assert!(config.records(Stage::ResponseComplete));
    assert!(config.records(Stage::Panic));
}

#[test]
fn omit_managed_fields_of_a_rule_overrides_the_policy() {
    let p = policy(
        r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
- level: Request
  users: [alice]
  omitManagedFields: false
- level: Request
"#,
    );
    let of = |who: &str| {
        p.evaluate(&on_path(user(who, &[]), "get", "/apis"))
            .omit_managed_fields
    };
    assert!(!of("alice"));
    assert!(of("bob"));
}

#[test]
fn a_policy_in_json_loads_as_in_yaml() {
    let p = policy(
        r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"RequestResponse","verbs":["create"],"nonResourceURLs":null}]}"#,
    );
    assert_eq!(p.rules().len(), 1);
    assert_eq!(p.rules()[0].level, Level::RequestResponse);
    assert_eq!(p.rules()[0].verbs, vec!["create".to_owned()]);
}

#[test]
fn a_bad_policy_is_refused_with_a_message() {
    let cases = [
        ("not a policy at all", "rules: [", "failed decoding"),
        ("a wrong apiVersion", "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]", "audit.k8s.io/v1"),
        ("a wrong kind", "apiVersion: audit.k8s.io/v1\nkind: Event\nrules: [{level: None}]", "must be Policy"),
        ("no rules", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []", "0 rules"),
        ("a level that does not exist", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]", "rules[0].level: Unsupported value: \"Everything\""),
        ("a rule without a level", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{verbs: [get]}]", "rules[0].level: Required value"),
        ("a stage that does not exist", "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Sometimes]\nrules: [{level: None}]", "omitStages[0]: Invalid value: \"Sometimes\""),
        ("a URL without a slash", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [metrics]}]", "must begin with a '/'"),
        ("a wildcard inside a URL", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [\"/a*/b\"]}]", "must be the final character"),
        ("resources and URLs in one rule", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/x], namespaces: [a]}]", "both regular resources and non-resource URLs"),
        ("resourceNames without resources", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{group: \"\", resourceNames: [a]}]}]", "requires at least one resource"),
        ("a group that is not a DNS name", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{group: Storage_Transfer}]}]", "rules[0].resources.group"),
    ];
    for (what, text, expected) in cases {
        let err = Policy::from_slice(text.as_bytes()).expect_err(what);
        assert!(
            err.to_string().contains(expected),
            "{what}: {err} should say {expected:?}"
        );
    }
}

#[test]
fn the_server_refuses_to_start_on_a_bad_policy_file_naming_the_flag() {
    let dir = temp_dir("bad-policy");
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]",
    )
    .unwrap();
    let log = dir.join("audit.log");
    let options = <crate::server::Options as clap::Parser>::try_parse_from([
        "x",
        "--insecure-allow-all",
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
    ])
    .unwrap();
    let err = options.complete().unwrap_err();
    assert!(matches!(
        err,
        crate::server::ConfigError::AuditPolicy {
            error: PolicyError::Invalid(_),
            ..
        }
    ));
    let message = err.to_string();
    assert!(message.starts_with("--audit-policy-file "), "{message}");
    assert!(
        message.contains("rules[0].level: Unsupported value: \"Loud\""),
        "{message}"
    );
}

#[test]
fn the_audit_flags_complete_into_a_rotating_log() {
    let dir = temp_dir("flags");
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]",
    )
    .unwrap();
    let log = dir.join("logs/audit.log");
    let options = <crate::server::Options as clap::Parser>::try_parse_from([
        "x",
        "--insecure-allow-all",
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
        "--audit-log-maxsize=10",
        "--audit-log-maxbackup=3",
        "--audit-log-maxage=7",
    ])
    .unwrap();
    let audit = options.complete().unwrap().audit.unwrap();
    assert_eq!(audit.log.path.as_deref(), Some(log.as_path()));
    assert_eq!(audit.log.rotation.max_size, 10 * 1024 * 1024);
    assert_eq!(audit.log.rotation.max_backups, 3);
    assert_eq!(
        audit.log.rotation.max_age,
        Some(Duration::from_secs(7 * 86_400))
    );
    assert!(log.is_file(), "the log file is created before serving");
    assert_eq!(audit.log.mode, Mode::Blocking, "kube's default");
    assert_eq!(audit.log.buffer, 10_000);
}

/// The options with the audit on and `flags` besides.
fn audit_options(name: &str, flags: &[&str]) -> crate::server::Options {
    let dir = temp_dir(name);
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]",
    )
    .unwrap();
    let log = dir.join("audit.log");
    let mut args = vec![
        "x".to_owned(),
        "--insecure-allow-all".to_owned(),
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
    ];
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    <crate::server::Options as clap::Parser>::try_parse_from(args).unwrap()
}

#[test]
fn the_audit_log_modes_are_kube_s_and_so_is_the_batch_buffer_flag() {
    let cases = [
        (&["--audit-log-mode=blocking"][..], Mode::Blocking, 10_000),
        (
            &["--audit-log-mode=blocking-strict"],
            Mode::BlockingStrict,
            10_000,
        ),
        (
            &["--audit-log-mode=batch", "--audit-log-batch-buffer-size=5"],
            Mode::Batch,
            5,
        ),
        (&["--audit-log-buffer-size=7"], Mode::Blocking, 7),
    ];
    for (flags, mode, buffer) in cases {
        let audit = audit_options("modes", flags)
            .complete()
            .unwrap()
            .audit
            .unwrap();
        assert_eq!(
            (audit.log.mode, audit.log.buffer),
            (mode, buffer),
            "{flags:?}"
        );
    }
}

#[test]
fn an_unknown_audit_log_mode_is_refused_naming_the_flag() {
    for audited in [true, false] {
        let options = if audited {
            audit_options("bad-mode", &["--audit-log-mode=async"])
        } else {
            <crate::server::Options as clap::Parser>::try_parse_from([
                "x",
                "--insecure-allow-all",
                "--audit-log-mode=async",
            ])
            .unwrap()
        };
        let message = options.complete().unwrap_err().to_string();
        assert_eq!(
            message,
            "--audit-log-mode: unknown mode \"async\"; the modes are batch, blocking, blocking-strict",
            "audited: {audited}"
        );
    }
}

// ----- events ----------------------------------------------------------------------

#[tokio::test]
async fn levels_decide_which_bodies_an_event_carries() {
    let answer = OBJECT.replace("\"spec\"", "\"status\":{},\"spec\"");
    for level in [Level::Metadata, Level::Request, Level::RequestResponse] {
        let (auditor, out) = auditor_at(level);
        let (handler_read, client_got, events) = create_at(&auditor, &out, 201, &answer).await;
        assert_eq!(
            handler_read,
            OBJECT.as_bytes(),
            "{level:?}: the handler reads the body unchanged"
        );
        assert_eq!(
            client_got,
            answer.as_bytes(),
            "{level:?}: the client gets the response unchanged"
        );
        let stages: Vec<&str> = events
            .iter()
            .map(|e| e["stage"].as_str().unwrap())
            .collect();
        assert_eq!(stages, ["RequestReceived", "ResponseComplete"], "{level:?}");
        let done = &events[1];
        assert_eq!(done["level"], level.as_str());
        assert_eq!(
            done["objectRef"]["name"], "move-data",
            "{level:?}: a create's name is read from its body"
        );
        assert_eq!(
            done["requestObject"].is_object(),
            level >= Level::Request,
            "{level:?}"
        );
        assert_eq!(
            done["responseObject"].is_object(),
            level >= Level::RequestResponse,
            "{level:?}"
        );
        assert!(
            events[0].get("requestObject").is_none(),
            "RequestReceived carries no body"
        );
    }
}

#[tokio::test]
async fn an_event_has_kube_s_fields_and_microsecond_timestamps() {
    let (auditor, out) = auditor_at(Level::Metadata);
    let (_, _, events) = create_at(&auditor, &out, 201, OBJECT).await;
    let e = &events[1];
    assert_eq!(e["kind"], "Event");
    assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(e["auditID"], "id-1");
    assert_eq!(e["verb"], "create");
    assert_eq!(
        e["requestURI"],
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/src/namespacetransfers?fieldManager=x"
    );
    assert_eq!(
        e["user"],
        json!({"username": "alice", "groups": ["tenants"]})
    );
    assert_eq!(e["sourceIPs"], json!(["10.0.0.1", "10.0.0.2", "10.0.0.3"]));
    assert_eq!(e["userAgent"], "kubectl/v1.36.0");
    assert_eq!(
        e["objectRef"],
        json!({"resource": "namespacetransfers", "namespace": "src", "name": "move-data",
               "apiGroup": "storage.transfer.k8s.io", "apiVersion": "v1alpha1"})
    );
    assert_eq!(e["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "allow");
    for key in ["requestReceivedTimestamp", "stageTimestamp"] {
        let t = e[key].as_str().unwrap();
        // 2024-05-01T10:00:00.123456Z
        assert_eq!(t.len(), 27, "{key}: {t}");
        assert!(t.ends_with('Z') && t.as_bytes()[19] == b'.', "{key}: {t}");
    }
    assert_eq!(
        events[0]["stageTimestamp"],
        events[0]["requestReceivedTimestamp"]
    );
}

#[tokio::test]
async fn a_failure_records_the_status_reason_and_message() {
    let (auditor, out) = auditor_at(Level::Metadata);
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespacetransfers.storage.transfer.k8s.io \"move-data\" already exists","reason":"AlreadyExists","details":{"name":"move-data"},"code":409}"#;
    let (_, client_got, events) = create_at(&auditor, &out, 409, status).await;
    assert_eq!(client_got, status.as_bytes());
    let s = &events[1]["responseStatus"];
    assert_eq!(s["code"], 409);
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["reason"], "AlreadyExists");
    assert!(s["message"].as_str().unwrap().contains("already exists"));
    assert!(
        events[1].get("responseObject").is_none(),
        "Metadata keeps no body"
    );
}

#[tokio::test]
async fn omit_managed_fields_drops_them_from_both_bodies() {
    let (auditor, out) =
        auditor(Policy::new(vec![Rule::at(Level::RequestResponse)], vec![], true).unwrap());
    let (handler_read, _, events) = create_at(&auditor, &out, 201, OBJECT).await;
    assert_eq!(
        handler_read,
        OBJECT.as_bytes(),
        "the handler still gets them"
    );
    let e = &events[1];
    assert_eq!(e["requestObject"]["metadata"]["name"], "move-data");
    assert!(e["requestObject"]["metadata"]
        .get("managedFields")
        .is_none());
    assert!(e["responseObject"]["metadata"]
        .get("managedFields")
        .is_none());
}

#[tokio::test]
async fn omitted_stages_are_not_written() {
    let (auditor, out) = auditor(
        Policy::new(
            vec![Rule::at(Level::Metadata)],
            vec![Stage::RequestReceived],
            false,
        )
        .unwrap(),
    );
    let (_, _, events) = create_at(&auditor, &out, 201, OBJECT).await;
    let stages: Vec<&str> = events
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["ResponseComplete"]);
}

#[tokio::test]
async fn a_response_over_the_bound_is_left_out_and_marked_truncated() {
    let (auditor, out) = auditor_at(Level::RequestResponse);
    let req = Request::get("/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let attributes = on_resource(
        user("alice", &[]),
        "list",
        "storage.transfer.k8s.io",
        "namespacetransfers",
        "",
        "",
    );
    let record = auditor
        .begin(&req, &attributes, signed_in(), "id", super::now())
        .unwrap();
    let big = format!("{{\"items\":[\"{}\"]}}", "x".repeat(4096));
    let resp = Response::new(Full::new(Bytes::from(big.clone())));
    let resp = record.finish(resp, 1024).await;
    assert_eq!(
        resp.into_body().collect().await.unwrap().to_bytes(),
        big.as_bytes()
    );
    assert!(auditor.flush(Duration::from_secs(5)).await);
    let e = &out.events()[0];
    assert!(e.get("responseObject").is_none());
    assert_eq!(e["annotations"]["audit.k8s.io/truncated"], "true");
}

#[tokio::test]
async fn a_request_body_over_the_bound_reaches_the_handler_unchanged() {
    let (auditor, _) = auditor_at(Level::Request);
    let chunks: Vec<Result<Frame<Bytes>, Infallible>> = (0..8)
        .map(|i| Ok(Frame::data(Bytes::from(vec![b'a' + i; 1000]))))
        .collect();
    let expected: Vec<u8> = (0..8u8).flat_map(|i| vec![b'a' + i; 1000]).collect();
    let req =
        Request::put("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/a/namespacetransfers/x")
            .body(StreamBody::new(futures::stream::iter(chunks)))
            .unwrap();
    let attributes = on_resource(
        user("alice", &[]),
        "update",
        "storage.transfer.k8s.io",
        "namespacetransfers",
        "a",
        "x",
    );
    let mut record = auditor
        .begin(&req, &attributes, signed_in(), "id", super::now())
        .unwrap();
    let req = record.capture_request(req, 2500).await;
    assert_eq!(
        req.into_body().collect().await.unwrap().to_bytes(),
        expected
    );
    assert!(record.event().request_object.is_none());
    assert_eq!(
        record
            .event()
            .annotations
            .get("audit.k8s.io/truncated")
            .map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
async fn a_watch_writes_response_started_then_response_complete_when_its_stream_ends() {
    let (auditor, out) = auditor_at(Level::RequestResponse);
    let req = Request::get("/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers?watch=true")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let attributes = on_resource(
        user("alice", &[]),
        "watch",
        "storage.transfer.k8s.io",
        "namespacetransfers",
        "",
        "",
    );
    let mut record = auditor
        .begin(&req, &attributes, signed_in(), "id", super::now())
        .unwrap();
    record.request_received().await.unwrap();
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
    let resp = record
        .finish(Response::new(StreamBody::new(rx)), 1024)
        .await;
    assert!(auditor.flush(Duration::from_secs(5)).await);
    let stages = |out: &Written| -> Vec<String> {
        out.events()
            .iter()
            .map(|e| e["stage"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        stages(&out),
        ["RequestReceived", "ResponseStarted"],
        "headers went out"
    );

    tx.unbounded_send(Ok(Frame::data(Bytes::from_static(
        b"{\"type\":\"ADDED\"}\n",
    ))))
    .unwrap();
    drop(tx);
    let streamed = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(streamed, b"{\"type\":\"ADDED\"}\n".as_slice());
    assert!(auditor.flush(Duration::from_secs(5)).await);
    assert_eq!(
        stages(&out),
        ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    );
    let done = &out.events()[2];
    assert_eq!(done["responseStatus"]["code"], 200);
    assert!(
        done.get("responseObject").is_none(),
        "a watch's stream is never recorded"
    );
}

#[tokio::test]
async fn a_watch_the_client_leaves_is_complete_when_its_body_is_dropped() {
    let (auditor, out) = auditor_at(Level::Metadata);
    let req = Request::get("/apis/storage.transfer.k8s.io/v1alpha1/ephemeralclaims?watch=1")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let attributes = on_resource(
        user("alice", &[]),
        "watch",
        "storage.transfer.k8s.io",
        "ephemeralclaims",
        "",
        "",
    );
    let record = auditor
        .begin(&req, &attributes, signed_in(), "id", super::now())
        .unwrap();
    let (_tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
    let resp = record
        .finish(Response::new(StreamBody::new(rx)), 1024)
        .await;
    drop(resp);
    assert!(auditor.flush(Duration::from_secs(5)).await);
    let stages: Vec<Value> = out.events().iter().map(|e| e["stage"].clone()).collect();
    assert_eq!(
        stages,
        [json!("ResponseStarted"), json!("ResponseComplete")]
    );
}

#[tokio::test]
async fn a_request_that_failed_authentication_gets_one_response_started_event() {
    let (auditor, out) = auditor_at(Level::Metadata);
    let req = Request::get("/apis")
        .header("authorization", "Bearer not-a-token")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let attributes = on_path(UserInfo::default(), "get", "/apis");
    let mut record = auditor
        .begin(&req, &attributes, Origin::default(), "id", super::now())
        .unwrap();
    record.request_received().await.unwrap();
    let resp = Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let _ = record.finish(resp, 1024).await;
    assert!(auditor.flush(Duration::from_secs(5)).await);
    let events = out.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["stage"], "ResponseStarted");
    assert_eq!(events[0]["user"], json!({}));
    assert_eq!(
        events[0]["responseStatus"],
        json!({"metadata": {}, "message": "Authentication failed, attempted: bearer", "code": 401})
    );
}

#[test]
fn an_incoming_audit_id_is_kept_and_echoed() {
    let mut headers = http::HeaderMap::new();
    headers.insert("audit-id", "from-kube-apiserver".parse().unwrap());
    assert_eq!(super::audit_id(&headers), "from-kube-apiserver");
    let fresh = super::audit_id(&http::HeaderMap::new());
    assert!(uuid::Uuid::parse_str(&fresh).is_ok());
    let resp = super::with_audit_id(Response::new(()), "from-kube-apiserver");
    assert_eq!(resp.headers()["audit-id"], "from-kube-apiserver");
}

// ----- sourceIPs -------------------------------------------------------------------

#[test]
fn a_direct_client_s_forwarded_for_is_not_believed_and_its_address_is_recorded() {
    let req = Request::get("/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers")
        .header("x-forwarded-for", "203.0.113.66")
        .header("x-real-ip", "203.0.113.67")
        .body(())
        .unwrap();
    let (auditor, _) = auditor_at(Level::Metadata);
    let attributes = on_path(user("mallory", &[]), "list", "/apis");
    let origin = Origin {
        authenticated: true,
        peer: Some([192, 0, 2, 10].into()),
        front_proxy: false,
    };
    let record = auditor
        .begin(&req, &attributes, origin, "id", super::now())
        .unwrap();
    assert_eq!(record.event().source_ips, ["192.0.2.10"]);
}

/// A case of `sourceIPs`: what it shows, the origin, the headers, and the
/// addresses recorded.
type SourceIpsCase = (
    &'static str,
    Origin,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

#[test]
fn source_ips_are_the_proxy_s_chain_then_the_peer_as_kube_lists_them() {
    let peer = Some(std::net::IpAddr::from([10, 0, 0, 9]));
    let proxy = Origin {
        authenticated: true,
        peer,
        front_proxy: true,
    };
    let direct = Origin {
        front_proxy: false,
        ..proxy
    };
    let failed = Origin {
        authenticated: false,
        ..direct
    };
    #[rustfmt::skip]
    let cases: [SourceIpsCase; 8] = [
        ("the proxy's chain, then the peer", proxy,
            &[("x-forwarded-for", "203.0.113.7, 10.0.0.5")],
            &["203.0.113.7", "10.0.0.5", "10.0.0.9"]),
        ("a peer that ends the chain is not repeated", proxy,
            &[("x-forwarded-for", "203.0.113.7, 10.0.0.9")],
            &["203.0.113.7", "10.0.0.9"]),
        ("X-Real-Ip after the chain when not in it", proxy,
            &[("x-forwarded-for", "203.0.113.7"), ("x-real-ip", "198.51.100.1")],
            &["203.0.113.7", "198.51.100.1", "10.0.0.9"]),
        ("X-Real-Ip already in the chain", proxy,
            &[("x-forwarded-for", "203.0.113.7"), ("x-real-ip", "203.0.113.7")],
            &["203.0.113.7", "10.0.0.9"]),
        ("what does not parse is skipped", proxy,
            &[("x-forwarded-for", "unknown, 203.0.113.7")],
            &["203.0.113.7", "10.0.0.9"]),
        ("the proxy without headers", proxy, &[], &["10.0.0.9"]),
        ("a direct client's headers are its own claim", direct,
            &[("x-forwarded-for", "203.0.113.7"), ("x-real-ip", "198.51.100.1")],
            &["10.0.0.9"]),
        ("nor are they believed when authentication failed", failed,
            &[("x-forwarded-for", "203.0.113.7")],
            &["10.0.0.9"]),
    ];
    for (case, origin, headers, want) in cases {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.append(*name, value.parse().unwrap());
        }
        assert_eq!(source_ips(&map, origin), want, "{case}");
    }
}

// ----- the writer ------------------------------------------------------------------

/// A disk that takes every write until the test lets it go.
struct Stuck(std::sync::mpsc::Receiver<()>);

impl Write for Stuck {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.0.recv();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn some_event(i: usize) -> super::Event {
    super::Event::new(Level::Metadata, format!("id-{i}"), super::now())
}

#[tokio::test]
async fn in_batch_mode_recording_never_waits_and_drops_and_counts_what_does_not_fit() {
    let (release, gate) = std::sync::mpsc::channel();
    let sink = Sink::start(Box::new(Stuck(gate)), Mode::Batch, 4);
    for i in 0..100 {
        // Never pending: a batch-mode record that waited would hang here,
        // the writer being stuck.
        let _ = sink.record(&some_event(i)).now_or_never().unwrap();
    }
    assert!(sink.dropped() >= 95, "dropped {}", sink.dropped());
    assert!(crate::metrics::text(|r| sink.scrape(r)).contains(&format!(
        "apiserver_audit_error_total{{plugin=\"log\",reason=\"dropped\"}} {}",
        sink.dropped()
    )));
    drop(release);
    assert!(sink.flush(Duration::from_secs(5)).await);
    assert_eq!(sink.written() + sink.dropped(), 100);
}

/// A sink on a stuck disk with room for one `event_of_size(_, 1000)` at a
/// time, which holds its room until it is written.
fn one_event_of_room(mode: Mode) -> (Sink, std::sync::mpsc::Sender<()>) {
    let (release, gate) = std::sync::mpsc::channel();
    let size = event_of_size(0, 1000).to_line().unwrap().len();
    let sink = Sink::start_bounded(Box::new(Stuck(gate)), mode, 100, size + size / 2);
    (sink, release)
}

#[tokio::test]
async fn in_blocking_mode_a_request_waits_for_room_instead_of_dropping_its_event() {
    let (sink, release) = one_event_of_room(Mode::Blocking);
    sink.record(&event_of_size(1, 1000)).await.unwrap();
    let second = event_of_size(2, 1000);
    let mut waiting = std::pin::pin!(sink.record(&second));
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "the second event waits for the first to be written"
    );
    assert_eq!(sink.dropped(), 0);
    drop(release);
    let recorded = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(recorded, Ok(Ok(())));
    assert!(sink.flush(Duration::from_secs(5)).await);
    assert_eq!((sink.written(), sink.dropped()), (2, 0));
}

#[tokio::test]
async fn a_request_that_goes_away_while_it_waits_leaves_the_room_to_the_next() {
    let (sink, release) = one_event_of_room(Mode::Blocking);
    sink.record(&event_of_size(1, 1000)).await.unwrap();
    let gone = event_of_size(2, 1000);
    {
        let mut waiting = std::pin::pin!(sink.record(&gone));
        assert!(futures::poll!(waiting.as_mut()).is_pending());
    }
    drop(release);
    let next = tokio::time::timeout(Duration::from_secs(30), sink.record(&some_event(3))).await;
    assert_eq!(next, Ok(Ok(())));
    assert!(sink.flush(Duration::from_secs(5)).await);
    assert_eq!(
        sink.written(),
        2,
        "the first and the next; the one gone was never queued"
    );
    assert_eq!(sink.queued_bytes(), 0);
}

#[tokio::test]
async fn in_batch_mode_the_same_event_is_dropped_and_counted_at_once() {
    let (sink, release) = one_event_of_room(Mode::Batch);
    sink.record(&event_of_size(1, 1000)).await.unwrap();
    let second = sink.record(&event_of_size(2, 1000)).now_or_never();
    assert_eq!(second, Some(Err(Lost::Dropped)));
    assert!(crate::metrics::text(|r| sink.scrape(r))
        .contains("apiserver_audit_error_total{plugin=\"log\",reason=\"dropped\"} 1"));
    drop(release);
    assert!(sink.flush(Duration::from_secs(5)).await);
    assert_eq!((sink.written(), sink.dropped()), (1, 1));
}

#[tokio::test]
async fn a_detached_event_in_blocking_mode_waits_in_a_task_rather_than_being_dropped() {
    let (sink, release) = one_event_of_room(Mode::Blocking);
    sink.record(&event_of_size(1, 1000)).await.unwrap();
    // A dropped request's ResponseComplete, or a watch's end.
    sink.record_detached(&event_of_size(2, 1000));
    assert_eq!(sink.dropped(), 0);
    drop(release);
    // The flush is queued after the detached event has found room.
    let written = async {
        while sink.written() < 2 {
            assert!(sink.flush(Duration::from_secs(5)).await);
            tokio::task::yield_now().await;
        }
    };
    assert!(tokio::time::timeout(Duration::from_secs(30), written)
        .await
        .is_ok());
    assert_eq!(sink.dropped(), 0);
}

/// A full disk.
struct DiskFull;

impl Write for DiskFull {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::from_raw_os_error(28))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_full_disk_fails_events_not_requests() {
    let sink = Sink::start(Box::new(DiskFull), Mode::Blocking, 16);
    for i in 0..10 {
        sink.record(&some_event(i)).await.unwrap();
    }
    assert!(sink.flush(Duration::from_secs(5)).await);
    assert_eq!(sink.failed(), 10);
    assert_eq!(sink.written(), 0);
}

/// A GET through an audit record on a full disk, in `mode`: what
/// `request_received` said, and how many events failed in all.
async fn request_received_on_a_full_disk(mode: Mode) -> (Result<(), Lost>, u64) {
    let sink = Sink::start(Box::new(DiskFull), mode, 16);
    let policy = Policy::new(vec![Rule::at(Level::Metadata)], vec![], false).unwrap();
    let auditor = Auditor::new(Arc::new(policy), sink.clone());
    let req = Request::get("/apis").body(()).unwrap();
    let attributes = on_path(user("alice", &[]), "get", "/apis");
    let mut record = auditor
        .begin(&req, &attributes, signed_in(), "id", super::now())
        .unwrap();
    let received = record.request_received().await;
    let resp = Response::new(Full::new(Bytes::from_static(b"{}")));
    let _ = record.finish(resp, 1024).await;
    assert!(sink.flush(Duration::from_secs(5)).await);
    (received, sink.failed())
}

#[tokio::test]
async fn in_blocking_strict_mode_a_request_whose_request_received_event_is_not_written_fails() {
    let (received, failed) = request_received_on_a_full_disk(Mode::BlockingStrict).await;
    assert_eq!(received, Err(Lost::WriteFailed));
    assert_eq!(failed, 1, "and nothing more is written for it");
}

#[tokio::test]
async fn in_the_other_modes_a_request_goes_on_when_its_events_are_not_written() {
    for mode in [Mode::Blocking, Mode::Batch] {
        let (received, failed) = request_received_on_a_full_disk(mode).await;
        assert_eq!(received, Ok(()), "{mode:?}");
        assert_eq!(failed, 2, "{mode:?}: RequestReceived and ResponseComplete");
    }
}

// ----- rotation --------------------------------------------------------------------

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sta-audit-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn line(i: usize) -> Vec<u8> {
    let mut l = format!("{{\"n\":{i:04}}}").into_bytes();
    l.resize(99, b' ');
    l.push(b'\n');
    l
}

#[test]
fn rotation_by_size_keeps_at_most_maxbackup_files() {
    let dir = temp_dir("rotate");
    let path = dir.join("audit.log");
    let mut log = RotatingFile::new(
        &path,
        Rotation {
            max_size: 250,
            max_backups: 2,
            max_age: None,
        },
    );
    for i in 0..20 {
        log.write_all(&line(i)).unwrap();
    }
    log.flush().unwrap();
    let backups = log.backups().unwrap();
    assert_eq!(backups.len(), 2, "{backups:?}");
    for b in &backups {
        let name = b.file_name().unwrap().to_str().unwrap();
        // audit-2024-05-01T10-00-00.000.log
        assert!(
            name.starts_with("audit-") && name.ends_with(".log") && name.len() == 33,
            "{name}"
        );
    }
    let current = std::fs::read(&path).unwrap();
    assert!(current.len() <= 250);
    assert_eq!(
        current,
        [line(18), line(19)].concat(),
        "lines are never split"
    );
    let newest = std::fs::read(&backups[1]).unwrap();
    assert_eq!(newest, [line(16), line(17)].concat());
    let entries = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(entries, 3, "the log and two backups");
}

#[test]
fn an_existing_log_is_appended_to_until_it_is_full() {
    let dir = temp_dir("append");
    let path = dir.join("audit.log");
    std::fs::write(&path, line(0)).unwrap();
    let rotation = Rotation {
        max_size: 250,
        ..Rotation::default()
    };
    let mut log = RotatingFile::new(&path, rotation);
    log.write_all(&line(1)).unwrap();
    log.flush().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), [line(0), line(1)].concat());
    log.write_all(&line(2)).unwrap();
    log.flush().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), line(2));
    assert_eq!(log.backups().unwrap().len(), 1, "0 keeps every backup");
}

#[test]
fn backups_older_than_maxage_are_removed() {
    let dir = temp_dir("age");
    let path = dir.join("audit.log");
    let old = dir.join("audit-2001-01-01T00-00-00.000.log");
    let unrelated = dir.join("other-2001-01-01T00-00-00.000.log");
    std::fs::write(&old, b"old\n").unwrap();
    std::fs::write(&unrelated, b"keep\n").unwrap();
    let mut log = RotatingFile::new(
        &path,
        Rotation {
            max_size: 150,
            max_backups: 0,
            max_age: Some(Duration::from_secs(86_400)),
        },
    );
    for i in 0..3 {
        log.write_all(&line(i)).unwrap();
    }
    assert!(!old.exists(), "a backup from 2001 is older than a day");
    assert!(unrelated.exists(), "only this log's backups are touched");
    assert_eq!(log.backups().unwrap().len(), 2);
}

#[test]
fn a_line_larger_than_maxsize_is_refused() {
    let dir = temp_dir("large");
    let mut log = RotatingFile::new(
        dir.join("audit.log"),
        Rotation {
            max_size: 10,
            ..Rotation::default()
        },
    );
    let err = log.write_all(&line(0)).unwrap_err();
    assert!(
        err.to_string().contains("exceeds maximum file size 10"),
        "{err}"
    );
}

// ----- the controllers' client -----------------------------------------------------

/// What kube-apiserver was sent.
#[derive(Debug, Clone)]
struct Sent {
    method: http::Method,
    uri: String,
    headers: http::HeaderMap,
}

/// A kube-apiserver that records each request and answers `(code, body)`.
#[derive(Clone)]
struct FakeApiserver {
    sent: Arc<Mutex<Vec<Sent>>>,
    answer: (u16, Value),
}

impl tonic::codegen::Service<Request<kube::client::Body>> for FakeApiserver {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        self.sent.lock().unwrap().push(Sent {
            method: req.method().clone(),
            uri: req.uri().to_string(),
            headers: req.headers().clone(),
        });
        let (code, body) = &self.answer;
        let resp = Response::builder()
            .status(*code)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        std::future::ready(Ok(resp))
    }
}

fn fake_apiserver(code: u16, body: Value) -> (kube::Client, Arc<Mutex<Vec<Sent>>>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let fake = FakeApiserver {
        sent: sent.clone(),
        answer: (code, body),
    };
    (kube::Client::new(fake, "default"), sent)
}

fn pvc_json() -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "data", "namespace": "src", "uid": "c1"}})
}

fn acting() -> ActingFor {
    ActingFor {
        transfer: "src/move-data".to_owned(),
        transfer_uid: "7d3c".to_owned(),
        source_requester: Some("alice".to_owned()),
        destination_requester: Some("bob".to_owned()),
    }
}

fn controller() -> ControllerUser {
    ControllerUser::new(user(
        "system:serviceaccount:storage-transfer:apiserver",
        &["system:serviceaccounts"],
    ))
}

#[tokio::test]
async fn a_controller_write_names_the_transfer_and_is_recorded_with_its_audit_id() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kube::api::{Patch, PatchParams};
    let (inner, sent) = fake_apiserver(200, pvc_json());
    let out = Written::default();
    let sink = Sink::start(Box::new(out.clone()), Mode::Blocking, 16);
    let client = controller_client(inner, Some(sink.clone()), controller(), "replica-a");
    let claims: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(client, "src");
    acting()
        .scope(claims.patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {}})),
        ))
        .await
        .unwrap();
    assert!(sink.flush(Duration::from_secs(5)).await);

    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    let headers = &sent[0].headers;
    assert_eq!(
        headers["user-agent"],
        concat!(
            "storage-transfer-apiserver/v",
            env!("CARGO_PKG_VERSION"),
            " (transfer src/move-data uid 7d3c)"
        )
    );
    let audit_id = headers["audit-id"].to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&audit_id).is_ok());

    let events = out.events();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        e["auditID"],
        audit_id.as_str(),
        "the id kube-apiserver records"
    );
    assert_eq!(e["stage"], "ResponseComplete");
    assert_eq!(e["level"], "Metadata");
    assert_eq!(e["verb"], "patch");
    assert_eq!(
        e["user"]["username"],
        "system:serviceaccount:storage-transfer:apiserver"
    );
    assert_eq!(e["userAgent"], headers["user-agent"].to_str().unwrap());
    assert_eq!(
        e["objectRef"],
        json!({"resource": "persistentvolumeclaims", "namespace": "src", "name": "data", "apiVersion": "v1"})
    );
    assert_eq!(e["responseStatus"]["code"], 200);
    assert_eq!(
        e["annotations"],
        json!({
            "storage.transfer.k8s.io/transfer": "src/move-data",
            "storage.transfer.k8s.io/transfer-uid": "7d3c",
            "storage.transfer.k8s.io/source-requester": "alice",
            "storage.transfer.k8s.io/destination-requester": "bob",
            "storage.transfer.k8s.io/replica": "replica-a",
        })
    );
}

#[tokio::test]
async fn a_refused_controller_create_is_recorded_and_still_fails_as_before() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "persistentvolumeclaims \"data\" already exists", "reason": "AlreadyExists", "code": 409});
    let (inner, _) = fake_apiserver(409, status);
    let out = Written::default();
    let sink = Sink::start(Box::new(out.clone()), Mode::Blocking, 16);
    let client = controller_client(inner, Some(sink.clone()), controller(), "replica-a");
    let claims: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(client, "dst");
    let claim: PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": "data"}})).unwrap();
    let err = acting()
        .scope(claims.create(&kube::api::PostParams::default(), &claim))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("the caller must see kube's error, not {other:?}"),
    }
    assert!(sink.flush(Duration::from_secs(5)).await);
    let e = &out.events()[0];
    assert_eq!(e["verb"], "create");
    assert_eq!(e["objectRef"]["name"], "data", "read from the body");
    assert_eq!(e["objectRef"]["namespace"], "dst");
    assert_eq!(e["responseStatus"]["code"], 409);
    assert_eq!(e["responseStatus"]["reason"], "AlreadyExists");
}

#[tokio::test]
async fn controller_reads_carry_the_headers_and_are_not_recorded() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let (inner, sent) = fake_apiserver(200, pvc_json());
    let out = Written::default();
    let sink = Sink::start(Box::new(out.clone()), Mode::Blocking, 16);
    let client = controller_client(inner, Some(sink.clone()), controller(), "replica-a");
    let claims: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(client, "src");
    claims.get("data").await.unwrap();
    assert!(sink.flush(Duration::from_secs(5)).await);
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent[0].method, http::Method::GET);
    assert_eq!(
        sent[0].headers["user-agent"],
        concat!("storage-transfer-apiserver/v", env!("CARGO_PKG_VERSION")),
        "outside a transfer, just ours"
    );
    assert!(sent[0].headers.contains_key("audit-id"));
    assert!(sent[0]
        .uri
        .ends_with("/api/v1/namespaces/src/persistentvolumeclaims/data"));
    assert!(out.events().is_empty());
}

#[test]
fn acting_for_a_pair_names_both_requesters_or_the_one_known() {
    use crate::api::namespace_transfer::NamespaceTransfer;
    let transfer = |ns: &str, uid: &str, who: Option<&str>| -> NamespaceTransfer {
        let mut value = json!({"apiVersion": "storage.transfer.k8s.io/v1alpha1", "kind": "NamespaceTransfer",
            "metadata": {"name": "move-data", "namespace": ns, "uid": uid},
            "spec": {"source": {"name": "data"}}});
        if let Some(who) = who {
            value["spec"]["requester"] = json!({"username": who});
        }
        serde_json::from_value(value).unwrap()
    };
    let s = transfer("src", "u1", Some("alice"));
    let d = transfer("dst", "u2", Some("bob"));
    let both = ActingFor::pair(&s, Some(&d));
    assert_eq!(both.transfer, "src/move-data");
    assert_eq!(both.transfer_uid, "u1");
    assert_eq!(both.source_requester.as_deref(), Some("alice"));
    assert_eq!(both.destination_requester.as_deref(), Some("bob"));
    let alone = ActingFor::pair(&s, None);
    let annotations: BTreeMap<String, String> = alone.annotations();
    assert_eq!(
        annotations
            .get("storage.transfer.k8s.io/source-requester")
            .map(String::as_str),
        Some("alice")
    );
    assert!(!annotations.contains_key("storage.transfer.k8s.io/destination-requester"));
}

#[test]
fn only_pv_and_pvc_writes_are_volume_writes() {
    let of = |method: &str, uri: &str| {
        VolumeWrite::of(&method.parse().unwrap(), &uri.parse().unwrap()).map(|w| {
            (
                w.verb,
                w.object_ref.resource,
                w.object_ref.namespace,
                w.object_ref.name,
                w.object_ref.subresource,
            )
        })
    };
    let s = |x: &str| x.to_owned();
    assert_eq!(
        of("PATCH", "/api/v1/persistentvolumes/pv-1"),
        Some(("patch", s("persistentvolumes"), s(""), s("pv-1"), s("")))
    );
    assert_eq!(
        of(
            "POST",
            "/api/v1/namespaces/a/persistentvolumeclaims?dryRun=All"
        ),
        Some(("create", s("persistentvolumeclaims"), s("a"), s(""), s("")))
    );
    assert_eq!(
        of("DELETE", "/api/v1/namespaces/a/persistentvolumeclaims/c"),
        Some(("delete", s("persistentvolumeclaims"), s("a"), s("c"), s("")))
    );
    assert_eq!(
        of("PUT", "/api/v1/persistentvolumes/pv-1/status"),
        Some((
            "update",
            s("persistentvolumes"),
            s(""),
            s("pv-1"),
            s("status")
        ))
    );
    assert_eq!(of("GET", "/api/v1/persistentvolumes/pv-1"), None, "a read");
    assert_eq!(
        of("POST", "/api/v1/namespaces/a/events"),
        None,
        "not a volume"
    );
    assert_eq!(
        of("POST", "/api/v1/persistentvolumeclaims"),
        None,
        "claims are namespaced"
    );
}

#[tokio::test]
async fn a_body_read_whole_for_the_audit_reports_its_exact_length_again() {
    use hyper::body::Body as _;
    let (replayed, whole) =
        super::request::read_prefix(Full::new(Bytes::from_static(b"{\"a\":1}")), 1024).await;
    assert_eq!(whole.as_deref(), Some(&b"{\"a\":1}"[..]));
    // hyper asks every body for its size: this one once panicked here.
    assert_eq!(replayed.size_hint().exact(), Some(7));
    let (replayed, whole) =
        super::request::read_prefix(Full::new(Bytes::from_static(b"0123456789")), 4).await;
    assert_eq!(whole, None);
    assert_eq!(replayed.size_hint().exact(), Some(10));
    assert_eq!(replayed.collect().await.unwrap().to_bytes().len(), 10);
}

// ----- bounded costs ---------------------------------------------------------------

/// An apply of `body` (YAML) audited at Request level: what the handler
/// read, and the event as it stands after the body was captured.
async fn apply_yaml_at_request_level(body: Vec<u8>) -> (usize, super::Event) {
    let (auditor, _) = auditor_at(Level::Request);
    let req = Request::patch(
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/a/namespacetransfers/x?fieldManager=m",
    )
    .header("content-type", "application/apply-patch+yaml")
    .body(Full::new(Bytes::from(body)))
    .unwrap();
    let attributes = on_resource(
        user("alice", &[]),
        "patch",
        "storage.transfer.k8s.io",
        "namespacetransfers",
        "a",
        "x",
    );
    let mut record = auditor
        .begin(&req, &attributes, signed_in(), "id", super::now())
        .unwrap();
    let req = record
        .capture_request(req, crate::wire::MAX_BODY_BYTES)
        .await;
    let read = req.into_body().collect().await.unwrap().to_bytes().len();
    (read, record.event().clone())
}

/// `a: &a [0,0,…]` then `b: [*a,*a,…]`, `size` bytes in all.
fn yaml_alias_bomb(size: usize) -> Vec<u8> {
    let half = size / 2;
    let mut body = b"a: &a [0".to_vec();
    while body.len() < half {
        body.extend_from_slice(b",0");
    }
    body.extend_from_slice(b"]\nb: [*a");
    while body.len() < size {
        body.extend_from_slice(b",*a");
    }
    body.extend_from_slice(b"]\n");
    body
}

#[tokio::test]
async fn a_yaml_alias_bomb_of_three_mebibytes_is_not_expanded_by_the_audit() {
    let body = yaml_alias_bomb(3 * 1024 * 1024 - 16);
    let sent = body.len();
    let (read, event) = apply_yaml_at_request_level(body).await;
    assert_eq!(read, sent, "the handler reads the body unchanged");
    assert!(event.request_object.is_none());
    assert!(
        event.annotations["audit.k8s.io/request-object"].starts_with("omitted"),
        "{:?}",
        event.annotations
    );
    assert!(
        event.to_line().unwrap().len() < 4096,
        "the event stays small"
    );
}

#[tokio::test]
async fn a_yaml_alias_bomb_within_the_handler_s_element_limit_is_not_expanded_either() {
    // About 80,000 elements, which the handler's guard lets through, but
    // 1.6 billion values once the aliases are expanded.
    let flat = yaml_alias_bomb(160_000);
    // And a billion laughs: a hundred bytes, a billion values.
    let mut nested = b"l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n".to_vec();
    for i in 1..10 {
        let p = i - 1;
        nested.extend_from_slice(
            format!("l{i}: &l{i} [*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p},*l{p}]\n")
                .as_bytes(),
        );
    }
    for body in [flat, nested] {
        let (_, event) = apply_yaml_at_request_level(body).await;
        assert!(event.request_object.is_none());
        assert!(event.annotations["audit.k8s.io/request-object"].starts_with("omitted"));
        assert!(event.to_line().unwrap().len() < 4096);
    }
}

#[tokio::test]
async fn a_yaml_apply_body_with_a_small_alias_is_still_recorded_as_json() {
    let body = b"apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: x\n  labels: &l {team: a}\n  annotations: *l\nspec: {}\n";
    let (_, event) = apply_yaml_at_request_level(body.to_vec()).await;
    let object = event.request_object.unwrap();
    assert_eq!(object["metadata"]["annotations"], json!({"team": "a"}));
    assert_eq!(object["metadata"]["labels"], json!({"team": "a"}));
    assert!(event.annotations.is_empty(), "{:?}", event.annotations);
}

/// An event whose annotation holds `size` bytes.
fn event_of_size(i: usize, size: usize) -> super::Event {
    let mut event = some_event(i);
    event.annotate("big", "x".repeat(size));
    event
}

#[tokio::test]
async fn the_queue_is_bounded_by_bytes_as_well_as_by_events() {
    let (release, gate) = std::sync::mpsc::channel();
    let sink = Sink::start(Box::new(Stuck(gate)), Mode::Batch, 10_000);
    // 80 MiB of events, each far under the event-count bound; the writer
    // takes the first and is stuck on it.
    for i in 0..80 {
        let _ = sink.record(&event_of_size(i, 1024 * 1024)).await;
    }
    let limit = super::sink::MAX_QUEUED_BYTES;
    assert!(sink.queued_bytes() <= limit, "{}", sink.queued_bytes());
    assert!(
        sink.dropped() >= 80 - (limit / (1024 * 1024)) as u64,
        "dropped {}",
        sink.dropped()
    );
    drop(release);
    assert!(sink.flush(Duration::from_secs(10)).await);
    assert_eq!(sink.written() + sink.dropped(), 80);
    assert_eq!(
        sink.queued_bytes(),
        0,
        "what is written is no longer counted"
    );
}

#[tokio::test]
async fn a_small_byte_budget_drops_big_events_and_keeps_small_ones() {
    let (release, gate) = std::sync::mpsc::channel();
    let sink = Sink::start_bounded(Box::new(Stuck(gate)), Mode::Batch, 10_000, 64 * 1024);
    let lost = sink.record(&event_of_size(0, 100 * 1024)).await;
    assert_eq!(lost, Err(Lost::Dropped));
    assert_eq!(
        sink.dropped(),
        1,
        "an event over the whole budget never fits"
    );
    for i in 1..=10 {
        sink.record(&some_event(i)).await.unwrap();
    }
    assert_eq!(sink.dropped(), 1, "small events still fit");
    assert!(crate::metrics::text(|r| sink.scrape(r))
        .contains("apiserver_audit_error_total{plugin=\"log\",reason=\"dropped\"} 1"));
    drop(release);
    assert!(sink.flush(Duration::from_secs(5)).await);
    assert_eq!(sink.written(), 10);
}

/// Runs a create of [`OBJECT`] through an audit record whose future is
/// dropped (the client reset the stream) while the handler waits, or,
/// if `in_response`, while its response body is read.
async fn create_cancelled(policy: Policy, in_response: bool) -> Vec<Value> {
    let (auditor, out) = auditor(policy);
    let served = {
        let auditor = auditor.clone();
        async move {
            let req = Request::post(
                "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/src/namespacetransfers",
            )
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(OBJECT.as_bytes())))
            .unwrap();
            let attributes = on_resource(
                user("alice", &["tenants"]),
                "create",
                "storage.transfer.k8s.io",
                "namespacetransfers",
                "src",
                "",
            );
            let mut record = auditor
                .begin(&req, &attributes, signed_in(), "id-c", super::now())
                .unwrap();
            record.request_received().await.unwrap();
            let req = record.capture_request(req, 3 * 1024 * 1024).await;
            let _ = req.into_body().collect().await;
            if !in_response {
                // The handler waits on a webhook or on etcd.
                std::future::pending::<()>().await;
            }
            // The handler answered; its body never ends.
            let (_tx, rx) = futures::channel::mpsc::unbounded::<Result<Frame<Bytes>, Infallible>>();
            let resp = Response::builder()
                .status(201)
                .body(StreamBody::new(rx))
                .unwrap();
            let _ = record.finish(resp, 1024 * 1024).await;
        }
    };
    assert!(
        served.now_or_never().is_none(),
        "the request was still being served"
    );
    assert!(auditor.flush(Duration::from_secs(5)).await);
    out.events()
}

#[tokio::test]
async fn a_request_whose_client_went_away_still_gets_its_response_complete_event() {
    let policy = Policy::new(
        vec![Rule::at(Level::Request)],
        vec![Stage::RequestReceived],
        false,
    )
    .unwrap();
    let events = create_cancelled(policy, false).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["stage"], "ResponseComplete");
    assert_eq!(e["auditID"], "id-c");
    assert_eq!(e["objectRef"]["name"], "move-data");
    assert!(e["requestObject"].is_object(), "the write is traced");
    assert_eq!(e["annotations"]["audit.k8s.io/cancelled"], "true");
    assert!(
        e["responseStatus"].get("code").is_none(),
        "no code was answered: {}",
        e["responseStatus"]
    );
}

#[tokio::test]
async fn a_request_cancelled_while_its_response_is_read_records_the_code_it_answered() {
    let events = create_cancelled(
        Policy::new(vec![Rule::at(Level::RequestResponse)], vec![], false).unwrap(),
        true,
    )
    .await;
    let stages: Vec<&str> = events
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"]);
    assert_eq!(events[1]["responseStatus"]["code"], 201);
    assert_eq!(events[1]["annotations"]["audit.k8s.io/cancelled"], "true");
}

#[tokio::test]
async fn a_finished_request_writes_its_response_complete_event_once() {
    let (auditor, out) = auditor_at(Level::Metadata);
    let (_, _, events) = create_at(&auditor, &out, 201, OBJECT).await;
    assert_eq!(events.len(), 2);
    assert!(events[1]["annotations"]
        .get("audit.k8s.io/cancelled")
        .is_none());
}
