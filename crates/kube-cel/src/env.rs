//! The shared CEL environment: the standard library, the `cel` crate's
//! strings and lists extensions, the Kubernetes libraries of
//! [`crate::libs`], and the internal functions the instrumented programs
//! call (see [`crate::rewrite`]).

use std::sync::{Arc, OnceLock};

use cel::common::types::{CelInt, DYN_TYPE, INT_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

use crate::cost;
use crate::rewrite::{
    CHARGE_ARG, CHARGE_CALL, CHARGE_COUNT, CHARGE_QUADRATIC, CHARGE_RANGE, REPLACE,
};
use crate::util::{int_arg, str_arg, string_ret};

/// The environment every program is compiled and evaluated with, built
/// once.
pub(crate) fn shared() -> Result<&'static Arc<Env>, String> {
    static ENV: OnceLock<Result<Arc<Env>, String>> = OnceLock::new();
    ENV.get_or_init(|| build().map(Arc::new).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

fn build() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_extension(cel::extensions::lists)?;
    env.add_overload(CHARGE_CALL, "kube_charge_call", vec![DYN_TYPE], charge_call)?;
    env.add_overload(CHARGE_ARG, "kube_charge_arg", vec![DYN_TYPE], charge_arg)?;
    env.add_overload(
        CHARGE_RANGE,
        "kube_charge_range",
        vec![DYN_TYPE],
        charge_range,
    )?;
    env.add_overload(
        CHARGE_QUADRATIC,
        "kube_charge_quadratic",
        vec![DYN_TYPE],
        charge_quadratic,
    )?;
    env.add_overload(
        CHARGE_COUNT,
        "kube_charge_count",
        vec![DYN_TYPE],
        charge_count,
    )?;
    let s = || STRING_TYPE;
    env.add_overload(REPLACE, "kube_replace", vec![s(), s(), s()], replace)?;
    env.add_overload(
        REPLACE,
        "kube_replace_n",
        vec![s(), s(), s(), INT_TYPE],
        replace,
    )?;
    env.add_overload(
        REPLACE,
        "kube_replace_any",
        vec![DYN_TYPE, DYN_TYPE, DYN_TYPE],
        no_replace,
    )?;
    env.add_overload(
        REPLACE,
        "kube_replace_n_any",
        vec![DYN_TYPE, DYN_TYPE, DYN_TYPE, DYN_TYPE],
        no_replace,
    )?;
    crate::libs::register(&mut env)?;
    Ok(env)
}

fn first<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    args.into_iter()
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)
}

fn charge_call<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    cost::charge(1 + cost::traversal_cost(value.as_ref()))?;
    Ok(value)
}

fn charge_arg<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    cost::charge(cost::traversal_cost(value.as_ref()))?;
    Ok(value)
}

fn charge_range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    cost::charge(cost::size_of(value.as_ref()))?;
    Ok(value)
}

fn charge_quadratic<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    let n = cost::size_of(value.as_ref());
    cost::charge(n.saturating_mul(n).div_ceil(10))?;
    Ok(value)
}

fn charge_count<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    let n = value
        .downcast_ref::<CelInt>()
        .map_or(1, |i| u64::try_from(*i.inner()).unwrap_or(0));
    cost::charge(n)?;
    Ok(value)
}

/// `s.replace(from, to[, n])`, as the strings extension has it, charged by
/// the size of its result before that is built.
fn replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let s = str_arg(&args, 0)?;
    let from = str_arg(&args, 1)?;
    let to = str_arg(&args, 2)?;
    let limit = if args.len() > 3 {
        usize::try_from(int_arg(&args, 3)?).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    let places = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    }
    .min(limit);
    let size = (s.len() as u64).saturating_add((places as u64).saturating_mul(to.len() as u64));
    cost::charge(size.div_ceil(10))?;
    string_ret(s.replacen(from, to, limit))
}

fn no_replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let types = args
        .iter()
        .map(|a| a.get_type().name().to_owned())
        .collect();
    Err(ExecutionError::no_such_member_overload("replace", types))
}
