//! The webhook plugins against a real HTTPS webhook
//! ([`sta_testenv::webhook::WebhookServer`]) on loopback.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use serde_json::{json, Value};
use sta_testenv::webhook::{Reply, WebhookServer};

use super::{Endpoint, ServiceResolver, Webhooks, MAX_RESPONSE_BYTES};
use crate::admission::{Namespaces, Reinvocation};
use crate::api::errors::{ApiError, GroupResource};
use crate::api::meta::Requester;
use crate::registry::admission::{Attributes, Operation};
use crate::registry::Context;

// ---- fixtures -------------------------------------------------------------

#[derive(Debug, Default)]
struct FakeNamespaces(HashMap<String, Arc<Namespace>>);

impl FakeNamespaces {
    fn with(name: &str, labels: Value) -> Self {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        Self(HashMap::from([(name.to_owned(), Arc::new(ns))]))
    }
}

impl Namespaces for FakeNamespaces {
    fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        self.0.get(name).cloned()
    }
}

/// Every Service is the given endpoint.
#[derive(Debug)]
struct FixedResolver(Option<Endpoint>);

#[async_trait::async_trait]
impl ServiceResolver for FixedResolver {
    async fn resolve(&self, _: &str, name: &str, _: u16) -> Result<Endpoint, String> {
        self.0
            .clone()
            .ok_or_else(|| format!("no endpoints available for service {name:?}"))
    }
}

fn webhooks() -> Webhooks {
    Webhooks::with_resolver(Arc::new(FixedResolver(None)))
}

fn namespaces() -> FakeNamespaces {
    FakeNamespaces::with("team-a", json!({"env": "prod"}))
}

fn transfer(labels: Value) -> Value {
    json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t1", "namespace": "team-a", "labels": labels},
        "spec": {"targetNamespace": "team-b"},
    })
}

fn attrs(operation: Operation) -> Attributes {
    let object = transfer(json!({"app": "db"}));
    Attributes {
        operation,
        group: "storage.transfer.k8s.io".to_owned(),
        version: "v1alpha1".to_owned(),
        kind: "NamespaceTransfer".to_owned(),
        resource: "namespacetransfers".to_owned(),
        subresource: String::new(),
        namespace: "team-a".to_owned(),
        name: "t1".to_owned(),
        object: (operation != Operation::Delete).then(|| object.clone()),
        old_object: (operation != Operation::Create).then_some(object),
        options: json!({"apiVersion": "meta.k8s.io/v1", "kind": operation.options_kind()}),
        dry_run: false,
        user: Requester::default(),
        schema: crate::api::schema::KindSchema::of::<crate::api::NamespaceTransfer>(),
        rights: Vec::new(),
    }
}

fn ctx() -> Context {
    Context {
        user: Requester {
            username: "alice".to_owned(),
            uid: Some("u-1".to_owned()),
            groups: vec!["devs".to_owned()],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// One webhook of `server`, matching every write to our group, with
/// `overrides` merged over it.
fn hook(name: &str, server: &WebhookServer, overrides: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {
            "url": server.url("/admit"),
            "caBundle": sta_testenv::base64(server.ca_bundle_pem().as_bytes()),
        },
        "rules": [{
            "operations": ["*"],
            "apiGroups": ["storage.transfer.k8s.io"],
            "apiVersions": ["*"],
            "resources": ["*/*"],
        }],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    });
    for (k, v) in overrides.as_object().cloned().unwrap_or_default() {
        hook[k.as_str()] = v;
    }
    hook
}

fn validating(name: &str, hooks: Vec<Value>) -> Arc<ValidatingWebhookConfiguration> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": hooks})).unwrap(),
    )
}

fn mutating(name: &str, hooks: Vec<Value>) -> Arc<MutatingWebhookConfiguration> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": hooks})).unwrap(),
    )
}

async fn validate(
    config: Arc<ValidatingWebhookConfiguration>,
    attrs: &Attributes,
    ctx: &Context,
) -> Result<(), ApiError> {
    webhooks()
        .validate(&[config], attrs, ctx, &namespaces())
        .await
}

