//! The watch cache: one etcd watch per resource, feeding an in-memory copy of
//! every object and a buffer of recent events, bounded by count and by
//! bytes ([`DEFAULT_CAPACITY`], [`DEFAULT_MAX_BYTES`]).
//!
//! Lists are served from the copy and watches from the buffer, so N clients cost
//! one etcd watch, not N. The cache is level-triggered: whenever its etcd watch
//! breaks (compaction, a lost connection) it lists again and closes the watches
//! it was serving, exactly as kube-apiserver's cacher does, so that clients
//! re-list instead of silently missing events.
//!
//! Consistency: [`WatchCache::wait_for_revision`] lets a reader demand a
//! revision it learned from etcd (a consistent read, like kube's
//! ConsistentListFromCache); the cache asks etcd for a progress notification
//! when no event would otherwise carry it there.
//!
//! Resumption: a watch from a revision older than the buffer (what every
//! client sends that resumes after our server restarted, or on a replica
//! that started after its revision) is not answered 410 Gone, as
//! kube-apiserver's watch cache answers it. The cache first reads the missing
//! events from etcd's history and puts them in front of its buffer
//! ([`backfill`]), one read for all the watches waiting on it. Only a
//! revision etcd has compacted, one followed by more changes than the buffer
//! has room for, or a read that does not finish in time, still gets
//! [`CacheError::TooOld`] (410 Expired).
//!
//! Each cache is counted under kube-apiserver's names
//! (`apiserver_watch_cache_events_received_total`, `…_events_dispatched_total`,
//! `…_initializations_total`, `…_resource_version`, `…_capacity`), labelled
//! by the group and resource of its prefix.
//!
//! The cache reads etcd only through [`Storage`]; it knows nothing of
//! objects, HTTP or API errors.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};

use crate::metrics::{self, CacheMetrics};

use super::{
    Event, KeyValue, ListOptions, Revision, Storage, StorageError, WatchMessage, WatchStream,
};

mod backfill;

/// How many recent events a cache keeps for watches that resume from a
/// resourceVersion, backfilled ones included; a watch that needs more
/// answers 410 Expired.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// How many bytes of recent events a cache keeps, as [`event_cost`] counts
/// them, besides [`DEFAULT_CAPACITY`]: a tenant who writes large objects
/// again and again fills the buffer by bytes long before it fills it by
/// count, and must not make every replica keep gigabytes of history.
/// Events of a few KiB fill it at about 1,300.
pub const DEFAULT_MAX_BYTES: usize = 32 * 1024 * 1024;

/// What one event of the buffer holds in memory, counted from its stored
/// bytes: the value and the value before it, each with the decoded object
/// and the encoding that readers keep beside it ([`Memo`](super::Memo)),
/// measured at about three times the stored bytes.
pub fn event_cost(event: &CacheEvent) -> usize {
    const MEMO_FACTOR: usize = 4;
    let stored = event.object.key.len()
        + event.object.value.len()
        + event.prev.as_ref().map_or(0, |p| p.value.len());
    stored.saturating_mul(MEMO_FACTOR).saturating_add(256)
}

/// How many events may queue for one slow watcher before it is closed.
const FANOUT_BUFFER: usize = 4_096;

/// What kind of change a cached event is, in watch terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One change, shared by every watcher that receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEvent {
    pub kind: EventKind,
    pub revision: Revision,
    /// The object after the change; for `Deleted`, the last value, with
    /// `mod_revision` set to the revision of the deletion.
    pub object: Arc<KeyValue>,
    /// The object before the change (`Modified`, `Deleted`).
    pub prev: Option<Arc<KeyValue>>,
}

/// Why a watch could not start from the cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("too old resource version: {requested} ({oldest})")]
    TooOld {
        requested: Revision,
        oldest: Revision,
    },
    #[error("the watch cache is not ready")]
    NotReady,
    #[error("timed out waiting for the watch cache to reach revision {0}")]
    Stale(Revision),
}

