//! A work queue of object keys, in the manner of client-go's workqueue: a key
//! waiting in the queue is held once however often it is added; a key being
//! worked on is never handed to a second worker, and if it is added meanwhile
//! it is queued again when the first worker is done. Keys can be added after a
//! delay, and failures back off per key.
//!
//! Owns ordering and de-duplication only; what a key means is the
//! reconciler's business.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The shortest and the longest wait after a failed attempt.
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

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
    shut_down: bool,
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

    /// Queues `key` once `delay` has passed.
    pub fn add_after(&self, key: &str, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let queue = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(&key);
        });
    }

    /// Queues `key` again after a delay that doubles with each consecutive
    /// failure, from 250 ms up to 30 s.
    pub fn add_rate_limited(&self, key: &str) {
        let failures = {
            let mut inner = self.lock();
            let n = inner.failures.entry(key.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        self.add_after(key, backoff(failures));
    }

    /// Forgets `key`'s failures: its next failure waits the shortest time.
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
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
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    BACKOFF_BASE.saturating_mul(factor).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests;
