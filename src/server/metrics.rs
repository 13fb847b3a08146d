//! `/metrics`: what the server counts itself, and what it reads from its
//! state when it is scraped, in the Prometheus text format with
//! `prometheus-client`; the process's families ([`crate::metrics`]: work
//! queues, watch caches, transfer and step durations, fenced writes) are
//! served with them.
//!
//! Counted here, named as kube-apiserver names them: requests by verb,
//! resource and code (`apiserver_request_total`), and their latency
//! (`apiserver_request_duration_seconds`). Read from the server's state at
//! each scrape ([`Scrape`]): the SAR cache, leadership, open connections,
//! transfers by phase, the transfers that wait by reason, the oldest
//! transfer in each phase, and each standing offer's clones against its
//! `maxClones` (the [`MAX_OFFERS_SHOWN`] nearest their limit: offers are
//! tenants' objects, so the family is bounded however many there are).
//! Flow control and audit add their own parts to the [`Scrape`].
//!
//! Every label value is one of a closed set: a verb, a served resource, an
//! HTTP code, a phase, a reason of the API's vocabulary; only the offers'
//! namespace and name come from tenants, and there are at most
//! [`MAX_OFFERS_SHOWN`] of them.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::api::namespace_transfer::{
    reason::TransferReason, NamespaceTransfer, NamespaceTransferPhase as Phase, Role, TransferMode,
    TransferStepName as StepName, CONDITION_READY,
};
use crate::endpoints::request::RequestInfo;
use crate::review_cache::CacheStats;

/// Latency buckets in seconds, a subset of kube-apiserver's.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
    60.0,
];

/// How many standing offers `storage_transfer_offer_clones` shows: those
/// nearest their `maxClones`.
pub const MAX_OFFERS_SHOWN: usize = 20;

/// The labels of one request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestLabels {
    /// Upper-case verb: GET, LIST, WATCH, POST, PUT, PATCH, DELETE,
    /// DELETECOLLECTION, or the HTTP method for non-resource paths.
    pub verb: String,
    /// Empty for non-resource requests.
    pub resource: String,
    pub subresource: String,
}

impl RequestLabels {
    /// A request's labels: its verb, resource and subresource when it names
    /// one of ours, else its HTTP method.
    pub fn of(info: &RequestInfo) -> Self {
        match info.resource() {
            Some(r) => Self {
                verb: r.verb.as_str().to_ascii_uppercase(),
                resource: r.resource.plural.to_owned(),
                subresource: if r.status {
                    "status".to_owned()
                } else {
                    String::new()
                },
            },
            None => Self {
                verb: method_label(&info.method).to_owned(),
                resource: String::new(),
                subresource: String::new(),
            },
        }
    }
}

/// The `verb` of a request that names none of our resources: its method if
/// it is one of HTTP's, else `OTHER`, as kube-apiserver labels it. A client
/// may send any token as a method, and each would be a series of its own.
fn method_label(method: &http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "OTHER",
    }
}

/// The labels of `apiserver_request_duration_seconds`, in kube's order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestSeries {
    verb: String,
    group: &'static str,
    version: &'static str,
    resource: String,
    subresource: String,
}

/// The labels of `apiserver_request_total`: a request's, and its code.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CodeSeries {
    #[prometheus(flatten)]
    request: RequestSeries,
    code: u16,
}

impl RequestSeries {
    fn of(l: RequestLabels) -> Self {
        let ours = !l.resource.is_empty();
        Self {
            verb: l.verb,
            group: if ours { crate::api::GROUP } else { "" },
            version: if ours { crate::api::VERSION } else { "" },
            resource: l.resource,
            subresource: l.subresource,
        }
    }
}

fn latency() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

/// The server's request metrics.
#[derive(Debug)]
pub struct Metrics {
    total: Family<CodeSeries, Counter>,
    duration: Family<RequestSeries, Histogram, fn() -> Histogram>,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let total = Family::<CodeSeries, Counter>::default();
        let duration: Family<RequestSeries, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency);
        let mut registry = Registry::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, group, version, resource and HTTP response code",
            total.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, resource and subresource",
            duration.clone(),
        );
        Self {
            total,
            duration,
            registry,
        }
    }
}

impl Metrics {
    /// Records one finished request. Watches are counted but, as in kube,
    /// kept out of the latency histogram: they are long-running by design.
    pub fn observe(&self, labels: RequestLabels, code: u16, elapsed: Duration) {
        let watch = labels.verb == "WATCH";
        let request = RequestSeries::of(labels);
        if !watch {
            self.duration
                .get_or_create(&request)
                .observe(elapsed.as_secs_f64());
        }
        self.total
            .get_or_create(&CodeSeries { request, code })
            .inc();
    }

