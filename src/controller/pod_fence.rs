//! The pod fence: a fresh view of a namespace's pods without waiting on
//! kube-apiserver's watch-cache progress ticker.
//!
//! Owns the fence pod's writes and the rule deciding which in-use checks one
//! write serves. The in-use checks (DESIGN §2.1.4) must see every pod created
//! before they were asked. A consistent LIST (no resourceVersion) does, but
//! kube-apiserver answers it from its pod watch cache only once that cache
//! has caught up with etcd's current revision, and in a namespace where no
//! pod changed it learns that only from a progress notification it requests
//! at most every 100 ms: up to 100 ms per check, and a transfer makes one
//! before protecting its objects, the lock, R2, R4 and R5.
//!
//! A fence is a write to one pod of the server's own (the fence pod: gated,
//! never scheduled, holding nothing): a merge patch of one annotation. etcd
//! gives that write a revision `F` later than every write committed before
//! it was sent, among them every pod created before the check asked. A LIST
//! with `resourceVersion=F&resourceVersionMatch=NotOlderThan` is then served
//! from a cache at least as fresh as `F`: the same guarantee as a consistent
//! LIST, and the pod cache reaches `F` as soon as the fence's own watch
//! event arrives (a millisecond or so), not at the next progress tick.
//!
//! Checks asked while a fence write is in flight share the next one (group
//! commit): one write serves every check that arrived before it was sent,
//! never one that arrived after ([`GroupCommit`]). Without a fence pod (not
//! installed, or the server may not patch it) the checks fall back to the
//! consistent LIST, which is as safe and only slower.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::Api;
use tokio::sync::Mutex;

use super::cluster::ClusterError;

/// The annotation each fence write changes (a write that changes nothing is
/// not written, and gets no new revision).
pub const ANNOTATION_FENCE: &str = "storage.transfer.k8s.io/fence";

/// How long one fence write may take. The checks that arrive meanwhile wait
/// behind it, so a write that stalls (an overloaded or partitioned
/// kube-apiserver) must not hold them for the client's whole timeout.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Group commit of fence writes: arrival tickets and the outcome of the
/// last write, with the rule for which arrivals that outcome serves. Generic
/// over the write, so that its rule is tested without a cluster.
#[derive(Debug, Default)]
pub struct GroupCommit {
    next: AtomicU64,
    last: Mutex<Option<Last>>,
}

/// The last write's outcome: `Some(revision)`, or `None` for "no usable
/// fence", and the bound of the tickets it serves.
#[derive(Debug, Clone)]
struct Last {
    bound: u64,
    outcome: Option<String>,
}

/// Whether a write sent when the next ticket was `bound` serves the check
/// holding `ticket`: only if that check arrived before the write was sent,
/// so that the write's revision is later than every write committed before
/// the check asked.
pub fn serves(bound: u64, ticket: u64) -> bool {
    ticket < bound
}

impl GroupCommit {
    /// The outcome of a write sent after this call arrived: the last one, if
    /// it was, or a new one made with `write` (given the bound it serves).
    /// Writes run one at a time; every check that arrives while one is in
    /// flight is served by the next. An `Err` is not shared: the next check
    /// writes again.
    pub async fn run<F, Fut, E>(&self, write: F) -> Result<Option<String>, E>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future<Output = Result<Option<String>, E>>,
    {
        let ticket = self.next.fetch_add(1, Ordering::SeqCst);
        let mut last = self.last.lock().await;
        if let Some(done) = last.as_ref().filter(|l| serves(l.bound, ticket)) {
            return Ok(done.outcome.clone());
        }
        let bound = self.next.load(Ordering::SeqCst);
        let outcome = write(bound).await?;
        *last = Some(Last {
            bound,
            outcome: outcome.clone(),
        });
        Ok(outcome)
    }
}

/// The fence pod `namespace/name`, written through the server's own client.
pub struct PodFence {
    pods: Api<Pod>,
    namespace: String,
    name: String,
    commits: GroupCommit,
    /// Whether the fence was found missing or refused (said once in the log;
    /// the consistent LIST is used until a write succeeds again).
    unusable: AtomicBool,
}

impl std::fmt::Debug for PodFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodFence")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PodFence {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Arc<Self> {
        Arc::new(PodFence {
            pods: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            commits: GroupCommit::default(),
            unusable: AtomicBool::new(false),
        })
    }

    /// A revision at least as late as every write committed before this
    /// call, from a fence write sent after it arrived. `Ok(None)` when there
    /// is no usable fence: the caller then reads consistently.
    pub async fn revision(&self) -> Result<Option<String>, ClusterError> {
        self.commits.run(|bound| self.write(bound)).await
    }

    /// One fence write: a merge patch of [`ANNOTATION_FENCE`] to a value this
    /// process never wrote before; its new resourceVersion, or `None` when
    /// the fence pod is missing or the server may not patch it.
    async fn write(&self, bound: u64) -> Result<Option<String>, ClusterError> {
        let stamp = format!(
            "{}-{bound}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        );
        let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION_FENCE: stamp}}});
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let write = self.pods.patch(&self.name, &params, &patch);
        let Ok(written) = tokio::time::timeout(WRITE_TIMEOUT, write).await else {
            // Every check waits behind this write: one that stalls is given
            // up, and the checks it serves list consistently.
            tracing::warn!(
                namespace = %self.namespace,
                name = %self.name,
                timeout = ?WRITE_TIMEOUT,
                "a pod fence write took too long; the checks waiting on it read pods consistently"
            );
            return Ok(None);
        };
        match written {
            Ok(pod) => {
                if self.unusable.swap(false, Ordering::SeqCst) {
                    tracing::info!(namespace = %self.namespace, name = %self.name, "the pod fence is usable again");
                }
                Ok(pod.metadata.resource_version)
            }
            // Missing, or not this server's to patch (RBAC, an admission
            // policy): no fence, whichever refused it. Not retried as the
            // controllers' other 403s are, since the consistent LIST needs
            // none of it.
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404 | 422) => {
                if !self.unusable.swap(true, Ordering::SeqCst) {
                    tracing::warn!(
                        namespace = %self.namespace,
                        name = %self.name,
                        message = %status.message,
                        "the pod fence cannot be written; in-use checks read pods consistently instead (as safe, up to 100 ms slower each)"
                    );
                }
                Ok(None)
            }
            Err(e) => Err(ClusterError::from(e)),
        }
    }
}

#[cfg(test)]
mod tests;
