//! The policy plugin against fake params, namespaces and authorizer, with
//! real CEL (kube_cel).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use super::matching::selector_matches;
use super::*;
use crate::api::meta::Requester;
use crate::authz::{Attributes as AuthzAttributes, Decision};
use crate::registry::admission::Operation;

// ---- fakes -----------------------------------------------------------------

/// ConfigMaps (namespaced) as params.
#[derive(Debug, Default)]
struct FakeParams {
    objects: Vec<Value>,
}

fn is_config_map(kind: &ParamKindRef) -> bool {
    kind.group.is_empty() && kind.version == "v1" && kind.kind == "ConfigMap"
}

#[async_trait::async_trait]
impl ParamSource for FakeParams {
    async fn scope(&self, kind: &ParamKindRef) -> Result<ParamScope, ParamError> {
        if is_config_map(kind) {
            Ok(ParamScope::Namespaced)
        } else {
            Err(ParamError::UnknownKind(kind.clone()))
        }
    }

    async fn get(
        &self,
        _kind: &ParamKindRef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ParamError> {
        Ok(self
            .objects
            .iter()
            .find(|o| o["metadata"]["namespace"] == namespace && o["metadata"]["name"] == name)
            .cloned())
    }

    async fn list(
        &self,
        _kind: &ParamKindRef,
        namespace: &str,
        selector: &LabelSelector,
        limit: usize,
    ) -> Result<Vec<Value>, ParamError> {
        let mut found = Vec::new();
        for o in &self.objects {
            let labels = serde_json::from_value(o["metadata"]["labels"].clone()).ok();
            if o["metadata"]["namespace"] == namespace
                && selector_matches(selector, labels.as_ref()).map_err(ParamError::Lookup)?
            {
                found.push(o.clone());
            }
        }
        if found.len() > limit {
            return Err(ParamError::TooMany(limit));
        }
        Ok(found)
    }
}

/// Allows `alice` everything; denies everyone else. Records what it was asked.
#[derive(Debug, Default)]
struct FakeAuthorizer {
    asked: Mutex<Vec<AuthzAttributes>>,
}

#[async_trait::async_trait]
impl Authorizer for FakeAuthorizer {
    async fn authorize(&self, attributes: &AuthzAttributes) -> Result<Decision, ApiError> {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(attributes.clone());
        Ok(if attributes.user.username == "alice" {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: "not alice".to_owned(),
            }
        })
    }
}

#[derive(Debug, Default)]
struct FakeNamespaces(HashMap<String, Arc<Namespace>>);

impl Namespaces for FakeNamespaces {
    fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        self.0.get(name).cloned()
    }
}

fn namespaces() -> FakeNamespaces {
    let mut all = HashMap::new();
    for (name, env) in [("team-a", "prod"), ("team-b", "dev")] {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"env": env}}
        }))
        .expect("namespace");
        all.insert(name.to_owned(), Arc::new(ns));
    }
    FakeNamespaces(all)
}

// ---- fixtures --------------------------------------------------------------

fn plugin(params: Vec<Value>) -> Policies {
    Policies::with_params(
        Arc::new(FakeParams { objects: params }),
        Arc::new(FakeAuthorizer::default()),
    )
}

fn transfer(labels: Value) -> Value {
    json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t1", "namespace": "team-a", "labels": labels},
        "spec": {
            "source": {"kind": "Namespace", "namespace": "team-a", "name": "data"},
            "destination": {"namespace": "team-b", "name": "data"}
        }
    })
}

fn create(object: Value) -> Attributes {
    Attributes {
        operation: Operation::Create,
        group: "storage.transfer.k8s.io".to_owned(),
        version: "v1alpha1".to_owned(),
        kind: "NamespaceTransfer".to_owned(),
        resource: "namespacetransfers".to_owned(),
        subresource: String::new(),
        namespace: "team-a".to_owned(),
        name: "t1".to_owned(),
        object: Some(object),
        old_object: None,
        options: json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}),
        dry_run: false,
        user: Requester {
            username: "alice".to_owned(),
            groups: vec!["tenants".to_owned()],
            ..Requester::default()
        },
        schema: crate::api::schema::KindSchema::of::<crate::api::NamespaceTransfer>(),
        rights: Vec::new(),
    }
}

fn attrs() -> Attributes {
    create(transfer(json!({"app": "db"})))
}