async fn mutate(
    configs: &[Arc<MutatingWebhookConfiguration>],
    attrs: &mut Attributes,
    ctx: &Context,
) -> Result<(), ApiError> {
    webhooks()
        .mutate(
            configs,
            attrs,
            ctx,
            &namespaces(),
            &mut Reinvocation::default(),
        )
        .await
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn message(result: Result<(), ApiError>) -> String {
    result.expect_err("the request must be refused").to_string()
}

// ---- answers --------------------------------------------------------------

#[tokio::test]
async fn a_refusal_keeps_the_webhooks_code_and_names_it_in_the_message() {
    let server = WebhookServer::start(|_| Reply::deny(422, "team-b is frozen")).unwrap();
    let config = validating("v", vec![hook("deny.example.com", &server, json!({}))]);
    let err = validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    assert_eq!(
        err.to_string(),
        "admission webhook \"deny.example.com\" denied the request: team-b is frozen"
    );
}

#[tokio::test]
async fn a_refusal_below_400_is_reported_as_400_and_without_explanation_when_silent() {
    let server = WebhookServer::start(|_| {
        Reply::Response(json!({"allowed": false, "status": {"code": 200}}))
    })
    .unwrap();
    let config = validating("v", vec![hook("quiet.example.com", &server, json!({}))]);
    let err = validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap_err();
    assert_eq!(err.code(), 400);
    assert_eq!(
        err.to_string(),
        "admission webhook \"quiet.example.com\" denied the request without explanation"
    );
}

#[tokio::test]
async fn warnings_of_an_allowing_webhook_reach_the_client() {
    let server =
        WebhookServer::start(|_| Reply::warn(&["spec.x is deprecated", "mind the gap"])).unwrap();
    let config = validating("v", vec![hook("warn.example.com", &server, json!({}))]);
    let ctx = ctx();
    validate(config, &attrs(Operation::Create), &ctx)
        .await
        .unwrap();
    assert_eq!(
        ctx.notes.warnings(),
        ["spec.x is deprecated", "mind the gap"]
    );
}

#[tokio::test]
async fn audit_annotations_are_recorded_under_the_webhooks_name() {
    let server =
        WebhookServer::start(|_| Reply::Response(json!({"auditAnnotations": {"decision": "ok"}})))
            .unwrap();
    let config = validating("v", vec![hook("audit.example.com", &server, json!({}))]);
    let ctx = ctx();
    validate(config, &attrs(Operation::Create), &ctx)
        .await
        .unwrap();
    assert_eq!(
        ctx.notes.annotations().get("audit.example.com/decision"),
        Some(&"ok".to_owned())
    );
}

#[tokio::test]
async fn the_review_carries_the_request_as_kube_fills_it() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let config = validating("v", vec![hook("look.example.com", &server, json!({}))]);
    let attrs = attrs(Operation::Update);
    validate(config, &attrs, &ctx()).await.unwrap();
    let request = &server.requests()[0];
    assert!(!request["uid"].as_str().unwrap().is_empty());
    let gvk = json!({"group": "storage.transfer.k8s.io", "version": "v1alpha1", "kind": "NamespaceTransfer"});
    let gvr = json!({"group": "storage.transfer.k8s.io", "version": "v1alpha1", "resource": "namespacetransfers"});
    assert_eq!(request["kind"], gvk);
    assert_eq!(request["requestKind"], gvk);
    assert_eq!(request["resource"], gvr);
    assert_eq!(request["requestResource"], gvr);
    assert_eq!(request["name"], "t1");
    assert_eq!(request["namespace"], "team-a");
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(
        request["userInfo"],
        json!({"username": "alice", "uid": "u-1", "groups": ["devs"]})
    );
    assert_eq!(request["object"], attrs.object.clone().unwrap());
    assert_eq!(request["oldObject"], attrs.old_object.clone().unwrap());
    assert_eq!(request["dryRun"], false);
    assert_eq!(request["options"]["kind"], "UpdateOptions");
}

