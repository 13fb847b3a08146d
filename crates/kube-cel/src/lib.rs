//! Kubernetes CEL over JSON objects.
//!
//! This crate owns evaluating the CEL expressions of Kubernetes admission —
//! ValidatingAdmissionPolicy validations, auditAnnotations and
//! messageExpressions, MutatingAdmissionPolicy mutations (ApplyConfiguration
//! and JSONPatch), and webhook matchConditions — against JSON objects, with
//! the Kubernetes CEL libraries. It is built on the `cel` crate's parser and
//! interpreter; it does not own fetching objects, policies or params, nor
//! deciding what a result means for a request.
//!
//! # Compiling
//!
//! [`Program::compile`] only parses (with CEL's macros and optional syntax).
//! There is no type checker: an unknown function or variable, a call with
//! arguments of the wrong type, or an expression of the wrong result type is
//! an error when the expression is evaluated, not when it is compiled. Check
//! [`Output::type_name`] for the result type kube would have checked.
//!
//! # Variables
//!
//! `object`, `oldObject`, `request`, `params`, `namespaceObject` (JSON,
//! `null` when absent), `variables.<name>` (lazy, memoized per [`Session`],
//! each seeing only the variables declared before it), `authorizer` and
//! `authorizer.requestResource` (when an [`Authorizer`] is given). Selecting
//! a missing field is the error `no such key: <field>`; `has(a.b)` and
//! `a.?b` test for it.
//!
//! # Libraries
//!
//! - the CEL standard library and macros (`has`, `all`, `exists`,
//!   `exists_one`, `map` (2 and 3 arguments), `filter`), optional values
//!   (`optional.of/none/ofNonZeroValue`, `.hasValue()`, `.value()`,
//!   `.orValue()`, `.or()`, `.optMap()`, `.optFlatMap()`, `l.first()`,
//!   `l.last()`, `optional.unwrap(l)`, `l.unwrapOpt()`), durations and
//!   timestamps;
//! - cel-go's strings extension: `charAt`, `indexOf`, `lastIndexOf`,
//!   `lowerAscii`, `upperAscii`, `replace`, `split`, `substring`, `trim`,
//!   `join`, `format`, `strings.quote`;
//! - cel-go's lists extension: `slice`, `flatten`, `distinct`, `reverse`,
//!   `sort`, `sortBy`, `lists.range`; and its sets extension:
//!   `sets.contains`, `sets.equivalent`, `sets.intersects`;
//! - kube's libraries: lists (`isSorted`, `sum`, `min`, `max`, `indexOf`,
//!   `lastIndexOf`), regex (`find`, `findAll`), URLs (`url`, `isURL`,
//!   `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`,
//!   `getQuery`), quantities (`quantity`, `isQuantity`, `sign`,
//!   `isGreaterThan`, `isLessThan`, `compareTo`, `add`, `sub`, `asInteger`,
//!   `isInteger`, `asApproximateFloat`; exact), IPs and CIDRs (`ip`, `isIP`,
//!   `ip.isCanonical`, `family`, `isUnspecified`, `isLoopback`,
//!   `isLinkLocalMulticast`, `isLinkLocalUnicast`, `isGlobalUnicast`, `cidr`,
//!   `isCIDR`, `containsIP`, `containsCIDR`, `ip()`, `prefixLength`,
//!   `masked`, `string()`), semver (`semver`, `isSemver`, `major`, `minor`,
//!   `patch`, `isGreaterThan`, `isLessThan`, `compareTo`), named formats
//!   (`format.named`, `format.dns1123Label()` ... `format.datetime()`,
//!   `validate`), the authorizer
//!   (`path`, `group`, `resource`, `subresource`, `namespace`, `name`,
//!   `fieldSelector`, `labelSelector`, `serviceAccount`, `check`, `allowed`,
//!   `reason`, `errored`, `error`);
//! - MutatingAdmissionPolicy values: `Object{...}` and `Object.<path>{...}`
//!   typed objects (their fields are not checked against a schema),
//!   `JSONPatch{op, path, from, value}` and `jsonpatch.escapeKey(k)`.
//!
//! [`UNSUPPORTED`] lists the kube library functions that are missing.
//!
//! # Cost
//!
//! kube bounds each evaluation by a runtime cost (per-call limit
//! 1,000,000). The `cel` crate has no hook to count or interrupt evaluation
//! steps, so this crate instruments each program when compiling it (see
//! the `rewrite` module) and charges a per-evaluation budget
//! ([`Limits::max_cost`]) as it runs; over budget, the evaluation fails
//! with `operation cancelled: actual cost limit exceeded`, whatever `||`
//! or `&&` around it would have made of an error. What is charged:
//!
//! - every function or operator call (not `&&`, `||`, `?:`, `!`, unary `-`
//!   and indexing): 1, plus a tenth of the size (string or bytes length,
//!   list or map size) of its result and of each argument that is not a
//!   literal;
//! - every element of a comprehension's range (`all`, `exists`, `map`,
//!   `filter`, `sortBy` ...): 1 per element, before the loop runs, so nested
//!   loops over tenant data are bounded by the product of their sizes;
//! - every element of a list or map literal and field of a typed object: a
//!   tenth of its size, since building them copies it;
//! - ahead of the call: `l.distinct()` size(l)²/10, `lists.range(n)` n,
//!   `s.replace(a, b)` a tenth of its result's size, `sets.*` the product of
//!   the two sizes /10, and 350,000 per authorization `check` (two fit).
//!
//! Not bounded by the budget: selecting fields and indexing (constant time);
//! a single call's own work, which is charged by its input and output
//! sizes rather than interrupted (`matches`, `find` and `findAll` run in
//! linear time, with patterns limited to 1 MiB compiled; `split`, `join`,
//! `format`, `sort`, `+` and the rest are linear or n·log n in their
//! inputs); converting the inputs from JSON (once per [`Session`]); and the
//! [`Authorizer`] itself. The charges approximate kube's; they are not its
//! exact numbers, so an expression near the limit may pass in one and fail
//! in the other. There is no compile-time cost estimate.

