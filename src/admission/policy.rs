//! The cluster's ValidatingAdmissionPolicies and MutatingAdmissionPolicies
//! (admissionregistration.k8s.io/v1) for requests to our kinds, evaluated
//! here because kube-apiserver does not admit what it proxies to an
//! aggregated API — as k8s.io/apiserver's `policy/validating` and
//! `policy/mutating` plugins do, with kube's messages.
//!
//! [`Policies`] is the plugin; the snapshot of policies and bindings comes
//! from the caller. Its parts:
//! - `plan`: which policy × binding × param tuples a request
//!   invokes (kube's generic dispatcher), with `matching`
//!   (matchConstraints, matchResources, selectors) and `params` (paramKind,
//!   paramRef; [`KubeParams`] reads kube-apiserver through a TTL cache);
//! - `compile`: each policy's CEL compiled once per generation;
//! - `eval`: what CEL sees (`object`, `oldObject`, `request`, `params`,
//!   `namespaceObject`, `variables`, `authorizer`) and kube's error wording;
//! - `validating` and `mutating`: what results mean (actions, audit
//!   annotations, warnings, failurePolicy, patches, reinvocation);
//! - `apply`: the ApplyConfiguration merge, with our kinds' schemas.
//!
//! Must not touch storage: the store decides when the phases run.
//!
//! # What bounds an evaluation
//!
//! Objects are at most 1.5 MiB (the store's limit), and CEL sees each once
//! per phase of an invocation (a `kube_cel::Session`: inputs converted and
//! variables evaluated once). Every expression runs within kube_cel's
//! per-call cost limit ([`kube_cel::PER_CALL_LIMIT`], kube's
//! `PerCallLimit`; over it, the expression fails with kube's `operation
//! cancelled: actual cost limit exceeded`, under the failurePolicy).
//! kube_cel reports no spent cost, so kube's per-binding total
//! (`RuntimeCELCostBudget`, 10^7) is not enforced: a request costs at most
//! the per-call limit × expressions × invocations. Invocations are bounded
//! by the bindings and by [`MAX_PARAMS`] params per binding; authorization
//! checks by a per-request cap (each answer cached for the request, as
//! kube's caching authorizer does); param lookups by [`PARAM_TIMEOUT`]. CEL
//! runs on a blocking thread, one per request and phase, never on the async
//! workers.

mod apply;
mod compile;
mod eval;
mod matching;
mod mutating;
mod params;
mod plan;
mod validating;

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, ValidatingAdmissionPolicy,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

use crate::admission::{Namespaces, Reinvocation, Snapshot};
use crate::api::errors::{ApiError, GroupResource};
use crate::authz::Authorizer;
use crate::registry::admission::Attributes;
use crate::registry::Context;

pub use params::{
    KubeParams, ParamError, ParamKindRef, ParamScope, ParamSource, MAX_PARAMS, PARAM_TIMEOUT,
    PARAM_TTL,
};

/// This plugin's key in [`Reinvocation::state`].
pub const REINVOCATION_KEY: &str = "policy";

/// The admission policy plugin: both kinds of policy, their compiled forms
/// and where their params come from.
#[derive(Debug)]
pub struct Policies {
    params: Arc<dyn ParamSource>,
    authorizer: Arc<dyn Authorizer>,
    validating: compile::Cache<ValidatingAdmissionPolicy>,
    mutating: compile::Cache<MutatingAdmissionPolicy>,
    schemas: apply::Schemas,
}

impl Policies {
    /// `client` (kube client to kube-apiserver) is for `paramRef` lookups;
    /// `authorizer` for CEL `authorizer`.
    pub fn new(client: kube::Client, authorizer: Arc<dyn Authorizer>) -> Self {
        Self::with_params(Arc::new(KubeParams::new(client)), authorizer)
    }

    /// With params from `params` (tests, or another source).
    pub fn with_params(params: Arc<dyn ParamSource>, authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            params,
            authorizer,
            validating: compile::Cache::default(),
            mutating: compile::Cache::default(),
            schemas: apply::Schemas::default(),
        }
    }

    /// Runs the mutating policies: may replace `attrs.object`, and sets
    /// `reinvocation.should_reinvoke` when a later pass must run
    /// `IfNeeded` policies again.
    pub async fn mutate(
        &self,
        snapshot: &Snapshot,
        attrs: &mut Attributes,
        ctx: &Context,
        namespaces: &dyn Namespaces,
        reinvocation: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        mutating::mutate(self, snapshot, attrs, ctx, namespaces, reinvocation).await
    }

    /// Runs the validating policies on the final object; warnings and audit
    /// annotations go to `ctx.notes`.
    pub async fn validate(
        &self,
        snapshot: &Snapshot,
        attrs: &Attributes,
        ctx: &Context,
        namespaces: &dyn Namespaces,
    ) -> Result<(), ApiError> {
        validating::validate(self, snapshot, attrs, ctx, namespaces).await
    }
}

/// The request's namespace for `namespaceObject`: none for cluster-scoped
/// requests; kube's NotFound when the cache lacks it.
fn namespace_of(
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
) -> Result<Option<Arc<Namespace>>, ApiError> {
    if attrs.namespace.is_empty() {
        return Ok(None);
    }
    match namespaces.get(&attrs.namespace) {
        Some(namespace) => Ok(Some(namespace)),
        None => Err(ApiError::NotFound {
            resource: GroupResource::new("", "namespaces"),
            name: attrs.namespace.clone(),
        }),
    }
}

/// The name kube's `admission.NewForbidden` gives the object: the
/// request's, else the object's name or generateName, else `Unknown`.
fn object_name(attrs: &Attributes) -> String {
    if !attrs.name.is_empty() {
        return attrs.name.clone();
    }
    let meta = |key: &str| {
        attrs
            .object
            .as_ref()
            .and_then(|o| o.pointer(&format!("/metadata/{key}")))
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    meta("name")
        .or_else(|| meta("generateName"))
        .unwrap_or_else(|| "Unknown".to_owned())
}

/// kube's `apierrors.NewForbidden` message: `<resource>.<group> "<name>"
/// is forbidden: <message>`.
fn forbidden_message(attrs: &Attributes, message: &str) -> String {
    let resource = GroupResource::new(&attrs.group, &attrs.resource);
    format!(
        "{resource} \"{}\" is forbidden: {message}",
        object_name(attrs)
    )
}

/// The Status details of a policy's refusal: the object, and one cause per
/// message.
fn denial_details(attrs: &Attributes, messages: Vec<String>) -> StatusDetails {
    StatusDetails {
        group: Some(attrs.group.clone()),
        kind: Some(attrs.resource.clone()),
        name: Some(object_name(attrs)),
        causes: Some(
            messages
                .into_iter()
                .map(|message| StatusCause {
                    message: Some(message),
                    ..StatusCause::default()
                })
                .collect(),
        ),
        ..StatusDetails::default()
    }
}

#[cfg(test)]
mod tests;
