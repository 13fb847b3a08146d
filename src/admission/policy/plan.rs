//! Which policy × binding × param tuples a request invokes: kube's generic
//! policy dispatcher, shared by both kinds of policy. A policy without
//! bindings does nothing; a policy whose `matchConstraints` select the
//! request invokes each of its bindings (in name order) whose
//! `matchResources` select it, once per param the binding's `paramRef`
//! resolves to. What goes wrong on the way is a configuration error, kept in
//! order for the dispatcher to weigh against the policy's failurePolicy.
//!
//! Async only for the param lookups; evaluates no CEL.

use k8s_openapi::api::admissionregistration::v1::{MatchResources, ParamKind, ParamRef};
use serde_json::Value;

use crate::admission::Namespaces;
use crate::registry::admission::Attributes;

use super::matching;
use super::params::{self, ParamKindRef, ParamSource};

/// What the plan needs of a policy.
#[derive(Debug, Clone, Copy)]
pub(super) struct PolicyRef<'a> {
    pub(super) name: &'a str,
    pub(super) constraints: Option<&'a MatchResources>,
    pub(super) param_kind: Option<&'a ParamKind>,
}

/// What the plan needs of a binding.
#[derive(Debug, Clone, Copy)]
pub(super) struct BindingRef<'a> {
    pub(super) policy_name: &'a str,
    pub(super) match_resources: Option<&'a MatchResources>,
    pub(super) param_ref: Option<&'a ParamRef>,
}

/// One step of a policy's part of the plan.
#[derive(Debug)]
pub(super) enum Item {
    /// kube's `failed to configure policy: …` (no binding) or `failed to
    /// configure binding: …`.
    ConfigError {
        binding: Option<usize>,
        message: String,
    },
    /// Evaluate [`Plan::jobs`]`[job]`.
    Invoke { binding: usize, job: usize },
}

/// A matching policy's steps, in order.
#[derive(Debug)]
pub(super) struct PolicyPlan {
    /// Index into the policies given to [`plan`].
    pub(super) policy: usize,
    pub(super) items: Vec<Item>,
}

/// One invocation: a policy, a binding and a param (`None`: no params).
#[derive(Debug)]
pub(super) struct Job {
    pub(super) policy: usize,
    pub(super) binding: usize,
    pub(super) params: Option<Value>,
}

#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) policies: Vec<PolicyPlan>,
    pub(super) jobs: Vec<Job>,
}

impl Plan {
    pub(super) fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

/// The plan for one request. Indices in the result are into `policies`
/// and `bindings`, which keep the snapshot's (name) order.
pub(super) async fn plan(
    policies: &[PolicyRef<'_>],
    bindings: &[BindingRef<'_>],
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
    source: &dyn ParamSource,
) -> Plan {
    let mut plan = Plan::default();
    for (p, policy) in policies.iter().enumerate() {
        let bound: Vec<usize> = (0..bindings.len())
            .filter(|&b| bindings[b].policy_name == policy.name)
            .collect();
        if bound.is_empty() {
            continue;
        }
        let mut items = Vec::new();
        let policy_error = |message: String| Item::ConfigError {
            binding: None,
            message: format!("failed to configure policy: {message}"),
        };
        match matching::policy_matches(policy.constraints, attrs, namespaces) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                plan.policies.push(PolicyPlan {
                    policy: p,
                    items: vec![policy_error(e)],
                });
                continue;
            }
        }
        let kind = match policy.param_kind {
            None => None,
            Some(kind) => match resolve(kind, source).await {
                Ok(resolved) => Some(resolved),
                Err(e) => {
                    plan.policies.push(PolicyPlan {
                        policy: p,
                        items: vec![policy_error(e)],
                    });
                    continue;
                }
            },
        };
        for b in bound {
            let binding = &bindings[b];
            let binding_error = |message: String| Item::ConfigError {
                binding: Some(b),
                message: format!("failed to configure binding: {message}"),
            };
            match matching::binding_matches(binding.match_resources, attrs, namespaces) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    items.push(binding_error(e));
                    continue;
                }
            }
            match params::collect(kind.as_ref(), binding.param_ref, &attrs.namespace, source).await
            {
                Err(e) => items.push(binding_error(e)),
                Ok(found) => {
                    for params in found {
                        items.push(Item::Invoke {
                            binding: b,
                            job: plan.jobs.len(),
                        });
                        plan.jobs.push(Job {
                            policy: p,
                            binding: b,
                            params,
                        });
                    }
                }
            }
        }
        if !items.is_empty() {
            plan.policies.push(PolicyPlan { policy: p, items });
        }
    }
    plan
}

/// A paramKind and the scope of the resource serving it.
async fn resolve(
    kind: &ParamKind,
    source: &dyn ParamSource,
) -> Result<(ParamKindRef, params::ParamScope), String> {
    let kind = ParamKindRef::parse(kind)
        .map_err(|e| format!("failed to parse paramKind APIVersion: {e}"))?;
    let scope = source.scope(&kind).await.map_err(|e| e.to_string())?;
    Ok((kind, scope))
}