use std::fmt;
use std::sync::Arc;

mod convert;
mod cost;
mod env;
mod errors;
mod libs;
mod rewrite;
mod session;
mod util;

pub use session::Session;

/// The Kubernetes CEL library functions (of kube's base environment and
/// the admission plugins) this crate does not support. Calling one is an
/// evaluation error.
pub const UNSUPPORTED: &[&str] = &[
    // cel-go's two-variable comprehensions (kube 1.32)
    "all(k, v, predicate)",
    "exists(k, v, predicate)",
    "existsOne(k, v, predicate)",
    "transformList",
    "transformMap",
    "transformMapEntry",
];

/// A compiled expression; `Send + Sync`, cheap to clone (an `Arc` inside).
///
/// Compiling parses the expression. Unknown functions and variables, and
/// type mismatches, are not found then: they are runtime errors.
#[derive(Clone)]
pub struct Program {
    inner: Arc<ProgramInner>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Program")
            .field(&self.inner.expression)
            .finish()
    }
}

#[derive(Debug)]
struct ProgramInner {
    expression: String,
    ast: cel::IdedExpr,
}

impl Program {
    /// Parses `expression`. Unknown functions and variables are runtime
    /// errors in this crate: there is no type checking.
    pub fn compile(expression: &str) -> Result<Program, CompileError> {
        let env = env::shared().map_err(|e| CompileError {
            message: format!("compilation failed: {e}"),
        })?;
        let ast = env.parser().parse(expression).map_err(|e| CompileError {
            message: format!("compilation failed: {e}"),
        })?;
        Ok(Program {
            inner: Arc::new(ProgramInner {
                expression: expression.to_owned(),
                ast: rewrite::instrument(ast),
            }),
        })
    }

    /// The instrumented expression tree.
    fn ast(&self) -> &cel::IdedExpr {
        &self.inner.ast
    }

    /// The source the program was compiled from.
    pub fn expression(&self) -> &str {
        &self.inner.expression
    }
}

/// An expression that does not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileError {
    /// The message, e.g. `compilation failed: ERROR: <input>:1:3: ...`.
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CompileError {}

/// An evaluation that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalError {
    /// The message, e.g. `no such key: foo`.
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EvalError {}

/// What an expression sees. Values are JSON; absent ones are `null` (kube
/// binds null for an absent oldObject/params/namespaceObject).
pub struct Activation<'a> {
    /// `object`.
    pub object: serde_json::Value,
    /// `oldObject`.
    pub old_object: serde_json::Value,
    /// `request`: the admission.k8s.io/v1 AdmissionRequest as JSON.
    pub request: serde_json::Value,
    /// `params`.
    pub params: serde_json::Value,
    /// `namespaceObject`.
    pub namespace_object: serde_json::Value,
    /// `variables.<name>`, in declaration order; each is compiled once and
    /// evaluated lazily, at most once per [`evaluate`] call on this
    /// activation (memoized), and may refer to earlier variables. An error
    /// evaluating a variable is the error of the expression that used it.
    pub variables: Vec<(String, Program)>,
    /// `authorizer` and `authorizer.requestResource`; `None` leaves
    /// `authorizer` unbound.
    pub authorizer: Option<&'a dyn Authorizer>,
    /// The request's resource, for `authorizer.requestResource`.
    pub request_resource: Option<ResourceCheck>,
}

