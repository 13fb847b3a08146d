//! The authorizer library: `authorizer.group(g).resource(r)...check(verb)`,
//! `authorizer.path(p).check(verb)`, `authorizer.serviceAccount(ns, name)`,
//! `authorizer.requestResource`, and the methods of the resulting decision.
//!
//! The builder values borrow the caller's [`Authorizer`], so they cannot be
//! downcast like `'static` values; the overloads reach them through their
//! [`Indexer`], handing it an [`AuthzOp`] to apply. Each `check` costs
//! 350,000, as in kube: at most two checks fit an expression's budget.

use cel::common::traits::Indexer;
use cel::common::types::{Kind, Type, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::KubeValue;
use crate::cost;
use crate::errors::error;
use crate::util::{any_arg, arg, bool_ret, static_val, str_arg, string_ret, Args, Ret};
use crate::{Authorizer, AuthzCheck, AuthzDecision, ResourceCheck};

/// The cost of one authorization check.
const CHECK_COST: u64 = 350_000;

pub(crate) static AUTHORIZER_TYPE: Type =
    Type::simple_type(Kind::Opaque, "kubernetes.authorization.Authorizer");
pub(crate) static PATH_CHECK_TYPE: Type =
    Type::simple_type(Kind::Opaque, "kubernetes.authorization.PathCheck");
pub(crate) static GROUP_CHECK_TYPE: Type =
    Type::simple_type(Kind::Opaque, "kubernetes.authorization.GroupCheck");
pub(crate) static RESOURCE_CHECK_TYPE: Type =
    Type::simple_type(Kind::Opaque, "kubernetes.authorization.ResourceCheck");
pub(crate) static DECISION_TYPE: Type =
    Type::simple_type(Kind::Opaque, "kubernetes.authorization.Decision");
static OP_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.authorization.Op");

/// Which builder a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Authorizer,
    Path,
    Group,
    Resource,
}

/// `authorizer` and the checks built from it.
#[derive(Clone)]
pub(crate) struct AuthzVal<'a> {
    authz: &'a dyn Authorizer,
    stage: Stage,
    service_account: Option<(String, String)>,
    path: String,
    resource: ResourceCheck,
    field_selector: Option<String>,
    label_selector: Option<String>,
}

impl std::fmt::Debug for AuthzVal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthzVal")
            .field("stage", &self.stage)
            .field("service_account", &self.service_account)
            .field("path", &self.path)
            .field("resource", &self.resource)
            .finish()
    }
}

impl<'a> AuthzVal<'a> {
    /// The `authorizer` variable.
    pub(crate) fn root(authz: &'a dyn Authorizer) -> Self {
        AuthzVal {
            authz,
            stage: Stage::Authorizer,
            service_account: None,
            path: String::new(),
            resource: ResourceCheck::default(),
            field_selector: None,
            label_selector: None,
        }
    }

    /// The `authorizer.requestResource` variable.
    pub(crate) fn request_resource(authz: &'a dyn Authorizer, resource: &ResourceCheck) -> Self {
        AuthzVal {
            stage: Stage::Resource,
            resource: resource.clone(),
            ..AuthzVal::root(authz)
        }
    }

    fn apply(&self, op: &AuthzOp) -> Result<Box<dyn Val + 'a>, ExecutionError> {
        let mut next = self.clone();
        match (self.stage, op) {
            (Stage::Authorizer, AuthzOp::Path(p)) => {
                next.stage = Stage::Path;
                next.path = p.clone();
            }
            (Stage::Authorizer, AuthzOp::Group(g)) => {
                next.stage = Stage::Group;
                next.resource.group = g.clone();
            }
            (Stage::Authorizer, AuthzOp::ServiceAccount(ns, name)) => {
                next.service_account = Some((ns.clone(), name.clone()));
            }
            (Stage::Group, AuthzOp::Resource(r)) => {
                next.stage = Stage::Resource;
                next.resource.resource = r.clone();
            }
            (Stage::Resource, AuthzOp::Subresource(s)) => next.resource.subresource = s.clone(),
            (Stage::Resource, AuthzOp::Namespace(s)) => next.resource.namespace = s.clone(),
            (Stage::Resource, AuthzOp::Name(s)) => next.resource.name = s.clone(),
            (Stage::Resource, AuthzOp::FieldSelector(s)) => next.field_selector = Some(s.clone()),
            (Stage::Resource, AuthzOp::LabelSelector(s)) => next.label_selector = Some(s.clone()),
            (Stage::Path | Stage::Resource, AuthzOp::Check(verb)) => {
                return Ok(Box::new(self.check(verb)?));
            }
            _ => return Err(error("no such overload")),
        }
        Ok(Box::new(next))
    }

    fn check(&self, verb: &str) -> Result<Decision, ExecutionError> {
        cost::charge(CHECK_COST)?;
        let check = if self.stage == Stage::Path {
            AuthzCheck::Path {
                path: self.path.clone(),
                verb: verb.to_owned(),
                service_account: self.service_account.clone(),
            }
        } else {
            let r = &self.resource;
            AuthzCheck::Resource {
                group: r.group.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                verb: verb.to_owned(),
                field_selector: self.field_selector.clone(),
                label_selector: self.label_selector.clone(),
                service_account: self.service_account.clone(),
            }
        };
        Ok(Decision(self.authz.check(&check)))
    }
}

