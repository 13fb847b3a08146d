//! ValidatingAdmissionPolicy: kube's `policy/validating` dispatcher and
//! validator. Each invocation evaluates the policy's matchConditions, then
//! every validation (a failing one's message from `messageExpression`, then
//! `message`, then `failed expression: …`) and every auditAnnotation; the
//! binding's `validationActions` decide what a failure does: `Deny` refuses
//! the request (the first refusal is the answer, its `reason` the code),
//! `Warn` adds kube's warning, `Audit` kube's `validation_failure` audit
//! annotation. An error counts as a failure under `failurePolicy: Fail` and
//! as nothing under `Ignore`.
//!
//! Owns the meaning of results and their wording; matching is [`plan`]'s,
//! evaluation [`eval`]'s.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use kube_cel::{Activation, Session};
use serde_json::Value;

use crate::admission::{Namespaces, Snapshot};
use crate::api::errors::ApiError;
use crate::registry::admission::Attributes;
use crate::registry::Context;

use super::compile::{Failure, Validating, Validation};
use super::eval::{self, BlockingAuthorizer, Input};
use super::plan::{self, BindingRef, Item, PolicyRef};
use super::{denial_details, forbidden_message, namespace_of, Policies};

/// kube's cap on a messageExpression's result (`MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE_LEN: usize = 5 * 1024;
/// kube's cap on an audit annotation's value.
const MAX_AUDIT_VALUE_LEN: usize = 10 * 1024;
/// The audit annotation an `Audit` action writes.
pub(super) const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";

/// One validation's result.
#[derive(Debug, Clone, PartialEq)]
struct Decision {
    /// Whether the binding's validationActions apply.
    deny: bool,
    message: String,
    /// The validation's `reason`; none for errors.
    reason: Option<String>,
}

/// One auditAnnotation's result.
#[derive(Debug, Clone, PartialEq)]
enum Annotation {
    Publish {
        key: String,
        value: String,
    },
    /// Refuses the request whatever the actions (kube's `AuditAnnotationActionError`).
    Error(String),
    Exclude,
}

/// One invocation's results.
#[derive(Debug, Default)]
struct Outcome {
    decisions: Vec<Decision>,
    annotations: Vec<Annotation>,
}

/// A refusal, before it is worded.
#[derive(Debug)]
struct Denied {
    policy: usize,
    binding: Option<usize>,
    message: String,
    reason: Option<String>,
}

