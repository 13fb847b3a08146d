//! One webhook and one request, for both dispatchers: whether the webhook
//! applies (kube's `ShouldCallHook`), and the call itself (the dry-run
//! check, the AdmissionReview exchange, warnings, audit annotations and
//! refusal) with the three kinds of failure kube tells apart.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde_json::Value;

use crate::admission::Namespaces;
use crate::api::errors::ApiError;
use crate::registry::admission::Attributes;
use crate::registry::Context;

use super::client::Target;
use super::hook::{FailurePolicy, Hook};
use super::review::{self, Verdict, Version};
use super::{conditions, matching, Webhooks};

/// How a call went wrong.
#[derive(Debug)]
pub(super) enum HookError {
    /// kube's `ErrCallingWebhook`: the webhook could not be asked, or
    /// answered nonsense. Its `failurePolicy` decides; the string is the
    /// reason.
    Calling(String),
    /// kube's `ErrWebhookRejection`: the webhook said no.
    Rejected(ApiError),
    /// Anything else, returned as it is whatever the policy: a dry run the
    /// webhook cannot take, a patch that does not apply.
    Other(ApiError),
}

/// `failed calling webhook "<name>": <reason>`.
pub(super) fn calling_message(hook: &Hook<'_>, reason: &str) -> String {
    format!("failed calling webhook {:?}: {reason}", hook.name)
}

/// What a dispatcher does with a failure: `None` to go on (an ignored
/// failure, recorded under `failed_open_key`), or the error to refuse with.
pub(super) fn settle(
    hook: &Hook<'_>,
    error: HookError,
    ctx: &Context,
    failed_open_key: &str,
) -> Option<ApiError> {
    match error {
        HookError::Calling(reason) => {
            let message = calling_message(hook, &reason);
            match hook.failure_policy {
                FailurePolicy::Ignore => {
                    tracing::warn!(webhook = hook.name, error = %message, "failed calling webhook, failing open");
                    ctx.notes.annotate(failed_open_key, hook.name);
                    None
                }
                FailurePolicy::Fail => {
                    tracing::warn!(webhook = hook.name, error = %message, "failed calling webhook, failing closed");
                    Some(ApiError::Internal(message))
                }
            }
        }
        HookError::Rejected(e) | HookError::Other(e) => {
            tracing::info!(webhook = hook.name, error = %e, "rejected by webhook");
            Some(e)
        }
    }
}

/// Whether `hook` is to be called: its rules, object selector and
/// namespace selector, then its matchConditions. A selector's error counts
/// only when the rules match and the other selector does not exclude the
/// request, as in kube.
pub(super) async fn should_call(
    webhooks: &Webhooks,
    hook: &Hook<'_>,
    attrs: &Attributes,
    ctx: &Context,
    namespaces: &dyn Namespaces,
) -> Result<bool, ApiError> {
    if !matching::rules_match(hook, attrs) {
        return Ok(false);
    }
    let object = matching::object_selector_matches(hook, attrs);
    if matches!(object, Ok(false)) {
        return Ok(false);
    }
    let namespace = matching::namespace_selector_matches(
        hook,
        attrs,
        namespaces,
        webhooks.namespace_client.as_ref(),
    )
    .await;
    if matches!(namespace, Ok(false)) {
        return Ok(false);
    }
    namespace?;
    object?;
    conditions::matches(&webhooks.programs, hook, attrs, &ctx.user).await
}

/// Calls `hook` for `attrs` and returns what it allowed; its warnings and
/// audit annotations are recorded in `ctx.notes` whatever it decided.
pub(super) async fn call(
    webhooks: &Webhooks,
    hook: &Hook<'_>,
    attrs: &Attributes,
    ctx: &Context,
    mutating: bool,
) -> Result<Verdict, HookError> {
    let dry_run = attrs.dry_run || ctx.dry_run;
    if dry_run {
        match hook.dry_run_safe() {
            Err(()) => return Err(HookError::Calling("Webhook SideEffects is nil".to_owned())),
            Ok(false) => {
                return Err(HookError::Other(ApiError::BadRequest(format!(
                    "admission webhook {:?} does not support dry run",
                    hook.name
                ))))
            }
            Ok(true) => {}
        }
    }
    let version = Version::pick(hook.admission_review_versions).ok_or_else(|| {
        HookError::Calling(
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)"
                .to_owned(),
        )
    })?;
    let uid = uuid::Uuid::new_v4().to_string();
    let mut request = review::admission_request(&uid, attrs, &ctx.user, true);
    request["dryRun"] = Value::Bool(dry_run);
    let body = serde_json::to_vec(&review::review(version, request))
        .map_err(|e| HookError::Calling(format!("could not create admission objects: {e}")))?;
    let target = Target::new(hook.name, hook.client_config).map_err(HookError::Calling)?;
    let reply = webhooks
        .transport
        .post(&target, webhooks.resolver.as_ref(), body, hook.timeout)
        .await
        .map_err(HookError::Calling)?;
    let answer = review::answer(reply.status, reply.content_type.as_deref(), &reply.body)
        .map_err(|e| HookError::Calling(format!("failed to call webhook: {e}")))?;
    let verdict = review::verify(&uid, version, mutating, answer)
        .map_err(|e| HookError::Calling(format!("received invalid webhook response: {e}")))?;
    for (key, value) in &verdict.audit_annotations {
        ctx.notes.annotate(format!("{}/{key}", hook.name), value);
    }
    for warning in &verdict.warnings {
        ctx.notes.warn(warning.as_str());
    }
    if !verdict.allowed {
        return Err(HookError::Rejected(denied(hook.name, verdict.status)));
    }
    Ok(verdict)
}

/// kube's `ToStatusErr`: the webhook's Status, with a code of at least 400
/// and the message naming the webhook.
pub(super) fn denied(webhook: &str, status: Option<Status>) -> ApiError {
    let status = status.unwrap_or_default();
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = match (status.message.as_deref(), status.reason.as_deref()) {
        (Some(m), _) if !m.is_empty() => format!("{denied_by}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    let code = status.code.unwrap_or_default();
    let code = match u16::try_from(code) {
        Ok(c) if c < 400 => 400,
        Ok(c) if c <= 999 => c,
        // Not an HTTP status at all: no client could read it.
        _ => {
            if code < 400 {
                400
            } else {
                500
            }
        }
    };
    ApiError::Denied {
        code,
        reason: status.reason.unwrap_or_default(),
        message,
        details: status.details.map(Box::new),
    }
}