fn rules() -> Value {
    json!({"resourceRules": [{
        "apiGroups": ["storage.transfer.k8s.io"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["namespacetransfers"]
    }]})
}

/// A policy over namespacetransfers; `spec` adds to (or overrides) it.
fn vap(name: &str, spec: Value) -> Arc<ValidatingAdmissionPolicy> {
    let mut full = json!({"matchConstraints": rules()});
    merge(&mut full, spec);
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": full})).expect("policy"),
    )
}

fn binding(
    name: &str,
    policy: &str,
    actions: &[&str],
    extra: Value,
) -> Arc<ValidatingAdmissionPolicyBinding> {
    let mut spec = json!({"policyName": policy, "validationActions": actions});
    merge(&mut spec, extra);
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("binding"),
    )
}

fn map(name: &str, spec: Value) -> Arc<MutatingAdmissionPolicy> {
    let mut full = json!({"matchConstraints": rules()});
    merge(&mut full, spec);
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": full})).expect("policy"),
    )
}

fn map_binding(name: &str, policy: &str) -> Arc<MutatingAdmissionPolicyBinding> {
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"policyName": policy}}))
            .expect("binding"),
    )
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

fn validating(
    policies: Vec<Arc<ValidatingAdmissionPolicy>>,
    bindings: Vec<Arc<ValidatingAdmissionPolicyBinding>>,
) -> Snapshot {
    Snapshot {
        validating_policies: policies,
        validating_bindings: bindings,
        ..Snapshot::default()
    }
}

fn one(validation: Value) -> Snapshot {
    validating(
        vec![vap("p", json!({"validations": [validation]}))],
        vec![binding("b", "p", &["Deny"], json!({}))],
    )
}

async fn run_validate(
    plugin: &Policies,
    snapshot: &Snapshot,
    attrs: &Attributes,
) -> (Result<(), ApiError>, Context) {
    let ctx = Context::default();
    let result = plugin.validate(snapshot, attrs, &ctx, &namespaces()).await;
    (result, ctx)
}

async fn check(snapshot: &Snapshot) -> Result<(), ApiError> {
    run_validate(&plugin(vec![]), snapshot, &attrs()).await.0
}

fn config_map(name: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels},
        "data": data
    })
}

// ---- validating ------------------------------------------------------------

#[tokio::test]
async fn a_failing_validation_with_deny_refuses_with_kubes_message_and_invalid() {
    let err = check(&one(
        json!({"expression": "object.metadata.name == 'other'", "message": "wrong name"}),
    ))
    .await
    .expect_err("denied");
    assert_eq!(err.code(), 422);
    assert_eq!(err.reason(), "Invalid");
    assert_eq!(
        err.to_string(),
        "namespacetransfers.storage.transfer.k8s.io \"t1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: wrong name"
    );
    let status = err.to_status();
    let details = status.details.expect("details");
    assert_eq!(details.kind.as_deref(), Some("namespacetransfers"));
    assert_eq!(
        details.causes.expect("causes")[0].message.as_deref(),
        Some("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: wrong name")
    );
}

#[tokio::test]
async fn a_passing_validation_admits() {
    check(&one(json!({"expression": "object.metadata.name == 't1'"})))
        .await
        .expect("admitted");
}

#[tokio::test]
async fn a_failing_validation_without_message_says_which_expression_failed() {
    let err = check(&one(json!({"expression": " object.metadata.name == 'x' "})))
        .await
        .expect_err("denied");
    assert!(
        err.to_string()
            .ends_with("denied request: failed expression: object.metadata.name == 'x'"),
        "{err}"
    );
}

#[tokio::test]
async fn message_expression_supplies_the_message() {
    let err = check(&one(json!({
        "expression": "false",
        "message": "static",
        "messageExpression": "'name ' + object.metadata.name + ' is taken'"
    })))
    .await
    .expect_err("denied");
    assert!(
        err.to_string()
            .ends_with("denied request: name t1 is taken"),
        "{err}"
    );
}

#[tokio::test]
async fn message_expression_that_is_not_a_string_falls_back_to_message() {
    let err = check(&one(
        json!({"expression": "false", "message": "static", "messageExpression": "42"}),
    ))
    .await
    .expect_err("denied");
    assert!(err.to_string().ends_with("denied request: static"), "{err}");
}

