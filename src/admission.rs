//! Admission of client writes to our kinds, in kube-apiserver's order
//! (DESIGN §2.1.2, §3.1): the cluster's mutating admission policies and
//! mutating webhooks (with reinvocation), then our own validation and the
//! rights a tenant must hold ([`rights`]), then the cluster's validating
//! admission policies and validating webhooks, and last, on a create, the
//! namespace's ResourceQuota object counts ([`quota`]).
//!
//! kube-apiserver does not admit what it proxies to an aggregated API, so
//! this server runs the cluster's admission configuration itself, as every
//! server built on k8s.io/apiserver does.
//!
//! Owns the plugins and their order ([`chain`]); the store decides when
//! each phase runs (`crate::registry::admission`).

pub mod chain;
pub mod config;
pub mod policy;
pub mod quota;
pub mod rights;
pub mod webhook;

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;

pub use crate::registry::admission::Reinvocation;
pub use chain::plugins;
pub use rights::{first_missing, RightsAdmission};

/// The cluster's admission configuration at one moment, each list sorted by
/// name (kube's order for webhook configurations and policies).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub mutating_policies: Vec<Arc<MutatingAdmissionPolicy>>,
    pub mutating_bindings: Vec<Arc<MutatingAdmissionPolicyBinding>>,
    pub mutating_webhooks: Vec<Arc<MutatingWebhookConfiguration>>,
    pub validating_policies: Vec<Arc<ValidatingAdmissionPolicy>>,
    pub validating_bindings: Vec<Arc<ValidatingAdmissionPolicyBinding>>,
    pub validating_webhooks: Vec<Arc<ValidatingWebhookConfiguration>>,
}

/// The cluster's namespaces, from an informer: for `namespaceSelector` and
/// `namespaceObject`.
pub trait Namespaces: Send + Sync + std::fmt::Debug {
    /// The namespace, if the cache has it.
    fn get(&self, name: &str) -> Option<Arc<Namespace>>;
}