#[tokio::test]
async fn a_webhook_that_speaks_only_v1beta1_is_called_with_v1beta1() {
    let server = WebhookServer::start(|_| Reply::deny(403, "old but firm")).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "old.example.com",
            &server,
            json!({"admissionReviewVersions": ["v1beta1"]}),
        )],
    );
    let err = validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap_err();
    assert_eq!(err.code(), 403);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_mutating_webhook_patch_changes_the_object_and_is_annotated() {
    let server = WebhookServer::start(|_| {
        Reply::patch(json!([{"op": "add", "path": "/metadata/labels/owner", "value": "ops"}]))
    })
    .unwrap();
    let config = mutating("m", vec![hook("label.example.com", &server, json!({}))]);
    let mut attrs = attrs(Operation::Create);
    let ctx = ctx();
    mutate(&[config], &mut attrs, &ctx).await.unwrap();
    assert_eq!(
        attrs.object.unwrap()["metadata"]["labels"],
        json!({"app": "db", "owner": "ops"})
    );
    let annotations = ctx.notes.annotations();
    let mutation: Value =
        serde_json::from_str(&annotations["mutation.webhook.admission.k8s.io/round_0_index_0"])
            .unwrap();
    assert_eq!(
        mutation,
        json!({"configuration": "m", "webhook": "label.example.com", "mutated": true})
    );
    let patch: Value =
        serde_json::from_str(&annotations["patch.webhook.admission.k8s.io/round_0_index_0"])
            .unwrap();
    assert_eq!(patch["patchType"], "JSONPatch");
    assert_eq!(patch["patch"][0]["path"], "/metadata/labels/owner");
}

#[tokio::test]
async fn a_patch_on_delete_is_an_internal_error() {
    let server = WebhookServer::start(|_| {
        Reply::patch(json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}]))
    })
    .unwrap();
    let config = mutating(
        "m",
        vec![hook(
            "del.example.com",
            &server,
            json!({"failurePolicy": "Ignore"}),
        )],
    );
    let err = mutate(&[config], &mut attrs(Operation::Delete), &ctx())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ApiError::Internal(
            "admission webhook \"del.example.com\" attempted to modify the object, which is not supported for this operation".to_owned()
        )
    );
}

#[tokio::test]
async fn a_validating_webhook_may_not_return_a_patch() {
    let server = WebhookServer::start(|_| {
        Reply::patch(json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}]))
    })
    .unwrap();
    let config = validating("v", vec![hook("sneaky.example.com", &server, json!({}))]);
    assert_eq!(
        message(validate(config, &attrs(Operation::Create), &ctx()).await),
        "Internal error occurred: failed calling webhook \"sneaky.example.com\": received invalid webhook response: validating webhook may not return response.patch"
    );
}

#[tokio::test]
async fn an_answer_for_another_uid_is_refused() {
    let server = WebhookServer::start(|_| Reply::Response(json!({"uid": "someone-else"}))).unwrap();
    let config = validating("v", vec![hook("uid.example.com", &server, json!({}))]);
    let text = message(validate(config, &attrs(Operation::Create), &ctx()).await);
    assert!(
        text.starts_with("Internal error occurred: failed calling webhook \"uid.example.com\": received invalid webhook response: expected response.uid="),
        "{text}"
    );
    assert!(text.ends_with(", got \"someone-else\""), "{text}");
}

#[tokio::test]
async fn of_several_refusals_the_first_webhook_in_order_is_reported() {
    let slow = WebhookServer::start(|_| {
        Reply::sleep(Duration::from_millis(300), Reply::deny(403, "first"))
    })
    .unwrap();
    let fast = WebhookServer::start(|_| Reply::deny(403, "second")).unwrap();
    let a = validating("a", vec![hook("a.example.com", &slow, json!({}))]);
    let b = validating("b", vec![hook("b.example.com", &fast, json!({}))]);
    let err = webhooks()
        .validate(&[b, a], &attrs(Operation::Create), &ctx(), &namespaces())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "admission webhook \"a.example.com\" denied the request: first"
    );
    assert_eq!(fast.requests().len(), 1);
}

// ---- failures and failurePolicy -------------------------------------------

