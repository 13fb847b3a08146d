//! Running a policy's compiled expressions: what CEL sees of a request
//! (kube's `CreateAdmissionRequest`, `CreateNamespaceObject`), the
//! `authorizer` variable backed by our async [`Authorizer`], and kube's
//! wording of compile and evaluation errors.
//!
//! Everything here is synchronous and runs on a blocking thread
//! ([`tokio::task::spawn_blocking`]); the authorizer blocks on the runtime
//! from there. Owns no decision about what a result means.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Namespace;
use kube_cel::{Activation, AuthzCheck, AuthzDecision, Limits, Output, ResourceCheck, Session};
use serde_json::{json, Map, Value};

use crate::api::meta::Requester;
use crate::authz::{Attributes as AuthzAttributes, Authorizer, Decision, ResourceAttributes};
use crate::registry::admission::Attributes;

use super::compile::{Common, Expr};

/// The most authorization checks one request's expressions may make; more
/// are answered with an error (each is a SubjectAccessReview at worst).
const MAX_AUTHZ_CHECKS: usize = 64;

/// The request as every expression sees it: built once per request.
#[derive(Debug, Clone)]
pub(super) struct Input {
    pub(super) object: Value,
    pub(super) old_object: Value,
    pub(super) request: Value,
    pub(super) namespace_object: Value,
    pub(super) resource: ResourceCheck,
}

impl Input {
    pub(super) fn new(attrs: &Attributes, namespace: Option<&Namespace>) -> Self {
        Self {
            object: attrs.object.clone().unwrap_or(Value::Null),
            old_object: attrs.old_object.clone().unwrap_or(Value::Null),
            request: admission_request(attrs),
            namespace_object: namespace.map(namespace_object).unwrap_or(Value::Null),
            resource: ResourceCheck {
                group: attrs.group.clone(),
                resource: attrs.resource.clone(),
                subresource: attrs.subresource.clone(),
                namespace: attrs.namespace.clone(),
                name: attrs.name.clone(),
            },
        }
    }

    /// An activation over this input, with no params and no variables yet.
    pub(super) fn activation<'a>(self, authorizer: &'a dyn kube_cel::Authorizer) -> Activation<'a> {
        Activation {
            object: self.object,
            old_object: self.old_object,
            request: self.request,
            params: Value::Null,
            namespace_object: self.namespace_object,
            variables: Vec::new(),
            authorizer: Some(authorizer),
            request_resource: Some(self.resource),
        }
    }
}

/// `request`: the admission.k8s.io/v1 AdmissionRequest kube's CEL sees,
/// without `object` and `oldObject` (they are variables of their own). Our
/// API has one version, so the matched kind and resource are the request's.
pub(super) fn admission_request(attrs: &Attributes) -> Value {
    let kind = json!({"group": attrs.group, "version": attrs.version, "kind": attrs.kind});
    let resource =
        json!({"group": attrs.group, "version": attrs.version, "resource": attrs.resource});
    let mut request = Map::new();
    request.insert("uid".into(), json!(""));
    request.insert("kind".into(), kind.clone());
    request.insert("resource".into(), resource.clone());
    request.insert("requestKind".into(), kind);
    request.insert("requestResource".into(), resource);
    if !attrs.subresource.is_empty() {
        request.insert("subResource".into(), json!(attrs.subresource));
        request.insert("requestSubResource".into(), json!(attrs.subresource));
    }
    if !attrs.name.is_empty() {
        request.insert("name".into(), json!(attrs.name));
    }
    if !attrs.namespace.is_empty() {
        request.insert("namespace".into(), json!(attrs.namespace));
    }
    request.insert("operation".into(), json!(attrs.operation.as_str()));
    request.insert("userInfo".into(), user_info(&attrs.user));
    request.insert("dryRun".into(), json!(attrs.dry_run));
    if !attrs.options.is_null() {
        request.insert("options".into(), attrs.options.clone());
    }
    Value::Object(request)
}

/// authentication.k8s.io/v1 UserInfo, empty fields left out.
fn user_info(user: &Requester) -> Value {
    let mut info = Map::new();
    if !user.username.is_empty() {
        info.insert("username".into(), json!(user.username));
    }
    if let Some(uid) = user.uid.as_deref().filter(|u| !u.is_empty()) {
        info.insert("uid".into(), json!(uid));
    }
    if !user.groups.is_empty() {
        info.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        info.insert("extra".into(), json!(user.extra));
    }
    Value::Object(info)
}

