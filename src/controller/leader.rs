//! Leader election for the controllers (DESIGN.md §3, "Scale-out").
//!
//! Every replica runs the controllers, but only the leader may act. Leadership is
//! an etcd election (etcd's `v3election` service) on a lease that this module
//! grants, keeps alive and revokes. It owns that lease and nothing else: it never
//! reads or writes our objects, and it knows nothing about what the controllers do.
//!
//! # How a term's writes are fenced
//!
//! Two guards, one for each kind of object the controllers write:
//!
//! - **Our objects, in etcd: fenced by etcd itself.** Campaigning creates this
//!   replica's election key, attached to the lease; etcd deletes it when the
//!   lease expires or is revoked. [`Leadership::fence`] names that key and its
//!   create revision, and every write of our objects carries it
//!   (`registry::Context::fence`), compared in the write's own transaction. A
//!   write that arrives after the term ended is refused, however long its
//!   writer was paused or the write was delayed on the way: the key it names
//!   cannot exist again with the same create revision.
//! - **Core objects, through kube-apiserver: a lease clock, then optimistic
//!   concurrency.** kube-apiserver cannot compare our election key, so
//!   [`Leadership::check`] comes right before each step's writes. etcd
//!   expires a lease no earlier than `TTL` after it *received* the last
//!   keep-alive, which is after we *sent* it. So when the answer to a
//!   keep-alive sent at `t` grants `TTL`, the lease is live at least until
//!   `t + TTL`, whether or not any later keep-alive gets through. `check`
//!   answers `Ok` only before `t + TTL − margin` (the margin absorbs
//!   clock-rate drift and the time between the check and the write reaching
//!   its server), and the election only makes a replica leader once the
//!   previous leader's key is deleted, which for an expired lease happens
//!   after `t + TTL`. Hence a stalled or partitioned leader stops passing
//!   checks before anyone else can be elected, without hearing from etcd.
//!   Past the deadline the term ends, and the controllers' futures are
//!   dropped the next time the term's task runs (its first branch is the
//!   deadline).
//!
//! A term also ends before its deadline when etcd no longer holds its key:
//! this module watches the key and forfeits the term as soon as it is
//! deleted (a lease revoked behind our back, a key deleted by hand), and a
//! controller whose write is refused by its fence forfeits it too
//! ([`Leadership::forfeit`]). Until the watch reports, which takes a round
//! trip to etcd, `check` may still pass in such a term: writes of our
//! objects are refused by the fence, writes of core objects are not.
//!
//! What `check` cannot cover, for core objects: a write that passed it and
//! was then delayed past the deadline (the process paused between the check
//! and the send, or the request held up on the way). Most such writes (the
//! rebind steps on PVs and claims) are conditional on the resourceVersion or
//! uid they were decided on, so one lands only if nobody, the new leader
//! included, has written that object since; it is then one step of the
//! protocol, decided on facts that were true when read, and the new leader
//! decides its next step from what it reads next, this write included. The
//! others are idempotent in effect and cannot move a volume: Events (a
//! record only), taking our own lock annotation off a claim, and creating a
//! claim that must not exist yet.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use crate::storage::Fence;

/// The first pause before another term after a failed one. It doubles up to
/// [`MAX_RETRY`] and resets once this replica has been elected.
const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(5);
/// How long shutdown waits for etcd to revoke the lease. Past this, the other
/// replicas take over when the lease expires by itself.
const REVOKE_TIMEOUT: Duration = Duration::from_secs(2);
/// The least safety margin subtracted from a lease's TTL.
const MIN_MARGIN: Duration = Duration::from_millis(200);

/// A mutation was refused because this replica is not (or no longer certainly)
/// the leader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not the controller leader: lease {lease_id:x} is lost or may have expired")]
pub struct NotLeader {
    lease_id: i64,
}

/// The right to act as the leader during one term, handed to `lead`.
///
/// Clones share the term. A term never comes back: once lost, this handle fails
/// every check, even after the replica is elected again with a new lease.
#[derive(Clone, Debug)]
pub struct Leadership {
    lease_id: i64,
    identity: Arc<str>,
    tenure: watch::Receiver<Tenure>,
    /// The term's own sender, so that any clone can end it ([`Leadership::forfeit`]).
    term: Arc<watch::Sender<Tenure>>,
    fence: Fence,
}

impl Leadership {
    /// `Ok` only while the lease is certainly still ours. Call it before every
    /// mutation.
    pub fn check(&self) -> Result<(), NotLeader> {
        match *self.tenure.borrow() {
            Tenure::Until(until) if Instant::now() < until => Ok(()),
            _ => Err(NotLeader {
                lease_id: self.lease_id,
            }),
        }
    }

