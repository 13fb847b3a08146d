//! The process's own metric families, kept as kube's components keep theirs:
//! one registry for the process (k8s.io/component-base's `legacyregistry`),
//! which any layer writes to without knowing who serves it. Names and labels
//! are kube's where kube has the series (client-go's `workqueue_*`, the
//! apiserver's `apiserver_watch_cache_*`), ours (`storage_transfer_*`) for
//! what only this server does.
//!
//! Owns the families and their label sets. Every label value is one of a
//! closed set (a controller's name, a served resource, a step, a mode, an
//! outcome), never a string a client wrote, so no family grows with what
//! tenants do. Series that are counted from the server's state when it is
//! scraped (transfers by phase, leadership, flow control's seats) are the
//! server's, not this module's.
//!
//! The exposition is Prometheus' text format 0.0.4, what kube-apiserver
//! serves to a scraper that does not ask for protobuf.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// client-go's work queue latency buckets: 10 ns to 10 s by powers of ten.
const QUEUE_BUCKETS: &[f64] = &[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0];

/// A step of the rebind protocol or a claim's lifecycle: a few milliseconds
/// (one write) to tens of seconds (waiting on a provisioner).
const STEP_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A whole transfer, from its creation to its end: seconds (both parties
/// ready) to days (an offer waiting for its request).
const TRANSFER_BUCKETS: &[f64] = &[
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0,
];

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn queue_histogram() -> Histogram {
    Histogram::new(QUEUE_BUCKETS.iter().copied())
}

fn step_histogram() -> Histogram {
    Histogram::new(STEP_BUCKETS.iter().copied())
}

fn transfer_histogram() -> Histogram {
    Histogram::new(TRANSFER_BUCKETS.iter().copied())
}

/// A work queue's label: the controller it feeds, as client-go's `name`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: &'static str,
}

/// The work queue families, as client-go's `workqueue` package names them.
#[derive(Debug)]
pub struct Workqueue {
    pub depth: Family<QueueLabels, Gauge>,
    pub adds: Family<QueueLabels, Counter>,
    pub queue_duration: HistogramFamily<QueueLabels>,
    pub work_duration: HistogramFamily<QueueLabels>,
    pub retries: Family<QueueLabels, Counter>,
}

/// One queue's handles on [`Workqueue`]'s families.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    pub depth: Gauge,
    pub adds: Counter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub retries: Counter,
}

impl Workqueue {
    /// The handles of the queue `name`.
    pub fn queue(&self, name: &'static str) -> QueueMetrics {
        let l = QueueLabels { name };
        QueueMetrics {
            depth: self.depth.get_or_create(&l).clone(),
            adds: self.adds.get_or_create(&l).clone(),
            queue_duration: self.queue_duration.get_or_create(&l).clone(),
            work_duration: self.work_duration.get_or_create(&l).clone(),
            retries: self.retries.get_or_create(&l).clone(),
        }
    }
}

/// A watch cache's labels, as kube-apiserver's: the resource it caches (a
/// served kind's, never a client's string).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub group: String,
    pub resource: String,
}

/// The watch cache families kube-apiserver has and ours can fill.
#[derive(Debug)]
pub struct WatchCache {
    /// Events read from storage's watch into the cache.
    pub events_received: Family<ResourceLabels, Counter>,
    /// Events sent to watchers: one per watcher an event reached.
    pub events_dispatched: Family<ResourceLabels, Counter>,
    /// Times the cache was (re)filled from a list.
    pub initializations: Family<ResourceLabels, Counter>,
    /// The resourceVersion the cache is current to.
    pub resource_version: Family<ResourceLabels, Gauge>,
    /// Events the cache keeps for watches that resume.
    pub capacity: Family<ResourceLabels, Gauge>,
}

/// One cache's handles on [`WatchCache`]'s families.
#[derive(Debug, Clone, Default)]
pub struct CacheMetrics {
    pub events_received: Counter,
    pub events_dispatched: Counter,
    pub initializations: Counter,
    pub resource_version: Gauge,
}

impl WatchCache {
    /// The handles of the cache of `group`'s `resource`, whose buffer keeps
    /// `capacity` events.
    pub fn cache(&self, group: &str, resource: &str, capacity: usize) -> CacheMetrics {
        let l = ResourceLabels {
            group: group.to_owned(),
            resource: resource.to_owned(),
        };
        self.capacity.get_or_create(&l).set(count(capacity));
        CacheMetrics {
            events_received: self.events_received.get_or_create(&l).clone(),
            events_dispatched: self.events_dispatched.get_or_create(&l).clone(),
            initializations: self.initializations.get_or_create(&l).clone(),
            resource_version: self.resource_version.get_or_create(&l).clone(),
        }
    }
}