#[derive(Debug)]
struct State {
    objects: BTreeMap<String, Arc<KeyValue>>,
    /// Events in revision order. Every event after `complete_after` is here;
    /// some of the events at `complete_after` itself may be too (one
    /// transaction's events leave the buffer one at a time).
    events: VecDeque<Arc<CacheEvent>>,
    /// The [`event_cost`] of `events`, summed.
    event_bytes: usize,
    /// Every event after this revision is in `events`.
    complete_after: Revision,
    revision: Revision,
    /// Counts re-lists: a backfill read for one generation's buffer must not
    /// be spliced into the next one's.
    generation: u64,
    sender: broadcast::Sender<Arc<CacheEvent>>,
}

#[derive(Debug)]
struct Inner {
    prefix: String,
    capacity: usize,
    /// The most [`event_cost`] the buffer holds.
    max_bytes: usize,
    storage: Arc<dyn Storage>,
    state: RwLock<State>,
    revision: watch::Sender<Revision>,
    want_progress: Notify,
    ready: AtomicBool,
    backfills: backfill::Backfills,
    metrics: CacheMetrics,
}

/// The read handle of a watch cache; cheap to clone.
#[derive(Debug, Clone)]
pub struct WatchCache {
    inner: Arc<Inner>,
}

/// A watch served from the cache: first the buffered events after the
/// requested revision, then live ones.
#[derive(Debug)]
pub struct CacheWatch {
    pub backlog: Vec<Arc<CacheEvent>>,
    pub live: broadcast::Receiver<Arc<CacheEvent>>,
}

/// A snapshot of the objects under a prefix, with the revision it is at, and a
/// watch that continues exactly after it.
#[derive(Debug)]
pub struct SnapshotWatch {
    pub objects: Vec<Arc<KeyValue>>,
    pub revision: Revision,
    pub live: broadcast::Receiver<Arc<CacheEvent>>,
}

impl WatchCache {
    /// Creates a cache of every key under `prefix` and starts feeding it from
    /// `storage` in a background task, until `shutdown` is notified.
    pub fn start(
        storage: Arc<dyn Storage>,
        prefix: String,
        capacity: usize,
        shutdown: Arc<Notify>,
    ) -> Self {
        Self::start_bounded(storage, prefix, capacity, DEFAULT_MAX_BYTES, shutdown)
    }

