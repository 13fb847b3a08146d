//! Compiling a policy's CEL once per generation: every expression of a
//! ValidatingAdmissionPolicy or MutatingAdmissionPolicy parsed into a
//! [`kube_cel::Program`], with compile errors kept, not raised — kube
//! reports them when a request meets the policy, under its failurePolicy.
//!
//! [`Cache`] keys a compiled policy by name and reuses it while the uid and
//! generation (else resourceVersion) are unchanged; a policy without them
//! (a test's, a static manifest's) is reused while its spec is equal.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingAdmissionPolicy, ValidatingAdmissionPolicy, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_cel::Program;

/// One expression, compiled or not.
#[derive(Debug, Clone)]
pub(super) struct Expr {
    /// The source, for messages.
    pub(super) source: String,
    /// The program, or the compile error's message.
    pub(super) program: Result<Program, String>,
}

impl Expr {
    pub(super) fn compile(source: &str) -> Self {
        Self {
            source: source.to_owned(),
            program: Program::compile(source).map_err(|e| e.message),
        }
    }
}

/// `failurePolicy`: `Fail` (the default; also any unknown value) or `Ignore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    Fail,
    Ignore,
}

impl Failure {
    fn parse(policy: Option<&str>) -> Self {
        match policy {
            Some("Ignore") => Failure::Ignore,
            _ => Failure::Fail,
        }
    }
}

/// What both kinds of policy have.
#[derive(Debug)]
pub(super) struct Common {
    pub(super) failure: Failure,
    /// `variables`, in order, that compiled.
    pub(super) variables: Vec<(String, Program)>,
    /// `variables` that did not compile, with the error.
    pub(super) broken_variables: Vec<(String, String)>,
    /// `matchConditions`, by name.
    pub(super) match_conditions: Vec<(String, Expr)>,
}

impl Common {
    fn compile(
        failure: Option<&str>,
        variables: Option<&Vec<Variable>>,
        conditions: Option<&Vec<MatchCondition>>,
    ) -> Self {
        let mut compiled = Vec::new();
        let mut broken = Vec::new();
        for v in variables.into_iter().flatten() {
            match Program::compile(&v.expression) {
                Ok(program) => compiled.push((v.name.clone(), program)),
                Err(e) => broken.push((v.name.clone(), e.message)),
            }
        }
        Self {
            failure: Failure::parse(failure),
            variables: compiled,
            broken_variables: broken,
            match_conditions: conditions
                .into_iter()
                .flatten()
                .map(|c| (c.name.clone(), Expr::compile(&c.expression)))
                .collect(),
        }
    }
}

/// One `validations[]` entry.
#[derive(Debug)]
pub(super) struct Validation {
    pub(super) expr: Expr,
    pub(super) message: Option<String>,
    pub(super) message_expression: Option<Expr>,
    pub(super) reason: Option<String>,
}

/// A compiled ValidatingAdmissionPolicy.
#[derive(Debug)]
pub(super) struct Validating {
    pub(super) common: Common,
    pub(super) validations: Vec<Validation>,
    /// `auditAnnotations[]`: key and valueExpression.
    pub(super) audit_annotations: Vec<(String, Expr)>,
}

impl Validating {
    fn compile(policy: &ValidatingAdmissionPolicy) -> Self {
        let spec = policy.spec.as_ref();
        Self {
            common: Common::compile(
                spec.and_then(|s| s.failure_policy.as_deref()),
                spec.and_then(|s| s.variables.as_ref()),
                spec.and_then(|s| s.match_conditions.as_ref()),
            ),
            validations: spec
                .and_then(|s| s.validations.as_ref())
                .into_iter()
                .flatten()
                .map(|v| Validation {
                    expr: Expr::compile(&v.expression),
                    message: v.message.clone(),
                    message_expression: v
                        .message_expression
                        .as_deref()
                        .filter(|m| !m.is_empty())
                        .map(Expr::compile),
                    reason: v.reason.clone(),
                })
                .collect(),
            audit_annotations: spec
                .and_then(|s| s.audit_annotations.as_ref())
                .into_iter()
                .flatten()
                .map(|a| (a.key.clone(), Expr::compile(&a.value_expression)))
                .collect(),
        }
    }
}

/// One `mutations[]` entry, by `patchType`.
#[derive(Debug)]
pub(super) enum Mutation {
    JsonPatch(Expr),
    ApplyConfiguration(Expr),
    /// A patch type this server does not know, or one without its expression.
    Unsupported(String),
}

