//! One webhook of a configuration, as both dispatchers see it (kube's
//! `WebhookAccessor`): its identity, and its fields with the defaults
//! admissionregistration/v1 gives them filled in.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// `timeoutSeconds` when unset (admissionregistration/v1's default).
const DEFAULT_TIMEOUT_SECONDS: i32 = 10;
/// The largest `timeoutSeconds` kube accepts.
const MAX_TIMEOUT_SECONDS: i32 = 30;

/// What a webhook does when it cannot be called or answers nonsense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FailurePolicy {
    /// Refuse the request (the default, and any value but `Ignore`, as in
    /// kube).
    Fail,
    /// Go on as if the webhook had allowed it.
    Ignore,
}

/// One webhook, borrowed from its configuration.
#[derive(Debug, Clone)]
pub(super) struct Hook<'a> {
    /// `<configuration>/<webhook>/<n>`, n counting webhooks of the same
    /// name in the configuration (kube's `GetUID`): the reinvocation key.
    pub(super) uid: String,
    pub(super) configuration: &'a str,
    pub(super) name: &'a str,
    pub(super) client_config: &'a WebhookClientConfig,
    pub(super) rules: &'a [RuleWithOperations],
    pub(super) failure_policy: FailurePolicy,
    pub(super) namespace_selector: Option<&'a LabelSelector>,
    pub(super) object_selector: Option<&'a LabelSelector>,
    /// `sideEffects` as given; empty when unset.
    pub(super) side_effects: &'a str,
    /// `timeoutSeconds`, defaulted to 10 and capped at 30.
    pub(super) timeout: Duration,
    pub(super) admission_review_versions: &'a [String],
    pub(super) match_conditions: &'a [MatchCondition],
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub(super) reinvoke_if_needed: bool,
}

impl Hook<'_> {
    /// Whether the webhook is safe to call for a dry run: `None` or
    /// `NoneOnDryRun`. `Err` when `sideEffects` is unset.
    pub(super) fn dry_run_safe(&self) -> Result<bool, ()> {
        match self.side_effects {
            "" => Err(()),
            "None" | "NoneOnDryRun" => Ok(true),
            _ => Ok(false),
        }
    }
}

fn failure_policy(value: Option<&str>) -> FailurePolicy {
    match value {
        Some("Ignore") => FailurePolicy::Ignore,
        _ => FailurePolicy::Fail,
    }
}

fn timeout(seconds: Option<i32>) -> Duration {
    let seconds = seconds
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
        .clamp(1, MAX_TIMEOUT_SECONDS);
    Duration::from_secs(u64::try_from(seconds).unwrap_or(10))
}

/// The uid of each webhook of a configuration, in order.
fn uids<'a>(configuration: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    names
        .map(|name| {
            let n = seen.entry(name).or_insert(0);
            let uid = format!("{configuration}/{name}/{n}");
            *n += 1;
            uid
        })
        .collect()
}

/// The hooks of `$configs` (webhook configurations of one kind), the
/// configurations sorted by name; `$reinvoke` says from a webhook whether it
/// asks to be reinvoked. The two kinds are distinct types with the same
/// webhook fields, hence a macro rather than a function.
macro_rules! hooks_of {
    ($configs:expr, |$w:ident| $reinvoke:expr) => {{
        let mut configs: Vec<_> = $configs.iter().map(Arc::as_ref).collect();
        configs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut hooks = Vec::new();
        for config in configs {
            let configuration = config.metadata.name.as_deref().unwrap_or_default();
            let webhooks = config.webhooks.as_deref().unwrap_or_default();
            let uids = uids(configuration, webhooks.iter().map(|w| w.name.as_str()));
            for ($w, uid) in webhooks.iter().zip(uids) {
                hooks.push(Hook {
                    uid,
                    configuration,
                    name: &$w.name,
                    client_config: &$w.client_config,
                    rules: $w.rules.as_deref().unwrap_or_default(),
                    failure_policy: failure_policy($w.failure_policy.as_deref()),
                    namespace_selector: $w.namespace_selector.as_ref(),
                    object_selector: $w.object_selector.as_ref(),
                    side_effects: &$w.side_effects,
                    timeout: timeout($w.timeout_seconds),
                    admission_review_versions: &$w.admission_review_versions,
                    match_conditions: $w.match_conditions.as_deref().unwrap_or_default(),
                    reinvoke_if_needed: $reinvoke,
                });
            }
        }
        hooks
    }};
}

/// Every mutating webhook, configurations sorted by name (kube runs them in
/// this order, serially).
pub(super) fn mutating_hooks(configs: &[Arc<MutatingWebhookConfiguration>]) -> Vec<Hook<'_>> {
    hooks_of!(configs, |w| w.reinvocation_policy.as_deref()
        == Some("IfNeeded"))
}

/// Every validating webhook, configurations sorted by name.
pub(super) fn validating_hooks(configs: &[Arc<ValidatingWebhookConfiguration>]) -> Vec<Hook<'_>> {
    hooks_of!(configs, |w| false)
}