/// How a transfer moves its volume.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Mode {
    Move,
    Clone,
}

/// What a transfer's source is.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum SourceKind {
    PersistentVolumeClaim,
    VolumeSnapshot,
}

/// How a transfer ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransferLabels {
    pub mode: Mode,
    pub kind: SourceKind,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// The step's name, from the controller's closed set of steps.
    pub step: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

/// What only this server does: transfers, their steps, and the writes a
/// fence stopped.
#[derive(Debug)]
pub struct Transfers {
    /// From a transfer's creation to its end, once per transfer object
    /// that ends, by mode, source kind and outcome.
    pub duration: HistogramFamily<TransferLabels>,
    /// How long each step's writes took, by step.
    pub step_duration: HistogramFamily<StepLabels>,
    /// Writes refused because the replica making them no longer held the
    /// lease it started them under (the fence did its job).
    pub fenced_writes: Family<ControllerLabels, Counter>,
}

impl Transfers {
    /// Records that a step's writes took `took`.
    pub fn step(&self, step: &'static str, took: Duration) {
        self.step_duration
            .get_or_create(&StepLabels { step })
            .observe(took.as_secs_f64());
    }
}

/// The process's families, and the registry they are encoded from.
#[derive(Debug)]
pub struct Metrics {
    pub workqueue: Workqueue,
    pub watch_cache: WatchCache,
    pub transfers: Transfers,
    registry: Registry,
}

impl Metrics {
    fn new() -> Self {
        let workqueue = Workqueue {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            retries: Family::default(),
        };
        let watch_cache = WatchCache {
            events_received: Family::default(),
            events_dispatched: Family::default(),
            initializations: Family::default(),
            resource_version: Family::default(),
            capacity: Family::default(),
        };
        let transfers = Transfers {
            duration: Family::new_with_constructor(transfer_histogram),
            step_duration: Family::new_with_constructor(step_histogram),
            fenced_writes: Family::default(),
        };
        let mut r = Registry::default();
        r.register(
            "workqueue_depth",
            "Current depth of workqueue",
            workqueue.depth.clone(),
        );
        r.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            workqueue.adds.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            workqueue.queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            workqueue.work_duration.clone(),
        );
        r.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            workqueue.retries.clone(),
        );
        r.register(
            "apiserver_watch_cache_events_received",
            "Counter of events received in watch cache broken by resource type",
            watch_cache.events_received.clone(),
        );
        r.register(
            "apiserver_watch_cache_events_dispatched",
            "Counter of events dispatched in watch cache broken by resource type",
            watch_cache.events_dispatched.clone(),
        );
        r.register(
            "apiserver_watch_cache_initializations",
            "Counter of watch cache initializations broken by resource type",
            watch_cache.initializations.clone(),
        );
        r.register(
            "apiserver_watch_cache_resource_version",
            "Current resource version of watch cache broken by resource type",
            watch_cache.resource_version.clone(),
        );
        r.register(
            "apiserver_watch_cache_capacity",
            "Total capacity of watch cache broken by resource type",
            watch_cache.capacity.clone(),
        );
        r.register(
            "storage_transfer_transfer_duration_seconds",
            "From a NamespaceTransfer's creation to its end, by mode, source kind and outcome",
            transfers.duration.clone(),
        );
        r.register(
            "storage_transfer_step_duration_seconds",
            "How long each action of the transfer controller took to make its writes, whether they all landed or one was refused",
            transfers.step_duration.clone(),
        );
        r.register(
            "storage_transfer_fenced_writes",
            "Writes refused because the replica making them had lost the lease it started them under",
            transfers.fenced_writes.clone(),
        );
        Self {
            workqueue,
            watch_cache,
            transfers,
            registry: r,
        }
    }

    /// Appends the families in Prometheus' text format.
    pub fn encode(&self, out: &mut String) {
        encode(out, &self.registry);
    }
}

/// Appends `registry`'s families to `out` in Prometheus' text format 0.0.4,
/// which, unlike OpenMetrics, has no end marker, so that the process's and
/// the server's registries can be served one after the other.
pub fn encode(out: &mut String, registry: &Registry) {
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(out, registry);
}

/// A count as a gauge's value: gauges hold an `i64`, and a count past it
/// (never, in practice) shows as the largest one.
pub fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The text of the families `fill` registers: a scrape of one part.
pub fn text(fill: impl FnOnce(&mut Registry)) -> String {
    let mut registry = Registry::default();
    fill(&mut registry);
    let mut out = String::new();
    encode(&mut out, &registry);
    out
}

/// The `Content-Type` of what [`encode`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's families.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

#[cfg(test)]
mod tests;
