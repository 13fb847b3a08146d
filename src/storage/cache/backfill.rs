//! Backfill: reading the events a resuming watch needs from etcd's history
//! when they are older than the watch cache's buffer, and splicing them in
//! front of it.
//!
//! After a restart the buffer starts empty at the revision the cache listed
//! at, so every client resuming from its last resourceVersion would get 410
//! Gone and re-list. Instead, such a watch waits while one temporary etcd
//! watch on the cache's prefix reads the events in `(from, complete_after]`,
//! which are then put in front of the buffer, lowering `complete_after`.
//!
//! - Single flight: one backfill runs at a time, from the oldest revision any
//!   waiting watch asked for (that etcd can still serve), so a storm of
//!   resuming clients costs one read of etcd's history, not one each.
//! - Bounded: at most the room left in the buffer in events, and at most
//!   [`BACKFILL_TIMEOUT`] of waiting per watch. A revision that etcd has
//!   compacted, or that more changes than that followed, is remembered as out
//!   of reach and answered at once from then on.
//! - No event twice, none lost: the backfill covers only up to the revision
//!   the buffer was complete after when it started, and is spliced in under
//!   the cache's write lock only if that is still so (no re-list, no event
//!   dropped meanwhile). Events the live feed appends meanwhile are after it.
//!
//! It touches only the buffer (the past), never the cache's copy of the
//! objects (the present), and never the live feed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{cache_event, event_cost, pop_front, read, trim, write, CacheEvent, Inner};
use crate::storage::{Event, Revision, Storage, StorageError, WatchMessage};

/// How long a watch waits for the backfill it needs, its own or the ones
/// queued before it, before it answers 410 as it would have without one.
const BACKFILL_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a backfill asks etcd for a progress notification: the only end
/// of its read when no event of the prefix follows the buffer's start, and
/// etcd ignores one asked before the watch has caught up.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// The backfills of one cache: who waits, which one runs, what is out of
/// reach.
#[derive(Debug, Default)]
pub(super) struct Backfills {
    /// The revisions waiting watches start after, with how many wait on each.
    wanted: Mutex<BTreeMap<Revision, usize>>,
    /// Held by the one backfill in flight; waiting watches queue on it and
    /// mostly find, once they get it, that the backfill before them did
    /// their work.
    running: tokio::sync::Mutex<()>,
    /// Every revision up to this one is out of reach for good: etcd compacted
    /// it, or more events than the buffer holds followed it.
    unreachable: AtomicI64,
}

impl Backfills {
    fn want(&self, revision: Revision) -> Wanted<'_> {
        *lock(&self.wanted).entry(revision).or_default() += 1;
        Wanted {
            backfills: self,
            revision,
        }
    }

    /// The oldest revision a waiting watch wants that may still be in reach.
    fn oldest_wanted(&self) -> Option<Revision> {
        let unreachable = self.unreachable();
        lock(&self.wanted)
            .keys()
            .find(|r| **r > unreachable)
            .copied()
    }

    fn unreachable(&self) -> Revision {
        self.unreachable.load(Ordering::Relaxed)
    }

    fn mark_unreachable(&self, revision: Revision) {
        self.unreachable.fetch_max(revision, Ordering::Relaxed);
    }
}

/// A watch's place among the waiting ones, given up when it is dropped
/// (also when the client goes away mid-wait).
#[derive(Debug)]
struct Wanted<'a> {
    backfills: &'a Backfills,
    revision: Revision,
}

impl Drop for Wanted<'_> {
    fn drop(&mut self) {
        let mut wanted = lock(&self.backfills.wanted);
        if let Some(count) = wanted.get_mut(&self.revision) {
            *count -= 1;
            if *count == 0 {
                wanted.remove(&self.revision);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why one backfill did not extend the buffer.
#[derive(Debug, thiserror::Error)]
enum BackfillError {
    #[error("revision {0} has been compacted")]
    Compacted(Revision),
    #[error("more than {room} events followed revision {from}, the room left in the buffer")]
    TooMany { from: Revision, room: usize },
    #[error(
        "the events after revision {from} take more than {room} bytes, the room left in the buffer"
    )]
    TooLarge { from: Revision, room: usize },
    #[error("etcd sent the event of {key} at revision {revision} without its previous value")]
    MissingPrev { key: String, revision: Revision },
    #[error("the cache re-listed or dropped events while the backfill read")]
    Superseded,
    #[error("reading etcd's history: {0}")]
    Storage(StorageError),
}

impl From<StorageError> for BackfillError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Compacted { requested } => BackfillError::Compacted(requested),
            other => BackfillError::Storage(other),
        }
    }
}