/// `namespaceObject`: kube's `CreateNamespaceObject` keeps the spec, the
/// status and most of the metadata (not managedFields or ownerReferences),
/// and no apiVersion or kind.
pub(super) fn namespace_object(namespace: &Namespace) -> Value {
    let meta = &namespace.metadata;
    let mut metadata = Map::new();
    let mut put = |key: &str, value: Value| {
        if !value.is_null() {
            metadata.insert(key.to_owned(), value);
        }
    };
    put("name", json!(meta.name));
    put("generateName", json!(meta.generate_name));
    put("namespace", json!(meta.namespace));
    put("uid", json!(meta.uid));
    put("resourceVersion", json!(meta.resource_version));
    put("generation", json!(meta.generation));
    put(
        "creationTimestamp",
        serde_json::to_value(&meta.creation_timestamp).unwrap_or(Value::Null),
    );
    put(
        "deletionTimestamp",
        serde_json::to_value(&meta.deletion_timestamp).unwrap_or(Value::Null),
    );
    put(
        "deletionGracePeriodSeconds",
        json!(meta.deletion_grace_period_seconds),
    );
    put("labels", json!(meta.labels));
    put("annotations", json!(meta.annotations));
    put("finalizers", json!(meta.finalizers));
    let mut object = Map::new();
    object.insert("metadata".into(), Value::Object(metadata));
    for (key, value) in [
        ("spec", serde_json::to_value(&namespace.spec)),
        ("status", serde_json::to_value(&namespace.status)),
    ] {
        if let Ok(value) = value.map(|v| if v.is_null() { json!({}) } else { v }) {
            object.insert(key.to_owned(), value);
        }
    }
    Value::Object(object)
}

/// kube_cel's synchronous authorizer over our async one, for one request:
/// blocks on the runtime (we are on a blocking thread) and caches each
/// answer for the rest of the request, as kube's caching authorizer does.
pub(super) struct BlockingAuthorizer {
    handle: tokio::runtime::Handle,
    inner: Arc<dyn Authorizer>,
    user: Requester,
    answers: Mutex<Vec<(AuthzCheck, AuthzDecision)>>,
}

impl BlockingAuthorizer {
    /// Must be called on the runtime; used from a blocking thread of it.
    pub(super) fn new(
        handle: tokio::runtime::Handle,
        inner: Arc<dyn Authorizer>,
        user: Requester,
    ) -> Self {
        Self {
            handle,
            inner,
            user,
            answers: Mutex::new(Vec::new()),
        }
    }

    /// The subject of a check: the requester, or the service account an
    /// expression named (kube's `serviceaccount.UserInfo`).
    fn subject(&self, service_account: &Option<(String, String)>) -> Requester {
        match service_account {
            None => self.user.clone(),
            Some((namespace, name)) => Requester {
                username: format!("system:serviceaccount:{namespace}:{name}"),
                uid: None,
                groups: vec![
                    "system:serviceaccounts".to_owned(),
                    format!("system:serviceaccounts:{namespace}"),
                ],
                extra: Default::default(),
            },
        }
    }

    fn attributes(&self, check: &AuthzCheck) -> AuthzAttributes {
        match check {
            AuthzCheck::Path {
                path,
                verb,
                service_account,
            } => AuthzAttributes {
                user: self.subject(service_account),
                verb: verb.clone(),
                resource: None,
                path: path.clone(),
            },
            AuthzCheck::Resource {
                group,
                resource,
                subresource,
                namespace,
                name,
                verb,
                service_account,
                ..
            } => AuthzAttributes {
                user: self.subject(service_account),
                verb: verb.clone(),
                resource: Some(ResourceAttributes {
                    group: group.clone(),
                    version: "*".to_owned(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                }),
                path: String::new(),
            },
        }
    }
}

impl kube_cel::Authorizer for BlockingAuthorizer {
    fn check(&self, check: &AuthzCheck) -> AuthzDecision {
        {
            let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, decision)) = answers.iter().find(|(c, _)| c == check) {
                return decision.clone();
            }
            if answers.len() >= MAX_AUTHZ_CHECKS {
                return AuthzDecision {
                    error: Some(format!(
                        "too many authorization checks (more than {MAX_AUTHZ_CHECKS})"
                    )),
                    ..AuthzDecision::default()
                };
            }
        }
        let attributes = self.attributes(check);
        let decision = match self.handle.block_on(self.inner.authorize(&attributes)) {
            Ok(Decision::Allow) => AuthzDecision {
                allowed: true,
                ..AuthzDecision::default()
            },
            Ok(Decision::Deny { reason }) => AuthzDecision {
                reason,
                ..AuthzDecision::default()
            },
            Err(e) => AuthzDecision {
                error: Some(e.to_string()),
                ..AuthzDecision::default()
            },
        };
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((check.clone(), decision.clone()));
        decision
    }
}