#[tokio::test]
async fn a_slow_webhook_under_fail_refuses_within_its_timeout() {
    let server =
        WebhookServer::start(|_| Reply::sleep(Duration::from_secs(20), Reply::allow())).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "slow.example.com",
            &server,
            json!({"timeoutSeconds": 1}),
        )],
    );
    let started = Instant::now();
    let err = validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(err.code(), 500);
    assert_eq!(
        err.to_string(),
        format!(
            "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
            server.url("/admit")
        )
    );
}

#[tokio::test]
async fn a_slow_webhook_under_ignore_is_skipped_within_its_timeout() {
    let server =
        WebhookServer::start(|_| Reply::sleep(Duration::from_secs(20), Reply::allow())).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "slow.example.com",
            &server,
            json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"}),
        )],
    );
    let ctx = ctx();
    let started = Instant::now();
    validate(config, &attrs(Operation::Create), &ctx)
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        ctx.notes
            .annotations()
            .get("failed-open.validating.webhook.admission.k8s.io/round_0_index_0"),
        Some(&"slow.example.com".to_owned())
    );
}

#[tokio::test]
async fn a_webhook_that_is_down_refuses_under_fail() {
    let port = closed_port();
    let config: Arc<ValidatingWebhookConfiguration> = validating(
        "v",
        vec![json!({
            "name": "down.example.com",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/admit")},
            "rules": [{"operations": ["CREATE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })],
    );
    assert_eq!(
        message(validate(config, &attrs(Operation::Create), &ctx()).await),
        format!(
            "Internal error occurred: failed calling webhook \"down.example.com\": failed to call webhook: Post \"https://127.0.0.1:{port}/admit?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
}

#[tokio::test]
async fn a_mutating_webhook_that_is_down_is_skipped_under_ignore() {
    let port = closed_port();
    let config = mutating(
        "m",
        vec![json!({
            "name": "down.example.com",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/admit")},
            "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Ignore",
        })],
    );
    let mut attrs = attrs(Operation::Create);
    let before = attrs.object.clone();
    let ctx = ctx();
    mutate(&[config], &mut attrs, &ctx).await.unwrap();
    assert_eq!(attrs.object, before);
    let annotations = ctx.notes.annotations();
    assert_eq!(
        annotations.get("failed-open.mutation.webhook.admission.k8s.io/round_0_index_0"),
        Some(&"down.example.com".to_owned())
    );
    assert!(
        annotations["mutation.webhook.admission.k8s.io/round_0_index_0"]
            .contains("\"mutated\":false")
    );
}

#[tokio::test]
async fn a_webhook_whose_certificate_is_not_trusted_fails_the_call() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let other = WebhookServer::start(|_| Reply::allow()).unwrap();
    let mut spec = hook("tls.example.com", &server, json!({}));
    spec["clientConfig"]["caBundle"] = json!(sta_testenv::base64(other.ca_bundle_pem().as_bytes()));
    let text = message(
        validate(
            validating("v", vec![spec]),
            &attrs(Operation::Create),
            &ctx(),
        )
        .await,
    );
    assert!(
        text.ends_with(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        ),
        "{text}"
    );
    assert!(server.requests().is_empty());
}

// ---- hostile webhooks -----------------------------------------------------

#[tokio::test]
async fn an_endless_body_is_cut_at_the_limit_and_refused_under_fail() {
    let server = WebhookServer::start(|_| Reply::Flood { bytes: u64::MAX }).unwrap();
    let config = validating("v", vec![hook("flood.example.com", &server, json!({}))]);
    let text = message(validate(config, &attrs(Operation::Create), &ctx()).await);
    assert_eq!(
        text,
        format!(
            "Internal error occurred: failed calling webhook \"flood.example.com\": failed to call webhook: the response body exceeds the limit of {MAX_RESPONSE_BYTES} bytes"
        )
    );
}

#[tokio::test]
async fn an_oversized_body_is_skipped_under_ignore() {
    let server = WebhookServer::start(|_| Reply::Raw {
        status: 200,
        content_type: "application/json".to_owned(),
        body: vec![b' '; MAX_RESPONSE_BYTES + 1],
    })
    .unwrap();
    let config = validating(
        "v",
        vec![hook(
            "big.example.com",
            &server,
            json!({"failurePolicy": "Ignore"}),
        )],
    );
    let ctx = ctx();
    validate(config, &attrs(Operation::Create), &ctx)
        .await
        .unwrap();
    assert!(ctx
        .notes
        .annotations()
        .contains_key("failed-open.validating.webhook.admission.k8s.io/round_0_index_0"));
}

#[tokio::test]
async fn garbage_json_fails_the_call() {
    let server = WebhookServer::start(|_| Reply::Raw {
        status: 200,
        content_type: "application/json".to_owned(),
        body: b"{\"apiVersion\": nope".to_vec(),
    })
    .unwrap();
    let config = validating("v", vec![hook("garbage.example.com", &server, json!({}))]);
    let err = validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap_err();
    assert_eq!(err.code(), 500);
    assert!(err
        .to_string()
        .starts_with("Internal error occurred: failed calling webhook \"garbage.example.com\": failed to call webhook: "));
}

#[tokio::test]
async fn a_server_error_in_text_is_quoted_as_client_go_quotes_it() {
    let server = WebhookServer::start(|_| Reply::Raw {
        status: 500,
        content_type: "text/plain".to_owned(),
        body: b"boom\n".to_vec(),
    })
    .unwrap();
    let config = validating("v", vec![hook("boom.example.com", &server, json!({}))]);
    assert_eq!(
        message(validate(config, &attrs(Operation::Create), &ctx()).await),
        "Internal error occurred: failed calling webhook \"boom.example.com\": failed to call webhook: an error on the server (\"boom\") has prevented the request from succeeding"
    );
}

// ---- dry run --------------------------------------------------------------

#[tokio::test]
async fn a_dry_run_is_refused_by_a_webhook_with_side_effects() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "effects.example.com",
            &server,
            json!({"sideEffects": "Some", "failurePolicy": "Ignore"}),
        )],
    );
    let mut attrs = attrs(Operation::Create);
    attrs.dry_run = true;
    let err = validate(config, &attrs, &ctx()).await.unwrap_err();
    assert_eq!(
        err,
        ApiError::BadRequest(
            "admission webhook \"effects.example.com\" does not support dry run".to_owned()
        )
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_dry_run_calls_a_webhook_without_side_effects_with_dry_run_set() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let config = validating("v", vec![hook("pure.example.com", &server, json!({}))]);
    let mut attrs = attrs(Operation::Create);
    attrs.dry_run = true;
    validate(config, &attrs, &ctx()).await.unwrap();
    assert_eq!(server.requests()[0]["dryRun"], true);
}

// ---- matching -------------------------------------------------------------

#[tokio::test]
async fn a_false_match_condition_skips_the_webhook() {
    let server = WebhookServer::start(|_| Reply::deny(403, "called")).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "cond.example.com",
            &server,
            json!({"matchConditions": [
                {"name": "is-create", "expression": "request.operation == 'CREATE'"},
                {"name": "not-t1", "expression": "object.metadata.name != 't1'"},
            ]}),
        )],
    );
    validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap();
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn true_match_conditions_call_the_webhook() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "cond.example.com",
            &server,
            json!({"matchConditions": [
                {"name": "is-t1", "expression": "object.metadata.name == 't1'"},
            ]}),
        )],
    );
    validate(config, &attrs(Operation::Create), &ctx())
        .await
        .unwrap();
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_failing_match_condition_follows_the_failure_policy() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let conditions = json!([{"name": "broken", "expression": "object.nope.deeper == 1"}]);
    let fail = validating(
        "v",
        vec![hook(
            "cond.example.com",
            &server,
            json!({"matchConditions": conditions}),
        )],
    );
    let err = validate(fail, &attrs(Operation::Create), &ctx())
        .await
        .unwrap_err();
    assert_eq!(err.code(), 403);
    assert!(err
        .to_string()
        .starts_with("namespacetransfers.storage.transfer.k8s.io \"t1\" is forbidden: expression 'object.nope.deeper == 1' resulted in error: "));
    let ignore = validating(
        "v",
        vec![hook(
            "cond.example.com",
            &server,
            json!({"matchConditions": conditions, "failurePolicy": "Ignore"}),
        )],
    );
    validate(ignore, &attrs(Operation::Create), &ctx())
        .await
        .unwrap();
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_namespace_selector_reads_the_labels_of_the_objects_namespace() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    for (selector, called) in [
        (json!({"matchLabels": {"env": "prod"}}), true),
        (json!({"matchLabels": {"env": "dev"}}), false),
        (
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
            false,
        ),
    ] {
        let before = server.requests().len();
        let config = validating(
            "v",
            vec![hook(
                "ns.example.com",
                &server,
                json!({"namespaceSelector": selector}),
            )],
        );
        validate(config, &attrs(Operation::Create), &ctx())
            .await
            .unwrap();
        assert_eq!(server.requests().len() > before, called, "{selector}");
    }
}