#[tokio::test]
async fn reason_picks_the_code() {
    for (reason, code) in [
        ("Forbidden", 403),
        ("Unauthorized", 401),
        ("RequestEntityTooLarge", 413),
        ("Invalid", 422),
    ] {
        let err = check(&one(json!({"expression": "false", "reason": reason})))
            .await
            .expect_err("denied");
        assert_eq!((err.code(), err.reason()), (code, reason));
    }
}

#[tokio::test]
async fn warn_action_adds_kubes_warning_and_admits() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({"validations": [{"expression": "false", "message": "careful"}]}),
        )],
        vec![binding("b", "p", &["Warn"], json!({}))],
    );
    let (result, ctx) = run_validate(&plugin(vec![]), &snapshot, &attrs()).await;
    result.expect("admitted");
    assert_eq!(
        ctx.notes.warnings(),
        vec![
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': careful"
                .to_owned()
        ]
    );
}

#[tokio::test]
async fn audit_action_writes_the_validation_failure_annotation_and_admits() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({"validations": [
                {"expression": "true"},
                {"expression": "false", "message": "a<b & c"}
            ]}),
        )],
        vec![binding("b", "p", &["Audit", "Warn"], json!({}))],
    );
    let (result, ctx) = run_validate(&plugin(vec![]), &snapshot, &attrs()).await;
    result.expect("admitted");
    assert_eq!(
        ctx.notes
            .annotations()
            .get("validation.policy.admission.k8s.io/validation_failure")
            .map(String::as_str),
        Some(
            r#"[{"message":"a\u003cb \u0026 c","policy":"p","binding":"b","expressionIndex":1,"validationActions":["Audit","Warn"]}]"#
        )
    );
    assert_eq!(ctx.notes.warnings().len(), 1);
}

#[tokio::test]
async fn audit_annotations_are_published_under_the_policy_name() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({
                "validations": [{"expression": "true"}],
                "auditAnnotations": [
                    {"key": "requested-by", "valueExpression": "' ' + request.userInfo.username + ' '"},
                    {"key": "skipped", "valueExpression": "null"}
                ]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    let (result, ctx) = run_validate(&plugin(vec![]), &snapshot, &attrs()).await;
    result.expect("admitted");
    let annotations = ctx.notes.annotations();
    assert_eq!(
        annotations.get("p/requested-by").map(String::as_str),
        Some("alice")
    );
    assert!(!annotations.contains_key("p/skipped"));
}

#[tokio::test]
async fn audit_annotation_of_the_wrong_type_refuses() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({"auditAnnotations": [{"key": "k", "valueExpression": "1"}]}),
        )],
        vec![binding("b", "p", &["Audit"], json!({}))],
    );
    let err = check(&snapshot).await.expect_err("denied");
    assert!(
        err.to_string().contains(
            "denied request: valueExpression '1' resulted in unsupported return type: int. Return type must be either string or null."
        ),
        "{err}"
    );
}