    /// The request series in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        crate::metrics::encode(&mut out, &self.registry);
        out
    }
}

/// What one scrape reads from the server's state, gathered into a registry
/// of its own that lives as long as the scrape.
#[derive(Debug, Default)]
pub struct Scrape {
    registry: Registry,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OfferLabels {
    namespace: String,
    offer: String,
}

/// The phases a transfer can be in, in the order they are shown.
const PHASES: [Phase; 7] = [
    Phase::Pending,
    Phase::WaitingForPeer,
    Phase::WaitingForRelease,
    Phase::Rebinding,
    Phase::Completed,
    Phase::Failed,
    Phase::Cancelled,
];

impl Scrape {
    pub fn new() -> Self {
        Self::default()
    }

    /// The registry a part of the server adds its own scraped series to.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// `storage_transfer_authorization_cache_total{result}`.
    pub fn authorization_cache(&mut self, stats: CacheStats) {
        let family = Family::<ResultLabel, Counter>::default();
        for (result, n) in [
            ("hit", stats.hits),
            ("miss", stats.misses),
            ("refused", stats.refused),
        ] {
            family.get_or_create(&ResultLabel { result }).inc_by(n);
        }
        self.registry.register(
            "storage_transfer_authorization_cache",
            "SubjectAccessReview answers by where they came from",
            family,
        );
    }

    /// `storage_transfer_leader`: whether this replica leads the controllers.
    pub fn leader(&mut self, is_leader: bool) {
        self.gauge(
            "storage_transfer_leader",
            "Whether this replica leads the controllers (1) or not (0)",
            i64::from(is_leader),
        );
    }

    /// `storage_transfer_open_connections`.
    pub fn open_connections(&mut self, open: usize) {
        self.gauge(
            "storage_transfer_open_connections",
            "Client connections open now",
            crate::metrics::count(open),
        );
    }

    /// A gauge without labels, set to `value`.
    pub fn gauge(&mut self, name: &str, help: &str, value: i64) {
        let gauge = Gauge::<i64>::default();
        gauge.set(value);
        self.registry.register(name, help, gauge);
    }

