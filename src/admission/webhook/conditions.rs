//! `matchConditions`: CEL expressions that must all be true for a webhook
//! to be called (kube's `matchconditions.Matcher`), evaluated with
//! `kube_cel` on a blocking thread.
//!
//! An expression sees `object`, `oldObject` (null when absent), `request`
//! (the AdmissionRequest without objects) and no `authorizer` yet: an
//! expression that uses it fails, and the failure follows the webhook's
//! `failurePolicy`, as any evaluation error does.

use std::collections::HashMap;
use std::sync::Mutex;

use kube_cel::{Activation, CompileError, Limits, Program, ResourceCheck};
use serde_json::Value;

use crate::api::errors::ApiError;
use crate::api::meta::Requester;
use crate::registry::admission::Attributes;

use super::hook::{FailurePolicy, Hook};
use super::review;

/// Compiled expressions kept beyond this many are dropped all at once; the
/// configurations rarely hold more.
const MAX_PROGRAMS: usize = 1024;

/// The compiled matchConditions, by expression.
#[derive(Debug, Default)]
pub(super) struct Programs(Mutex<HashMap<String, Result<Program, CompileError>>>);

impl Programs {
    fn compiled(&self, expression: &str) -> Result<Program, CompileError> {
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = cache.get(expression) {
            return found.clone();
        }
        if cache.len() >= MAX_PROGRAMS {
            cache.clear();
        }
        let compiled = Program::compile(expression);
        cache.insert(expression.to_owned(), compiled.clone());
        compiled
    }
}

/// One condition, ready to run on another thread.
struct Compiled {
    expression: String,
    program: Result<Program, CompileError>,
}

/// What the conditions decided before the failure policy applies.
#[derive(Debug, PartialEq)]
enum Outcome {
    Match,
    /// A condition was false: the webhook is skipped whatever else failed.
    NoMatch,
    /// No condition was false, and these failed.
    Errors(Vec<String>),
}

/// Whether the webhook's matchConditions let it be called. An evaluation
/// error skips the webhook under `Ignore` and refuses the request under
/// `Fail` (403, as kube's generic webhook refuses it).
pub(super) async fn matches(
    programs: &Programs,
    hook: &Hook<'_>,
    attrs: &Attributes,
    user: &Requester,
) -> Result<bool, ApiError> {
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let compiled: Vec<Compiled> = hook
        .match_conditions
        .iter()
        .map(|c| Compiled {
            expression: c.expression.clone(),
            program: programs.compiled(&c.expression),
        })
        .collect();
    let object = attrs.object.clone().unwrap_or(Value::Null);
    let old_object = attrs.old_object.clone().unwrap_or(Value::Null);
    let request = review::admission_request("", attrs, user, false);
    let check = ResourceCheck {
        group: attrs.group.clone(),
        resource: attrs.resource.clone(),
        subresource: attrs.subresource.clone(),
        namespace: attrs.namespace.clone(),
        name: attrs.name.clone(),
    };
    let outcome = tokio::task::spawn_blocking(move || {
        let activation = Activation {
            object,
            old_object,
            request,
            params: Value::Null,
            namespace_object: Value::Null,
            variables: Vec::new(),
            authorizer: None,
            request_resource: Some(check),
        };
        evaluate_all(&compiled, &activation)
    })
    .await
    .unwrap_or_else(|e| Outcome::Errors(vec![format!("evaluating match conditions: {e}")]));
    match outcome {
        Outcome::Match => Ok(true),
        Outcome::NoMatch => Ok(false),
        Outcome::Errors(errors) => match hook.failure_policy {
            FailurePolicy::Ignore => Ok(false),
            FailurePolicy::Fail => {
                let message = aggregate(&errors);
                tracing::warn!(
                    webhook = hook.name,
                    error = %message,
                    "failed evaluating match conditions, failing closed"
                );
                Err(forbidden(attrs, &message))
            }
        },
    }
}

fn evaluate_all(conditions: &[Compiled], activation: &Activation<'_>) -> Outcome {
    let limits = Limits::default();
    let mut errors = Vec::new();
    for condition in conditions {
        let program = match &condition.program {
            Ok(program) => program,
            Err(e) => {
                errors.push(format!("compilation error: {e}"));
                continue;
            }
        };
        match kube_cel::evaluate(program, activation, &limits) {
            Ok(out) => match out.value {
                Value::Bool(true) => {}
                Value::Bool(false) => return Outcome::NoMatch,
                _ => errors.push(format!(
                    "compilation error: must evaluate to bool but got {}",
                    out.type_name
                )),
            },
            Err(e) => errors.push(format!(
                "expression '{}' resulted in error: {e}",
                condition.expression
            )),
        }
    }
    if errors.is_empty() {
        Outcome::Match
    } else {
        Outcome::Errors(errors)
    }
}

/// apimachinery's aggregate error message.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// kube's `NewForbidden(resource, name, err)`.
fn forbidden(attrs: &Attributes, message: &str) -> ApiError {
    let resource = if attrs.group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.group)
    };
    let message = if attrs.name.is_empty() {
        format!("{resource} is forbidden: {message}")
    } else {
        format!("{resource} {:?} is forbidden: {message}", attrs.name)
    };
    ApiError::Forbidden { message }
}