#[tokio::test]
async fn variables_are_composited_lazily() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({
                "variables": [
                    {"name": "app", "expression": "object.metadata.labels['app']"},
                    {"name": "isDb", "expression": "variables.app == 'db'"}
                ],
                "validations": [{"expression": "!variables.isDb", "messageExpression": "'app is ' + variables.app"}]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    let err = check(&snapshot).await.expect_err("denied");
    assert!(
        err.to_string().ends_with("denied request: app is db"),
        "{err}"
    );
}

#[tokio::test]
async fn request_and_namespace_object_are_bound() {
    check(&one(json!({"expression":
        "request.operation == 'CREATE' && request.kind.kind == 'NamespaceTransfer' \
         && request.resource.resource == 'namespacetransfers' && request.namespace == 'team-a' \
         && request.userInfo.username == 'alice' && request.dryRun == false \
         && namespaceObject.metadata.labels.env == 'prod' && oldObject == null && params == null"})))
    .await
    .expect("admitted");
}

#[tokio::test]
async fn authorizer_checks_the_requester_with_our_authorizer() {
    let authorizer = Arc::new(FakeAuthorizer::default());
    let plugin = Policies::with_params(Arc::new(FakeParams::default()), authorizer.clone());
    let snapshot = one(json!({"expression":
        "authorizer.group('').resource('secrets').namespace('team-b').check('get').allowed()"}));
    let mut bob = attrs();
    bob.user.username = "bob".to_owned();
    let (alice_result, _) = run_validate(&plugin, &snapshot, &attrs()).await;
    alice_result.expect("alice may");
    let (bob_result, _) = run_validate(&plugin, &snapshot, &bob).await;
    bob_result.expect_err("bob may not");
    let asked = authorizer
        .asked
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let resource = asked[0].resource.clone().expect("resource check");
    assert_eq!(
        (
            asked[0].verb.as_str(),
            resource.resource.as_str(),
            resource.namespace.as_str()
        ),
        ("get", "secrets", "team-b")
    );
}

#[tokio::test]
async fn false_match_condition_skips_the_policy() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({
                "matchConditions": [{"name": "only-web", "expression": "object.metadata.labels['app'] == 'web'"}],
                "validations": [{"expression": "false"}]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    check(&snapshot).await.expect("skipped");
}

#[tokio::test]
async fn cel_error_under_fail_refuses_with_kubes_message() {
    let err = check(&one(json!({"expression": "object.spec.nope == 'x'"})))
        .await
        .expect_err("denied");
    assert!(
        err.to_string()
            .contains("denied request: expression 'object.spec.nope == 'x'' resulted in error: "),
        "{err}"
    );
    assert_eq!(err.code(), 422);
}

#[tokio::test]
async fn cel_error_under_ignore_admits() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({"failurePolicy": "Ignore", "validations": [{"expression": "object.spec.nope == 'x'"}]}),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    check(&snapshot).await.expect("ignored");
}

#[tokio::test]
async fn compile_error_under_fail_refuses_as_a_compilation_error() {
    let err = check(&one(json!({"expression": "object.metadata.name =="})))
        .await
        .expect_err("denied");
    assert!(
        err.to_string()
            .contains("denied request: compilation error: "),
        "{err}"
    );
}

#[tokio::test]
async fn a_validation_that_is_not_a_bool_is_an_error() {
    let err = check(&one(json!({"expression": "'yes'"})))
        .await
        .expect_err("denied");
    assert!(
        err.to_string()
            .contains("denied request: compilation error: must evaluate to bool but got string"),
        "{err}"
    );
}

#[tokio::test]
async fn match_condition_error_under_fail_refuses_and_under_ignore_skips() {
    let conditions = json!([{"name": "broken", "expression": "object.spec.nope"}]);
    let fail = validating(
        vec![vap(
            "p",
            json!({"matchConditions": conditions, "validations": [{"expression": "true"}]}),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    let err = check(&fail).await.expect_err("denied");
    assert!(err.to_string().contains("resulted in error"), "{err}");
    let ignore = validating(
        vec![vap(
            "p",
            json!({"failurePolicy": "Ignore", "matchConditions": conditions, "validations": [{"expression": "false"}]}),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    check(&ignore).await.expect("skipped");
}

// ---- matching --------------------------------------------------------------

#[tokio::test]
async fn a_policy_without_bindings_does_nothing() {
    let snapshot = validating(
        vec![vap("p", json!({"validations": [{"expression": "false"}]}))],
        vec![],
    );
    check(&snapshot).await.expect("unbound");
    let other = validating(
        vec![vap("p", json!({"validations": [{"expression": "false"}]}))],
        vec![binding("b", "someone-else", &["Deny"], json!({}))],
    );
    check(&other).await.expect("bound to another policy");
}

#[tokio::test]
async fn exclude_resource_rules_exempt_a_resource() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*", "*/*"]}],
                    "excludeResourceRules": [{"apiGroups": ["storage.transfer.k8s.io"], "apiVersions": ["*"], "operations": ["*"], "resources": ["namespacetransfers"]}]
                },
                "validations": [{"expression": "false"}]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    check(&snapshot).await.expect("excluded");
}

#[tokio::test]
async fn a_status_rule_matches_only_the_status_subresource() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["storage.transfer.k8s.io"], "apiVersions": ["v1alpha1"],
                    "operations": ["UPDATE"], "resources": ["namespacetransfers/status"]
                }]},
                "validations": [{"expression": "false"}]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    let mut update = attrs();
    update.operation = Operation::Update;
    update.old_object = update.object.clone();
    let plugin = plugin(vec![]);
    run_validate(&plugin, &snapshot, &update)
        .await
        .0
        .expect("main resource not matched");
    update.subresource = "status".to_owned();
    run_validate(&plugin, &snapshot, &update)
        .await
        .0
        .expect_err("status matched");
}

#[tokio::test]
async fn namespace_selector_matches_by_the_namespaces_labels() {
    let snapshot = |env: &str| {
        validating(
            vec![vap(
                "p",
                json!({
                    "matchConstraints": {
                        "resourceRules": rules()["resourceRules"],
                        "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": [env]}]}
                    },
                    "validations": [{"expression": "false"}]
                }),
            )],
            vec![binding("b", "p", &["Deny"], json!({}))],
        )
    };
    check(&snapshot("dev")).await.expect("team-a is prod");
    check(&snapshot("prod")).await.expect_err("team-a is prod");
}

#[tokio::test]
async fn binding_match_resources_narrow_the_policy() {
    let snapshot = validating(
        vec![vap("p", json!({"validations": [{"expression": "false"}]}))],
        vec![binding(
            "b",
            "p",
            &["Deny"],
            json!({"matchResources": {"objectSelector": {"matchLabels": {"app": "web"}}}}),
        )],
    );
    check(&snapshot).await.expect("object is app=db");
}

// ---- params ----------------------------------------------------------------

fn with_params(param_ref: Value, validation: &str) -> Snapshot {
    validating(
        vec![vap(
            "p",
            json!({
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "validations": [{"expression": validation, "messageExpression": "'limit from ' + params.metadata.name"}]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({"paramRef": param_ref}))],
    )
}

#[tokio::test]
async fn param_ref_by_name_binds_params() {
    let plugin = plugin(vec![config_map("limits", json!({}), json!({"app": "db"}))]);
    let snapshot = with_params(
        json!({"name": "limits", "parameterNotFoundAction": "Deny"}),
        "object.metadata.labels['app'] != params.data.app",
    );
    let err = run_validate(&plugin, &snapshot, &attrs())
        .await
        .0
        .expect_err("denied");
    assert!(
        err.to_string()
            .ends_with("denied request: limit from limits"),
        "{err}"
    );
}

#[tokio::test]
async fn param_ref_by_selector_evaluates_against_each_param() {
    let plugin = plugin(vec![
        config_map("allow", json!({"policy": "p"}), json!({"app": "web"})),
        config_map("deny", json!({"policy": "p"}), json!({"app": "db"})),
        config_map("unrelated", json!({}), json!({"app": "db"})),
    ]);
    let snapshot = with_params(
        json!({"selector": {"matchLabels": {"policy": "p"}}, "parameterNotFoundAction": "Deny"}),
        "object.metadata.labels['app'] != params.data.app",
    );
    let err = run_validate(&plugin, &snapshot, &attrs())
        .await
        .0
        .expect_err("denied");
    assert!(
        err.to_string().ends_with("denied request: limit from deny"),
        "{err}"
    );
}

#[tokio::test]
async fn missing_param_with_deny_refuses_with_kubes_message() {
    let snapshot = with_params(
        json!({"name": "absent", "parameterNotFoundAction": "Deny"}),
        "true",
    );
    let err = check(&snapshot).await.expect_err("denied");
    assert_eq!(
        err.to_string(),
        "namespacetransfers.storage.transfer.k8s.io \"t1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
}

#[tokio::test]
async fn missing_param_with_allow_skips_the_binding() {
    let by_name = with_params(
        json!({"name": "absent", "parameterNotFoundAction": "Allow"}),
        "false",
    );
    check(&by_name).await.expect("skipped");
    let by_selector = with_params(
        json!({"selector": {"matchLabels": {"none": "x"}}, "parameterNotFoundAction": "Allow"}),
        "false",
    );
    check(&by_selector).await.expect("skipped");
}

#[tokio::test]
async fn an_unknown_param_kind_is_a_configuration_error_of_the_policy() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({"paramKind": {"apiVersion": "example.com/v1", "kind": "Limits"}, "validations": [{"expression": "true"}]}),
        )],
        vec![binding(
            "b",
            "p",
            &["Deny"],
            json!({"paramRef": {"name": "x"}}),
        )],
    );
    let err = check(&snapshot).await.expect_err("denied");
    assert!(
        err.to_string().ends_with(
            "ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Limits'"
        ),
        "{err}"
    );
}

// ---- mutating --------------------------------------------------------------

fn mutating(policies: Vec<Arc<MutatingAdmissionPolicy>>) -> Snapshot {
    let bindings = policies
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            map_binding(&format!("{name}-binding"), &name)
        })
        .collect();
    Snapshot {
        mutating_policies: policies,
        mutating_bindings: bindings,
        ..Snapshot::default()
    }
}

fn json_patch(name: &str, expression: &str, reinvocation: &str) -> Arc<MutatingAdmissionPolicy> {
    map(
        name,
        json!({
            "reinvocationPolicy": reinvocation,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]
        }),
    )
}

async fn run_mutate(
    plugin: &Policies,
    snapshot: &Snapshot,
    attrs: &mut Attributes,
    reinvocation: &mut Reinvocation,
) -> Result<(), ApiError> {
    plugin
        .mutate(
            snapshot,
            attrs,
            &Context::default(),
            &namespaces(),
            reinvocation,
        )
        .await
}

fn labels(attrs: &Attributes) -> Value {
    attrs
        .object
        .as_ref()
        .map(|o| o["metadata"]["labels"].clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_json_patch_mutation_changes_the_object() {
    let snapshot = mutating(vec![json_patch(
        "p",
        "[JSONPatch{op: 'add', path: '/metadata/labels/owner', value: request.userInfo.username}]",
        "Never",
    )]);
    let mut attrs = attrs();
    let mut reinvocation = Reinvocation::default();
    run_mutate(&plugin(vec![]), &snapshot, &mut attrs, &mut reinvocation)
        .await
        .expect("mutated");
    assert_eq!(labels(&attrs), json!({"app": "db", "owner": "alice"}));
}

#[tokio::test]
async fn an_apply_configuration_mutation_merges_a_label() {
    let snapshot = mutating(vec![map(
        "p",
        json!({"mutations": [{
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"}
        }]}),
    )]);
    let mut attrs = attrs();
    let before = attrs.object.clone();
    run_mutate(
        &plugin(vec![]),
        &snapshot,
        &mut attrs,
        &mut Reinvocation::default(),
    )
    .await
    .expect("mutated");
    assert_eq!(labels(&attrs), json!({"app": "db", "team": "a"}));
    let spec = |o: &Option<Value>| o.as_ref().map(|o| o["spec"].clone());
    assert_eq!(spec(&attrs.object), spec(&before));
}

#[tokio::test]
async fn a_failed_mutation_under_fail_refuses_with_kubes_message() {
    let snapshot = mutating(vec![json_patch(
        "p",
        "[JSONPatch{op: 'replace', path: '/spec/nope/deeper', value: 'x'}]",
        "Never",
    )]);
    let err = run_mutate(
        &plugin(vec![]),
        &snapshot,
        &mut attrs(),
        &mut Reinvocation::default(),
    )
    .await
    .expect_err("refused");
    assert_eq!((err.code(), err.reason()), (403, "Invalid"));
    assert!(
        err.to_string()
            .starts_with("policy 'p' with binding 'p-binding' denied request: JSON Patch: "),
        "{err}"
    );
}

#[tokio::test]
async fn a_failed_mutation_under_ignore_leaves_the_object() {
    let snapshot = mutating(vec![map(
        "p",
        json!({
            "failurePolicy": "Ignore",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "object.spec.nope"}}]
        }),
    )]);
    let mut attrs = attrs();
    let before = attrs.clone();
    run_mutate(
        &plugin(vec![]),
        &snapshot,
        &mut attrs,
        &mut Reinvocation::default(),
    )
    .await
    .expect("ignored");
    assert_eq!(attrs, before);
}

/// `a-observer` records the `source` label `b-source` sets after it.
fn observer_and_source(observer_reinvocation: &str) -> Snapshot {
    mutating(vec![
        json_patch(
            "a-observer",
            "[JSONPatch{op: 'add', path: '/metadata/labels/seen', \
              value: 'source' in object.metadata.labels ? object.metadata.labels['source'] : 'none'}]",
            observer_reinvocation,
        ),
        json_patch(
            "b-source",
            "[JSONPatch{op: 'add', path: '/metadata/labels/source', value: 'yes'}]",
            "Never",
        ),
    ])
}

async fn two_passes(snapshot: &Snapshot) -> (Attributes, bool) {
    let plugin = plugin(vec![]);
    let mut attrs = attrs();
    let mut reinvocation = Reinvocation::default();
    run_mutate(&plugin, snapshot, &mut attrs, &mut reinvocation)
        .await
        .expect("first pass");
    let asked = reinvocation.should_reinvoke;
    if asked {
        reinvocation.should_reinvoke = false;
        reinvocation.reinvoking = true;
        run_mutate(&plugin, snapshot, &mut attrs, &mut reinvocation)
            .await
            .expect("second pass");
    }
    (attrs, asked)
}

#[tokio::test]
async fn an_if_needed_policy_is_reinvoked_after_a_later_policy_changes_the_object() {
    let (attrs, asked) = two_passes(&observer_and_source("IfNeeded")).await;
    assert!(asked);
    assert_eq!(
        labels(&attrs),
        json!({"app": "db", "seen": "yes", "source": "yes"})
    );
}

#[tokio::test]
async fn a_never_policy_is_not_reinvoked() {
    let (attrs, _) = two_passes(&observer_and_source("Never")).await;
    assert_eq!(
        labels(&attrs),
        json!({"app": "db", "seen": "none", "source": "yes"})
    );
}

#[tokio::test]
async fn a_changed_policy_is_compiled_again() {
    let plugin = plugin(vec![]);
    let denying = one(json!({"expression": "false"}));
    run_validate(&plugin, &denying, &attrs())
        .await
        .0
        .expect_err("denied");
    let admitting = one(json!({"expression": "true"}));
    run_validate(&plugin, &admitting, &attrs())
        .await
        .0
        .expect("recompiled");
}

#[tokio::test]
async fn an_apply_configuration_with_an_undeclared_field_is_refused() {
    let snapshot = mutating(vec![map(
        "p",
        json!({"mutations": [{
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": "Object{spec: Object.spec{nope: 'x'}}"}
        }]}),
    )]);
    let err = run_mutate(
        &plugin(vec![]),
        &snapshot,
        &mut attrs(),
        &mut Reinvocation::default(),
    )
    .await
    .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "policy 'p' with binding 'p-binding' denied request: error applying patch: failed to convert patch object to typed object: .spec.nope: field not declared in schema"
    );
}

#[tokio::test]
async fn a_delete_is_not_mutated_but_still_matched() {
    let snapshot = mutating(vec![json_patch(
        "p",
        "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}]",
        "Never",
    )]);
    let mut delete = attrs();
    delete.operation = Operation::Delete;
    delete.old_object = delete.object.take();
    let before = delete.clone();
    run_mutate(
        &plugin(vec![]),
        &snapshot,
        &mut delete,
        &mut Reinvocation::default(),
    )
    .await
    .expect("nothing to mutate");
    assert_eq!(delete, before);
}

#[tokio::test]
async fn a_variable_that_does_not_compile_fails_the_expressions_that_use_it() {
    let snapshot = validating(
        vec![vap(
            "p",
            json!({
                "variables": [{"name": "broken", "expression": "object.metadata.name =="}],
                "validations": [{"expression": "variables.broken == 'x'"}]
            }),
        )],
        vec![binding("b", "p", &["Deny"], json!({}))],
    );
    let err = check(&snapshot).await.expect_err("denied");
    assert!(
        err.to_string().contains(
            "denied request: expression 'variables.broken == 'x'' resulted in error: composited variable \"broken\" fails to compile: compilation failed: "
        ),
        "{err}"
    );
}

#[test]
fn selectors_become_the_query_string_a_list_takes() {
    let selector: LabelSelector = serde_json::from_value(json!({
        "matchLabels": {"a": "1"},
        "matchExpressions": [
            {"key": "b", "operator": "In", "values": ["x", "y"]},
            {"key": "c", "operator": "NotIn", "values": ["z"]},
            {"key": "d", "operator": "Exists"},
            {"key": "e", "operator": "DoesNotExist"}
        ]
    }))
    .expect("selector");
    assert_eq!(
        super::matching::selector_string(&selector),
        "a=1,b in (x,y),c notin (z),d,!e"
    );
}

#[test]
fn the_plugin_is_shareable_across_requests() {
    fn shareable<T: Send + Sync + std::fmt::Debug>() {}
    shareable::<Policies>();
    shareable::<KubeParams>();
}