/// Extends the buffer back so that it holds every event after `after`, if
/// etcd still can and the buffer has room, within [`BACKFILL_TIMEOUT`].
/// Whether it did, the caller sees by trying the buffer again.
pub(super) async fn extend_back_to(inner: &Inner, after: Revision) {
    let deadline = Instant::now() + BACKFILL_TIMEOUT;
    let backfills = &inner.backfills;
    let _wanted = backfills.want(after);
    loop {
        if !needs_backfill(inner, after) {
            return;
        }
        let Ok(_running) = tokio::time::timeout_at(deadline, backfills.running.lock()).await else {
            tracing::debug!(prefix = %inner.prefix, after, "gave up waiting for the backfill in flight");
            return;
        };
        // The backfill we queued behind may have done our work.
        if !needs_backfill(inner, after) {
            return;
        }
        let from = backfills.oldest_wanted().map_or(after, |r| r.min(after));
        match tokio::time::timeout_at(deadline, backfill(inner, from)).await {
            Ok(Ok(events)) => {
                tracing::debug!(prefix = %inner.prefix, from, events, "watch cache backfilled from etcd's history");
                return;
            }
            Ok(Err(
                e @ (BackfillError::Compacted(_)
                | BackfillError::TooMany { .. }
                | BackfillError::TooLarge { .. }),
            )) => {
                tracing::debug!(prefix = %inner.prefix, from, error = %e, "watch cache cannot backfill");
                backfills.mark_unreachable(from);
                // That was an older revision another watch wanted; ours may
                // still be in reach.
                if from >= after {
                    return;
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(prefix = %inner.prefix, from, error = %e, "watch cache backfill failed");
                return;
            }
            Err(_) => {
                tracing::warn!(prefix = %inner.prefix, from, "watch cache backfill timed out");
                return;
            }
        }
    }
}

/// Whether a watch from `after` is older than the buffer and a backfill may
/// help: not known to be out of reach, and the buffer has room.
fn needs_backfill(inner: &Inner, after: Revision) -> bool {
    if after <= inner.backfills.unreachable() || !inner.ready.load(Ordering::Relaxed) {
        return false;
    }
    let state = read(&inner.state);
    after < state.complete_after
        && state.events.len() < inner.capacity
        && state.event_bytes < inner.max_bytes
}

/// One backfill: reads `(from, complete_after]` from etcd and splices it in
/// front of the buffer. Returns how many events it added.
async fn backfill(inner: &Inner, from: Revision) -> Result<usize, BackfillError> {
    let (generation, through, room) = {
        let state = read(&inner.state);
        // Events at `complete_after` still in the buffer are read again and
        // replaced, so they leave room.
        let partial: Vec<&Arc<CacheEvent>> = state
            .events
            .iter()
            .take_while(|e| e.revision <= state.complete_after)
            .collect();
        let partial_bytes: usize = partial.iter().map(|e| event_cost(e)).sum();
        let room = Room {
            events: inner
                .capacity
                .saturating_sub(state.events.len() - partial.len()),
            bytes: inner
                .max_bytes
                .saturating_sub(state.event_bytes.saturating_sub(partial_bytes)),
        };
        (state.generation, state.complete_after, room)
    };
    if from >= through {
        return Ok(0);
    }
    let events = read_history(inner.storage.as_ref(), &inner.prefix, from, through, room).await?;
    let count = events.len();
    splice(inner, generation, from, through, events)?;
    Ok(count)
}

/// How much a backfill may add to the buffer.
#[derive(Debug, Clone, Copy)]
struct Room {
    events: usize,
    /// As [`event_cost`] counts them.
    bytes: usize,
}

/// The events under `prefix` in `(from, through]`, from a temporary etcd
/// watch, as the live feed would have made them; no more than fit in
/// `room`, by count and by bytes, so that a watch from far back never
/// makes the server hold more history than its buffer would.
async fn read_history(
    storage: &dyn Storage,
    prefix: &str,
    from: Revision,
    through: Revision,
    room: Room,
) -> Result<Vec<Arc<CacheEvent>>, BackfillError> {
    let mut watch = storage.watch(prefix, from).await?;
    let mut events = Vec::new();
    let mut bytes = 0usize;
    let mut ask = tokio::time::interval(PROGRESS_INTERVAL);
    loop {
        tokio::select! {
            message = watch.next() => match message? {
                None => {
                    return Err(BackfillError::Storage(StorageError::Unavailable(
                        "the watch of etcd's history ended".to_owned(),
                    )))
                }
                Some(WatchMessage::Events(batch)) => {
                    for event in batch {
                        // Past the buffer's start: the buffer has the rest.
                        if event.revision() > through {
                            return Ok(events);
                        }
                        if events.len() == room.events {
                            return Err(BackfillError::TooMany { from, room: room.events });
                        }
                        check_complete(&event)?;
                        let event = Arc::new(cache_event(event, None));
                        bytes = bytes.saturating_add(event_cost(&event));
                        if bytes > room.bytes {
                            return Err(BackfillError::TooLarge { from, room: room.bytes });
                        }
                        events.push(event);
                    }
                }
                Some(WatchMessage::Progress(revision)) => {
                    if revision >= through {
                        return Ok(events);
                    }
                }
            },
            _ = ask.tick() => watch.request_progress().await?,
        }
    }
}

/// A backfill has no copy of the objects to fall back on: it needs etcd's
/// previous value of every modification and deletion (etcd always has it for
/// a revision it has not compacted; a stored key's create revision is never
/// 0, so 0 marks a value etcd did not send).
fn check_complete(event: &Event) -> Result<(), BackfillError> {
    let complete = match event {
        Event::Put { kv, prev } => prev.is_some() || kv.create_revision == kv.mod_revision,
        Event::Delete { prev, .. } => prev.create_revision > 0,
    };
    if complete {
        Ok(())
    } else {
        Err(BackfillError::MissingPrev {
            key: event.key().to_owned(),
            revision: event.revision(),
        })
    }
}

/// Puts `events`, which are every event in `(from, through]`, in front of the
/// buffer, if the buffer still starts at `through` in the same generation.
fn splice(
    inner: &Inner,
    generation: u64,
    from: Revision,
    through: Revision,
    events: Vec<Arc<CacheEvent>>,
) -> Result<(), BackfillError> {
    let mut state = write(&inner.state);
    if state.generation != generation || state.complete_after != through {
        return Err(BackfillError::Superseded);
    }
    // The backfill has every event at `through`; the buffer may hold some.
    while state.events.front().is_some_and(|e| e.revision <= through) {
        pop_front(&mut state);
    }
    for event in events.into_iter().rev() {
        state.event_bytes = state.event_bytes.saturating_add(event_cost(&event));
        state.events.push_front(event);
    }
    state.complete_after = from;
    trim(&mut state, inner);
    Ok(())
}

#[cfg(test)]
mod tests;
