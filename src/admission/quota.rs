//! ResourceQuota object counts of our kinds, as kube-apiserver's
//! `ResourceQuota` admission plugin counts them for custom resources:
//! `count/namespacetransfers.storage.transfer.k8s.io` and
//! `count/ephemeralclaims.storage.transfer.k8s.io`.
//!
//! kube-apiserver does not admit what it proxies to an aggregated API, and
//! kube-controller-manager's quota controller only recounts a namespace
//! when an object goes away, a quota changes, or every
//! `--resource-quota-sync-period`: a create is charged by admission or not
//! at all. So this server charges its own creates, as kube does:
//! - only a quota whose `status.hard` (the controller's copy of its spec)
//!   names the count applies, and one with `scopes` or a `scopeSelector`
//!   never does (kube's generic object-count evaluator matches no scope);
//! - a quota whose `status.used` has no entry for the count yet is "status
//!   unknown" and refuses the create until the controller has counted;
//! - `used + 1 > hard` refuses with kube's "exceeded quota" message;
//! - otherwise every applying quota's `status.used` is raised by one, each
//!   a patch guarded on the resourceVersion it was read at and redone on a
//!   conflict, before the create may go on. A dry run is checked and refused
//!   in the same way but charges nothing.
//!
//! A create that fails after it was charged (a name taken, a lost etcd
//! write) leaves the quota charged one too many, as in kube, until the
//! quota controller next recounts.
//!
//! Owns the decision ([`check_create`], pure) and the charge; the store
//! decides when it runs (last, after validating admission, once per create).
//! It must not touch anything but ResourceQuotas.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::api::errors::{ApiError, GroupResource};
use crate::registry::admission::QuotaControl;
use crate::registry::Context;

/// How often the charge is redone after a quota changed under it.
const RETRIES: usize = 8;

/// `count/<resource>.<group>`: the quota resource name of the object count.
pub fn count_name(resource: &GroupResource) -> String {
    format!("count/{resource}")
}

/// One quota to raise by one: its position in the list it was read from, and
/// the value its `status.used` takes for the count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub index: usize,
    pub used: String,
}

/// Why a create is refused: the text after kube's `… is forbidden: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("exceeded quota: {quota}, requested: {count}=1, used: {count}={used}, limited: {count}={hard}")]
    Exceeded {
        quota: String,
        count: String,
        used: String,
        hard: String,
    },
    /// The quota controller has not counted the resource yet.
    #[error("status unknown for quota: {quota}, resources: {count}")]
    StatusUnknown { quota: String, count: String },
    /// A value kube's validation would never have let in: refused rather
    /// than guessed at.
    #[error("failed quota: {quota}: {field} of {count} is {value:?}, not a quantity this server can compare")]
    Unreadable {
        quota: String,
        count: String,
        field: &'static str,
        value: String,
    },
}

/// Whether a create of one object counted as `count` may go on under
/// `quotas` (the namespace's), and if so what to charge. Pure.
pub fn check_create(quotas: &[ResourceQuota], count: &str) -> Result<Vec<Charge>, Refusal> {
    let mut charges = Vec::new();
    for (index, quota) in quotas.iter().enumerate() {
        let name = quota.metadata.name.clone().unwrap_or_default();
        let status = quota.status.as_ref();
        let Some(hard) = status
            .and_then(|s| s.hard.as_ref())
            .and_then(|h| h.get(count))
        else {
            continue;
        };
        if has_scopes(quota) {
            continue;
        }
        let unreadable = |field: &'static str, value: &str| Refusal::Unreadable {
            quota: name.clone(),
            count: count.to_owned(),
            field,
            value: value.to_owned(),
        };
        let hard_milli = parse_milli(&hard.0).ok_or_else(|| unreadable("hard", &hard.0))?;
        let Some(used) = status
            .and_then(|s| s.used.as_ref())
            .and_then(|u| u.get(count))
        else {
            return Err(Refusal::StatusUnknown {
                quota: name,
                count: count.to_owned(),
            });
        };
        let used_milli = parse_milli(&used.0).ok_or_else(|| unreadable("used", &used.0))?;
        let after = used_milli
            .checked_add(1000)
            .ok_or_else(|| unreadable("used", &used.0))?;
        if after > hard_milli {
            return Err(Refusal::Exceeded {
                quota: name,
                count: count.to_owned(),
                used: used.0.clone(),
                hard: hard.0.clone(),
            });
        }
        charges.push(Charge {
            index,
            used: format_milli(after),
        });
    }
    Ok(charges)
}

/// Whether the quota restricts itself by scope: kube's object-count
/// evaluator of a custom resource matches no scope, so such a quota never
/// counts our objects.
fn has_scopes(quota: &ResourceQuota) -> bool {
    let Some(spec) = &quota.spec else {
        return false;
    };
    spec.scopes.as_ref().is_some_and(|s| !s.is_empty())
        || spec
            .scope_selector
            .as_ref()
            .and_then(|s| s.match_expressions.as_ref())
            .is_some_and(|e| !e.is_empty())
}

