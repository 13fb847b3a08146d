//! MutatingAdmissionPolicy: kube's `policy/mutating` dispatcher. Each
//! invocation (policies in name order, each binding in order, each param)
//! evaluates the policy's matchConditions, then its mutations in order on
//! the object as the previous ones left it: `JSONPatch` (a list of
//! `JSONPatch` values, applied as RFC 6902; a failed `test` leaves the
//! object as it was) or `ApplyConfiguration` (an `Object{…}` merged as
//! server-side apply merges, [`apply`](super::apply)). A failed mutation is
//! an error under the policy's failurePolicy and the next mutation still
//! runs; the first error under `Fail` refuses the request.
//!
//! Reinvocation (kube's `policyReinvokeContext`, our state under
//! [`STATE_KEY`]): a policy with `reinvocationPolicy: IfNeeded` runs again in
//! the second pass when something changed the object after it ran.

use crate::wire::{bounded_patch, MAX_BODY_BYTES};
use std::collections::HashSet;
use std::sync::Arc;

use kube_cel::{Activation, Output, Session};
use serde_json::Value;

use crate::admission::{Namespaces, Reinvocation, Snapshot};
use crate::api::errors::ApiError;
use crate::registry::admission::Attributes;
use crate::registry::Context;

use super::apply::{self, KindSchema};
use super::compile::{Failure, Mutating, Mutation};
use super::eval::{self, BlockingAuthorizer, Input};
use super::plan::{self, BindingRef, Item, PolicyRef};
use super::{denial_details, namespace_of, Policies};

/// This plugin's key in [`Reinvocation::state`].
pub(super) const STATE_KEY: &str = super::REINVOCATION_KEY;

/// Who an invocation is: kube reinvokes by policy, binding and param.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct InvocationKey {
    policy: String,
    binding: String,
    /// The param's namespace and name, empty without params.
    param: (String, String),
}

/// What the policies remember between the two passes of one request.
#[derive(Debug, Default)]
struct ReinvokeState {
    /// The object as the policies left it last time.
    last_output: Option<Value>,
    /// `IfNeeded` invocations that ran since the object last changed.
    previously_invoked: HashSet<InvocationKey>,
    /// The invocations to run in the second pass.
    reinvoke: HashSet<InvocationKey>,
}

impl ReinvokeState {
    fn require_reinvoking_previously_invoked(&mut self) {
        self.reinvoke.extend(self.previously_invoked.drain());
    }
}

/// One invocation, ready for the blocking thread.
#[derive(Debug)]
struct Work {
    policy: Arc<Mutating>,
    /// Index of its policy in the snapshot, for errors.
    policy_index: usize,
    binding_index: usize,
    key: InvocationKey,
    params: Option<Value>,
}

/// An error, before it is weighed and worded.
#[derive(Debug)]
struct PolicyError {
    policy: usize,
    binding: Option<usize>,
    message: String,
    /// `Invalid` for evaluation errors; none for configuration errors.
    reason: Option<&'static str>,
}