pub(super) async fn validate(
    policies: &Policies,
    snapshot: &Snapshot,
    attrs: &Attributes,
    ctx: &Context,
    namespaces: &dyn Namespaces,
) -> Result<(), ApiError> {
    if snapshot.validating_bindings.is_empty() {
        return Ok(());
    }
    let policy_refs: Vec<PolicyRef<'_>> = snapshot
        .validating_policies
        .iter()
        .map(|p| PolicyRef {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            constraints: p.spec.as_ref().and_then(|s| s.match_constraints.as_ref()),
            param_kind: p.spec.as_ref().and_then(|s| s.param_kind.as_ref()),
        })
        .collect();
    let binding_refs: Vec<BindingRef<'_>> = snapshot
        .validating_bindings
        .iter()
        .map(|b| BindingRef {
            policy_name: &b.spec.policy_name,
            match_resources: b.spec.match_resources.as_ref(),
            param_ref: b.spec.param_ref.as_ref(),
        })
        .collect();
    let plan = plan::plan(
        &policy_refs,
        &binding_refs,
        attrs,
        namespaces,
        &*policies.params,
    )
    .await;
    if plan.is_empty() {
        return Ok(());
    }
    let compiled = policies.validating.compiled(&snapshot.validating_policies);

    let outcomes = if plan.jobs.is_empty() {
        Vec::new()
    } else {
        let namespace = namespace_of(attrs, namespaces)?;
        let input = Input::new(attrs, namespace.as_deref());
        let work: Vec<(Arc<Validating>, Option<Value>)> = plan
            .jobs
            .into_iter()
            .map(|job| (compiled[job.policy].clone(), job.params))
            .collect();
        let handle = tokio::runtime::Handle::current();
        let authorizer = policies.authorizer.clone();
        let user = attrs.user.clone();
        tokio::task::spawn_blocking(move || {
            let bridge = BlockingAuthorizer::new(handle, authorizer, user);
            let mut activation = input.activation(&bridge);
            work.into_iter()
                .map(|(policy, params)| validate_one(&policy, params, &mut activation, &bridge))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ApiError::Internal(format!("evaluating admission policies: {e}")))?
    };

    let policy_name = |p: usize| policy_refs[p].name;
    let binding =
        |b: usize| -> &ValidatingAdmissionPolicyBinding { &snapshot.validating_bindings[b] };
    let binding_name = |b: usize| binding(b).metadata.name.as_deref().unwrap_or_default();
    let mut denied: Vec<Denied> = Vec::new();
    for policy_plan in &plan.policies {
        let p = policy_plan.policy;
        let mut collected: Vec<(String, Vec<String>)> = Vec::new();
        for item in &policy_plan.items {
            match item {
                Item::ConfigError { binding, message } => {
                    if compiled[p].common.failure == Failure::Fail {
                        denied.push(Denied {
                            policy: p,
                            binding: *binding,
                            message: message.clone(),
                            reason: None,
                        });
                    }
                }
                Item::Invoke { binding: b, job } => {
                    let Some(outcome) = outcomes.get(*job) else {
                        continue;
                    };
                    let actions = &binding(*b).spec.validation_actions;
                    for (index, decision) in outcome.decisions.iter().enumerate() {
                        if !decision.deny {
                            continue;
                        }
                        for action in actions {
                            match action.as_str() {
                                "Deny" => denied.push(Denied {
                                    policy: p,
                                    binding: Some(*b),
                                    message: decision.message.clone(),
                                    reason: decision.reason.clone(),
                                }),
                                "Warn" => ctx.notes.warn(format!(
                                    "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                                    policy_name(p),
                                    binding_name(*b),
                                    decision.message
                                )),
                                "Audit" => ctx.notes.annotate(
                                    VALIDATION_FAILURE_ANNOTATION,
                                    validation_failure(binding(*b), index, &decision.message),
                                ),
                                _ => {}
                            }
                        }
                    }
                    for annotation in &outcome.annotations {
                        match annotation {
                            Annotation::Publish { key, value } => {
                                collect_annotation(&mut collected, key, value)
                            }
                            Annotation::Error(message) => denied.push(Denied {
                                policy: p,
                                binding: Some(*b),
                                message: message.clone(),
                                reason: None,
                            }),
                            Annotation::Exclude => {}
                        }
                    }
                }
            }
        }
        for (key, values) in collected {
            ctx.notes
                .annotate(format!("{}/{key}", policy_name(p)), values.join(", "));
        }
    }

    let Some(first) = denied.first() else {
        return Ok(());
    };
    let message = match first.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
            policy_name(first.policy),
            binding_name(b),
            first.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            policy_name(first.policy),
            first.message
        ),
    };
    let reason = first.reason.clone().unwrap_or_else(|| "Invalid".to_owned());
    Err(ApiError::Denied {
        code: reason_code(&reason),
        reason,
        message: forbidden_message(attrs, &message),
        details: Some(Box::new(denial_details(attrs, vec![message]))),
    })
}

/// kube's `reasonToCode`.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// kube's audit annotation collector: the distinct values of a key across
/// a policy's bindings, in order, each capped.
fn collect_annotation(collected: &mut Vec<(String, Vec<String>)>, key: &str, value: &str) {
    let mut value = value;
    if value.len() > MAX_AUDIT_VALUE_LEN {
        let mut cut = MAX_AUDIT_VALUE_LEN;
        while !value.is_char_boundary(cut) {
            cut -= 1;
        }
        value = &value[..cut];
    }
    match collected.iter_mut().find(|(k, _)| k == key) {
        Some((_, values)) => {
            if !values.iter().any(|v| v == value) {
                values.push(value.to_owned());
            }
        }
        None => collected.push((key.to_owned(), vec![value.to_owned()])),
    }
}

