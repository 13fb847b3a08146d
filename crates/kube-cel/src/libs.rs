//! The Kubernetes CEL libraries, each in its own module, and the dispatch
//! from a value to the crate type behind it.

use cel::common::value::Val;
use cel::{DeclarationError, Env};

use crate::convert::KubeValue;

pub(crate) mod authz;
pub(crate) mod format;
pub(crate) mod ip;
pub(crate) mod lists;
pub(crate) mod mutation;
pub(crate) mod quantity;
pub(crate) mod regex;
pub(crate) mod semver;
pub(crate) mod sets;
pub(crate) mod url;

/// Declares every library's overloads on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    mutation::register(env)?;
    quantity::register(env)?;
    url::register(env)?;
    ip::register(env)?;
    regex::register(env)?;
    lists::register(env)?;
    sets::register(env)?;
    semver::register(env)?;
    format::register(env)?;
    authz::register(env)?;
    Ok(())
}

/// The crate type behind `v`, if it is one of them.
pub(crate) fn kube_value(v: &dyn Val) -> Option<&dyn KubeValue> {
    if let Some(o) = v.downcast_ref::<mutation::TypedObject>() {
        return Some(o);
    }
    if let Some(q) = v.downcast_ref::<quantity::Quantity>() {
        return Some(q);
    }
    if let Some(u) = v.downcast_ref::<url::Url>() {
        return Some(u);
    }
    if let Some(ip) = v.downcast_ref::<ip::Ip>() {
        return Some(ip);
    }
    if let Some(c) = v.downcast_ref::<ip::Cidr>() {
        return Some(c);
    }
    if let Some(s) = v.downcast_ref::<semver::Semver>() {
        return Some(s);
    }
    if let Some(f) = v.downcast_ref::<format::Format>() {
        return Some(f);
    }
    if let Some(d) = v.downcast_ref::<authz::Decision>() {
        return Some(d);
    }
    None
}