    /// [`Leadership::check`] as a bool, for logs and gauges.
    pub fn is_leader(&self) -> bool {
        self.check().is_ok()
    }

    /// Resolves once leadership is lost: the lease expired or was revoked, its
    /// keep-alives went unanswered until the deadline, or the replica resigned.
    /// Resolves at the deadline by itself, whether or not anyone calls `check`.
    pub async fn lost(&self) {
        let mut tenure = self.tenure.clone();
        loop {
            let until = match *tenure.borrow_and_update() {
                Tenure::Until(until) => until,
                Tenure::Ended => return,
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                () = sleep_until(until) => {}
                changed = tenure.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Ends the term now, for every clone and for the election: a write was
    /// refused by its fence, so etcd no longer holds this term's key (the
    /// lease was revoked, or the key deleted), whatever the lease clock says.
    pub fn forfeit(&self) {
        self.term.send_replace(Tenure::Ended);
    }

    /// This term's election key and its create revision: a write fenced on it
    /// goes through only while the term lasts in etcd.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The etcd lease this term holds (for logs and tests).
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The value this replica campaigned with.
    pub fn identity(&self) -> &str {
        &self.identity
    }
}

/// Whether this replica leads right now, for `/metrics` and logs.
#[derive(Clone, Debug)]
pub struct LeaderStatus {
    current: watch::Receiver<Option<Leadership>>,
}

impl LeaderStatus {
    /// Whether this replica holds a term that still passes its check.
    pub fn is_leader(&self) -> bool {
        self.current
            .borrow()
            .as_ref()
            .is_some_and(Leadership::is_leader)
    }

    /// The current term, if this replica has been elected and not yet lost it.
    pub fn leadership(&self) -> Option<Leadership> {
        self.current.borrow().clone().filter(Leadership::is_leader)
    }
}

/// One candidate in the controllers' election.
pub struct LeaderElection {
    client: Client,
    election: String,
    identity: Arc<str>,
    lease_ttl: Duration,
    status: watch::Sender<Option<Leadership>>,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("election", &self.election)
            .field("identity", &self.identity)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

impl LeaderElection {
    /// A candidate named `identity` (unique per replica, e.g. hostname and pid)
    /// in the election `election`, an etcd key prefix such as
    /// `/registry/storage.transfer.k8s.io/_leader/controllers`. The lease asks
    /// for `lease_ttl` rounded up to whole seconds (at least one); etcd may
    /// grant more.
    pub fn new(client: Client, election: String, identity: String, lease_ttl: Duration) -> Self {
        Self {
            client,
            election,
            identity: identity.into(),
            lease_ttl,
            status: watch::Sender::new(None),
        }
    }

    /// A read-only handle on whether this candidate leads, valid after `run`
    /// has consumed the election.
    pub fn status(&self) -> LeaderStatus {
        LeaderStatus {
            current: self.status.subscribe(),
        }
    }

    /// Campaigns, runs `lead` while leader, and campaigns again after losing
    /// the lease, until `shutdown` resolves. `lead`'s future is dropped as soon
    /// as leadership is lost; if it returns by itself, the replica resigns and
    /// campaigns again. On shutdown the lease is revoked, so another replica
    /// takes over at once rather than after the TTL. etcd errors are logged
    /// and retried.
    pub async fn run<F, Fut>(self, shutdown: impl Future<Output = ()>, mut lead: F)
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()> + Send,
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut retry = FIRST_RETRY;
        loop {
            let (end, elected) = self.term(shutdown.as_mut(), &mut lead).await;
            match end {
                TermEnd::Shutdown => return,
                TermEnd::Lost(reason) => {
                    if !elected {
                        warn!(
                            identity = %self.identity,
                            %reason,
                            "lost the lease while campaigning"
                        );
                    }
                }
                TermEnd::LeadReturned => {}
                TermEnd::Failed(error) => {
                    warn!(
                        identity = %self.identity,
                        %error,
                        retry_in = ?retry,
                        "leader election failed"
                    );
                }
            }
            let pause = retry;
            retry = if elected {
                FIRST_RETRY
            } else {
                (retry * 2).min(MAX_RETRY)
            };
            tokio::select! {
                biased;
                () = shutdown.as_mut() => return,
                () = sleep(pause) => {}
            }
        }
    }

    /// One lease: grant it, hold it, then revoke it. Returns how the term ended
    /// and whether this replica was elected in it.
    async fn term<S, F, Fut>(&self, mut shutdown: Pin<&mut S>, lead: &mut F) -> (TermEnd, bool)
    where
        S: Future<Output = ()>,
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()> + Send,
    {
        let mut leases = self.client.lease_client();
        let sent = Instant::now();
        let granted = tokio::select! {
            biased;
            () = shutdown.as_mut() => return (TermEnd::Shutdown, false),
            granted = leases.grant(requested_ttl_secs(self.lease_ttl), None) => granted,
        };
        let granted = match granted {
            Ok(granted) if granted.ttl() > 0 => granted,
            Ok(granted) => {
                return (
                    TermEnd::Failed(etcd_client::Error::LeaseKeepAliveError(format!(
                        "etcd granted a lease with TTL {}",
                        granted.ttl()
                    ))),
                    false,
                )
            }
            Err(e) => return (TermEnd::Failed(e), false),
        };
        let lease_id = granted.id();
        debug!(
            identity = %self.identity,
            lease_id = %hex(lease_id),
            ttl = granted.ttl(),
            "granted a lease"
        );

        // Declared before `clock` so that it is dropped after it: should this
        // future itself be dropped, the term ends before `lead` is cancelled.
        let mut leading: Option<Pin<Box<Fut>>> = None;
        let mut clock = LeaseClock::new(lease_id, sent, granted.ttl());
        let end = self.hold(&mut clock, shutdown, lead, &mut leading).await;
        // End the term for every `Leadership` clone before cancelling `lead`.
        clock.end();
        let elected = leading.is_some();
        drop(leading);
        if elected {
            self.status.send_replace(None);
            info!(
                identity = %self.identity,
                lease_id = %hex(lease_id),
                why = %end,
                "no longer the controller leader"
            );
        }
        // Deletes our election key, so the next candidate is elected now.
        match timeout(REVOKE_TIMEOUT, leases.revoke(lease_id)).await {
            Ok(Ok(_)) => debug!(lease_id = %hex(lease_id), "revoked the lease"),
            Ok(Err(error)) => {
                debug!(lease_id = %hex(lease_id), %error, "revoking the lease failed")
            }
            Err(_) => debug!(lease_id = %hex(lease_id), "revoking the lease timed out"),
        }
        (end, elected)
    }

    /// Keeps the lease alive, campaigns on it and, once elected, drives `lead`
    /// into `leading`, until the lease is lost, `lead` returns, or shutdown.
    async fn hold<S, F, Fut>(
        &self,
        clock: &mut LeaseClock,
        mut shutdown: Pin<&mut S>,
        lead: &mut F,
        leading: &mut Option<Pin<Box<Fut>>>,
    ) -> TermEnd
    where
        S: Future<Output = ()>,
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = ()> + Send,
    {
        let lease_id = clock.lease_id;
        let mut leases = self.client.lease_client();
        // etcd-client sends the first keep-alive and waits for its answer here.
        clock.on_send(Instant::now());
        let (mut keeper, mut answers) = tokio::select! {
            biased;
            () = shutdown.as_mut() => return TermEnd::Shutdown,
            () = clock.expiry() => return TermEnd::Lost(LossReason::Unanswered),
            started = leases.keep_alive(lease_id) => match started {
                Ok(started) => started,
                Err(e) => return TermEnd::Failed(e),
            },
        };
        if let Err(reason) = clock.on_answer(Instant::now(), clock.granted_ttl) {
            return TermEnd::Lost(reason);
        }

        let period = clock.keep_alive_interval();
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut elections = self.client.election_client();
        let campaign = elections.campaign(self.election.as_str(), &*self.identity, lease_id);
        let mut campaign = std::pin::pin!(campaign);
        // Ends the term as soon as etcd deletes our key; aborted with the term.
        let mut _key_watch: Option<AbortOnDrop> = None;

        loop {
            tokio::select! {
                biased;
                () = shutdown.as_mut() => return TermEnd::Shutdown,
                () = clock.expiry() => return TermEnd::Lost(LossReason::Unanswered),
                answer = answers.next() => {
                    let answered = match answer {
                        Some(Ok(answer)) => clock.on_answer(Instant::now(), answer.ttl()),
                        Some(Err(error)) => Err(LossReason::KeepAliveFailed(error)),
                        None => Err(LossReason::KeepAliveEnded),
                    };
                    if let Err(reason) = answered {
                        return TermEnd::Lost(reason);
                    }
                }
                _ = ticks.tick() => {
                    clock.on_send(Instant::now());
                    if let Err(error) = keeper.keep_alive().await {
                        return TermEnd::Lost(LossReason::KeepAliveFailed(error));
                    }
                }
                won = &mut campaign, if leading.is_none() => {
                    let won = match won {
                        Ok(won) => won,
                        Err(error) => return TermEnd::Failed(error),
                    };
                    let Some(key) = won.leader() else {
                        return TermEnd::Failed(etcd_client::Error::ElectError(
                            "the campaign's answer names no leader key".to_owned(),
                        ));
                    };
                    let fence = Fence {
                        key: String::from_utf8_lossy(key.key()).into_owned(),
                        create_revision: key.rev(),
                    };
                    let leadership = clock.leadership(&self.identity, fence);
                    if leadership.check().is_err() {
                        return TermEnd::Lost(LossReason::Unanswered);
                    }
                    _key_watch = Some(AbortOnDrop(tokio::spawn(watch_key(
                        self.client.clone(),
                        leadership.clone(),
                    ))));
                    info!(
                        identity = %self.identity,
                        lease_id = %hex(lease_id),
                        election = %self.election,
                        "became the controller leader"
                    );
                    self.status.send_replace(Some(leadership.clone()));
                    *leading = Some(Box::pin(lead(leadership)));
                }
                () = async {
                    match leading.as_mut() {
                        Some(work) => work.await,
                        None => std::future::pending().await,
                    }
                } => return TermEnd::LeadReturned,
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Forfeits `leadership` as soon as its election key is gone or made
/// again: the lease was revoked (etcd deletes its keys at once), or someone
/// deleted the key. The lease clock would go on vouching for a revoked lease
/// until the next keep-alive answer, and for a deleted key as long as the
/// lease lives; writes of our objects are refused by their fence meanwhile,
/// but writes of core objects are not. Follows the key with a watch from
/// the revision it was read at, and reads it again whenever the watch
/// fails.
async fn watch_key(client: Client, leadership: Leadership) {
    let key = leadership.fence().key.clone();
    let created = leadership.fence().create_revision;
    let mut kv = client.kv_client();
    let mut watches = client.watch_client();
    loop {
        let read = match kv.get(key.as_str(), None).await {
            Ok(read) => read,
            Err(error) => {
                debug!(%key, %error, "cannot read the election key; trying again");
                sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if read.kvs().first().map(|kv| kv.create_revision()) != Some(created) {
            return forfeit_for_key(&leadership, &key);
        }
        let from = read.header().map_or(created, |h| h.revision()) + 1;
        let options = etcd_client::WatchOptions::new().with_start_revision(from);
        if let Ok(mut stream) = watches.watch(key.as_str(), Some(options)).await {
            while let Ok(Some(message)) = stream.message().await {
                let deleted = message
                    .events()
                    .iter()
                    .any(|e| e.event_type() == etcd_client::EventType::Delete);
                if deleted {
                    return forfeit_for_key(&leadership, &key);
                }
            }
        }
        sleep(Duration::from_secs(1)).await;
    }
}

fn forfeit_for_key(leadership: &Leadership, key: &str) {
    if super::fault::key_loss_unheard() {
        warn!(%key, "fault injection: the election key is gone, and the term goes on");
        return;
    }
    if leadership.is_leader() {
        warn!(
            identity = %leadership.identity(),
            %key,
            "the election key is gone: the lease was revoked or the key deleted; ending the term"
        );
    }
    leadership.forfeit();
}

/// How a term ended.
#[derive(Debug)]
enum TermEnd {
    /// `shutdown` resolved.
    Shutdown,
    /// The lease is gone, or can no longer be vouched for.
    Lost(LossReason),
    /// `lead` returned by itself.
    LeadReturned,
    /// An etcd call for the lease or the campaign failed.
    Failed(etcd_client::Error),
}

impl std::fmt::Display for TermEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shutdown => f.write_str("resigned on shutdown"),
            Self::Lost(reason) => write!(f, "{reason}"),
            Self::LeadReturned => f.write_str("resigned because the controllers stopped"),
            Self::Failed(error) => write!(f, "etcd call failed: {error}"),
        }
    }
}

/// Why a lease stopped being ours.
#[derive(Debug, thiserror::Error)]
enum LossReason {
    #[error("etcd answered that the lease has expired or was revoked")]
    Gone,
    #[error("no keep-alive was answered in time; the lease may expire")]
    Unanswered,
    #[error("keep-alive failed: {0}")]
    KeepAliveFailed(etcd_client::Error),
    #[error("the keep-alive stream ended")]
    KeepAliveEnded,
    #[error(
        "the term was forfeited: its election key is gone, or a write was refused by its fence"
    )]
    Forfeited,
}

/// How long this replica may rely on its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tenure {
    /// Certainly live until this instant: a keep-alive's send time plus the
    /// TTL it was answered with, minus the margin.
    Until(Instant),
    /// Lost, resigned, or no longer vouched for. Final.
    Ended,
}

#[cfg(test)]
impl Leadership {
    /// A term held for `held` from now, for tests of what runs under one.
    pub(crate) fn held_for(held: Duration) -> Leadership {
        let term = Arc::new(watch::Sender::new(Tenure::Until(Instant::now() + held)));
        Leadership {
            lease_id: 1,
            identity: Arc::from("replica-a"),
            tenure: term.subscribe(),
            term,
            fence: Fence {
                key: "/election/1".to_owned(),
                create_revision: 1,
            },
        }
    }
}

/// The keep-alive bookkeeping of one lease: turns answers into a [`Tenure`],
/// shared with every [`Leadership`] of the term.
#[derive(Debug)]
struct LeaseClock {
    lease_id: i64,
    granted_ttl: i64,
    /// Send times of the keep-alives not answered yet, oldest first. etcd
    /// answers one stream in order; should an answer ever go missing, a later
    /// one is credited to an earlier send time, which only errs on the safe side.
    in_flight: VecDeque<Instant>,
    tenure: Arc<watch::Sender<Tenure>>,
}

impl LeaseClock {
    /// The clock of a lease granted `ttl_secs` by a request sent at `sent`.
    fn new(lease_id: i64, sent: Instant, ttl_secs: i64) -> Self {
        Self {
            lease_id,
            granted_ttl: ttl_secs,
            in_flight: VecDeque::new(),
            tenure: Arc::new(watch::Sender::new(Tenure::Until(live_until(
                sent, ttl_secs,
            )))),
        }
    }

    /// A third of the TTL, so that one lost answer is survived.
    fn keep_alive_interval(&self) -> Duration {
        ttl(self.granted_ttl) / 3
    }

    fn on_send(&mut self, at: Instant) {
        self.in_flight.push_back(at);
    }

    /// Credits an answer granting `ttl_secs` to the oldest keep-alive in flight.
    /// An answer after the deadline does not revive the term: the lease may
    /// have been someone else's to take in between.
    fn on_answer(&mut self, now: Instant, ttl_secs: i64) -> Result<(), LossReason> {
        let sent = self.in_flight.pop_front();
        if ttl_secs <= 0 {
            self.end();
            return Err(LossReason::Gone);
        }
        // Copied out: ending the term below needs the channel's write lock.
        let tenure = *self.tenure.borrow();
        let current = match tenure {
            Tenure::Until(until) if now < until => until,
            Tenure::Until(_) => {
                self.end();
                return Err(LossReason::Unanswered);
            }
            Tenure::Ended => return Err(LossReason::Forfeited),
        };
        if let Some(sent) = sent {
            let until = live_until(sent, ttl_secs).max(current);
            self.tenure.send_replace(Tenure::Until(until));
        }
        Ok(())
    }

    /// Resolves at the deadline; never once the term has ended.
    fn expiry(&self) -> impl Future<Output = ()> + 'static {
        let tenure = *self.tenure.borrow();
        async move {
            match tenure {
                Tenure::Until(until) => sleep_until(until).await,
                Tenure::Ended => std::future::pending().await,
            }
        }
    }

    fn leadership(&self, identity: &Arc<str>, fence: Fence) -> Leadership {
        Leadership {
            lease_id: self.lease_id,
            identity: identity.clone(),
            tenure: self.tenure.subscribe(),
            term: self.tenure.clone(),
            fence,
        }
    }

    fn end(&self) {
        self.tenure.send_replace(Tenure::Ended);
    }
}

impl Drop for LeaseClock {
    fn drop(&mut self) {
        self.end();
    }
}

fn ttl(secs: i64) -> Duration {
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// The margin below a TTL within which we stop relying on the lease.
fn margin(ttl: Duration) -> Duration {
    (ttl / 5).max(MIN_MARGIN)
}

/// Until when a lease is certainly live, given a keep-alive sent at `sent`
/// answered with `ttl_secs`.
fn live_until(sent: Instant, ttl_secs: i64) -> Instant {
    let ttl = ttl(ttl_secs);
    sent + ttl.saturating_sub(margin(ttl))
}

/// `lease_ttl` in whole seconds for etcd, rounded up, at least one.
fn requested_ttl_secs(lease_ttl: Duration) -> i64 {
    let secs = lease_ttl.as_secs() + u64::from(lease_ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// Lease ids in the form etcdctl prints them.
fn hex(lease_id: i64) -> String {
    format!("{lease_id:x}")
}

#[cfg(test)]
mod tests;