/// A quantity in thousandths, rounded up, as kube's `MilliValue`: digits
/// with an optional sign and fraction, then a binary suffix (`Ki`…`Ei`),
/// a decimal one (`n`, `u`, `m`, `k`, `M`…`E`) or an exponent (`e3`).
/// `None` for anything else, or too large to hold.
pub fn parse_milli(text: &str) -> Option<i128> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let end = rest
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    // The digits as one integer, over 10^fraction.len().
    let mut digits: i128 = 0;
    for c in whole.chars().chain(fraction.chars()) {
        digits = digits
            .checked_mul(10)?
            .checked_add(i128::from(c.to_digit(10)?))?;
    }
    let mut ten_power = 3 - i32::try_from(fraction.len()).ok()?; // thousandths
    let mut two_power = 0u32;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let at = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                .iter()
                .position(|s| *s == suffix)?;
            two_power = 10 * (u32::try_from(at).ok()? + 1);
        }
        "n" => ten_power -= 9,
        "u" => ten_power -= 6,
        "m" => ten_power -= 3,
        "k" => ten_power += 3,
        "M" => ten_power += 6,
        "G" => ten_power += 9,
        "T" => ten_power += 12,
        "P" => ten_power += 15,
        "E" => ten_power += 18,
        exponent => {
            let digits = exponent
                .strip_prefix('e')
                .or_else(|| exponent.strip_prefix('E'))?;
            let (sign, digits) = match digits.strip_prefix('-') {
                Some(d) => (-1, d),
                None => (1, digits.strip_prefix('+').unwrap_or(digits)),
            };
            if digits.is_empty() || digits.len() > 3 || !digits.chars().all(|c| c.is_ascii_digit())
            {
                return None;
            }
            ten_power += sign * digits.parse::<i32>().ok()?;
        }
    }
    let mut value = digits.checked_mul(2i128.checked_pow(two_power)?)?;
    if ten_power >= 0 {
        value = value.checked_mul(10i128.checked_pow(u32::try_from(ten_power).ok()?)?)?;
    } else {
        match 10i128.checked_pow(ten_power.unsigned_abs()) {
            Some(divisor) => {
                let rounded_up = value / divisor + i128::from(value % divisor != 0);
                value = rounded_up;
            }
            // Less than a thousandth, but not nothing.
            None => value = i128::from(value != 0),
        }
    }
    Some(if negative { -value } else { value })
}

/// Thousandths as a quantity: whole numbers plain, the rest in `m`.
fn format_milli(milli: i128) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// kube's `admission.NewForbidden`: `<resource> "<name>" is forbidden: …`.
fn forbidden(resource: &GroupResource, name: &str, refusal: &Refusal) -> ApiError {
    let message = if name.is_empty() {
        format!("{resource} is forbidden: {refusal}")
    } else {
        format!("{resource} \"{name}\" is forbidden: {refusal}")
    };
    ApiError::Forbidden { message }
}

/// The plugin: reads the namespace's quotas from kube-apiserver on every
/// create (so no replica admits on a stale count) and charges them there.
#[derive(Clone)]
pub struct ResourceQuotas {
    client: kube::Client,
}

impl std::fmt::Debug for ResourceQuotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceQuotas").finish_non_exhaustive()
    }
}

impl ResourceQuotas {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait::async_trait]
impl QuotaControl for ResourceQuotas {
    async fn charge_create(
        &self,
        ctx: &Context,
        resource: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let count = count_name(resource);
        let api: kube::Api<ResourceQuota> = kube::Api::namespaced(self.client.clone(), namespace);
        // Quotas already charged for this create, by uid: a retry after a
        // conflict on another must not charge them twice.
        let mut charged = BTreeSet::new();
        for _ in 0..RETRIES {
            let quotas: Vec<ResourceQuota> = api
                .list(&ListParams::default())
                .await
                .map_err(|e| {
                    ApiError::ServiceUnavailable(format!(
                        "reading the resource quotas of namespace \"{namespace}\": {e}"
                    ))
                })?
                .items
                .into_iter()
                .filter(|q| !charged.contains(&q.metadata.uid))
                .collect();
            let charges =
                check_create(&quotas, &count).map_err(|r| forbidden(resource, name, &r))?;
            if ctx.dry_run || charges.is_empty() {
                return Ok(());
            }
            let mut conflicted = false;
            for charge in charges {
                let Some(quota) = quotas.get(charge.index) else {
                    continue;
                };
                let quota_name = quota.metadata.name.clone().unwrap_or_default();
                let patch = json!({
                    "metadata": {"resourceVersion": quota.metadata.resource_version},
                    "status": {"used": {count.as_str(): charge.used}},
                });
                match api
                    .patch_status(&quota_name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => {
                        charged.insert(quota.metadata.uid.clone());
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => conflicted = true,
                    // Deleted since it was read: it limits nothing any more.
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => {
                        return Err(ApiError::ServiceUnavailable(format!(
                            "charging resource quota \"{quota_name}\" in namespace \"{namespace}\": {e}"
                        )))
                    }
                }
            }
            if !conflicted {
                return Ok(());
            }
        }
        Err(ApiError::TooManyRequests {
            message: format!(
                "the resource quotas of namespace \"{namespace}\" kept changing while this create was charged to them; try again"
            ),
            retry_after_seconds: 1,
        })
    }
}

#[cfg(test)]
mod tests;
