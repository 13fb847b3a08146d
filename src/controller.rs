//! The reconcilers: the NamespaceTransfer rebind protocol and the
//! EphemeralClaim life cycle. They act on our objects through `registry`, and
//! on core objects (PVs, PVCs, pods) through kube-rs with the server's
//! ServiceAccount, only while this replica holds the etcd election.
//!
//! Owns the controllers' lifecycle: the election ([`leader`]), and for each
//! controller its triggers that say which object to look at ([`watch`],
//! [`claim::watch`]), its work queue ([`queue`]) and its workers. Both share
//! one term of leadership. What a reconcile does lives in [`transfer`] and
//! [`claim`].

pub mod claim;
pub mod cluster;
pub mod events;
pub mod fault;
pub mod leader;
pub mod pod_fence;
pub mod queue;
pub mod transfer;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::Notify;

use crate::api::errors::ApiError;
use crate::authz::Authorizer;
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, Store};
use claim::ClaimController;
use cluster::{Cluster, ClusterError};
use events::Events;
use leader::{LeaderElection, LeaderStatus, Leadership, NotLeader};
use queue::WorkQueue;
use transfer::{TransferController, TransferOptions};

/// Why one reconcile stopped short. Every variant is retried with backoff:
/// the next attempt starts again from what it reads.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// etcd refused a write of our objects: it was fenced on this term's
    /// election key, which is gone. The term has ended, whatever the lease
    /// clock says (a lease revoked, or an election key deleted, behind this
    /// replica's back).
    #[error("our storage refused a write: {0}")]
    Fenced(String),
    #[error("kube-apiserver: {0}")]
    Cluster(ClusterError),
    #[error("our storage: {0}")]
    Api(ApiError),
    /// The reconcile ran past [`RECONCILE_TIMEOUT`] and was abandoned.
    #[error("abandoned after {0:?} without an answer")]
    TimedOut(Duration),
}

// The cause is part of the message, not a `source()` as well, so that it is
// printed once.
impl From<ClusterError> for Error {
    fn from(err: ClusterError) -> Self {
        Error::Cluster(err)
    }
}

impl From<ApiError> for Error {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::Fenced(message) => Error::Fenced(message),
            err => Error::Api(err),
        }
    }
}

/// `namespace/name`: the queue key of every controller, and how objects are
/// named in messages.
pub fn object_key<O: crate::api::meta::Object>(o: &O) -> String {
    let m = o.metadata();
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

/// The object `namespace/name` as etcd has it now, or `None` when it is gone
/// (a reconcile of a deleted object has nothing left to do).
///
/// A linearizable read, as a get from etcd would be, served by the store's
/// watch cache once it has caught up with the revision etcd answers after
/// the call (`Store::read`): the copy the cache has already decoded is
/// reused, and reads made side by side share that one revision request.
pub(crate) async fn current<S: crate::registry::Strategy>(
    store: &Store<S>,
    namespace: &str,
    name: &str,
) -> Result<Option<S::Object>, Error> {
    match store.read(namespace, name, None).await {
        Ok(o) => Ok(Some(o.into_owned())),
        Err(ApiError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The object a queue key names, read once leadership is confirmed; `None`
/// when the key is malformed or the object is gone.
pub(crate) async fn keyed<S: crate::registry::Strategy>(
    leadership: &Leadership,
    store: &Store<S>,
    key: &str,
) -> Result<Option<S::Object>, Error> {
    leadership.check()?;
    match key.split_once('/') {
        Some((namespace, name)) => current(store, namespace, name).await,
        None => Ok(None),
    }
}

/// The longest one reconcile may run before its worker abandons it and the
/// key is retried with the failure backoff. A step makes a handful of calls,
/// each answered in well under a second; this bounds what nothing else
/// does, a call that is never answered (kube's client sets no read timeout,
/// and retries 429s and 5xx for minutes on its own), so that no key is held
/// by one attempt past its resync.
///
/// Abandoning a reconcile is safe for the reason a crash or a failover is:
/// each write is conditional and made again or found made on the next look,
/// which reads afresh. What it can leave in memory is also what a new leader
/// starts without: the read cache's expectation of a write whose answer was
/// not awaited (the copy is then trusted as a new leader's would be, against
/// conditional writes).
pub(crate) const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a reconcile asks of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing to do until something changes.
    Done,
    /// Look again at once: a step was taken, or a race was lost.
    Now,
    /// Look again after a while (waiting for a pod, a binding, a deadline).
    After(Duration),
}

impl Next {
    /// The sooner of two answers: a reconcile that does two things looks
    /// again when the first of them needs it.
    pub fn sooner(self, other: Next) -> Next {
        match (self, other) {
            (Next::Now, _) | (_, Next::Now) => Next::Now,
            (Next::After(a), Next::After(b)) => Next::After(a.min(b)),
            (Next::After(a), Next::Done) | (Next::Done, Next::After(a)) => Next::After(a),
            (Next::Done, Next::Done) => Next::Done,
        }
    }
}

/// One controller's reconcile: brings the object named by `key`
/// (`namespace/name`) one step closer to where it should be.
#[async_trait::async_trait]
pub trait Reconciler: Send + Sync {
    async fn reconcile(&self, key: &str) -> Result<Next, Error>;
}

#[async_trait::async_trait]
impl Reconciler for TransferController {
    async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        TransferController::reconcile(self, key).await
    }
}

#[async_trait::async_trait]
impl Reconciler for ClaimController {
    async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        ClaimController::reconcile(self, key).await
    }
}

/// How the controllers run.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// This replica's name in the election and in Events.
    pub identity: String,
    /// The etcd key prefix of the election.
    pub election: String,
    pub lease_ttl: Duration,
    /// The fence pod (`namespace`, `name`) pods are listed at
    /// ([`pod_fence::PodFence`]), if any.
    pub pod_fence: Option<(String, String)>,
    /// Reconciles that run at once, per controller.
    pub workers: usize,
    /// Which controllers run (at least one, or none is started at all).
    pub enabled: EnabledControllers,
    pub transfer: TransferOptions,
}