#[tokio::test]
async fn a_namespace_unknown_to_a_selecting_webhook_refuses_with_not_found() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "ns.example.com",
            &server,
            json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
        )],
    );
    let mut attrs = attrs(Operation::Create);
    attrs.namespace = "ghost".to_owned();
    let err = validate(config, &attrs, &ctx()).await.unwrap_err();
    assert_eq!(
        err,
        ApiError::NotFound {
            resource: GroupResource::new("", "namespaces"),
            name: "ghost".to_owned()
        }
    );
}

#[tokio::test]
async fn the_object_selector_matches_the_new_or_the_old_object() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let config = validating(
        "v",
        vec![hook(
            "obj.example.com",
            &server,
            json!({"objectSelector": {"matchLabels": {"app": "db"}}}),
        )],
    );
    // Only the old object has the label: called.
    let mut update = attrs(Operation::Update);
    update.object = Some(transfer(json!({"app": "web"})));
    validate(config.clone(), &update, &ctx()).await.unwrap();
    assert_eq!(server.requests().len(), 1);
    // Neither has it: skipped.
    update.old_object = Some(transfer(json!({})));
    validate(config, &update, &ctx()).await.unwrap();
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn resource_rules_match_subresources_as_kube_splits_them() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    for (resources, main, status) in [
        (json!(["namespacetransfers"]), true, false),
        (json!(["namespacetransfers/status"]), false, true),
        (json!(["namespacetransfers/*"]), true, true),
        (json!(["*"]), true, false),
        (json!(["*/status"]), false, true),
        (json!(["*/*"]), true, true),
        (json!(["ephemeralclaims"]), false, false),
    ] {
        let rules = json!([{
            "operations": ["UPDATE"], "apiGroups": ["storage.transfer.k8s.io"],
            "apiVersions": ["v1alpha1"], "resources": resources, "scope": "Namespaced",
        }]);
        let config = validating("v", vec![hook("r", &server, json!({"rules": rules}))]);
        let hooks = super::hook::validating_hooks(std::slice::from_ref(&config));
        let mut attrs = attrs(Operation::Update);
        assert_eq!(
            super::matching::rules_match(&hooks[0], &attrs),
            main,
            "{resources} main"
        );
        attrs.subresource = "status".to_owned();
        assert_eq!(
            super::matching::rules_match(&hooks[0], &attrs),
            status,
            "{resources} status"
        );
    }
}