impl fmt::Debug for Activation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Activation")
            .field("object", &self.object)
            .field("old_object", &self.old_object)
            .field("request", &self.request)
            .field("params", &self.params)
            .field("namespace_object", &self.namespace_object)
            .field("variables", &self.variables)
            .field("authorizer", &self.authorizer.map(|_| "<authorizer>"))
            .field("request_resource", &self.request_resource)
            .finish()
    }
}

/// The request's resource, as `authorizer.requestResource` checks it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceCheck {
    /// API group, empty for the core group.
    pub group: String,
    /// Resource, e.g. `pods`.
    pub resource: String,
    /// Subresource, e.g. `status`, or empty.
    pub subresource: String,
    /// Namespace, or empty.
    pub namespace: String,
    /// Name, or empty.
    pub name: String,
}

/// A SubjectAccessReview for the requesting user (kube's `authorizer`
/// variable). Synchronous: the caller runs evaluation on a blocking thread
/// and may block inside.
pub trait Authorizer: Send + Sync {
    /// Decides `check`.
    fn check(&self, check: &AuthzCheck) -> AuthzDecision;
}

/// What an expression asks the [`Authorizer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthzCheck {
    /// `authorizer.path(p).check(verb)`: a non-resource request.
    Path {
        /// The URL path.
        path: String,
        /// The verb, e.g. `get`.
        verb: String,
        /// `Some((namespace, name))` after `authorizer.serviceAccount(ns, name)`:
        /// the subject is that service account, not the requesting user.
        service_account: Option<(String, String)>,
    },
    /// `authorizer.group(g).resource(r)...check(verb)`: a resource request.
    Resource {
        /// API group.
        group: String,
        /// Resource.
        resource: String,
        /// Subresource, or empty.
        subresource: String,
        /// Namespace, or empty.
        namespace: String,
        /// Name, or empty.
        name: String,
        /// The verb.
        verb: String,
        /// `fieldSelector(s)`, if given.
        field_selector: Option<String>,
        /// `labelSelector(s)`, if given.
        label_selector: Option<String>,
        /// `Some((namespace, name))` after `authorizer.serviceAccount(ns, name)`.
        service_account: Option<(String, String)>,
    },
}

/// The [`Authorizer`]'s answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthzDecision {
    /// Allowed.
    pub allowed: bool,
    /// Explicitly denied.
    pub denied: bool,
    /// The reason given.
    pub reason: String,
    /// The error, if the check failed.
    pub error: Option<String>,
}

/// Limits for one evaluation (kube bounds CEL by cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most cost one evaluation may spend.
    pub max_cost: u64,
}

/// Kube's per-call cost limit.
pub const PER_CALL_LIMIT: u64 = 1_000_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_cost: PER_CALL_LIMIT,
        }
    }
}

/// The value an expression evaluated to.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The value, as JSON: maps, lists, strings, ints, doubles, bools and
    /// null; bytes as base64; durations as Go prints them (`1h2m3s`);
    /// timestamps in RFC 3339; quantities, URLs, IPs, CIDRs and semvers as
    /// their strings; optionals as their value or null; objects built with
    /// `Object{...}` or `JSONPatch{...}` as JSON objects.
    pub value: serde_json::Value,
    /// Its CEL type name, e.g. `bool`, `string`, `list`, `map`,
    /// `null_type`, `Object` (or `Object.spec` ...) for a typed object,
    /// `JSONPatch`, `kubernetes.Quantity`.
    pub type_name: String,
    /// For a non-empty list whose elements all have one type, that type's
    /// name, e.g. `JSONPatch` for kube's `list(JSONPatch)`; `None` otherwise.
    pub element_type_name: Option<String>,
}

/// Evaluates `program` against `activation`, within `limits`: a
/// one-expression [`Session`]. Evaluate several expressions against one
/// activation with a [`Session`] to convert its inputs and evaluate its
/// `variables` once.
///
/// Fails with the evaluation's error worded as kube words it (`no such key:
/// x`, `found no matching overload for ...`), or with `operation cancelled:
/// actual cost limit exceeded` once the evaluation spends more than
/// `limits.max_cost`.
pub fn evaluate(
    program: &Program,
    activation: &Activation,
    limits: &Limits,
) -> Result<Output, EvalError> {
    Session::new(activation).evaluate(program, limits)
}

#[cfg(test)]
mod tests;