    /// As [`WatchCache::start`], keeping at most `max_bytes` of events (as
    /// [`event_cost`] counts them) besides at most `capacity` of them.
    pub fn start_bounded(
        storage: Arc<dyn Storage>,
        prefix: String,
        capacity: usize,
        max_bytes: usize,
        shutdown: Arc<Notify>,
    ) -> Self {
        let (sender, _) = broadcast::channel(FANOUT_BUFFER);
        let (revision, _) = watch::channel(0);
        let (group, resource) = group_resource(&prefix);
        let metrics = metrics::global()
            .watch_cache
            .cache(group, resource, capacity.max(1));
        let inner = Arc::new(Inner {
            prefix,
            capacity: capacity.max(1),
            max_bytes,
            storage,
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                events: VecDeque::new(),
                event_bytes: 0,
                complete_after: 0,
                revision: 0,
                generation: 0,
                sender,
            }),
            revision,
            want_progress: Notify::new(),
            ready: AtomicBool::new(false),
            backfills: backfill::Backfills::default(),
            metrics,
        });
        let feeder = inner.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = feed_forever(&feeder) => {}
                () = shutdown.notified() => {}
            }
            feeder.ready.store(false, Ordering::Relaxed);
        });
        Self { inner }
    }

    /// Whether the cache has listed and is watching.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Relaxed)
    }

    /// The prefix this cache holds.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The newest revision the cache has caught up with.
    pub fn revision(&self) -> Revision {
        *self.inner.revision.borrow()
    }

    /// Waits until the cache has seen everything up to `revision`.
    pub async fn wait_for_revision(
        &self,
        revision: Revision,
        timeout: Duration,
    ) -> Result<(), CacheError> {
        let mut rx = self.inner.revision.subscribe();
        if *rx.borrow_and_update() >= revision && self.is_ready() {
            return Ok(());
        }
        self.inner.want_progress.notify_one();
        let wait = async {
            loop {
                if *rx.borrow_and_update() >= revision && self.is_ready() {
                    return Ok(());
                }
                // Keep asking: a progress request sent while the watch was
                // being re-established is lost.
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() {
                        return Err(CacheError::NotReady);
                    },
                    () = tokio::time::sleep(Duration::from_millis(100)) => {
                        self.inner.want_progress.notify_one();
                    }
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .unwrap_or(Err(CacheError::Stale(revision)))
    }

    /// The objects whose keys start with `prefix`, and the revision they are at.
    pub fn snapshot(&self, prefix: &str) -> Result<(Vec<Arc<KeyValue>>, Revision), CacheError> {
        if !self.is_ready() {
            return Err(CacheError::NotReady);
        }
        let state = read(&self.inner.state);
        Ok((range(&state.objects, prefix), state.revision))
    }

    /// How many objects under `prefix` the cache holds, counting no further
    /// than `at_most` (so that the count costs at most that many steps).
    pub fn count(&self, prefix: &str, at_most: usize) -> usize {
        under(&read(&self.inner.state).objects, prefix)
            .take(at_most)
            .count()
    }

    /// One object by key, and the revision the cache is at.
    pub fn get(&self, key: &str) -> Result<(Option<Arc<KeyValue>>, Revision), CacheError> {
        if !self.is_ready() {
            return Err(CacheError::NotReady);
        }
        let state = read(&self.inner.state);
        Ok((state.objects.get(key).cloned(), state.revision))
    }

    /// A watch of every change after `after`.
    ///
    /// A revision older than the buffer is first read back from etcd's
    /// history (shared with every other watch waiting for it, and bounded by
    /// the buffer's room and a time limit); only if that fails is the answer
    /// [`CacheError::TooOld`].
    pub async fn watch_from(&self, after: Revision) -> Result<CacheWatch, CacheError> {
        match self.watch_buffered(after) {
            Err(CacheError::TooOld { .. }) => {}
            served_or_failed => return served_or_failed,
        }
        backfill::extend_back_to(&self.inner, after).await;
        self.watch_buffered(after)
    }

    /// A watch of every change after `after`, from the buffer alone.
    fn watch_buffered(&self, after: Revision) -> Result<CacheWatch, CacheError> {
        if !self.is_ready() {
            return Err(CacheError::NotReady);
        }
        let state = read(&self.inner.state);
        if after < state.complete_after {
            return Err(CacheError::TooOld {
                requested: after,
                oldest: state.complete_after,
            });
        }
        let backlog = state
            .events
            .iter()
            .filter(|e| e.revision > after)
            .cloned()
            .collect();
        Ok(CacheWatch {
            backlog,
            live: state.sender.subscribe(),
        })
    }

    /// The current objects under `prefix` plus a watch of every later change,
    /// taken atomically (for `sendInitialEvents` and watches without a
    /// resourceVersion).
    pub fn snapshot_and_watch(&self, prefix: &str) -> Result<SnapshotWatch, CacheError> {
        if !self.is_ready() {
            return Err(CacheError::NotReady);
        }
        let state = read(&self.inner.state);
        Ok(SnapshotWatch {
            objects: range(&state.objects, prefix),
            revision: state.revision,
            live: state.sender.subscribe(),
        })
    }
}

fn range(objects: &BTreeMap<String, Arc<KeyValue>>, prefix: &str) -> Vec<Arc<KeyValue>> {
    under(objects, prefix).cloned().collect()
}

/// The objects whose keys start with `prefix`, in key order.
fn under<'a>(
    objects: &'a BTreeMap<String, Arc<KeyValue>>,
    prefix: &'a str,
) -> impl Iterator<Item = &'a Arc<KeyValue>> + 'a {
    objects
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
}