#[test]
fn rules_check_operation_group_version_and_scope() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let base = json!({"operations": ["CREATE"], "apiGroups": ["storage.transfer.k8s.io"],
        "apiVersions": ["v1alpha1"], "resources": ["namespacetransfers"]});
    for (change, matches) in [
        (json!({}), true),
        (json!({"operations": ["*"]}), true),
        (json!({"operations": ["DELETE"]}), false),
        (json!({"apiGroups": ["apps"]}), false),
        (json!({"apiVersions": ["v1"]}), false),
        (json!({"scope": "Cluster"}), false),
        (json!({"scope": "*"}), true),
    ] {
        let mut rule = base.clone();
        for (k, v) in change.as_object().cloned().unwrap_or_default() {
            rule[k.as_str()] = v;
        }
        let config = validating("v", vec![hook("r", &server, json!({"rules": [rule]}))]);
        let hooks = super::hook::validating_hooks(std::slice::from_ref(&config));
        assert_eq!(
            super::matching::rules_match(&hooks[0], &attrs(Operation::Create)),
            matches,
            "{change}"
        );
    }
}

// ---- service references ---------------------------------------------------

#[tokio::test]
async fn a_service_reference_is_called_at_its_endpoint_under_the_service_name() {
    let server =
        WebhookServer::start_with_names(&["hooks.webhooks.svc"], |_| Reply::deny(403, "via svc"))
            .unwrap();
    let webhooks = Webhooks::with_resolver(Arc::new(FixedResolver(Some(Endpoint {
        host: "127.0.0.1".to_owned(),
        port: server.port(),
    }))));
    let mut spec = hook("svc.example.com", &server, json!({}));
    spec["clientConfig"] = json!({
        "service": {"namespace": "webhooks", "name": "hooks", "path": "/validate"},
        "caBundle": sta_testenv::base64(server.ca_bundle_pem().as_bytes()),
    });
    let err = webhooks
        .validate(
            &[validating("v", vec![spec])],
            &attrs(Operation::Create),
            &ctx(),
            &namespaces(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "admission webhook \"svc.example.com\" denied the request: via svc"
    );
}

#[tokio::test]
async fn a_service_without_endpoints_fails_the_call() {
    let server = WebhookServer::start(|_| Reply::allow()).unwrap();
    let mut spec = hook("svc.example.com", &server, json!({}));
    spec["clientConfig"] = json!({"service": {"namespace": "webhooks", "name": "hooks"}});
    assert_eq!(
        message(validate(validating("v", vec![spec]), &attrs(Operation::Create), &ctx()).await),
        "Internal error occurred: failed calling webhook \"svc.example.com\": failed to call webhook: Post \"https://hooks.webhooks.svc:443/?timeout=5s\": no endpoints available for service \"hooks\""
    );
}

#[test]
fn a_ready_endpoint_on_the_named_port_is_picked() {
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "hooks-abc"},
        "addressType": "IPv4",
        "ports": [{"name": "metrics", "port": 9090}, {"name": "https", "port": 8443}],
        "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
        ],
    }))
    .unwrap();
    let picked = super::resolver::pick_endpoint(std::slice::from_ref(&slice), "https", 0);
    assert_eq!(
        picked,
        Some(Endpoint {
            host: "10.0.0.2".to_owned(),
            port: 8443
        })
    );
    assert_eq!(super::resolver::pick_endpoint(&[slice], "grpc", 0), None);
}