/// The value of the `validation_failure` annotation: a JSON list of one
/// failure, as Go's encoder writes it (fields in kube's order, HTML
/// characters escaped).
fn validation_failure(
    binding: &ValidatingAdmissionPolicyBinding,
    expression_index: usize,
    message: &str,
) -> String {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Failure<'a> {
        message: &'a str,
        policy: &'a str,
        binding: &'a str,
        expression_index: usize,
        validation_actions: &'a [String],
    }
    let value = [Failure {
        message,
        policy: &binding.spec.policy_name,
        binding: binding.metadata.name.as_deref().unwrap_or_default(),
        expression_index,
        validation_actions: &binding.spec.validation_actions,
    }];
    go_json_escape(&serde_json::to_string(&value).unwrap_or_default())
}

/// Go's `encoding/json` escapes `<`, `>`, `&`, U+2028 and U+2029, which
/// serde_json leaves as they are; outside strings none of them occur.
pub(super) fn go_json_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// One invocation of a policy (kube's `validator.Validate`), in kube's
/// phases: matchConditions, validations (with `authorizer`), then
/// messageExpressions and auditAnnotations (without).
fn validate_one<'a>(
    policy: &Validating,
    params: Option<Value>,
    activation: &mut Activation<'a>,
    authorizer: &'a dyn kube_cel::Authorizer,
) -> Outcome {
    let common = &policy.common;
    activation.params = params.unwrap_or(Value::Null);
    activation.variables = common.variables.clone();
    activation.authorizer = Some(authorizer);
    let fail = common.failure == Failure::Fail;
    let error = |message: String| Decision {
        deny: fail,
        message,
        reason: None,
    };
    match eval::match_conditions(common, activation) {
        Ok(true) => {}
        Ok(false) => return Outcome::default(),
        Err(message) if fail => {
            return Outcome {
                decisions: vec![error(message)],
                annotations: Vec::new(),
            }
        }
        Err(_) => return Outcome::default(),
    }

    let results: Vec<_> = {
        let session = Session::new(activation);
        policy
            .validations
            .iter()
            .map(|v| eval::run(&v.expr, common, &session))
            .collect()
    };

    // kube binds no authorizer for messageExpressions and auditAnnotations.
    activation.authorizer = None;
    let session = Session::new(activation);
    let decisions = policy
        .validations
        .iter()
        .zip(results)
        .map(|(validation, result)| match result {
            Err(e) => error(e.condition_message()),
            Ok(out) => match out.value {
                Value::Bool(true) => Decision {
                    deny: false,
                    message: String::new(),
                    reason: None,
                },
                Value::Bool(false) => Decision {
                    deny: true,
                    message: failure_message(validation, policy, &session),
                    reason: Some(
                        validation
                            .reason
                            .clone()
                            .unwrap_or_else(|| "Invalid".to_owned()),
                    ),
                },
                _ => error(eval::wrong_type("bool", &out).condition_message()),
            },
        })
        .collect();
    let annotations = policy
        .audit_annotations
        .iter()
        .map(|(key, expr)| match eval::run(expr, common, &session) {
            Err(e) if fail => Annotation::Error(e.condition_message()),
            Err(_) => Annotation::Exclude,
            Ok(out) => match &out.value {
                Value::String(s) if s.trim().is_empty() => Annotation::Exclude,
                Value::String(s) => Annotation::Publish {
                    key: key.clone(),
                    value: s.trim().to_owned(),
                },
                Value::Null => Annotation::Exclude,
                _ => Annotation::Error(format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    expr.source,
                    eval::type_name(&out)
                )),
            },
        })
        .collect();
    drop(session);
    activation.authorizer = Some(authorizer);
    Outcome {
        decisions,
        annotations,
    }
}

/// A failed validation's message: its messageExpression's string (trimmed,
/// one line, at most 5 KiB), else its `message`, else kube's default.
fn failure_message(validation: &Validation, policy: &Validating, session: &Session<'_>) -> String {
    let mut message = String::new();
    if let Some(expr) = &validation.message_expression {
        if let Ok(out) = eval::run(expr, &policy.common, session) {
            if let Value::String(s) = out.value {
                let s = s.trim();
                if s.len() <= MAX_MESSAGE_LEN && !s.contains('\n') {
                    message = s.to_owned();
                }
            }
        }
    }
    if message.is_empty() {
        message = validation
            .message
            .as_deref()
            .unwrap_or_default()
            .trim()
            .to_owned();
    }
    if message.is_empty() {
        message = format!("failed expression: {}", validation.expr.source.trim());
    }
    message
}