/// The controllers `--controllers` leaves running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnabledControllers {
    pub transfers: bool,
    pub claims: bool,
}

impl EnabledControllers {
    pub const TRANSFERS: &'static str = "namespacetransfer";
    pub const CLAIMS: &'static str = "ephemeralclaim";

    /// Whether any controller runs.
    pub fn any(&self) -> bool {
        self.transfers || self.claims
    }

    /// Reads `--controllers`: the names are applied in order, so that
    /// `*,-ephemeralclaim` runs only the transfer controller. An empty list
    /// runs none.
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let mut enabled = Self {
            transfers: false,
            claims: false,
        };
        for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
            let (on, name) = match item.strip_prefix('-') {
                Some(name) => (false, name),
                None => (true, item),
            };
            match name {
                "*" if on => {
                    enabled.transfers = true;
                    enabled.claims = true;
                }
                Self::TRANSFERS => enabled.transfers = on,
                Self::CLAIMS => enabled.claims = on,
                _ => {
                    return Err(format!(
                        "unknown controller {item:?}: use '*', {:?} or {:?}, each optionally prefixed with '-'",
                        Self::TRANSFERS,
                        Self::CLAIMS
                    ))
                }
            }
        }
        Ok(enabled)
    }
}

/// Everything the controllers act with.
#[derive(Clone)]
pub struct Dependencies {
    pub transfers: Arc<Store<NamespaceTransferStrategy>>,
    pub claims: Arc<Store<EphemeralClaimStrategy>>,
    pub client: kube::Client,
    pub etcd: etcd_client::Client,
    pub authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for Dependencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dependencies").finish_non_exhaustive()
    }
}