/// Why an expression gave no value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ExprError {
    /// It did not compile: the compiler's message (`compilation failed: …`).
    Compile(String),
    /// It failed: kube's whole message (`expression '…' resulted in error: …`).
    Eval(String),
}

impl ExprError {
    /// As kube's condition evaluators word it (validations, matchConditions,
    /// auditAnnotations, messageExpressions).
    pub(super) fn condition_message(&self) -> String {
        match self {
            ExprError::Compile(detail) => format!("compilation error: {detail}"),
            ExprError::Eval(message) => message.clone(),
        }
    }

    /// As kube's mutating evaluators word it (the compile error bare).
    pub(super) fn mutation_message(&self) -> String {
        match self {
            ExprError::Compile(detail) | ExprError::Eval(detail) => detail.clone(),
        }
    }
}

/// Whether `source` reads `variables.<name>`.
fn references_variable(source: &str, name: &str) -> bool {
    let needle = format!("variables.{name}");
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    source.match_indices(&needle).any(|(at, _)| {
        let before = source[..at].chars().next_back();
        let after = source[at + needle.len()..].chars().next();
        !before.is_some_and(|c| ident(c) || c == '.') && !after.is_some_and(ident)
    })
}

/// Evaluates `expr` in `session` (one phase of one invocation: its inputs
/// are converted, and its variables evaluated, once). A reference to a
/// variable that did not compile fails as kube's composition does.
pub(super) fn run(
    expr: &Expr,
    common: &Common,
    session: &Session<'_>,
) -> Result<Output, ExprError> {
    let program = expr
        .program
        .as_ref()
        .map_err(|e| ExprError::Compile(e.clone()))?;
    let failed = |message: String| {
        ExprError::Eval(format!(
            "expression '{}' resulted in error: {message}",
            expr.source
        ))
    };
    if let Some((name, error)) = common
        .broken_variables
        .iter()
        .find(|(name, _)| references_variable(&expr.source, name))
    {
        return Err(failed(format!(
            "composited variable \"{name}\" fails to compile: compilation failed: {}",
            error.trim_start_matches("compilation failed: ")
        )));
    }
    session
        .evaluate(program, &Limits::default())
        .map_err(|e| failed(e.message))
}

/// The CEL type name of a value, for messages about wrong result types.
pub(super) fn type_name(output: &Output) -> &str {
    &output.type_name
}

/// kube's message for an expression whose result has the wrong type (kube
/// finds these when it type-checks at compile time; we find them when the
/// value arrives).
pub(super) fn wrong_type(expected: &str, output: &Output) -> ExprError {
    ExprError::Compile(format!(
        "must evaluate to {expected} but got {}",
        type_name(output)
    ))
}

/// Evaluates the policy's matchConditions (without `namespaceObject`, as
/// kube's matcher binds none): `Ok(false)` when one is false, even if
/// another failed; otherwise the failures, aggregated as kube words them.
pub(super) fn match_conditions(
    common: &Common,
    activation: &mut Activation<'_>,
) -> Result<bool, String> {
    if common.match_conditions.is_empty() {
        return Ok(true);
    }
    let namespace = std::mem::take(&mut activation.namespace_object);
    let session = Session::new(activation);
    let mut errors: Vec<String> = Vec::new();
    let mut matched = true;
    for (_, expr) in &common.match_conditions {
        match run(expr, common, &session) {
            Ok(out) => match out.value {
                Value::Bool(false) => {
                    matched = false;
                    break;
                }
                Value::Bool(true) => {}
                _ => errors.push(wrong_type("bool", &out).condition_message()),
            },
            Err(e) => errors.push(e.condition_message()),
        }
    }
    drop(session);
    activation.namespace_object = namespace;
    if !matched {
        return Ok(false);
    }
    match errors.len() {
        0 => Ok(true),
        1 => Err(errors.remove(0)),
        _ => {
            let mut unique: Vec<String> = Vec::new();
            for e in errors {
                if !unique.contains(&e) {
                    unique.push(e);
                }
            }
            if unique.len() == 1 {
                Err(unique.remove(0))
            } else {
                Err(format!("[{}]", unique.join(", ")))
            }
        }
    }
}
