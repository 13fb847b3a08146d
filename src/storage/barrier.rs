//! Linearizable reads of etcd's current revision, coalesced.
//!
//! A consistent read served from the watch cache (a get or a list with no
//! `resourceVersion`) first asks etcd for its current revision, then waits
//! for the cache to reach it. Under load that read is one etcd round trip
//! per request. This module owns the rule that lets concurrent requests
//! share it: a caller is answered only by a read that was *sent after it
//! asked*. Callers that ask while a read is on the wire wait for the next
//! one, and every caller waiting when a read is sent shares its answer. So
//! each answer is at least the revision etcd had when the caller asked,
//! which is what linearizability requires, and at load the reads cost one
//! round trip per batch instead of one per request (etcd batches its own
//! ReadIndex the same way).
//!
//! The reads run on a task of their own, so a caller that goes away (its
//! client hung up) never strands the others. A read is given
//! [`READ_TIMEOUT`]: one that stalls (a partitioned member, an election)
//! fails its batch, and the next batch sends a fresh read, rather than
//! holding up every reader for the client's whole timeout. A read that
//! etcd refuses because its leader changed, or it has none, is sent again
//! within that time, as kube-apiserver's etcd client does: an election is
//! no reason to fail a read the new leader answers a moment later.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Result, Revision, StorageError};

/// How long one read may take before its callers are told etcd is
/// unavailable.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One read of the current revision.
pub type RevisionRead = Pin<Box<dyn Future<Output = Result<Revision>> + Send>>;

type Reader = dyn Fn() -> RevisionRead + Send + Sync;

/// Coalesces reads of the current revision; see the module docs. Clones
/// share their reads.
#[derive(Clone)]
pub struct RevisionBarrier {
    read: Arc<Reader>,
    state: Arc<Mutex<Waiting>>,
}

impl std::fmt::Debug for RevisionBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevisionBarrier").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Waiting {
    /// Whether a task is sending reads; it stops once nobody waits.
    reading: bool,
    /// Callers who asked since the last read was sent.
    callers: Vec<oneshot::Sender<Result<Revision>>>,
}

impl RevisionBarrier {
    /// A barrier whose reads are `read`.
    pub fn new(read: impl Fn() -> RevisionRead + Send + Sync + 'static) -> Self {
        Self {
            read: Arc::new(read),
            state: Arc::default(),
        }
    }

    /// etcd's current revision, from a read sent after this call began.
    pub async fn current(&self) -> Result<Revision> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut waiting = lock(&self.state);
            waiting.callers.push(tx);
            !std::mem::replace(&mut waiting.reading, true)
        };
        if start {
            // The guard exists before the task does, so that a task dropped
            // before it ever ran (its runtime shutting down) still hands
            // the reading over.
            let task = Task {
                state: self.state.clone(),
                done: false,
            };
            tokio::spawn(send_reads(self.read.clone(), task));
        }
        rx.await.unwrap_or_else(|_| {
            Err(StorageError::Unavailable(
                "the read of etcd's current revision was abandoned".to_owned(),
            ))
        })
    }
}

/// Sends one read for everyone waiting, answers them, and goes on while
/// more have come; stops (and says so) once nobody waits.
async fn send_reads(read: Arc<Reader>, mut task: Task) {
    loop {
        let batch = {
            let mut waiting = lock(&task.state);
            if waiting.callers.is_empty() {
                waiting.reading = false;
                task.done = true;
                return;
            }
            std::mem::take(&mut waiting.callers)
        };
        let answer = tokio::time::timeout(READ_TIMEOUT, read_through_elections(&read))
            .await
            .unwrap_or_else(|_| {
                Err(StorageError::Unavailable(format!(
                    "etcd did not answer a read of its current revision within {READ_TIMEOUT:?}"
                )))
            });
        for caller in batch {
            let _ = caller.send(answer.clone());
        }
    }
}

/// How long to wait before reading again after etcd said its leader
/// changed or it has none.
pub const ELECTION_RETRY: Duration = Duration::from_millis(100);

/// Whether etcd refused a read only because an election is under way (a
/// read sent again shortly is answered by the new leader), as
/// kube-apiserver's etcd client retries them.
fn during_election(error: &StorageError) -> bool {
    matches!(error, StorageError::Unavailable(m)
        if m.contains("etcdserver: leader changed") || m.contains("etcdserver: no leader"))
}

/// One read, sent again while etcd answers that it is electing a leader
/// (the caller bounds it with [`READ_TIMEOUT`]). Each read is sent after
/// the callers asked, so a retried one answers them as well.
async fn read_through_elections(read: &Arc<Reader>) -> Result<Revision> {
    loop {
        match read().await {
            Err(e) if during_election(&e) => tokio::time::sleep(ELECTION_RETRY).await,
            answer => return answer,
        }
    }
}

/// The reading task. Should it end any other way than by finding nobody
/// waiting (a panic, or its runtime shutting down, even before it ran),
/// the next caller starts a new one, and those waiting now are told the
/// read was abandoned.
struct Task {
    state: Arc<Mutex<Waiting>>,
    done: bool,
}

impl Drop for Task {
    fn drop(&mut self) {
        if !self.done {
            let mut waiting = lock(&self.state);
            waiting.reading = false;
            waiting.callers.clear();
        }
    }
}

fn lock(state: &Mutex<Waiting>) -> MutexGuard<'_, Waiting> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
