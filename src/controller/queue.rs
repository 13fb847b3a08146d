//! A work queue of object keys, in the manner of client-go's workqueue: a key
//! waiting in the queue is held once however often it is added; a key being
//! worked on is never handed to a second worker, and if it is added meanwhile
//! it is queued again when the first worker is done. Keys can be added after a
//! delay, and failures back off per key.
//!
//! Fairness: keys are `namespace/name`, and the keys waiting for a worker
//! are handed out round-robin between namespaces, so that however many keys
//! one namespace has queued, another namespace's key waits for at most one
//! key of each other namespace.
//!
//! Pacing, so that many objects that cannot proceed do not hammer
//! kube-apiserver: everything the queue schedules itself rather than an event
//! asking for it (a retry after a failure, another look at a pair that
//! waits, a resync) goes through one token bucket for the whole queue
//! ([`PACE_PER_SECOND`], bursts of [`PACE_BURST`], as client-go's default
//! controller rate limiter), and per key through an exponential backoff:
//! failures from 250 ms, consecutive waits from 1 s, both up to 30 s. A key
//! holds at most one pending timer (the earliest wins). When it fires the key
//! is *due*: it waits, in its namespace's turn, for a token, and takes it
//! only as it is moved to the keys waiting for a worker. A token is thus
//! never spent on a look that does not happen (a timer replaced by an
//! earlier one, or a due look an event overtook), the bucket never runs into
//! debt, and a namespace's due key waits for at most one token per other
//! namespace with due keys, never behind another namespace's backlog.
//! Events and [`WorkQueue::add`] are never paced: a change is looked at at
//! once, and it supersedes the key's timer or due look (the look re-derives
//! when to look again).
//!
//! A named queue ([`WorkQueue::named`]) is counted as client-go counts its
//! queues, under the same names labelled by the queue's name:
//! `workqueue_depth` (keys waiting for a worker, now or for a token),
//! `workqueue_adds_total` (adds that queued a key or marked a held one
//! dirty), `workqueue_queue_duration_seconds` (from that add to a worker
//! taking the key), `workqueue_work_duration_seconds` (from taking it to
//! `done`) and `workqueue_retries_total` (failures queued again).
//!
//! Owns ordering, de-duplication and pacing only; what a key means is the
//! reconciler's business.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{self, QueueMetrics};

/// The shortest and the longest wait after a failed attempt.
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The shortest per-key wait after consecutive waits (a pair waiting for a
/// pod to go, for a bind); it doubles up to [`BACKOFF_MAX`].
const WAIT_BASE: Duration = Duration::from_secs(1);
/// The paced looks the whole queue may take per second, and in one burst.
pub const PACE_PER_SECOND: f64 = 20.0;
pub const PACE_BURST: f64 = 200.0;

#[derive(Debug, Default)]
struct Inner {
    /// Keys waiting for a worker.
    ready: Lanes,
    /// Keys a worker holds now.
    active: HashSet<String>,
    /// Keys added while a worker held them: queued again on `done`.
    dirty: HashSet<String>,
    /// Consecutive failures per key.
    failures: HashMap<String, u32>,
    /// Consecutive waits per key (reconciles that asked to look again later).
    waits: HashMap<String, u32>,
    /// Keys with a pending timer, and when it fires.
    delayed: HashMap<String, Instant>,
    /// Keys whose paced look is due, waiting for a token.
    due: Lanes,
    bucket: Bucket,
    shut_down: bool,
    /// When each key waiting for a worker, or dirty, was added.
    added: HashMap<String, Instant>,
    /// When a worker took each key it holds.
    taken: HashMap<String, Instant>,
}

impl Inner {
    /// Queues `key` for a worker now, or marks it dirty if one holds it;
    /// whether a waiting worker should be woken.
    fn enqueue(&mut self, key: &str, metrics: Option<&QueueMetrics>) -> bool {
        let added = if self.active.contains(key) {
            self.dirty.insert(key.to_owned())
        } else {
            self.ready.push(key)
        };
        // A dirty key queued again on `done` was counted when it was added.
        if added && !self.added.contains_key(key) {
            self.added.insert(key.to_owned(), Instant::now());
            if let Some(m) = metrics {
                m.adds.inc();
            }
        }
        added && !self.active.contains(key)
    }

    /// Keys waiting for a worker, now or for a token.
    fn depth(&self) -> usize {
        self.ready.len() + self.due.len()
    }

    /// Moves due keys to the ready ones, round-robin between namespaces,
    /// for as many tokens as the bucket has at `now`; how long until its
    /// next token if due keys are left.
    fn promote(&mut self, now: Instant, metrics: Option<&QueueMetrics>) -> Option<Duration> {
        while !self.due.is_empty() {
            if let Err(wait) = self.bucket.try_take(now) {
                return Some(wait);
            }
            if let Some(key) = self.due.pop() {
                self.enqueue(&key, metrics);
            }
        }
        None
    }
}

/// Keys in first-in-first-out lanes, one per namespace, taken round-robin
/// between the lanes; each key at most once.
#[derive(Debug, Default)]
struct Lanes {
    /// Namespaces with keys, in the order of their next turn.
    turns: VecDeque<String>,
    lanes: HashMap<String, VecDeque<String>>,
    keys: HashSet<String>,
}

impl Lanes {
    /// Adds `key` at the end of its namespace's lane; false if it is in.
    fn push(&mut self, key: &str) -> bool {
        if !self.keys.insert(key.to_owned()) {
            return false;
        }
        let namespace = namespace_of(key);
        let lane = self.lanes.entry(namespace.to_owned()).or_default();
        if lane.is_empty() {
            self.turns.push_back(namespace.to_owned());
        }
        lane.push_back(key.to_owned());
        true
    }

    /// The first key of the namespace whose turn it is.
    fn pop(&mut self) -> Option<String> {
        let namespace = self.turns.pop_front()?;
        let lane = self.lanes.get_mut(&namespace)?;
        let key = lane.pop_front()?;
        if lane.is_empty() {
            self.lanes.remove(&namespace);
        } else {
            self.turns.push_back(namespace);
        }
        self.keys.remove(&key);
        Some(key)
    }

    /// Takes `key` out; false if it was not in.
    fn remove(&mut self, key: &str) -> bool {
        if !self.keys.remove(key) {
            return false;
        }
        let namespace = namespace_of(key);
        if let Some(lane) = self.lanes.get_mut(namespace) {
            lane.retain(|k| k != key);
            if lane.is_empty() {
                self.lanes.remove(namespace);
                self.turns.retain(|n| n != namespace);
            }
        }
        true
    }

    fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The namespace of a `namespace/name` key (empty for a key without one).
fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl Default for Bucket {
    fn default() -> Self {
        Self::new(PACE_PER_SECOND, PACE_BURST)
    }
}

impl Bucket {
    pub(crate) fn new(rate: f64, burst: f64) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: None,
        }
    }

    /// Takes one token at `now` if there is one; otherwise how long until
    /// there is.
    pub(crate) fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = self
            .at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.at = Some(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            // Rounded up, so that the taker finds its token when it wakes.
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
            Err(wait.max(Duration::from_nanos(1)) + Duration::from_nanos(1))
        }
    }
}

