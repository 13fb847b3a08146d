//! `/metrics` in the Prometheus text format: request counts by verb, resource
//! and code, and request latency histograms, named as kube-apiserver names
//! them (`apiserver_request_total`, `apiserver_request_duration_seconds`).
//!
//! A small hand-rolled registry: a handful of series behind one mutex, which
//! is cheap next to a TLS request. The server's own gauges (the SAR cache,
//! leadership, transfers by phase, open connections) are written here too,
//! from figures the server reads; audit and flow control write the series
//! of what they count themselves.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, Role, TransferMode,
};
use crate::endpoints::request::RequestInfo;
use crate::review_cache::CacheStats;

/// Latency buckets in seconds, a subset of kube-apiserver's.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
    60.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

/// The labels of one request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
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
                verb: info.method.as_str().to_owned(),
                resource: String::new(),
                subresource: String::new(),
            },
        }
    }
}

#[derive(Debug, Default)]
struct Series {
    total: BTreeMap<(RequestLabels, u16), u64>,
    duration: BTreeMap<RequestLabels, Histogram>,
}

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    series: Mutex<Series>,
}

impl Metrics {
    /// Records one finished request. Watches are counted but, as in kube,
    /// kept out of the latency histogram: they are long-running by design.
    pub fn observe(&self, labels: RequestLabels, code: u16, elapsed: Duration) {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let watch = labels.verb == "WATCH";
        *series.total.entry((labels.clone(), code)).or_default() += 1;
        if !watch {
            series
                .duration
                .entry(labels)
                .or_default()
                .observe(elapsed.as_secs_f64());
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, group, version, resource and HTTP response code.\n# TYPE apiserver_request_total counter"
        );
        for ((l, code), n) in &series.total {
            let _ = writeln!(
                out,
                "apiserver_request_total{{{},code=\"{code}\"}} {n}",
                labels(l)
            );
        }
        let _ = writeln!(
            out,
            "# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb, resource and subresource.\n# TYPE apiserver_request_duration_seconds histogram"
        );
        for (l, h) in &series.duration {
            let base = labels(l);
            for (le, count) in BUCKETS.iter().zip(&h.counts) {
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_bucket{{{base},le=\"{le}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_bucket{{{base},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_sum{{{base}}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "apiserver_request_duration_seconds_count{{{base}}} {}",
                h.count
            );
        }
        out
    }
}

/// `storage_transfer_authorization_cache_total{result}`.
pub fn authorization_cache(stats: CacheStats) -> String {
    format!(
        "# HELP storage_transfer_authorization_cache_total SubjectAccessReview answers by where they came from.\n# TYPE storage_transfer_authorization_cache_total counter\nstorage_transfer_authorization_cache_total{{result=\"hit\"}} {}\nstorage_transfer_authorization_cache_total{{result=\"miss\"}} {}\nstorage_transfer_authorization_cache_total{{result=\"refused\"}} {}\n",
        stats.hits, stats.misses, stats.refused
    )
}

/// `storage_transfer_leader`: whether this replica leads the controllers.
pub fn leader(is_leader: bool) -> String {
    format!(
        "# HELP storage_transfer_leader Whether this replica leads the controllers (1) or not (0).\n# TYPE storage_transfer_leader gauge\nstorage_transfer_leader {}\n",
        u8::from(is_leader)
    )
}

/// `storage_transfer_open_connections`.
pub fn open_connections(open: usize) -> String {
    format!(
        "# HELP storage_transfer_open_connections Client connections open now.\n# TYPE storage_transfer_open_connections gauge\nstorage_transfer_open_connections {open}\n"
    )
}

/// `storage_transfer_namespace_transfers{phase}`: how many of `transfers`
/// are in each phase; and `storage_transfer_clones{phase}`: the Clone-mode
/// transfers among them, counted once per clone on the side that receives
/// it (a standing offer has one object for many clones, each request one),
/// so that Completed, Failed and Cancelled are the clones' outcomes.
pub fn transfers_by_phase<'a>(
    transfers: impl Iterator<Item = &'a NamespaceTransfer> + Clone,
) -> String {
    let phases = [
        Phase::Pending,
        Phase::WaitingForPeer,
        Phase::WaitingForRelease,
        Phase::Rebinding,
        Phase::Completed,
        Phase::Failed,
        Phase::Cancelled,
    ];
    let phase_of = |t: &NamespaceTransfer| t.status.as_ref().and_then(|s| s.phase);
    let mut text = String::from(
        "# HELP storage_transfer_namespace_transfers NamespaceTransfers by phase.\n# TYPE storage_transfer_namespace_transfers gauge\n",
    );
    for phase in phases {
        let count = transfers
            .clone()
            .filter(|t| phase_of(t) == Some(phase))
            .count();
        let _ = writeln!(
            text,
            "storage_transfer_namespace_transfers{{phase=\"{phase}\"}} {count}"
        );
    }
    text.push_str(
        "# HELP storage_transfer_clones Clone-mode transfers by phase, once per clone.\n# TYPE storage_transfer_clones gauge\n",
    );
    for phase in phases {
        let count = transfers
            .clone()
            .filter(|t| t.mode() == TransferMode::Clone)
            .filter(|t| matches!(t.role(), Ok(Role::Destination | Role::Both)))
            .filter(|t| phase_of(t) == Some(phase))
            .count();
        let _ = writeln!(text, "storage_transfer_clones{{phase=\"{phase}\"}} {count}");
    }
    text
}

fn labels(l: &RequestLabels) -> String {
    let group = if l.resource.is_empty() {
        ""
    } else {
        crate::api::GROUP
    };
    let version = if l.resource.is_empty() {
        ""
    } else {
        crate::api::VERSION
    };
    format!(
        "verb=\"{}\",group=\"{group}\",version=\"{version}\",resource=\"{}\",subresource=\"{}\"",
        escape(&l.verb),
        escape(&l.resource),
        escape(&l.subresource)
    )
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests;
