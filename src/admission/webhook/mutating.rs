//! The mutating dispatcher (kube's `mutating/dispatcher.go`): webhooks one
//! after the other, each patch applied before the next call, the audit
//! annotations kube writes, and the webhook plugin's part of reinvocation
//! (`reinvocationcontext.go`).
//!
//! Reinvocation: a webhook with `reinvocationPolicy: IfNeeded` runs again in
//! the second pass when a later mutation (by any webhook or plugin) changed
//! the object after it ran. A webhook is never called for the first time
//! in the second pass. Whenever a webhook changes the object this plugin
//! asks for the second pass (`should_reinvoke`), as kube does: it cannot
//! see whether another plugin's mutator would be reinvoked, and the second
//! pass calls again only what asked for it.

use std::any::Any;
use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use crate::admission::{Namespaces, Reinvocation};
use crate::api::errors::ApiError;
use crate::registry::admission::{AnnotationLevel, Attributes};
use crate::registry::Context;
use crate::wire::{bounded_patch, MAX_BODY_BYTES};

use super::hook::Hook;
use super::invoke::{self, HookError};
use super::Webhooks;

/// Our key in [`Reinvocation::state`].
const STATE_KEY: &str = "webhook";

const MUTATION_PREFIX: &str = "mutation.webhook.admission.k8s.io/";
const PATCH_PREFIX: &str = "patch.webhook.admission.k8s.io/";
const FAILED_OPEN_PREFIX: &str = "failed-open.mutation.webhook.admission.k8s.io/";

/// The webhook plugin's memory between the two passes (kube's
/// `webhookReinvokeContext`).
#[derive(Debug, Default)]
struct State {
    /// The object as this plugin left it at the end of its last pass: if
    /// it differs at the start of the second, another plugin changed it.
    last_output: Option<Value>,
    /// Webhooks with `IfNeeded` that ran since the last change.
    previously_invoked: HashSet<String>,
    /// Webhooks to call again in the second pass.
    reinvoke: HashSet<String>,
}

impl State {
    fn take(reinvocation: &mut Reinvocation) -> State {
        reinvocation
            .state
            .remove(STATE_KEY)
            .and_then(|b: Box<dyn Any + Send + Sync>| b.downcast::<State>().ok())
            .map(|b| *b)
            .unwrap_or_default()
    }

    /// A mutation happened: every reinvocable webhook that ran before it
    /// is due again.
    fn require_reinvoking_previously_invoked(&mut self) {
        self.reinvoke.extend(self.previously_invoked.drain());
    }
}

/// `mutation.webhook.admission.k8s.io/round_R_index_I`.
#[derive(Serialize)]
struct MutationAnnotation<'a> {
    configuration: &'a str,
    webhook: &'a str,
    mutated: bool,
}

/// `patch.webhook.admission.k8s.io/round_R_index_I`.
#[derive(Serialize)]
struct PatchAnnotation<'a> {
    configuration: &'a str,
    webhook: &'a str,
    patch: &'a Value,
    #[serde(rename = "patchType")]
    patch_type: &'a str,
}

pub(super) async fn dispatch(
    webhooks: &Webhooks,
    hooks: &[Hook<'_>],
    attrs: &mut Attributes,
    ctx: &Context,
    namespaces: &dyn Namespaces,
    reinvocation: &mut Reinvocation,
) -> Result<(), ApiError> {
    let mut state = State::take(reinvocation);
    let result = run(
        webhooks,
        hooks,
        attrs,
        ctx,
        namespaces,
        reinvocation,
        &mut state,
    )
    .await;
    state.last_output = attrs.object.clone();
    reinvocation.state.insert(STATE_KEY, Box::new(state));
    result
}

async fn run(
    webhooks: &Webhooks,
    hooks: &[Hook<'_>],
    attrs: &mut Attributes,
    ctx: &Context,
    namespaces: &dyn Namespaces,
    reinvocation: &mut Reinvocation,
    state: &mut State,
) -> Result<(), ApiError> {
    let reinvoking = reinvocation.reinvoking;
    if reinvoking && state.last_output != attrs.object {
        // Another plugin changed the object in its second pass.
        state.require_reinvoking_previously_invoked();
    }
    let round = usize::from(reinvoking);
    for (index, hook) in hooks.iter().enumerate() {
        if !invoke::should_call(webhooks, hook, attrs, ctx, namespaces).await? {
            continue;
        }
        if reinvoking && !state.reinvoke.contains(&hook.uid) {
            continue;
        }
        let result = call(webhooks, hook, attrs, ctx, round, index).await;
        let changed = matches!(result, Ok(true));
        ctx.notes.annotate(
            format!("{MUTATION_PREFIX}round_{round}_index_{index}"),
            json(&MutationAnnotation {
                configuration: hook.configuration,
                webhook: hook.name,
                mutated: changed,
            }),
        );
        if changed {
            state.require_reinvoking_previously_invoked();
            reinvocation.should_reinvoke = true;
        }
        if hook.reinvoke_if_needed {
            state.previously_invoked.insert(hook.uid.clone());
        }
        if let Err(e) = result {
            let failed_open = format!("{FAILED_OPEN_PREFIX}round_{round}_index_{index}");
            if let Some(refusal) = invoke::settle(hook, e, ctx, &failed_open) {
                return Err(refusal);
            }
        }
    }
    Ok(())
}

/// Calls one webhook and applies its patch to `attrs.object`; true when
/// the object changed.
async fn call(
    webhooks: &Webhooks,
    hook: &Hook<'_>,
    attrs: &mut Attributes,
    ctx: &Context,
    round: usize,
    index: usize,
) -> Result<bool, HookError> {
    let verdict = invoke::call(webhooks, hook, attrs, ctx, true).await?;
    if verdict.patch.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch = serde_json::from_slice(&verdict.patch).map_err(|e| {
        HookError::Calling(format!(
            "received undecodable patch in webhook response: {e}"
        ))
    })?;
    if patch.0.is_empty() {
        return Ok(false);
    }
    let Some(object) = attrs.object.as_ref() else {
        return Err(HookError::Other(ApiError::Internal(format!(
            "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
            hook.name
        ))));
    };
    if verdict.patch_type != "JSONPatch" {
        return Err(HookError::Calling(format!(
            "unsupported patch type {:?}",
            verdict.patch_type
        )));
    }
    // Within the bounds a client's JSON patch gets: a few `copy`
    // operations from a hostile webhook must not double the object until
    // the server runs out of memory.
    let mut patched = object.clone();
    bounded_patch::apply(
        &mut patched,
        &patch.0,
        &bounded_patch::Limits::new(MAX_BODY_BYTES),
    )
    .map_err(|e| HookError::Other(ApiError::Internal(e.to_string())))?;
    let changed = patched != *object;
    let patch_json: Value = serde_json::from_slice(&verdict.patch).unwrap_or(Value::Null);
    // The patch shows object content: as kube, only in events that record
    // the request.
    ctx.notes.annotate_at(
        format!("{PATCH_PREFIX}round_{round}_index_{index}"),
        json(&PatchAnnotation {
            configuration: hook.configuration,
            webhook: hook.name,
            patch: &patch_json,
            patch_type: "JSONPatch",
        }),
        AnnotationLevel::Request,
    );
    attrs.object = Some(patched);
    Ok(changed)
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