/// A cloneable handle on one queue.
#[derive(Debug, Clone, Default)]
pub struct WorkQueue {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<Notify>,
    name: &'static str,
    metrics: Option<QueueMetrics>,
}

impl WorkQueue {
    /// A queue that is not counted.
    pub fn new() -> Self {
        Self::default()
    }

    /// A queue counted in the process's `workqueue_*` series as `name`,
    /// from a depth of 0.
    pub fn named(name: &'static str) -> Self {
        let metrics = metrics::global().workqueue.queue(name);
        metrics.depth.set(0);
        Self {
            name,
            metrics: Some(metrics),
            ..Self::default()
        }
    }

    /// The name the queue is counted as; empty if it is not.
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets `workqueue_depth` to what `inner` holds now.
    fn count_depth(&self, inner: &Inner) {
        if let Some(m) = &self.metrics {
            m.depth.set(metrics::count(inner.depth()));
        }
    }

    /// Queues `key` now, unless it is already waiting. A pending timer or
    /// due look of the key is dropped, its token unspent: the look this
    /// asks for decides anew when to look again.
    pub fn add(&self, key: &str) {
        let wake = {
            let mut inner = self.lock();
            if inner.shut_down {
                return;
            }
            inner.delayed.remove(key);
            inner.due.remove(key);
            let wake = inner.enqueue(key, self.metrics.as_ref());
            self.count_depth(&inner);
            wake
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// Queues `key` once `delay` has passed. A key already waiting for an
    /// earlier time keeps it.
    pub fn add_after(&self, key: &str, delay: Duration) {
        self.schedule(key, delay, false);
    }

    /// A timer for `key` after `delay`, unless one fires sooner or the key
    /// is queued or due already. When a `paced` timer fires the key is due:
    /// it waits for a token in its namespace's turn (see the module docs).
    fn schedule(&self, key: &str, delay: Duration, paced: bool) {
        if delay.is_zero() && !paced {
            self.add(key);
            return;
        }
        let at = Instant::now() + delay;
        {
            let mut inner = self.lock();
            if inner.shut_down || inner.ready.contains(key) || inner.due.contains(key) {
                return;
            }
            match inner.delayed.get(key) {
                Some(pending) if *pending <= at => return,
                _ if delay.is_zero() => {
                    inner.delayed.remove(key);
                    inner.due.push(key);
                    self.count_depth(&inner);
                    drop(inner);
                    self.wake.notify_one();
                    return;
                }
                _ => {
                    inner.delayed.insert(key.to_owned(), at);
                }
            }
        }
        let queue = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let wake = {
                let mut inner = queue.lock();
                if inner.shut_down || inner.delayed.get(&key) != Some(&at) {
                    // Replaced by an earlier timer, or overtaken by an add.
                    return;
                }
                inner.delayed.remove(&key);
                let wake = if !paced {
                    inner.enqueue(&key, queue.metrics.as_ref())
                } else {
                    !inner.ready.contains(&key) && inner.due.push(&key)
                };
                queue.count_depth(&inner);
                wake
            };
            if wake {
                queue.wake.notify_one();
            }
        });
    }

