//! The admission chain: every plugin, in kube-apiserver's order, as one
//! list ([`plugins`]):
//! 1. [`RightsAdmission`]: the rights a tenant must hold for what it
//!    creates (DESIGN §3.1);
//! 2. [`MutatingPolicies`]: mutating admission policies;
//! 3. [`MutatingWebhooks`]: mutating webhooks;
//! 4. [`ValidatingPolicies`]: validating admission policies;
//! 5. [`ValidatingWebhooks`]: validating webhooks;
//! 6. [`ResourceQuotas`]: the namespace's object counts, on a create.
//!
//! kube's two phases run over this one list
//! (`crate::registry::admission::Chain`): the mutating phase runs the
//! mutators, 2 and 3 (both once more when one of them changed the object
//! after one that asked for it had run: kube's reinvocation); then the
//! store validates the object; then the validating phase runs 1, 4, 5 and
//! 6, quota last. A new plugin is one file implementing [`Plugin`] and one
//! line in [`plugins`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;

use crate::api::errors::ApiError;
use crate::authz::Authorizer;
use crate::registry::admission::{Attributes, Chain, Operation, Plugin, Reinvocation};
use crate::registry::Context;

use super::config::{AdmissionConfig, SYNC_WAIT};
use super::policy::Policies;
use super::quota::ResourceQuotas;
use super::webhook::Webhooks;
use super::{Namespaces, RightsAdmission, Snapshot};

/// The plugins of a server: the tenant's rights always; with a cluster
/// (its `client` and its watched admission `config`), its policies,
/// webhooks and quotas, which kube-apiserver does not run for what it
/// proxies to us.
pub fn plugins(
    authorizer: Arc<dyn Authorizer>,
    cluster: Option<(&kube::Client, &Arc<AdmissionConfig>)>,
) -> Chain {
    let mut plugins: Vec<Arc<dyn Plugin>> =
        vec![Arc::new(RightsAdmission::new(authorizer.clone()))];
    if let Some((client, config)) = cluster {
        let config = config.clone();
        let policies = Arc::new(Policies::new(client.clone(), authorizer));
        let webhooks = Arc::new(Webhooks::new(client.clone()));
        let cluster = Cluster { config };
        plugins.extend([
            Arc::new(MutatingPolicies(cluster.clone(), policies.clone())) as Arc<dyn Plugin>,
            Arc::new(MutatingWebhooks(cluster.clone(), webhooks.clone())),
            Arc::new(ValidatingPolicies(cluster.clone(), policies)),
            Arc::new(ValidatingWebhooks(cluster, webhooks)),
            Arc::new(ResourceQuotas::new(client.clone())),
        ]);
    }
    Chain::new(plugins)
}

/// What the cluster's policies and webhooks share: the watched
/// configuration, and the namespaces their selectors match.
#[derive(Debug, Clone)]
struct Cluster {
    config: Arc<AdmissionConfig>,
}

impl Cluster {
    /// Whether any configuration could act on a write: none does (and the
    /// informers have synced) when no binding or webhook exists.
    fn active(&self) -> bool {
        !self.config.is_empty()
    }

    /// Whether the configuration is known; a write is refused until it is,
    /// as k8s.io/apiserver's plugins refuse it (`admission.NewForbidden`).
    async fn ready(&self, attrs: &Attributes) -> Result<(), ApiError> {
        if self.config.wait_synced(SYNC_WAIT).await {
            return Ok(());
        }
        let resource = format!("{}.{}", attrs.resource, attrs.group);
        let what = if attrs.name.is_empty() {
            resource
        } else {
            format!("{resource} \"{}\"", attrs.name)
        };
        Err(ApiError::Forbidden {
            message: format!("{what} is forbidden: not yet ready to handle request"),
        })
    }

    /// What a plugin acts on, once the configuration is known: the
    /// configuration now, and the namespaces its selectors match.
    async fn look(
        &self,
        attrs: &Attributes,
    ) -> Result<(Snapshot, WithRequestNamespace<'_>), ApiError> {
        self.ready(attrs).await?;
        Ok((self.config.snapshot(), self.namespaces(attrs).await))
    }