fn read(lock: &RwLock<State>) -> std::sync::RwLockReadGuard<'_, State> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write(lock: &RwLock<State>) -> std::sync::RwLockWriteGuard<'_, State> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// List, watch, apply; on any failure, start again after a short pause.
async fn feed_forever(inner: &Inner) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match feed_once(inner, inner.storage.as_ref()).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(err) => {
                tracing::warn!(prefix = %inner.prefix, error = %err, "watch cache lost its watch; re-listing");
                inner.ready.store(false, Ordering::Relaxed);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn feed_once(inner: &Inner, storage: &dyn Storage) -> Result<(), StorageError> {
    let (objects, revision) = list_all(storage, &inner.prefix).await?;
    let mut watch = storage.watch(&inner.prefix, revision).await?;
    {
        let mut state = write(&inner.state);
        state.objects = objects;
        state.events.clear();
        state.event_bytes = 0;
        state.complete_after = revision;
        state.revision = revision;
        state.generation += 1;
        // Watchers of the previous generation may have missed events: close
        // them by replacing the sender, so their clients re-list.
        let (sender, _) = broadcast::channel(FANOUT_BUFFER);
        state.sender = sender;
    }
    inner.revision.send_replace(revision);
    inner.metrics.initializations.inc();
    inner.metrics.resource_version.set(revision);
    inner.ready.store(true, Ordering::Relaxed);
    tracing::debug!(prefix = %inner.prefix, revision, "watch cache synced");

    loop {
        let (err, heard) = follow(inner, watch.as_mut()).await;
        if !heard || matches!(err, StorageError::Compacted { .. }) {
            // A watch that fails before it delivers anything is not worth
            // resuming again, and one past compaction cannot be: list afresh.
            return Err(err);
        }
        // The cache is whole up to its revision, so the watch resumes from
        // there (on whichever member answers now) and its watchers stay open,
        // as kube's reflector re-watches from its last resourceVersion. Only
        // a compacted revision, or a resumed watch that fails at once, costs
        // a re-list.
        let from = read(&inner.state).revision;
        tracing::warn!(prefix = %inner.prefix, error = %err, revision = from, "watch cache lost its etcd watch; resuming");
        tokio::time::sleep(RESUME_PAUSE).await;
        watch = storage.watch(&inner.prefix, from).await?;
    }
}

/// How long the cache waits before it resumes a watch that failed.
const RESUME_PAUSE: Duration = Duration::from_millis(100);

/// Applies what `watch` delivers until it fails; returns the error, and
/// whether it delivered anything first.
async fn follow(inner: &Inner, watch: &mut dyn WatchStream) -> (StorageError, bool) {
    let mut heard = false;
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        let step = tokio::select! {
            message = watch.next() => match message {
                Err(err) => Err(err),
                Ok(None) => Err(StorageError::Unavailable("watch stream ended".to_owned())),
                Ok(Some(WatchMessage::Events(events))) => {
                    heard = true;
                    apply(inner, events);
                    Ok(())
                }
                Ok(Some(WatchMessage::Progress(revision))) => {
                    heard = true;
                    advance(inner, revision);
                    Ok(())
                }
            },
            () = inner.want_progress.notified() => watch.request_progress().await,
            // Keep the revision fresh for bookmarks even when nothing changes.
            _ = tick.tick() => watch.request_progress().await,
        };
        if let Err(err) = step {
            return (err, heard);
        }
    }
}

async fn list_all(
    storage: &dyn Storage,
    prefix: &str,
) -> Result<(BTreeMap<String, Arc<KeyValue>>, Revision), StorageError> {
    let mut objects = BTreeMap::new();
    // Pages of 1,000 keep each answer (and the memory it takes to decode)
    // to a few MiB at the object sizes we store.
    let mut opts = ListOptions {
        limit: Some(1_000),
        ..ListOptions::default()
    };
    loop {
        let page = storage.list(&format!("{prefix}/"), opts.clone()).await?;
        opts.revision = Some(page.revision);
        opts.start_after = page.items.last().map(|kv| kv.key.clone());
        for kv in page.items {
            objects.insert(kv.key.clone(), Arc::new(kv));
        }
        if !page.more {
            return Ok((objects, page.revision));
        }
    }
}