    /// Queues `key` again after a failure: after a delay that doubles with
    /// each consecutive failure, from 250 ms up to 30 s, and then once the
    /// queue's bucket has a token for it.
    pub fn add_rate_limited(&self, key: &str) {
        if let Some(m) = &self.metrics {
            m.retries.inc();
        }
        let delay = {
            let mut inner = self.lock();
            let n = inner.failures.entry(key.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            backoff(*n)
        };
        self.schedule(key, delay, true);
    }

    /// Queues `key` again for a reconcile that asked to look again after
    /// `after` (it waits for something without an event of its own, or for
    /// a deadline): no sooner than that and than its consecutive waits'
    /// backoff (from 1 s, doubling, up to 30 s), and then once the bucket
    /// has a token for it.
    pub fn add_paced(&self, key: &str, after: Duration) {
        let delay = {
            let mut inner = self.lock();
            let n = inner.waits.entry(key.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            after.max(wait_backoff(*n))
        };
        self.schedule(key, delay, true);
    }

    /// Queues `key` for a periodic look (a resync), paced by the bucket,
    /// unless it is queued, due, being worked on, or has a timer due within
    /// `within` (a later timer is brought forward: the look re-derives it).
    pub fn add_resync(&self, key: &str, within: Duration) {
        {
            let inner = self.lock();
            let soon = Instant::now() + within;
            if inner.shut_down
                || inner.active.contains(key)
                || inner.delayed.get(key).is_some_and(|at| *at <= soon)
            {
                return;
            }
        }
        self.schedule(key, Duration::ZERO, true);
    }

    /// Forgets `key`'s failures: its next failure waits the shortest time.
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// Forgets `key`'s failures and waits: it made progress.
    pub fn progressed(&self, key: &str) {
        let mut inner = self.lock();
        inner.failures.remove(key);
        inner.waits.remove(key);
    }

    /// The next key to work on; `None` once the queue is shut down. The
    /// caller must call [`WorkQueue::done`] with it.
    pub async fn next(&self) -> Option<String> {
        loop {
            let notified = self.wake.notified();
            let token_in = {
                let mut inner = self.lock();
                if inner.shut_down {
                    return None;
                }
                let now = Instant::now();
                let token_in = inner.promote(now, self.metrics.as_ref());
                if let Some(key) = inner.ready.pop() {
                    inner.active.insert(key.clone());
                    let added = inner.added.remove(&key);
                    inner.taken.insert(key.clone(), now);
                    if let (Some(m), Some(added)) = (&self.metrics, added) {
                        m.queue_duration
                            .observe(now.saturating_duration_since(added).as_secs_f64());
                    }
                    self.count_depth(&inner);
                    let more = !inner.ready.is_empty() || !inner.due.is_empty();
                    drop(inner);
                    if more {
                        // Another waiting worker takes the rest.
                        self.wake.notify_one();
                    }
                    return Some(key);
                }
                token_in
            };
            match token_in {
                Some(wait) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Releases `key`; if it was added while held, it is queued again.
    pub fn done(&self, key: &str) {
        let requeue = {
            let mut inner = self.lock();
            inner.active.remove(key);
            let taken = inner.taken.remove(key);
            if let (Some(m), Some(taken)) = (&self.metrics, taken) {
                m.work_duration.observe(taken.elapsed().as_secs_f64());
            }
            inner.dirty.remove(key)
        };
        if requeue {
            self.add(key);
        }
    }

    /// Wakes every waiting worker with `None`; later adds are dropped.
    /// Its depth then counts as 0: the next term's queue of the same name
    /// counts afresh.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        if let Some(m) = &self.metrics {
            m.depth.set(0);
        }
        self.wake.notify_waiters();
    }

    /// How many keys wait for a worker, now or for a token.
    pub fn len(&self) -> usize {
        self.lock().depth()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The wait after `failures` consecutive failures.
fn backoff(failures: u32) -> Duration {
    doubling(BACKOFF_BASE, failures)
}

/// The least wait after `waits` consecutive waits.
fn wait_backoff(waits: u32) -> Duration {
    doubling(WAIT_BASE, waits)
}

/// `base` doubled `n - 1` times, at most [`BACKOFF_MAX`].
fn doubling(base: Duration, n: u32) -> Duration {
    let factor = 2u32.saturating_pow(n.saturating_sub(1).min(16));
    base.saturating_mul(factor).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests;