impl Val for AuthzVal<'_> {
    fn get_type(&self) -> &Type {
        match self.stage {
            Stage::Authorizer => &AUTHORIZER_TYPE,
            Stage::Path => &PATH_CHECK_TYPE,
            Stage::Group => &GROUP_CHECK_TYPE,
            Stage::Resource => &RESOURCE_CHECK_TYPE,
        }
    }

    fn cel_type() -> &'static Type {
        &AUTHORIZER_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for AuthzVal<'_> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match idx.downcast_ref::<AuthzOp>() {
            Some(op) => self.apply(op).map(CowVal::Owned),
            None => Err(ExecutionError::no_such_key(
                idx.downcast_ref::<cel::common::types::CelString>()
                    .map_or("?", |s| s.inner()),
            )),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// A step of the builder chain, handed to [`AuthzVal`]'s indexer.
#[derive(Debug, Clone, PartialEq)]
enum AuthzOp {
    Path(String),
    Group(String),
    ServiceAccount(String, String),
    Resource(String),
    Subresource(String),
    Namespace(String),
    Name(String),
    FieldSelector(String),
    LabelSelector(String),
    Check(String),
}

static_val!(AuthzOp, OP_TYPE);

/// `kubernetes.authorization.Decision`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision(AuthzDecision);

static_val!(Decision, DECISION_TYPE);

impl KubeValue for Decision {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        Ok(serde_json::json!({
            "allowed": self.0.allowed,
            "denied": self.0.denied,
            "reason": self.0.reason,
            "error": self.0.error,
        }))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let s = || STRING_TYPE;
    let a = || AUTHORIZER_TYPE.to_owned();
    let r = || RESOURCE_CHECK_TYPE.to_owned();
    let d = || DECISION_TYPE.to_owned();
    env.add_member_overload("path", "authorizer_path", a(), vec![s()], path)?;
    env.add_member_overload("group", "authorizer_group", a(), vec![s()], group)?;
    env.add_member_overload(
        "serviceAccount",
        "authorizer_serviceaccount",
        a(),
        vec![s(), s()],
        service_account,
    )?;
    env.add_member_overload(
        "resource",
        "groupcheck_resource",
        GROUP_CHECK_TYPE.to_owned(),
        vec![s()],
        resource,
    )?;
    env.add_member_overload(
        "subresource",
        "resourcecheck_subresource",
        r(),
        vec![s()],
        subresource,
    )?;
    env.add_member_overload(
        "namespace",
        "resourcecheck_namespace",
        r(),
        vec![s()],
        namespace,
    )?;
    env.add_member_overload("name", "resourcecheck_name", r(), vec![s()], name)?;
    env.add_member_overload(
        "fieldSelector",
        "authorizer_fieldselector",
        r(),
        vec![s()],
        field_selector,
    )?;
    env.add_member_overload(
        "labelSelector",
        "authorizer_labelselector",
        r(),
        vec![s()],
        label_selector,
    )?;
    env.add_member_overload(
        "check",
        "pathcheck_check",
        PATH_CHECK_TYPE.to_owned(),
        vec![s()],
        check,
    )?;
    env.add_member_overload("check", "resourcecheck_check", r(), vec![s()], check)?;
    env.add_member_overload("errored", "decision_errored", d(), vec![], errored)?;
    env.add_member_overload("error", "decision_error", d(), vec![], decision_error)?;
    env.add_member_overload("allowed", "decision_allowed", d(), vec![], allowed)?;
    env.add_member_overload("reason", "decision_reason", d(), vec![], reason)?;
    Ok(())
}

/// Applies `op` to the builder in `args[0]`.
fn step<'b, 'v>(args: &Args<'b, 'v>, op: AuthzOp) -> Ret<'b, 'v> {
    let target = any_arg(args, 0)?;
    let indexer = target
        .as_indexer()
        .ok_or_else(|| error("no such overload"))?;
    let next = indexer.get(&op)?.into_owned();
    Ok(CowVal::Owned(next))
}

fn path<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let p = str_arg(&args, 1)?;
    if p.trim().is_empty() {
        return Err(error("path must not be empty"));
    }
    step(&args, AuthzOp::Path(p.to_owned()))
}

fn group<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let g = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::Group(g))
}

fn service_account<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let namespace = str_arg(&args, 1)?.to_owned();
    let name = str_arg(&args, 2)?.to_owned();
    if !is_dns1123_subdomain(&name) {
        return Err(error("Invalid service account name"));
    }
    if !is_dns1123_label(&namespace) {
        return Err(error("Invalid service account namespace"));
    }
    step(&args, AuthzOp::ServiceAccount(namespace, name))
}

fn resource<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let r = str_arg(&args, 1)?;
    if r.trim().is_empty() {
        return Err(error("resource must not be empty"));
    }
    step(&args, AuthzOp::Resource(r.to_owned()))
}

fn subresource<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::Subresource(s))
}

fn namespace<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::Namespace(s))
}

fn name<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::Name(s))
}

fn field_selector<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::FieldSelector(s))
}

fn label_selector<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::LabelSelector(s))
}

fn check<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let verb = str_arg(&args, 1)?.to_owned();
    step(&args, AuthzOp::Check(verb))
}

fn errored<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(arg::<Decision>(&args, 0)?.0.error.is_some())
}

fn decision_error<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(
        arg::<Decision>(&args, 0)?
            .0
            .error
            .clone()
            .unwrap_or_default(),
    )
}

fn allowed<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    bool_ret(arg::<Decision>(&args, 0)?.0.allowed)
}

fn reason<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    string_ret(arg::<Decision>(&args, 0)?.0.reason.clone())
}

/// A DNS-1123 label: a namespace name.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: a service account name.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}
