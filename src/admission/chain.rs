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
use super::Reinvocation;

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
    /// as k8s.io/apiserver's plugins refuse it.
    async fn ready(&self) -> Result<(), ApiError> {
        if self.config.wait_synced(SYNC_WAIT).await {
            Ok(())
        } else {
            Err(ApiError::Forbidden {
                message: "not yet ready to handle request".to_owned(),
            })
        }
    }
}

#[async_trait::async_trait]
impl AdmissionControl for ClusterAdmission {
    fn is_idle(&self) -> bool {
        self.config.is_empty()
    }

    async fn mutate(&self, ctx: &Context, attrs: &mut Attributes) -> Result<(), ApiError> {
        self.ready().await?;
        let snapshot = self.config.snapshot();
        let namespaces = self.config.as_ref();
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
        self.ready().await?;
        let snapshot = self.config.snapshot();
        let namespaces = self.config.as_ref();
        self.policies
            .validate(&snapshot, attrs, ctx, namespaces)
            .await?;
        self.webhooks
            .validate(&snapshot.validating_webhooks, attrs, ctx, namespaces)
            .await
    }
}
