//! The cluster's admission webhooks, called by this server for writes to our
//! kinds. kube-apiserver does not run admission for what it proxies to an
//! aggregated API, so this server reads the MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations and calls them itself, as every server
//! built on k8s.io/apiserver does (`pkg/admission/plugin/webhook`).
//!
//! What each part owns:
//! - `hook`: one webhook of a configuration as the dispatchers see it
//!   (kube's `WebhookAccessor`), with kube's defaults filled in;
//! - `matching`: whether a webhook applies: `rules`, `namespaceSelector`,
//!   `objectSelector` (kube's `predicates`);
//! - `conditions`: `matchConditions` in CEL (through `kube_cel`), without
//!   an `authorizer` for now;
//! - `review`: the AdmissionReview sent and the checks on the answer
//!   (kube's `request/admissionreview.go`); pure;
//! - `client`: the HTTPS POST, with TLS, the call's timeout, a bounded
//!   response body ([`MAX_RESPONSE_BYTES`]) and a small cache of idle
//!   connections;
//! - `resolver`: where a `clientConfig.service` is;
//! - `invoke`: one call of one webhook, and how its failure is settled;
//! - `mutating` and `validating`: the two dispatchers, with the audit
//!   annotations, `failurePolicy` and, for mutating webhooks, reinvocation
//!   (their state between passes is `Reinvocation::state["webhook"]`).
//!
//! Service references: an aggregated server cannot count on cluster DNS or
//! a route to ClusterIPs, so a `service` is resolved as kube-aggregator's
//! endpoint routing does: an `ExternalName` Service is called at its
//! `externalName`; any other Service at a ready endpoint of its
//! EndpointSlices, on the port the slices give for the Service's port. The
//! TLS server name stays `<name>.<namespace>.svc`, as kube verifies it.
//!
//! Not here: the watch on the configurations (`super::config`) and the
//! order of the plugins, with the second mutating pass (`super::chain`).

mod client;
mod conditions;
mod hook;
mod invoke;
mod matching;
mod mutating;
mod resolver;
mod review;
mod validating;

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};

use crate::api::errors::ApiError;
use crate::registry::admission::Attributes;
use crate::registry::Context;

use super::{Namespaces, Reinvocation};

pub use client::MAX_RESPONSE_BYTES;
pub use resolver::{Endpoint, KubeServiceResolver, ServiceResolver};

/// The webhook admission plugins (mutating and validating), with what they
/// keep between requests: TLS configurations, idle connections and
/// compiled matchConditions. Cheap to share in an `Arc`.
pub struct Webhooks {
    /// Where `clientConfig.service` references point.
    resolver: Arc<dyn ServiceResolver>,
    /// For a namespace the informer does not have yet: kube then asks
    /// kube-apiserver before it concludes the namespace does not exist.
    /// `None` in unit tests: a namespace missing from the cache is missing.
    namespace_client: Option<kube::Client>,
    transport: client::Transport,
    programs: conditions::Programs,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("resolver", &self.resolver)
            .field("namespace_client", &self.namespace_client.is_some())
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// The plugins for a running server: `client` (to kube-apiserver)
    /// resolves `service` references and looks up namespaces the cache
    /// does not know yet.
    pub fn new(client: kube::Client) -> Self {
        Self {
            resolver: Arc::new(KubeServiceResolver::new(client.clone())),
            namespace_client: Some(client),
            transport: client::Transport::default(),
            programs: conditions::Programs::default(),
        }
    }

    /// The plugins with another [`ServiceResolver`] and no kube-apiserver:
    /// namespaces are only what `Namespaces` has (for unit tests).
    pub fn with_resolver(resolver: Arc<dyn ServiceResolver>) -> Self {
        Self {
            resolver,
            namespace_client: None,
            transport: client::Transport::default(),
            programs: conditions::Programs::default(),
        }
    }

    /// Mutating admission: calls every matching mutating webhook in order
    /// (configurations by name, webhooks as listed), applies their patches
    /// to `attrs.object`, and records in `reinvocation` what the second pass
    /// needs (kube's `mutatingDispatcher.Dispatch`).
    pub async fn mutate(
        &self,
        configs: &[Arc<MutatingWebhookConfiguration>],
        attrs: &mut Attributes,
        ctx: &Context,
        namespaces: &dyn Namespaces,
        reinvocation: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        let hooks = hook::mutating_hooks(configs);
        if hooks.is_empty() {
            return Ok(());
        }
        mutating::dispatch(self, &hooks, attrs, ctx, namespaces, reinvocation).await
    }

    /// Validating admission: calls every matching validating webhook at
    /// once and reports the refusal of the first in order, if any (kube's
    /// `validatingDispatcher.Dispatch`).
    pub async fn validate(
        &self,
        configs: &[Arc<ValidatingWebhookConfiguration>],
        attrs: &Attributes,
        ctx: &Context,
        namespaces: &dyn Namespaces,
    ) -> Result<(), ApiError> {
        let hooks = hook::validating_hooks(configs);
        if hooks.is_empty() {
            return Ok(());
        }
        validating::dispatch(self, &hooks, attrs, ctx, namespaces).await
    }
}

#[cfg(test)]
mod tests;