pub(super) async fn mutate(
    policies: &Policies,
    snapshot: &Snapshot,
    attrs: &mut Attributes,
    _ctx: &Context,
    namespaces: &dyn Namespaces,
    reinvocation: &mut Reinvocation,
) -> Result<(), ApiError> {
    if snapshot.mutating_bindings.is_empty() {
        return Ok(());
    }
    let policy_refs: Vec<PolicyRef<'_>> = snapshot
        .mutating_policies
        .iter()
        .map(|p| PolicyRef {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            constraints: p.spec.as_ref().and_then(|s| s.match_constraints.as_ref()),
            param_kind: p.spec.as_ref().and_then(|s| s.param_kind.as_ref()),
        })
        .collect();
    let binding_refs: Vec<BindingRef<'_>> = snapshot
        .mutating_bindings
        .iter()
        .map(|b| BindingRef {
            policy_name: b
                .spec
                .as_ref()
                .and_then(|s| s.policy_name.as_deref())
                .unwrap_or_default(),
            match_resources: b.spec.as_ref().and_then(|s| s.match_resources.as_ref()),
            param_ref: b.spec.as_ref().and_then(|s| s.param_ref.as_ref()),
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
    let compiled = policies.mutating.compiled(&snapshot.mutating_policies);
    let binding_name = |b: usize| {
        snapshot.mutating_bindings[b]
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
    };

    // kube's generic dispatcher: configuration errors first, in order.
    let mut errors: Vec<PolicyError> = plan
        .policies
        .iter()
        .flat_map(|pp| {
            pp.items.iter().filter_map(move |item| match item {
                Item::ConfigError { binding, message } => Some(PolicyError {
                    policy: pp.policy,
                    binding: *binding,
                    message: message.clone(),
                    reason: None,
                }),
                Item::Invoke { .. } => None,
            })
        })
        .collect();

    if !plan.jobs.is_empty() {
        let namespace = namespace_of(attrs, namespaces)?;
        let input = Input::new(attrs, namespace.as_deref());
        let work: Vec<Work> = plan
            .jobs
            .into_iter()
            .map(|job| Work {
                policy: compiled[job.policy].clone(),
                policy_index: job.policy,
                binding_index: job.binding,
                key: InvocationKey {
                    policy: policy_refs[job.policy].name.to_owned(),
                    binding: binding_name(job.binding).to_owned(),
                    param: param_identity(job.params.as_ref()),
                },
                params: job.params,
            })
            .collect();
        let state = reinvocation
            .state
            .remove(STATE_KEY)
            .and_then(|s| s.downcast::<ReinvokeState>().ok())
            .map(|s| *s)
            .unwrap_or_default();
        let reinvoking = reinvocation.reinvoking;
        let schema = policies.schemas.for_kind(&attrs.schema);
        let handle = tokio::runtime::Handle::current();
        let authorizer = policies.authorizer.clone();
        let user = attrs.user.clone();
        let pass = tokio::task::spawn_blocking(move || {
            let bridge = BlockingAuthorizer::new(handle, authorizer, user);
            let mut activation = input.activation(&bridge);
            let mut pass = Pass {
                state,
                reinvoking,
                should_reinvoke: false,
                errors: Vec::new(),
            };
            pass.run(&work, &mut activation, &schema);
            let object = std::mem::take(&mut activation.object);
            (pass, object)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("evaluating admission policies: {e}")))?;
        let (pass, object) = pass;
        if attrs.object.is_some() {
            attrs.object = Some(object);
        }
        if pass.should_reinvoke {
            reinvocation.should_reinvoke = true;
        }
        errors.extend(pass.errors);
        reinvocation.state.insert(STATE_KEY, Box::new(pass.state));
    }

    errors.retain(|e| compiled[e.policy].common.failure == Failure::Fail);
    let messages: Vec<String> = errors
        .iter()
        .map(|e| match e.binding {
            Some(b) => format!(
                "policy '{}' with binding '{}' denied request: {}",
                policy_refs[e.policy].name,
                binding_name(b),
                e.message
            ),
            None => format!(
                "policy {} denied request: {}",
                go_quote(policy_refs[e.policy].name),
                e.message
            ),
        })
        .collect();
    let Some(first) = errors.first() else {
        return Ok(());
    };
    // kube builds a Forbidden (403) and only swaps in the first error's reason.
    Err(ApiError::Denied {
        code: 403,
        reason: first.reason.unwrap_or("Forbidden").to_owned(),
        message: messages[0].clone(),
        details: Some(Box::new(denial_details(attrs, messages))),
    })
}

/// Go's `%q` for a name (JSON's quoting agrees for printable names).
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A param's namespace and name.
fn param_identity(params: Option<&Value>) -> (String, String) {
    let field = |key: &str| {
        params
            .and_then(|p| p.pointer(&format!("/metadata/{key}")))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (field("namespace"), field("name"))
}

/// One pass of the mutating policies over the object, on the blocking
/// thread (kube's `dispatchInvocations`).
struct Pass {
    state: ReinvokeState,
    reinvoking: bool,
    should_reinvoke: bool,
    errors: Vec<PolicyError>,
}

impl Pass {
    fn run(&mut self, work: &[Work], activation: &mut Activation<'_>, schema: &KindSchema) {
        if self.reinvoking && self.state.last_output.as_ref() != Some(&activation.object) {
            // Something after us changed the object: every IfNeeded policy that ran reruns.
            self.state.require_reinvoking_previously_invoked();
        }
        let mut dirty = false;
        for w in work {
            let common = &w.policy.common;
            activation.params = w.params.clone().unwrap_or(Value::Null);
            activation.variables = common.variables.clone();
            match eval::match_conditions(common, activation) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(message) => {
                    if common.failure == Failure::Fail {
                        self.error(w, message);
                    }
                    continue;
                }
            }
            if self.reinvoking && !self.state.reinvoke.contains(&w.key) {
                continue;
            }
            let before = activation.object.clone();
            for mutation in &w.policy.mutations {
                if activation.object.is_null() {
                    // A delete: nothing to mutate.
                    continue;
                }
                match mutate_once(mutation, common, activation, schema) {
                    Ok(object) => {
                        activation.object = object;
                        dirty = true;
                    }
                    Err(message) => self.error(w, message),
                }
            }
            if before != activation.object {
                self.state.require_reinvoking_previously_invoked();
                self.should_reinvoke = true;
            }
            if w.policy.reinvoke_if_needed {
                self.state.previously_invoked.insert(w.key.clone());
            }
        }
        if dirty {
            self.state.require_reinvoking_previously_invoked();
            self.should_reinvoke = true;
        }
        self.state.last_output = Some(activation.object.clone());
    }

    fn error(&mut self, w: &Work, message: String) {
        self.errors.push(PolicyError {
            policy: w.policy_index,
            binding: Some(w.binding_index),
            message,
            reason: Some("Invalid"),
        });
    }
}

/// The object after one mutation, or kube's error.
fn mutate_once(
    mutation: &Mutation,
    common: &super::compile::Common,
    activation: &Activation<'_>,
    schema: &KindSchema,
) -> Result<Value, String> {
    let evaluate = |expr| -> Result<Output, String> {
        let session = Session::new(activation);
        eval::run(expr, common, &session).map_err(|e| e.mutation_message())
    };
    match mutation {
        Mutation::Unsupported(message) => Err(message.clone()),
        Mutation::JsonPatch(expr) => {
            let out = evaluate(expr)?;
            let elements = out.element_type_name.as_deref();
            if out.value.as_array().is_some_and(|items| !items.is_empty())
                && elements != Some("JSONPatch")
            {
                return Err(format!(
                    "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch, got element of {}",
                    elements.unwrap_or("mixed types")
                ));
            }
            json_patch(&activation.object, out.value)
        }
        Mutation::ApplyConfiguration(expr) => {
            let out = evaluate(expr)?;
            match out.value {
                Value::Object(patch) if out.type_name == "Object" => {
                    apply::apply_configuration(schema, &activation.object, patch)
                        .map_err(|e| format!("error applying patch: {e}"))
                }
                _ => Err(format!(
                    "unsupported return type from ApplyConfiguration expression: {}",
                    out.type_name
                )),
            }
        }
    }
}

/// kube's `jsonPatcher.Patch`: a failed `test` leaves the object as it was.
fn json_patch(object: &Value, patch: Value) -> Result<Value, String> {
    let Value::Array(items) = patch else {
        return Err("type mismatch: JSONPatchType.expression should evaluate to array".to_owned());
    };
    let operations = items
        .into_iter()
        .map(serde_json::from_value::<json_patch::PatchOperation>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!("type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch: {e}")
        })?;
    // Bounded as a client's JSON patch is: the cost budget limits how many
    // operations an expression makes, not how large `copy` grows the object.
    let mut patched = object.clone();
    match bounded_patch::apply(
        &mut patched,
        &operations,
        &bounded_patch::Limits::new(MAX_BODY_BYTES),
    ) {
        Ok(()) => Ok(patched),
        Err(bounded_patch::PatchError::Failed {
            reason: bounded_patch::Failure::TestFailed,
            ..
        }) => Ok(object.clone()),
        Err(e) => Err(format!("JSON Patch: {e}")),
    }
}