/// The group and resource a cache's prefix ends in
/// (`/registry/storage.transfer.k8s.io/namespacetransfers`), for its labels.
fn group_resource(prefix: &str) -> (&str, &str) {
    let mut segments = prefix.trim_end_matches('/').rsplit('/');
    let resource = segments.next().unwrap_or_default();
    (segments.next().unwrap_or_default(), resource)
}

fn apply(inner: &Inner, events: Vec<Event>) {
    let mut last = None;
    {
        let mut state = write(&inner.state);
        for event in events {
            let revision = event.revision();
            // One etcd transaction may change several keys at one revision.
            if revision < state.revision {
                continue;
            }
            let cached = state.objects.get(event.key()).cloned();
            let cached = Arc::new(cache_event(event, cached));
            if cached.kind == EventKind::Deleted {
                state.objects.remove(&cached.object.key);
            } else {
                state
                    .objects
                    .insert(cached.object.key.clone(), cached.object.clone());
            }
            state.event_bytes = state.event_bytes.saturating_add(event_cost(&cached));
            state.events.push_back(cached.clone());
            trim(&mut state, inner);
            state.revision = revision;
            inner.metrics.events_received.inc();
            // No receivers is fine.
            if let Ok(watchers) = state.sender.send(cached) {
                inner.metrics.events_dispatched.inc_by(watchers as u64);
            }
            last = Some(revision);
        }
    }
    if let Some(revision) = last {
        inner.revision.send_replace(revision);
        inner.metrics.resource_version.set(revision);
    }
}

/// One etcd event as watchers see it. `cached` is the cache's copy of the key
/// before the event, which the live feed has and a backfill does not; without
/// it, etcd's previous value stands in.
fn cache_event(event: Event, cached: Option<Arc<KeyValue>>) -> CacheEvent {
    match event {
        Event::Put { kv, prev } => {
            let prev = cached.or_else(|| prev.map(Arc::new));
            CacheEvent {
                kind: if prev.is_some() {
                    EventKind::Modified
                } else {
                    EventKind::Added
                },
                revision: kv.mod_revision,
                object: Arc::new(kv),
                prev,
            }
        }
        Event::Delete { prev, revision } => {
            let last_value = cached.as_deref().cloned().unwrap_or(prev);
            let object = Arc::new(KeyValue {
                mod_revision: revision,
                memo: Default::default(),
                ..last_value.clone()
            });
            CacheEvent {
                kind: EventKind::Deleted,
                revision,
                object,
                prev: Some(Arc::new(last_value)),
            }
        }
    }
}

/// Drops the oldest events beyond the cache's count or bytes (the newest
/// event always stays); watches from before the last one dropped are too
/// old from then on.
fn trim(state: &mut State, inner: &Inner) {
    while state.events.len() > inner.capacity
        || (state.event_bytes > inner.max_bytes && state.events.len() > 1)
    {
        match pop_front(state) {
            Some(dropped) => state.complete_after = dropped.revision,
            None => break,
        }
    }
}

/// Takes the oldest event out of the buffer, and its cost off the sum.
fn pop_front(state: &mut State) -> Option<Arc<CacheEvent>> {
    let dropped = state.events.pop_front()?;
    state.event_bytes = state.event_bytes.saturating_sub(event_cost(&dropped));
    Some(dropped)
}

fn advance(inner: &Inner, revision: Revision) {
    {
        let mut state = write(&inner.state);
        if revision <= state.revision {
            return;
        }
        state.revision = revision;
    }
    inner.revision.send_replace(revision);
}

#[cfg(test)]
mod tests;
