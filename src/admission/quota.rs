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
//! quota controller next recounts. A generated name that turns out to be
//! taken is charged again with the next name drawn, as kube's retry of
//! `generateName` is (about once in fourteen million creates).
//!
//! Where the quotas are read, as kube's quota admission reads them: from a
//! watch of the cluster's ResourceQuotas, each replaced by the copy this
//! server last wrote when that one is newer (by resourceVersion), so that
//! back-to-back creates do not each conflict on a copy the watch has not
//! caught up with; a namespace the watch has no quota for is looked up
//! live, and that answer kept for [`LIVE_LOOKUP_TTL`] (a quota made just
//! before may not have reached the watch yet). Every charge is guarded on
//! the resourceVersion it was decided on, so a stale copy can only cost a
//! conflict, after which the quotas are read live. So a create in a
//! namespace with no quota costs kube-apiserver nothing most of the time,
//! and never a read of its own.
//!
//! Owns the decision ([`check_create`], pure) and the charge; it is the
//! last plugin of the chain (`crate::admission::chain`), so it runs after
//! every other validating plugin, once for each name a create tries.
//! It must not touch anything but ResourceQuotas.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use crate::api::errors::{ApiError, GroupResource};
use crate::reflect::Watched;
use crate::registry::admission::{Attributes, Operation, Phase, Plugin};
use crate::registry::Context;

/// How often the charge is redone after a quota changed under it.
const RETRIES: usize = 8;

/// How long a live lookup of a namespace the watch had no quota for is
/// trusted: kube's quota admission keeps its live lookups as long.
pub const LIVE_LOOKUP_TTL: Duration = Duration::from_secs(30);

/// The most namespaces whose live lookups, and quotas this server last
/// wrote, are kept at once.
const KEPT: usize = 4096;

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

/// The plugin: reads the quotas from its watch (see the module's doc) and
/// charges them in kube-apiserver.
#[derive(Clone)]
pub struct ResourceQuotas {
    client: kube::Client,
    /// The cluster's quotas, as the watch last saw them.
    watched: Arc<Watched<ResourceQuota>>,
    /// What the watch has not caught up with yet.
    recent: Arc<Mutex<Recent>>,
}

/// Live lookups of namespaces the watch had no quota for, and the copies
/// of quotas this server last wrote.
#[derive(Default)]
struct Recent {
    /// By namespace: when it was looked up, and what was found.
    looked_up: HashMap<String, (Instant, Vec<ResourceQuota>)>,
    /// By uid.
    written: HashMap<String, ResourceQuota>,
}

impl std::fmt::Debug for ResourceQuotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceQuotas").finish_non_exhaustive()
    }
}

impl ResourceQuotas {
    /// Starts the watch of the cluster's quotas.
    pub fn new(client: kube::Client) -> Self {
        let watched = Arc::new(Watched::start(client.clone()));
        Self {
            client,
            watched,
            recent: Arc::default(),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The quotas of `namespace`: from the watch (each replaced by the copy
    /// this server last wrote when that is newer), or else from a live
    /// lookup younger than [`LIVE_LOOKUP_TTL`]; `None` when they must be
    /// read live.
    fn known(&self, namespace: &str) -> Option<Vec<ResourceQuota>> {
        if !self.watched.ready() {
            return None;
        }
        let watched: Vec<ResourceQuota> = self
            .watched
            .store
            .state()
            .iter()
            .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
            .map(|q| q.as_ref().clone())
            .collect();
        let recent = self.recent();
        if watched.is_empty() {
            let (at, found) = recent.looked_up.get(namespace)?;
            return (at.elapsed() < LIVE_LOOKUP_TTL).then(|| found.clone());
        }
        Some(
            watched
                .into_iter()
                .map(|q| {
                    let written = q.metadata.uid.as_ref().and_then(|u| recent.written.get(u));
                    match written {
                        Some(w) if newer(w, &q) => w.clone(),
                        _ => q,
                    }
                })
                .collect(),
        )
    }

    /// Reads the quotas of `namespace` live, and keeps what was found when
    /// the watch has none there.
    async fn look_up(&self, namespace: &str) -> Result<Vec<ResourceQuota>, ApiError> {
        let api: kube::Api<ResourceQuota> = kube::Api::namespaced(self.client.clone(), namespace);
        let found = api
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                ApiError::ServiceUnavailable(format!(
                    "reading the resource quotas of namespace \"{namespace}\": {e}"
                ))
            })?
            .items;
        let mut recent = self.recent();
        if recent.looked_up.len() >= KEPT {
            recent
                .looked_up
                .retain(|_, (at, _)| at.elapsed() < LIVE_LOOKUP_TTL);
            if recent.looked_up.len() >= KEPT {
                recent.looked_up.clear();
            }
        }
        recent
            .looked_up
            .insert(namespace.to_owned(), (Instant::now(), found.clone()));
        Ok(found)
    }

    /// Keeps `quota`, as this server just wrote it.
    fn wrote(&self, quota: ResourceQuota) {
        let Some(uid) = quota.metadata.uid.clone() else {
            return;
        };
        let mut recent = self.recent();
        if recent.written.len() >= KEPT {
            recent.written.clear();
        }
        recent.written.insert(uid, quota);
    }
}

/// Whether `a` is a later version of the same quota than `b`: etcd's
/// resourceVersions are revisions, which only grow (kube's quota admission
/// compares them so too).
fn newer(a: &ResourceQuota, b: &ResourceQuota) -> bool {
    let revision = |q: &ResourceQuota| {
        q.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    matches!((revision(a), revision(b)), (Some(a), Some(b)) if a > b)
}

/// kube's `ResourceQuota` plugin, last in the chain: refuses a create the
/// namespace's quotas have no room for and, unless the write is a dry run,
/// charges it to them before it is written.
#[async_trait::async_trait]
impl Plugin for ResourceQuotas {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    fn handles(&self, operation: Operation, phase: Phase) -> bool {
        operation == Operation::Create && phase == Phase::Validating
    }

    async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError> {
        let resource = GroupResource::new(&attrs.group, &attrs.resource);
        self.charge_create(ctx, &resource, &attrs.namespace, &attrs.name)
            .await
    }
}

impl ResourceQuotas {
    /// Charges a create of `name` to the quotas of `namespace`.
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
        for attempt in 0..RETRIES {
            // The first look trusts the watch; after a conflict, only a live
            // read will do.
            let known = if attempt == 0 {
                self.known(namespace)
            } else {
                None
            };
            let quotas = match known {
                Some(quotas) => quotas,
                None => self.look_up(namespace).await?,
            };
            let quotas: Vec<ResourceQuota> = quotas
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
                    Ok(written) => {
                        charged.insert(quota.metadata.uid.clone());
                        self.wrote(written);
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
