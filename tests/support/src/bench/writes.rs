//! What a fleet's run wrote to etcd ([`Fleet::settle`]): once etcd is quiet
//! again after [`Fleet::request_all`], every write since the run's first
//! request, per pair and by the kind of key, read back from etcd's own
//! history. The scale benchmark reports it; it owns the etcd client that
//! reads that history.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::scenario::many::{revision, Fleet, Run};
use crate::ControlPlane;

/// How many etcd writes a window of [`QUIET_WINDOW`] may see with the
/// control plane idle (its components renew their leases every 2 to 10 s).
const QUIET_WRITES: u64 = 4;
const QUIET_WINDOW: Duration = Duration::from_secs(2);

/// Every write the fleet caused, counted once etcd is quiet again: those
/// made after the last completion too (Events still queued, pvc-protection
/// letting the source claims go).
#[derive(Debug, Clone)]
pub struct Settled {
    /// etcd writes (revisions) per pair, from the first request until quiet.
    pub writes_per_pair: f64,
    /// How long after the last completion etcd was quiet.
    pub after: Duration,
    /// The keys those writes put or deleted, per pair, by kind (see
    /// `key_kind`), most first; empty when etcd compacted the run's
    /// history before it was read.
    pub keys_per_pair: Vec<(String, f64)>,
}

impl Fleet {
    /// Waits, up to `timeout`, until etcd is quiet after `run` (no more
    /// than `QUIET_WRITES` writes in each of two `QUIET_WINDOW`s in a
    /// row: the control plane's leases), then counts every write since the
    /// run's first request, by kind.
    pub fn settle(&self, cp: &ControlPlane, run: &Run, timeout: Duration) -> Settled {
        let k = cp.kubectl();
        let started = Instant::now();
        let (mut before, mut quiet) = (revision(k), 0);
        while quiet < 2 && started.elapsed() < timeout {
            std::thread::sleep(QUIET_WINDOW);
            let now = revision(k);
            quiet = if now - before <= QUIET_WRITES {
                quiet + 1
            } else {
                0
            };
            before = now;
        }
        let (first, _) = run.revisions;
        let pairs = self.pairs.len() as f64;
        let mut keys_per_pair: Vec<(String, f64)> = keys_written(&cp.etcd_url, first, before)
            .into_iter()
            .map(|(kind, n)| (kind, n as f64 / pairs))
            .collect();
        keys_per_pair.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Settled {
            writes_per_pair: before.saturating_sub(first) as f64 / pairs,
            after: started.elapsed(),
            keys_per_pair,
        }
    }
}

/// The keys etcd put or deleted after revision `after` up to `until`, by
/// `key_kind`, read from etcd's history with a watch; empty if etcd
/// compacted that history first (kube-apiserver compacts every 5 minutes).
/// With `BENCH_KEYS_LOG=path`, each write is also logged there in order
/// (revision, put or delete, key, and the phase and steps of our objects),
/// to name the writes of a small fleet one by one.
fn keys_written(etcd_url: &str, after: u64, until: u64) -> HashMap<String, u64> {
    use std::io::Write as _;
    let mut log = std::env::var_os("BENCH_KEYS_LOG")
        .map(|p| std::io::BufWriter::new(std::fs::File::create(p).unwrap()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut counts = HashMap::new();
        let client = etcd_client::Client::connect([etcd_url], None)
            .await
            .unwrap();
        let mut stream = client
            .watch_client()
            // A response batches up to a thousand revisions' events.
            .max_decoding_message_size(256 << 20)
            .watch(
                vec![0u8],
                Some(
                    etcd_client::WatchOptions::new()
                        .with_from_key()
                        .with_start_revision(after as i64 + 1),
                ),
            )
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while let Ok(Some(r)) = tokio::time::timeout_at(deadline.into(), stream.message())
            .await
            .unwrap_or(Ok(None))
        {
            if r.compact_revision() > 0 || r.canceled() {
                return HashMap::new();
            }
            // One revision's keys (a transaction's) come in one response:
            // count all of them, then stop once `until` is reached.
            let mut reached = false;
            for e in r.events() {
                let Some(kv) = e.kv() else { continue };
                let revision = kv.mod_revision() as u64;
                if revision > until {
                    return counts;
                }
                let key = String::from_utf8_lossy(kv.key());
                if let Some(log) = log.as_mut() {
                    let what = serde_json::from_slice::<Value>(kv.value())
                        .map(|v| {
                            let steps: Vec<&str> = v["status"]["steps"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|s| s["name"].as_str())
                                .collect();
                            format!(
                                "{} {:?} finalizers {}",
                                v["status"]["phase"].as_str().unwrap_or("-"),
                                steps,
                                v["metadata"]["finalizers"]
                            )
                        })
                        .unwrap_or_default();
                    let verb = if e.event_type() == etcd_client::EventType::Delete {
                        "delete"
                    } else {
                        "put"
                    };
                    writeln!(log, "{revision} {verb} {key} {what}").unwrap();
                }
                *counts.entry(key_kind(&key)).or_insert(0) += 1;
                reached |= revision == until;
            }
            if reached {
                return counts;
            }
        }
        counts
    })
}

/// What an etcd key holds: the resource under kube's `/registry/` prefix
/// (`persistentvolumeclaims`, `events`, `leases`…), with its group when it
/// has one (`storage.transfer.k8s.io/namespacetransfers`).
fn key_kind(key: &str) -> String {
    let rest = key.strip_prefix("/registry/").unwrap_or(key);
    let mut parts = rest.split('/');
    match (parts.next(), parts.next()) {
        (Some(group), Some(resource)) if group.contains('.') => format!("{group}/{resource}"),
        (Some(resource), _) => resource.to_owned(),
        _ => key.to_owned(),
    }
}
