//! The cluster's admission plugins as one [`AdmissionControl`], in
//! kube-apiserver's order: mutating admission policies, then mutating
//! webhooks (and, when one of them changed the object after a mutator that
//! asked for it had run, both once more: kube's reinvocation); then, after
//! the store's own validation and the tenant's rights, validating admission
//! policies and then validating webhooks.

use std::sync::Arc;

use crate::api::errors::ApiError;
use crate::registry::admission::{AdmissionControl, Attributes};
use crate::registry::Context;

use super::config::{AdmissionConfig, SYNC_WAIT};
use super::policy::Policies;
use super::webhook::Webhooks;
use super::{Namespaces, Reinvocation};
use k8s_openapi::api::core::v1::Namespace;

/// Policies and webhooks over the watched configuration.
#[derive(Debug)]
pub struct ClusterAdmission {
    config: Arc<AdmissionConfig>,
    policies: Policies,
    webhooks: Webhooks,
}

impl ClusterAdmission {
    pub fn new(config: Arc<AdmissionConfig>, policies: Policies, webhooks: Webhooks) -> Self {
        Self {
            config,
            policies,
            webhooks,
        }
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

#[async_trait::async_trait]
impl AdmissionControl for ClusterAdmission {
    fn is_idle(&self) -> bool {
        self.config.is_empty()
    }

    async fn mutate(&self, ctx: &Context, attrs: &mut Attributes) -> Result<(), ApiError> {
        self.ready(attrs).await?;
        let snapshot = self.config.snapshot();
        let namespaces = &self.namespaces(attrs).await;
        let mut reinvocation = Reinvocation::default();
        self.policies
            .mutate(&snapshot, attrs, ctx, namespaces, &mut reinvocation)
            .await?;
        self.webhooks
            .mutate(
                &snapshot.mutating_webhooks,
                attrs,
                ctx,
                namespaces,
                &mut reinvocation,
            )
            .await?;
        if reinvocation.should_reinvoke {
            reinvocation.should_reinvoke = false;
            reinvocation.reinvoking = true;
            self.policies
                .mutate(&snapshot, attrs, ctx, namespaces, &mut reinvocation)
                .await?;
            self.webhooks
                .mutate(
                    &snapshot.mutating_webhooks,
                    attrs,
                    ctx,
                    namespaces,
                    &mut reinvocation,
                )
                .await?;
        }
        Ok(())
    }

    async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError> {
        self.ready(attrs).await?;
        let snapshot = self.config.snapshot();
        let namespaces = &self.namespaces(attrs).await;
        self.policies
            .validate(&snapshot, attrs, ctx, namespaces)
            .await?;
        self.webhooks
            .validate(&snapshot.validating_webhooks, attrs, ctx, namespaces)
            .await
    }
}