    /// The transfer series, from every transfer the server stores, read at
    /// `now` (seconds since the epoch):
    /// - `storage_transfer_namespace_transfers{phase}`: how many are in each
    ///   phase;
    /// - `storage_transfer_clones{phase}`: the Clone-mode transfers among
    ///   them, counted once per clone on the side that receives it (a
    ///   standing offer has one object for many clones, each request one),
    ///   so that Completed, Failed and Cancelled are the clones' outcomes;
    /// - `storage_transfer_transfers_waiting{reason}`: the transfers that
    ///   have not ended, by the reason of their Ready condition;
    /// - `storage_transfer_oldest_transfer_age_seconds{phase}`: the age,
    ///   since its creation, of the oldest transfer in each phase that has
    ///   not ended;
    /// - `storage_transfer_rebinding_seconds`: how long the transfer that
    ///   has been Rebinding longest has been, since its Locked step (R1),
    ///   when Rebinding starts; 0 when none is;
    /// - `storage_transfer_offer_clones{namespace,offer}` and
    ///   `storage_transfer_offer_max_clones{namespace,offer}`: each standing
    ///   offer's clones alive and its `maxClones`, for the
    ///   [`MAX_OFFERS_SHOWN`] offers nearest their limit, and
    ///   `storage_transfer_offers`: how many offers stand in all.
    pub fn transfers<'a>(
        &mut self,
        transfers: impl Iterator<Item = &'a NamespaceTransfer> + Clone,
        now: i64,
    ) {
        let phase_of = |t: &NamespaceTransfer| t.status.as_ref().and_then(|s| s.phase);
        let by_phase = Family::<PhaseLabel, Gauge>::default();
        let clones = Family::<PhaseLabel, Gauge>::default();
        let oldest = Family::<PhaseLabel, Gauge>::default();
        let waiting = Family::<ReasonLabel, Gauge>::default();
        for phase in PHASES {
            let label = PhaseLabel {
                phase: phase.as_str(),
            };
            by_phase.get_or_create(&label).set(0);
            clones.get_or_create(&label).set(0);
        }
        let mut offers = Vec::new();
        let mut rebinding = 0;
        for t in transfers {
            let Some(phase) = phase_of(t) else {
                continue;
            };
            let label = PhaseLabel {
                phase: phase.as_str(),
            };
            by_phase.get_or_create(&label).inc();
            if t.mode() == TransferMode::Clone
                && matches!(t.role(), Ok(Role::Destination | Role::Both))
            {
                clones.get_or_create(&label).inc();
            }
            if phase.is_finished() {
                continue;
            }
            waiting
                .get_or_create(&ReasonLabel {
                    reason: waiting_reason(t),
                })
                .inc();
            if phase == Phase::Rebinding {
                let locked = t
                    .status
                    .as_ref()
                    .and_then(|s| s.steps.iter().find(|s| s.name == StepName::Locked))
                    .map(|s| &s.time)
                    .or(t.metadata.creation_timestamp.as_ref());
                if let Some(locked) = locked {
                    rebinding = rebinding.max(now.saturating_sub(locked.0.as_second()));
                }
            }
            if let Some(created) = &t.metadata.creation_timestamp {
                let age = now.saturating_sub(created.0.as_second()).max(0);
                let gauge = oldest.get_or_create(&label);
                if age > gauge.get() {
                    gauge.set(age);
                }
            }
            if let (Some(max), Some(counts)) = (
                t.max_clones(),
                t.status.as_ref().and_then(|s| s.clones.as_ref()),
            ) {
                offers.push((t, counts.alive, i64::from(max)));
            }
        }
        let standing = offers.len();
        // The offers nearest their limit first, then by name, so that which
        // are shown does not change from scrape to scrape at a tie.
        offers.sort_by(|(a, a_alive, a_max), (b, b_alive, b_max)| {
            let nearer = (i128::from(*b_alive) * i128::from(*a_max.max(&1)))
                .cmp(&(i128::from(*a_alive) * i128::from(*b_max.max(&1))));
            nearer.then_with(|| {
                (&a.metadata.namespace, &a.metadata.name)
                    .cmp(&(&b.metadata.namespace, &b.metadata.name))
            })
        });
        let alive = Family::<OfferLabels, Gauge>::default();
        let limit = Family::<OfferLabels, Gauge>::default();
        for (t, n, max) in offers.into_iter().take(MAX_OFFERS_SHOWN) {
            let label = OfferLabels {
                namespace: t.metadata.namespace.clone().unwrap_or_default(),
                offer: t.metadata.name.clone().unwrap_or_default(),
            };
            alive.get_or_create(&label).set(n);
            limit.get_or_create(&label).set(max);
        }
        let r = &mut self.registry;
        r.register(
            "storage_transfer_namespace_transfers",
            "NamespaceTransfers by phase",
            by_phase,
        );
        r.register(
            "storage_transfer_clones",
            "Clone-mode transfers by phase, once per clone",
            clones,
        );
        r.register(
            "storage_transfer_transfers_waiting",
            "NamespaceTransfers that have not ended, by the reason of their Ready condition",
            waiting,
        );
        r.register(
            "storage_transfer_oldest_transfer_age_seconds",
            "Age of the oldest NamespaceTransfer in each phase, of those that have not ended",
            oldest,
        );
        r.register(
            "storage_transfer_offer_clones",
            "Clones alive under a standing clone offer, for the offers nearest their maxClones",
            alive,
        );
        r.register(
            "storage_transfer_offer_max_clones",
            "A standing clone offer's maxClones, for the offers nearest it",
            limit,
        );
        self.gauge(
            "storage_transfer_rebinding_seconds",
            "How long the NamespaceTransfer Rebinding longest has been, since its Locked step",
            rebinding,
        );
        self.gauge(
            "storage_transfer_offers",
            "Standing clone offers, shown or not",
            crate::metrics::count(standing),
        );
    }

    /// The whole scrape: the process's families, the server's request
    /// series, then this scrape's.
    pub fn render(&self, requests: &Metrics) -> String {
        let mut out = requests.render();
        crate::metrics::global().encode(&mut out);
        crate::metrics::encode(&mut out, &self.registry);
        out
    }
}

/// Why a transfer that has not ended waits: its Ready condition's reason,
/// when it is one of the API's (anything else counts as `Unknown`, so that
/// the label stays a closed set).
fn waiting_reason(t: &NamespaceTransfer) -> &'static str {
    t.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY))
        .and_then(|c| TransferReason::parse(&c.reason))
        .map_or("Unknown", TransferReason::as_str)
}

#[cfg(test)]
mod tests;
