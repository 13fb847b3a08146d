//! The admission chain: every plugin, in kube-apiserver's order, as one
//! list ([`plugins`]):
//! 1. [`RightsAdmission`]: the rights a tenant must hold for what it
//!    creates (DESIGN §2.1.2, §2.2);
//! 2. mutating admission policies;
//! 3. mutating webhooks;
//! 4. validating admission policies;
//! 5. validating webhooks (2 to 5 are each a `ClusterPlugin`);
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
use crate::registry::admission::{Attributes, Chain, Operation, Phase, Plugin, Reinvocation};
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
        let cluster = |which| -> Arc<dyn Plugin> {
            Arc::new(ClusterPlugin {
                which,
                cluster: Cluster {
                    config: config.clone(),
                },
                policies: policies.clone(),
                webhooks: webhooks.clone(),
            })
        };
        plugins.extend([
            cluster(Configured::MutatingPolicies),
            cluster(Configured::MutatingWebhooks),
            cluster(Configured::ValidatingPolicies),
            cluster(Configured::ValidatingWebhooks),
            Arc::new(ResourceQuotas::new(client.clone())),
        ]);
    }
    Chain::new(plugins)
}

/// What the cluster's policies and webhooks share: the watched
/// configuration, from which each call takes its own look (a snapshot,
/// and the namespaces its selectors match; kube's plugins each read their
/// own informers on every call too).
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

/// Which of kube's four plugins over the cluster's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Configured {
    MutatingPolicies,
    MutatingWebhooks,
    ValidatingPolicies,
    ValidatingWebhooks,
}

/// One of the cluster's policy and webhook plugins (kube's
/// `MutatingAdmissionPolicy`, `MutatingAdmissionWebhook`,
/// `ValidatingAdmissionPolicy`, `ValidatingAdmissionWebhook`): the four
/// share the watched configuration, and the policies and the webhooks
/// their evaluators.
#[derive(Debug)]
struct ClusterPlugin {
    which: Configured,
    cluster: Cluster,
    policies: Arc<Policies>,
    webhooks: Arc<Webhooks>,
}

#[async_trait::async_trait]
impl Plugin for ClusterPlugin {
    fn name(&self) -> &'static str {
        match self.which {
            Configured::MutatingPolicies => "MutatingAdmissionPolicy",
            Configured::MutatingWebhooks => "MutatingAdmissionWebhook",
            Configured::ValidatingPolicies => "ValidatingAdmissionPolicy",
            Configured::ValidatingWebhooks => "ValidatingAdmissionWebhook",
        }
    }

    fn handles(&self, _: Operation, phase: Phase) -> bool {
        let mutates = matches!(
            self.which,
            Configured::MutatingPolicies | Configured::MutatingWebhooks
        );
        self.cluster.active() && mutates == (phase == Phase::Mutating)
    }

    async fn admit(
        &self,
        ctx: &Context,
        attrs: &mut Attributes,
        passes: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        match self.which {
            Configured::MutatingPolicies => {
                let (snapshot, namespaces) = self.cluster.look(attrs).await?;
                self.policies
                    .mutate(&snapshot, attrs, ctx, &namespaces, passes)
                    .await
            }
            Configured::MutatingWebhooks => {
                let (snapshot, namespaces) = self.cluster.look(attrs).await?;
                let configs = &snapshot.mutating_webhooks;
                self.webhooks
                    .mutate(configs, attrs, ctx, &namespaces, passes)
                    .await
            }
            Configured::ValidatingPolicies | Configured::ValidatingWebhooks => Ok(()),
        }
    }

    async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError> {
        match self.which {
            Configured::ValidatingPolicies => {
                let (snapshot, namespaces) = self.cluster.look(attrs).await?;
                self.policies
                    .validate(&snapshot, attrs, ctx, &namespaces)
                    .await
            }
            Configured::ValidatingWebhooks => {
                let (snapshot, namespaces) = self.cluster.look(attrs).await?;
                let configs = &snapshot.validating_webhooks;
                self.webhooks
                    .validate(configs, attrs, ctx, &namespaces)
                    .await
            }
            Configured::MutatingPolicies | Configured::MutatingWebhooks => Ok(()),
        }
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
        for phase in [Phase::Mutating, Phase::Validating] {
            assert!(chain.handles(Operation::Update, phase));
            assert!(chain.handles(Operation::Delete, phase));
            assert!(!alone.handles(Operation::Update, phase));
        }
        // Alone, a create builds nothing for the mutating phase.
        assert!(!alone.handles(Operation::Create, Phase::Mutating));
        assert!(alone.handles(Operation::Create, Phase::Validating));
    }
}