/// A compiled MutatingAdmissionPolicy.
#[derive(Debug)]
pub(super) struct Mutating {
    pub(super) common: Common,
    pub(super) mutations: Vec<Mutation>,
    /// `reinvocationPolicy: IfNeeded`.
    pub(super) reinvoke_if_needed: bool,
}

impl Mutating {
    fn compile(policy: &MutatingAdmissionPolicy) -> Self {
        let spec = policy.spec.as_ref();
        let mutations = spec.and_then(|s| s.mutations.as_ref());
        Self {
            common: Common::compile(
                spec.and_then(|s| s.failure_policy.as_deref()),
                spec.and_then(|s| s.variables.as_ref()),
                spec.and_then(|s| s.match_conditions.as_ref()),
            ),
            mutations: mutations
                .into_iter()
                .flatten()
                .map(|m| {
                    let json_patch = m.json_patch.as_ref().and_then(|p| p.expression.as_deref());
                    let apply = m
                        .apply_configuration
                        .as_ref()
                        .and_then(|p| p.expression.as_deref());
                    match (m.patch_type.as_str(), json_patch, apply) {
                        ("JSONPatch", Some(e), _) => Mutation::JsonPatch(Expr::compile(e)),
                        ("ApplyConfiguration", _, Some(e)) => {
                            Mutation::ApplyConfiguration(Expr::compile(e))
                        }
                        (other, _, _) => Mutation::Unsupported(format!(
                            "unsupported mutation patchType {other:?} or missing expression"
                        )),
                    }
                })
                .collect(),
            reinvoke_if_needed: spec.and_then(|s| s.reinvocation_policy.as_deref())
                == Some("IfNeeded"),
        }
    }
}

/// A policy kind the cache compiles.
pub(super) trait Compile: PartialEq + std::fmt::Debug {
    type Compiled: std::fmt::Debug;
    fn metadata(&self) -> &ObjectMeta;
    fn compile(&self) -> Self::Compiled;
}

impl Compile for ValidatingAdmissionPolicy {
    type Compiled = Validating;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn compile(&self) -> Validating {
        Validating::compile(self)
    }
}

impl Compile for MutatingAdmissionPolicy {
    type Compiled = Mutating;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn compile(&self) -> Mutating {
        Mutating::compile(self)
    }
}

/// Compiled policies by name.
#[derive(Debug)]
pub(super) struct Cache<P: Compile> {
    entries: Mutex<HashMap<String, Entry<P>>>,
}

#[derive(Debug)]
struct Entry<P: Compile> {
    policy: Arc<P>,
    compiled: Arc<P::Compiled>,
}

impl<P: Compile> Default for Cache<P> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

/// Whether `a` and `b` are the same generation of one policy.
fn same_generation<P: Compile>(a: &Arc<P>, b: &Arc<P>) -> bool {
    if Arc::ptr_eq(a, b) {
        return true;
    }
    let (ma, mb) = (a.metadata(), b.metadata());
    match (&ma.uid, &mb.uid) {
        (Some(ua), Some(ub)) if ua == ub => match (ma.generation, mb.generation) {
            (Some(ga), Some(gb)) => ga == gb,
            _ => ma.resource_version.is_some() && ma.resource_version == mb.resource_version,
        },
        (Some(_), Some(_)) => false,
        _ => a == b,
    }
}

impl<P: Compile> Cache<P> {
    /// The compiled form of each of `policies` (one snapshot's), compiling
    /// what changed and forgetting policies no longer there.
    pub(super) fn compiled(&self, policies: &[Arc<P>]) -> Vec<Arc<P::Compiled>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = HashSet::new();
        let compiled = policies
            .iter()
            .map(|policy| {
                let name = policy.metadata().name.clone().unwrap_or_default();
                seen.insert(name.clone());
                match entries.get(&name) {
                    Some(entry) if same_generation(&entry.policy, policy) => entry.compiled.clone(),
                    _ => {
                        let compiled = Arc::new(policy.compile());
                        entries.insert(
                            name,
                            Entry {
                                policy: policy.clone(),
                                compiled: compiled.clone(),
                            },
                        );
                        compiled
                    }
                }
            })
            .collect();
        entries.retain(|name, _| seen.contains(name));
        compiled
    }
}