    /// The namespaces the plugins see: the informer's, and the request's
    /// own read from kube-apiserver when the informer has not seen it yet
    /// (a namespace created just before the write), as kube's matchers
    /// fall back to a live read.
    async fn namespaces(&self, attrs: &Attributes) -> WithRequestNamespace<'_> {
        let missing = !attrs.namespace.is_empty() && self.config.get(&attrs.namespace).is_none();
        let fetched = if missing {
            self.config.read_namespace(&attrs.namespace).await
        } else {
            None
        };
        WithRequestNamespace {
            cache: &self.config,
            fetched,
        }
    }
}

/// [`AdmissionConfig`]'s namespaces, and one read live.
#[derive(Debug)]
struct WithRequestNamespace<'a> {
    cache: &'a AdmissionConfig,
    fetched: Option<Arc<Namespace>>,
}

impl Namespaces for WithRequestNamespace<'_> {
    fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        self.cache.get(name).or_else(|| {
            self.fetched
                .clone()
                .filter(|n| n.metadata.name.as_deref() == Some(name))
        })
    }
}

/// kube's `MutatingAdmissionPolicy` plugin.
#[derive(Debug)]
struct MutatingPolicies(Cluster, Arc<Policies>);

#[async_trait::async_trait]
impl Plugin for MutatingPolicies {
    fn name(&self) -> &'static str {
        "MutatingAdmissionPolicy"
    }

    fn handles(&self, _: Operation) -> bool {
        self.0.active()
    }

    async fn admit(
        &self,
        ctx: &Context,
        attrs: &mut Attributes,
        passes: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        let (snapshot, namespaces) = self.0.look(attrs).await?;
        self.1
            .mutate(&snapshot, attrs, ctx, &namespaces, passes)
            .await
    }
}

/// kube's `MutatingAdmissionWebhook` plugin.
#[derive(Debug)]
struct MutatingWebhooks(Cluster, Arc<Webhooks>);

#[async_trait::async_trait]
impl Plugin for MutatingWebhooks {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    fn handles(&self, _: Operation) -> bool {
        self.0.active()
    }

    async fn admit(
        &self,
        ctx: &Context,
        attrs: &mut Attributes,
        passes: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        let (snapshot, namespaces) = self.0.look(attrs).await?;
        self.1
            .mutate(&snapshot.mutating_webhooks, attrs, ctx, &namespaces, passes)
            .await
    }
}

/// kube's `ValidatingAdmissionPolicy` plugin.
#[derive(Debug)]
struct ValidatingPolicies(Cluster, Arc<Policies>);

#[async_trait::async_trait]
impl Plugin for ValidatingPolicies {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    fn handles(&self, _: Operation) -> bool {
        self.0.active()
    }

    async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError> {
        let (snapshot, namespaces) = self.0.look(attrs).await?;
        self.1.validate(&snapshot, attrs, ctx, &namespaces).await
    }
}

/// kube's `ValidatingAdmissionWebhook` plugin.
#[derive(Debug)]
struct ValidatingWebhooks(Cluster, Arc<Webhooks>);

#[async_trait::async_trait]
impl Plugin for ValidatingWebhooks {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    fn handles(&self, _: Operation) -> bool {
        self.0.active()
    }

    async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError> {
        let (snapshot, namespaces) = self.0.look(attrs).await?;
        self.1
            .validate(&snapshot.validating_webhooks, attrs, ctx, &namespaces)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::AllowAll;

    #[tokio::test]
    async fn the_chain_is_ours_then_the_mutators_then_the_validators_then_quota() {
        let alone = plugins(Arc::new(AllowAll), None);
        assert_eq!(alone.names(), ["TenantRights"]);
        // A cluster nobody answers: the chain is built all the same.
        let unreachable = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(unreachable).unwrap();
        let config = Arc::new(AdmissionConfig::start(client.clone()));
        let chain = plugins(Arc::new(AllowAll), Some((&client, &config)));
        assert_eq!(
            chain.names(),
            [
                "TenantRights",
                "MutatingAdmissionPolicy",
                "MutatingAdmissionWebhook",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionWebhook",
                "ResourceQuota",
            ]
        );
        // Until the configuration is listed, every write passes through the
        // cluster's plugins (which refuse it until then); the tenant's rights
        // and quota are asked on a create only.
        assert!(chain.handles(Operation::Update));
        assert!(chain.handles(Operation::Delete));
        assert!(!alone.handles(Operation::Update));
    }
}
