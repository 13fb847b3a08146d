//! The validating dispatcher (kube's `validating/dispatcher.go`): every
//! matching webhook is called at once, and the request waits for all of
//! them. kube reports the first refusal to arrive, which depends on
//! timing; this server reports the refusal of the first webhook in order
//! (configurations by name, webhooks as listed), one of the answers kube
//! could give, and always the same one.

use futures::future::join_all;

use crate::admission::Namespaces;
use crate::api::errors::ApiError;
use crate::registry::admission::Attributes;
use crate::registry::Context;

use super::hook::Hook;
use super::invoke;
use super::Webhooks;

const FAILED_OPEN_PREFIX: &str = "failed-open.validating.webhook.admission.k8s.io/";

pub(super) async fn dispatch(
    webhooks: &Webhooks,
    hooks: &[Hook<'_>],
    attrs: &Attributes,
    ctx: &Context,
    namespaces: &dyn Namespaces,
) -> Result<(), ApiError> {
    let mut relevant = Vec::new();
    for hook in hooks {
        if invoke::should_call(webhooks, hook, attrs, ctx, namespaces).await? {
            relevant.push(hook);
        }
    }
    // The index in the failed-open annotation counts the webhooks called,
    // as kube counts them.
    let calls = relevant.iter().enumerate().map(|(index, hook)| async move {
        let error = invoke::call(webhooks, hook, attrs, ctx, false)
            .await
            .err()?;
        let failed_open = format!("{FAILED_OPEN_PREFIX}round_0_index_{index}");
        invoke::settle(hook, error, ctx, &failed_open)
    });
    match join_all(calls).await.into_iter().flatten().next() {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}