// ---- reinvocation ---------------------------------------------------------

/// A webhook that sets label `key` (a change only the first time).
fn labeller(key: &'static str) -> WebhookServer {
    WebhookServer::start(move |request| {
        let has = request["object"]["metadata"]["labels"].get(key).is_some();
        if has {
            Reply::allow()
        } else {
            Reply::patch(
                json!([{"op": "add", "path": format!("/metadata/labels/{key}"), "value": "yes"}]),
            )
        }
    })
    .unwrap()
}

#[tokio::test]
async fn a_webhook_asking_for_reinvocation_runs_again_after_a_later_change() {
    let first = labeller("first");
    let second = labeller("second");
    let configs = [
        mutating(
            "a",
            vec![hook(
                "first.example.com",
                &first,
                json!({"reinvocationPolicy": "IfNeeded"}),
            )],
        ),
        mutating("b", vec![hook("second.example.com", &second, json!({}))]),
    ];
    let webhooks = webhooks();
    let mut attrs = attrs(Operation::Create);
    let ctx = ctx();
    let mut reinvocation = Reinvocation::default();
    webhooks
        .mutate(&configs, &mut attrs, &ctx, &namespaces(), &mut reinvocation)
        .await
        .unwrap();
    assert!(reinvocation.should_reinvoke);
    reinvocation.should_reinvoke = false;
    reinvocation.reinvoking = true;
    webhooks
        .mutate(&configs, &mut attrs, &ctx, &namespaces(), &mut reinvocation)
        .await
        .unwrap();
    assert_eq!(first.requests().len(), 2);
    assert_eq!(second.requests().len(), 1);
    assert_eq!(
        first.requests()[1]["object"]["metadata"]["labels"]["second"],
        "yes"
    );
    assert!(ctx
        .notes
        .annotations()
        .contains_key("mutation.webhook.admission.k8s.io/round_1_index_0"));
    assert!(!reinvocation.should_reinvoke);
}