/// The running election: whether this replica leads, and the task to await
/// after stopping it, so that the lease is revoked before the process exits.
#[derive(Debug)]
pub struct Running {
    pub status: LeaderStatus,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the election. The controllers run while this replica leads, and
/// stop when `stop` is notified; on stop a leader revokes its lease, so that
/// another replica takes over at once.
pub fn start(config: ControllerConfig, deps: Dependencies, stop: Arc<Notify>) -> Running {
    let election = LeaderElection::new(
        deps.etcd.clone(),
        config.election.clone(),
        config.identity.clone(),
        config.lease_ttl,
    );
    let status = election.status();
    let task = tokio::spawn(async move {
        let shutdown = async move { stop.notified().await };
        election
            .run(shutdown, |leadership| {
                let (config, deps) = (config.clone(), deps.clone());
                async move { lead(config, deps, leadership).await }
            })
            .await;
    });
    Running { status, task }
}

/// One term as leader: for each controller its triggers, queue and workers,
/// all dropped when the term ends. A controller whose workers stop (they saw
/// the lease lost) ends the term for both.
async fn lead(config: ControllerConfig, deps: Dependencies, leadership: Leadership) {
    tracing::info!(identity = %config.identity, "starting controllers");
    let pod_fence = config
        .pod_fence
        .as_ref()
        .map(|(namespace, name)| pod_fence::PodFence::new(deps.client.clone(), namespace, name));
    let cluster = Cluster::new(deps.client.clone());
    let events = Events::new(deps.client.clone(), &config.identity);
    let ctx = Context {
        user: crate::api::meta::Requester {
            username: format!("system:controller:{}", config.identity),
            ..Default::default()
        },
        dry_run: false,
        writer: crate::registry::Writer::Controller,
        manager: String::new(),
        notes: Default::default(),
        fence: Some(leadership.fence().clone()),
    };

    let transfer_queue = WorkQueue::named("namespacetransfer");
    count_fenced_writes_from_zero(&transfer_queue);
    let transfer_triggers = watch::Triggers::start(
        deps.transfers.clone(),
        deps.client.clone(),
        transfer_queue.clone(),
    );
    // The transfer controller reads claims and volumes from its triggers'
    // copies where they can be trusted (cluster::ReadCache).
    let cached = Cluster::with_cache(
        deps.client.clone(),
        cluster::ReadCache::new(transfer_triggers.claims(), transfer_triggers.volumes()),
    )
    // The in-use checks list pods at a fence's revision; the EphemeralClaim
    // controller's reads stay consistent LISTs (a fence is a write).
    .with_fence(pod_fence);
    let transfers = TransferController::new(
        deps.transfers.clone(),
        cached,
        transfer_triggers.storage_classes(),
        deps.authorizer.clone(),
        events.clone(),
        leadership.clone(),
        transfer_queue.clone(),
        config.transfer.clone(),
        ctx.clone(),
    )
    .with_named_keys(transfer_triggers.named_keys());

    let claim_queue = WorkQueue::named("ephemeralclaim");
    count_fenced_writes_from_zero(&claim_queue);
    let claim_triggers = claim::watch::Triggers::start(
        deps.claims.clone(),
        deps.transfers.clone(),
        deps.client.clone(),
        claim_queue.clone(),
    );
    let claims = ClaimController::new(
        deps.claims.clone(),
        deps.transfers.clone(),
        cluster,
        deps.authorizer.clone(),
        events,
        leadership.clone(),
        ctx,
    );

    // The triggers and workers live exactly as long as this future.
    let _triggers = (transfer_triggers, claim_triggers);
    tokio::select! {
        _ = workers(config.enabled.transfers, config.workers, &transfer_queue, &transfers, &leadership) => {}
        _ = workers(config.enabled.claims, config.workers, &claim_queue, &claims, &leadership) => {}
    }
}

/// A controller's workers, ending when they all stop; a controller that is
/// not enabled has none and never ends.
async fn workers(
    enabled: bool,
    count: usize,
    queue: &WorkQueue,
    controller: &dyn Reconciler,
    leadership: &Leadership,
) {
    if !enabled {
        return std::future::pending().await;
    }
    join_all((0..count.max(1)).map(|_| work(queue, controller, leadership))).await;
}

/// `storage_transfer_fenced_writes_total` of the controller `queue` feeds,
/// counted from 0 from its start, so that a rate over it is 0 rather than
/// no series at all until the first fenced write.
fn count_fenced_writes_from_zero(queue: &WorkQueue) {
    fenced_writes(queue).inc_by(0);
}

/// The fenced-writes counter of the controller `queue` feeds.
fn fenced_writes(queue: &WorkQueue) -> prometheus_client::metrics::counter::Counter {
    crate::metrics::global()
        .transfers
        .fenced_writes
        .get_or_create(&crate::metrics::ControllerLabels {
            controller: queue.name(),
        })
        .clone()
}

/// One worker: takes keys off the queue until it is shut down, or until it
/// sees the term lost. A fenced write ends the term for every worker of
/// both controllers at once: each fails its next check.
async fn work(queue: &WorkQueue, controller: &dyn Reconciler, leadership: &Leadership) {
    while let Some(key) = queue.next().await {
        let reconciled = tokio::time::timeout(RECONCILE_TIMEOUT, controller.reconcile(&key))
            .await
            .unwrap_or(Err(Error::TimedOut(RECONCILE_TIMEOUT)));
        match reconciled {
            Ok(next) => match next {
                Next::Done => queue.progressed(&key),
                Next::Now => {
                    queue.progressed(&key);
                    queue.add(&key);
                }
                Next::After(delay) => {
                    queue.forget(&key);
                    queue.add_paced(&key, delay);
                }
            },
            Err(err @ (Error::NotLeader(_) | Error::Fenced(_))) => {
                if matches!(err, Error::Fenced(_)) {
                    fenced_writes(queue).inc();
                }
                tracing::warn!(%key, error = %err, "stopping: leadership lost");
                leadership.forfeit();
                queue.done(&key);
                queue.shut_down();
                return;
            }
            Err(err @ Error::TimedOut(_)) => {
                tracing::warn!(%key, error = %err, "reconcile abandoned; retrying");
                queue.add_rate_limited(&key);
            }
            Err(err) => {
                tracing::info!(%key, error = %err, "reconcile failed; retrying");
                queue.add_rate_limited(&key);
            }
        }
        queue.done(&key);
    }
}

#[cfg(test)]
mod tests;
