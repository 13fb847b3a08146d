//! A work queue of object keys, in the manner of client-go's workqueue: a key
//! waiting in the queue is held once however often it is added; a key being
//! worked on is never handed to a second worker, and if it is added meanwhile
//! it is queued again when the first worker is done. Keys can be added after a
//! delay, and failures back off per key.
//!
//! Pacing, so that many objects that cannot proceed do not hammer
//! kube-apiserver: everything the queue schedules itself rather than an event
//! asking for it (a retry after a failure, another look at a pair that
//! waits, a resync) goes through one token bucket for the whole queue
//! ([`PACE_PER_SECOND`], bursts of [`PACE_BURST`], as client-go's default
//! controller rate limiter), and per key through an exponential backoff:
//! failures from 250 ms, consecutive waits from 1 s, both up to 30 s. A key
//! holds at most one pending timer (the earliest wins), and a timer takes
//! its token when it fires, so the bucket's debt never exceeds one token per
//! key. Events and [`WorkQueue::add`] are never paced: a change is looked at
//! at once.
//!
//! Owns ordering, de-duplication and pacing only; what a key means is the
//! reconciler's business.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

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
    /// Keys waiting for a worker, in order.
    ready: VecDeque<String>,
    /// The keys in `ready`, for de-duplication.
    queued: HashSet<String>,
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
    bucket: Bucket,
    shut_down: bool,
}

/// A token bucket: `rate` tokens a second, at most `burst` saved up. Taking
/// a token it does not have yet is allowed and says how long until it would
/// have had it, so that callers queue up behind each other.
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

    /// Takes one token at `now`: how long the taker must wait for it.
    pub(crate) fn take(&mut self, now: Instant) -> Duration {
        let elapsed = self
            .at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.at = Some(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// A cloneable handle on one queue.
#[derive(Debug, Clone, Default)]
pub struct WorkQueue {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<Notify>,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` now, unless it is already waiting.
    pub fn add(&self, key: &str) {
        let mut inner = self.lock();
        if inner.shut_down {
            return;
        }
        if inner.active.contains(key) {
            inner.dirty.insert(key.to_owned());
            return;
        }
        if inner.queued.insert(key.to_owned()) {
            inner.ready.push_back(key.to_owned());
            drop(inner);
            self.wake.notify_one();
        }
    }

    /// Queues `key` once `delay` has passed. A key already waiting for an
    /// earlier time keeps it.
    pub fn add_after(&self, key: &str, delay: Duration) {
        self.schedule(key, delay, false);
    }

    /// A timer for `key` after `delay`, unless one fires sooner. A `paced`
    /// timer takes its token from the bucket when it fires (and waits for
    /// it), so a timer that another replaced, or one due in a day, costs
    /// nothing now, and the bucket's debt never exceeds one token per key.
    fn schedule(&self, key: &str, delay: Duration, paced: bool) {
        if delay.is_zero() && !paced {
            self.add(key);
            return;
        }
        let at = Instant::now() + delay;
        {
            let mut inner = self.lock();
            if inner.shut_down {
                return;
            }
            match inner.delayed.get(key) {
                Some(pending) if *pending <= at => return,
                _ => {
                    inner.delayed.insert(key.to_owned(), at);
                }
            }
        }
        let queue = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut at = at;
            if paced {
                let wait = {
                    let mut inner = queue.lock();
                    if inner.delayed.get(&key) != Some(&at) {
                        // Replaced by an earlier timer: nothing to do.
                        return;
                    }
                    let wait = inner.bucket.take(Instant::now());
                    if !wait.is_zero() {
                        at = Instant::now() + wait;
                        inner.delayed.insert(key.clone(), at);
                    }
                    wait
                };
                if !wait.is_zero() {
                    tokio::time::sleep_until(at).await;
                }
            }
            let due = {
                let mut inner = queue.lock();
                match inner.delayed.get(&key) {
                    // A timer replaced by an earlier one has nothing to do.
                    Some(pending) if *pending == at => {
                        inner.delayed.remove(&key);
                        true
                    }
                    _ => false,
                }
            };
            if due {
                queue.add(&key);
            }
        });
    }

    /// Queues `key` again after a failure: after a delay that doubles with
    /// each consecutive failure, from 250 ms up to 30 s, and then once the
    /// queue's bucket has a token for it.
    pub fn add_rate_limited(&self, key: &str) {
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
    /// unless it is queued, being worked on, or has a timer due within
    /// `within` (a later timer is brought forward: the look re-derives it).
    pub fn add_resync(&self, key: &str, within: Duration) {
        {
            let inner = self.lock();
            let soon = Instant::now() + within;
            if inner.shut_down
                || inner.queued.contains(key)
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
            {
                let mut inner = self.lock();
                if inner.shut_down {
                    return None;
                }
                if let Some(key) = inner.ready.pop_front() {
                    inner.queued.remove(&key);
                    inner.active.insert(key.clone());
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// Releases `key`; if it was added while held, it is queued again.
    pub fn done(&self, key: &str) {
        let requeue = {
            let mut inner = self.lock();
            inner.active.remove(key);
            inner.dirty.remove(key)
        };
        if requeue {
            self.add(key);
        }
    }

    /// Wakes every waiting worker with `None`; later adds are dropped.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.wake.notify_waiters();
    }

    /// How many keys wait for a worker.
    pub fn len(&self) -> usize {
        self.lock().ready.len()
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