#[tokio::test]
async fn a_webhook_without_reinvocation_runs_once() {
    let first = labeller("first");
    let second = labeller("second");
    let configs = [
        mutating("a", vec![hook("first.example.com", &first, json!({}))]),
        mutating("b", vec![hook("second.example.com", &second, json!({}))]),
    ];
    let webhooks = webhooks();
    let mut attrs = attrs(Operation::Create);
    let ctx = ctx();
    let mut reinvocation = Reinvocation::default();
    webhooks
        .mutate(&configs, &mut attrs, &ctx, &namespaces(), &mut reinvocation)
        .await
        .unwrap();
    reinvocation.reinvoking = true;
    webhooks
        .mutate(&configs, &mut attrs, &ctx, &namespaces(), &mut reinvocation)
        .await
        .unwrap();
    assert_eq!(first.requests().len(), 1);
    assert_eq!(second.requests().len(), 1);
}

#[tokio::test]
async fn another_plugins_change_in_the_second_pass_reinvokes_the_webhook() {
    let first = labeller("first");
    let configs = [mutating(
        "a",
        vec![hook(
            "first.example.com",
            &first,
            json!({"reinvocationPolicy": "IfNeeded"}),
        )],
    )];
    let webhooks = webhooks();
    let mut attrs = attrs(Operation::Create);
    let ctx = ctx();
    let mut reinvocation = Reinvocation::default();
    webhooks
        .mutate(&configs, &mut attrs, &ctx, &namespaces(), &mut reinvocation)
        .await
        .unwrap();
    // A policy with IfNeeded changes the object after the webhook ran.
    attrs.object.as_mut().unwrap()["metadata"]["labels"]["policy"] = json!("set");
    reinvocation.reinvoking = true;
    webhooks
        .mutate(&configs, &mut attrs, &ctx, &namespaces(), &mut reinvocation)
        .await
        .unwrap();
    assert_eq!(first.requests().len(), 2);
}

#[test]
fn the_plugins_can_be_shared_across_tasks() {
    fn shared<T: Send + Sync + std::fmt::Debug + 'static>() {}
    shared::<Webhooks>();
}

#[tokio::test]
async fn a_webhook_patch_that_doubles_the_object_by_copies_is_refused_not_applied() {
    // 64 copies of the whole object into itself: 2^64 times its size, were
    // it applied as written.
    let ops: Vec<Value> = (0..64)
        .map(|i| json!({"op": "copy", "from": "/metadata", "path": format!("/metadata/labels/c{i}")}))
        .collect();
    let server = WebhookServer::start(move |_| Reply::patch(Value::Array(ops.clone()))).unwrap();
    let config = mutating("m", vec![hook("bomb.example.com", &server, json!({}))]);
    let mut attrs = attrs(Operation::Create);
    let before = attrs.object.clone();
    let err = mutate(&[config], &mut attrs, &ctx()).await.unwrap_err();
    assert_eq!(err.code(), 500, "{err}");
    assert!(err.to_string().contains("more than the limit"), "{err}");
    assert_eq!(attrs.object, before);
}

#[tokio::test]
async fn a_patch_annotation_is_kept_out_of_metadata_level_audit_events() {
    let server = WebhookServer::start(|_| {
        Reply::patch(json!([{"op": "add", "path": "/metadata/labels/owner", "value": "ops"}]))
    })
    .unwrap();
    let config = mutating("m", vec![hook("label.example.com", &server, json!({}))]);
    let ctx = ctx();
    mutate(&[config], &mut attrs(Operation::Create), &ctx)
        .await
        .unwrap();
    use crate::registry::admission::AnnotationLevel;
    let metadata = ctx.notes.annotations_at(AnnotationLevel::Metadata);
    assert!(metadata.contains_key("mutation.webhook.admission.k8s.io/round_0_index_0"));
    assert!(!metadata.contains_key("patch.webhook.admission.k8s.io/round_0_index_0"));
    let request = ctx.notes.annotations_at(AnnotationLevel::Request);
    assert!(request.contains_key("patch.webhook.admission.k8s.io/round_0_index_0"));
}
