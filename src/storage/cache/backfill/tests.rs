use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use tokio::sync::{Notify, Semaphore};

use super::*;
use crate::storage::cache::{CacheError, EventKind, WatchCache};
use crate::storage::memory::MemoryStorage;
use crate::storage::{Guard, KeyValue, ListOptions, ListPage, Release, WatchStream};

const PREFIX: &str = "/registry/g/things";

/// etcd as the backfill sees it: [`MemoryStorage`] plus compaction, a count
/// of the watches opened, and a gate that holds history watches back so that
/// a test can write while a backfill is in flight.
#[derive(Debug, Default)]
struct FakeEtcd {
    memory: MemoryStorage,
    /// As etcd's compaction: a watch must start at this revision or later.
    compacted: AtomicI64,
    watches: AtomicUsize,
    /// Watches opened while it is set deliver nothing until it has a permit.
    gate: Mutex<Option<Arc<Semaphore>>>,
    /// Notified when a watch is opened behind the gate.
    opened: Notify,
}

impl FakeEtcd {
    fn compact(&self, revision: Revision) {
        self.compacted.store(revision, Ordering::Relaxed);
    }

    /// From now on, watches wait until the returned gate gets a permit.
    fn close_gate(&self) -> Arc<Semaphore> {
        let gate = Arc::new(Semaphore::new(0));
        *lock(&self.gate) = Some(gate.clone());
        gate
    }

    fn watches(&self) -> usize {
        self.watches.load(Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl Storage for FakeEtcd {
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[Guard],
        fence: Option<&crate::storage::Fence>,
    ) -> crate::storage::Result<KeyValue> {
        self.memory.create_guarded(key, value, guards, fence).await
    }

    async fn get(&self, key: &str) -> crate::storage::Result<KeyValue> {
        self.memory.get(key).await
    }

    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[Release],
        fence: Option<&crate::storage::Fence>,
    ) -> crate::storage::Result<KeyValue> {
        self.memory
            .update_releasing(key, expected, value, releases, fence)
            .await
    }

    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[Release],
        fence: Option<&crate::storage::Fence>,
    ) -> crate::storage::Result<(KeyValue, Revision)> {
        self.memory
            .delete_releasing(key, expected, releases, fence)
            .await
    }

    async fn list(&self, prefix: &str, opts: ListOptions) -> crate::storage::Result<ListPage> {
        self.memory.list(prefix, opts).await
    }

    async fn current_revision(&self) -> crate::storage::Result<Revision> {
        self.memory.current_revision().await
    }

    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
    ) -> crate::storage::Result<Box<dyn WatchStream>> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        if after + 1 < self.compacted.load(Ordering::Relaxed) {
            return Err(StorageError::Compacted { requested: after });
        }
        let inner = self.memory.watch(prefix, after).await?;
        let gate = lock(&self.gate).clone();
        if gate.is_some() {
            self.opened.notify_one();
        }
        Ok(Box::new(GatedWatch { inner, gate }))
    }
}

#[derive(Debug)]
struct GatedWatch {
    inner: Box<dyn WatchStream>,
    gate: Option<Arc<Semaphore>>,
}

#[async_trait::async_trait]
impl WatchStream for GatedWatch {
    async fn next(&mut self) -> crate::storage::Result<Option<WatchMessage>> {
        // Cancel-safe: the gate is forgotten only once it has opened.
        if let Some(gate) = self.gate.clone() {
            let _permit = gate.acquire().await;
            self.gate = None;
        }
        self.inner.next().await
    }

    async fn request_progress(&mut self) -> crate::storage::Result<()> {
        self.inner.request_progress().await
    }
}

async fn ready_cache(etcd: Arc<FakeEtcd>, capacity: usize) -> WatchCache {
    let cache = WatchCache::start(etcd, PREFIX.to_owned(), capacity, Arc::new(Notify::new()));
    for _ in 0..500 {
        if cache.is_ready() {
            return cache;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("cache never became ready");
}

fn key(name: &str) -> String {
    format!("{PREFIX}/ns/{name}")
}

fn v(text: &str) -> Bytes {
    Bytes::from(text.to_owned())
}

/// What a watcher learns from each event: kind, revision, name, the value
/// after (for a deletion, the last one) and the value before.
type Seen = (EventKind, Revision, String, String, Option<String>);

fn seen(events: &[Arc<CacheEvent>]) -> Vec<Seen> {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    events
        .iter()
        .map(|e| {
            assert_eq!(e.object.mod_revision, e.revision, "{e:?}");
            let name = e.object.key.rsplit('/').next().unwrap_or_default();
            (
                e.kind,
                e.revision,
                name.to_owned(),
                text(&e.object.value),
                e.prev.as_ref().map(|p| text(&p.value)),
            )
        })
        .collect()
}

fn added(revision: Revision, name: &str, value: &str) -> Seen {
    (
        EventKind::Added,
        revision,
        name.to_owned(),
        value.to_owned(),
        None,
    )
}

fn modified(revision: Revision, name: &str, value: &str, before: &str) -> Seen {
    (
        EventKind::Modified,
        revision,
        name.to_owned(),
        value.to_owned(),
        Some(before.to_owned()),
    )
}

fn deleted(revision: Revision, name: &str, last: &str) -> Seen {
    (
        EventKind::Deleted,
        revision,
        name.to_owned(),
        last.to_owned(),
        Some(last.to_owned()),
    )
}

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_watch_from_before_the_cache_started_is_served_from_etcd_history() {
    let etcd = Arc::new(FakeEtcd::default());
    let a = etcd.create(&key("a"), v("a1")).await.unwrap();
    let b = etcd.create(&key("b"), v("b1")).await.unwrap();
    let a2 = etcd.update(&a.key, a.mod_revision, v("a2")).await.unwrap();
    let (_, b_gone) = etcd.delete(&b.key, b.mod_revision).await.unwrap();
    let cache = ready_cache(etcd.clone(), 100).await;
    let c = etcd.create(&key("c"), v("c1")).await.unwrap();
    cache.wait_for_revision(c.mod_revision, WAIT).await.unwrap();

    let w = cache.watch_from(a.mod_revision).await.unwrap();
    assert_eq!(
        seen(&w.backlog),
        [
            added(b.mod_revision, "b", "b1"),
            modified(a2.mod_revision, "a", "a2", "a1"),
            deleted(b_gone, "b", "b1"),
            added(c.mod_revision, "c", "c1"),
        ]
    );
    // The buffer now reaches back: the next resuming watch costs etcd nothing.
    let watches = etcd.watches();
    let again = cache.watch_from(a2.mod_revision).await.unwrap();
    assert_eq!(again.backlog.len(), 2);
    assert_eq!(etcd.watches(), watches);
}

#[tokio::test]
async fn events_the_live_feed_appends_during_a_backfill_are_neither_duplicated_nor_lost() {
    let etcd = Arc::new(FakeEtcd::default());
    let old = etcd.create(&key("old"), v("o1")).await.unwrap();
    let (_, old_gone) = etcd.delete(&old.key, old.mod_revision).await.unwrap();
    // The history the cache never saw: Added, Modified, Deleted interleaved.
    let a = etcd.create(&key("a"), v("a1")).await.unwrap();
    let b = etcd.create(&key("b"), v("b1")).await.unwrap();
    let a2 = etcd.update(&a.key, a.mod_revision, v("a2")).await.unwrap();
    let (_, b_gone) = etcd.delete(&b.key, b.mod_revision).await.unwrap();
    let c = etcd.create(&key("c"), v("c1")).await.unwrap();
    // Compacted up to `b`: a watch may resume after `a`, not before it.
    etcd.compact(b.mod_revision);
    let cache = ready_cache(etcd.clone(), 100).await;

    let gate = etcd.close_gate();
    let resume = tokio::spawn({
        let cache = cache.clone();
        async move { cache.watch_from(a.mod_revision).await }
    });
    etcd.opened.notified().await;
    // While the backfill's etcd watch is open, the live feed appends.
    let a3 = etcd.update(&a.key, a2.mod_revision, v("a3")).await.unwrap();
    let (_, c_gone) = etcd.delete(&c.key, c.mod_revision).await.unwrap();
    let d = etcd.create(&key("d"), v("d1")).await.unwrap();
    let (_, a_gone) = etcd.delete(&a.key, a3.mod_revision).await.unwrap();
    cache.wait_for_revision(a_gone, WAIT).await.unwrap();
    gate.add_permits(1);
    let mut w = resume.await.unwrap().unwrap();

    let mut expected = vec![
        added(b.mod_revision, "b", "b1"),
        modified(a2.mod_revision, "a", "a2", "a1"),
        deleted(b_gone, "b", "b1"),
        added(c.mod_revision, "c", "c1"),
        modified(a3.mod_revision, "a", "a3", "a2"),
        deleted(c_gone, "c", "c1"),
        added(d.mod_revision, "d", "d1"),
        deleted(a_gone, "a", "a3"),
    ];
    assert_eq!(seen(&w.backlog), expected);

    // Then live, from the next change on, once.
    let e = etcd.create(&key("e"), v("e1")).await.unwrap();
    let next = tokio::time::timeout(WAIT, w.live.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&[next]), [added(e.mod_revision, "e", "e1")]);
    assert!(w.live.try_recv().is_err());

    // The buffer itself holds each event once.
    cache.wait_for_revision(e.mod_revision, WAIT).await.unwrap();
    expected.push(added(e.mod_revision, "e", "e1"));
    let again = cache.watch_from(a.mod_revision).await.unwrap();
    assert_eq!(seen(&again.backlog), expected);

    // A revision etcd compacted still cannot be resumed.
    let err = cache.watch_from(old_gone).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_is_too_old_and_asks_etcd_only_once() {
    let etcd = Arc::new(FakeEtcd::default());
    let a = etcd.create(&key("a"), v("a1")).await.unwrap();
    let a2 = etcd.update(&a.key, a.mod_revision, v("a2")).await.unwrap();
    let a3 = etcd.update(&a.key, a2.mod_revision, v("a3")).await.unwrap();
    let b = etcd.create(&key("b"), v("b1")).await.unwrap();
    etcd.compact(a3.mod_revision);
    let cache = ready_cache(etcd.clone(), 100).await;

    // As before backfills: the buffer starts where the cache listed.
    let err = cache.watch_from(a.mod_revision).await.unwrap_err();
    assert_eq!(
        err,
        CacheError::TooOld {
            requested: a.mod_revision,
            oldest: b.mod_revision,
        }
    );
    // The cache's own watch and one try.
    assert_eq!(etcd.watches(), 2);
    let again = cache.watch_from(a.mod_revision).await.unwrap_err();
    assert!(matches!(again, CacheError::TooOld { .. }), "{again:?}");
    assert_eq!(etcd.watches(), 2);

    // From the compaction revision on, history is still there.
    let w = cache.watch_from(a3.mod_revision).await.unwrap();
    assert_eq!(seen(&w.backlog), [added(b.mod_revision, "b", "b1")]);
}

#[tokio::test]
async fn a_watch_with_more_changes_since_than_the_buffer_has_room_for_is_too_old() {
    let etcd = Arc::new(FakeEtcd::default());
    let mut created = Vec::new();
    for n in 1..=5 {
        created.push(etcd.create(&key(&format!("x{n}")), v("x")).await.unwrap());
    }
    let cache = ready_cache(etcd.clone(), 3).await;

    // Four changes followed the first create: one more than the buffer holds.
    let err = cache.watch_from(created[0].mod_revision).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
    // Three followed the second: they fit.
    let w = cache.watch_from(created[1].mod_revision).await.unwrap();
    let revisions: Vec<Revision> = w.backlog.iter().map(|e| e.revision).collect();
    assert_eq!(
        revisions,
        created[2..]
            .iter()
            .map(|kv| kv.mod_revision)
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_backfill_is_dropped_when_the_buffer_lost_its_oldest_events_meanwhile() {
    let etcd = Arc::new(FakeEtcd::default());
    let a = etcd.create(&key("a"), v("a1")).await.unwrap();
    let b = etcd.create(&key("b"), v("b1")).await.unwrap();
    let cache = ready_cache(etcd.clone(), 3).await;

    let gate = etcd.close_gate();
    let resume = tokio::spawn({
        let cache = cache.clone();
        async move { cache.watch_from(a.mod_revision).await }
    });
    etcd.opened.notified().await;
    // Four live changes overflow the buffer: it no longer starts where the
    // backfill would end, and splicing it in would leave a gap.
    let mut last = b.clone();
    for n in 2..=5 {
        last = etcd
            .update(&b.key, last.mod_revision, v(&format!("b{n}")))
            .await
            .unwrap();
    }
    cache
        .wait_for_revision(last.mod_revision, WAIT)
        .await
        .unwrap();
    gate.add_permits(1);
    let err = resume.await.unwrap().unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");

    // The buffer is as the live feed left it: it has lost the first live
    // change, and does not pretend otherwise.
    let err = cache.watch_from(b.mod_revision).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
    let w = cache.watch_from(last.mod_revision - 3).await.unwrap();
    assert_eq!(
        seen(&w.backlog),
        [
            modified(last.mod_revision - 2, "b", "b3", "b2"),
            modified(last.mod_revision - 1, "b", "b4", "b3"),
            modified(last.mod_revision, "b", "b5", "b4"),
        ]
    );
}

#[tokio::test]
async fn a_storm_of_resuming_watches_reads_etcd_history_once() {
    let etcd = Arc::new(FakeEtcd::default());
    let mut created = Vec::new();
    for n in 0..10 {
        created.push(etcd.create(&key(&format!("x{n}")), v("x")).await.unwrap());
    }
    let cache = ready_cache(etcd.clone(), 100).await;
    assert_eq!(etcd.watches(), 1);

    let gate = etcd.close_gate();
    let resume = |after: Revision| {
        let cache = cache.clone();
        tokio::spawn(async move { (after, cache.watch_from(after).await) })
    };
    // The oldest first: its backfill is the one in flight.
    let mut watches = vec![resume(created[0].mod_revision)];
    etcd.opened.notified().await;
    for n in 0..200 {
        watches.push(resume(created[n % 9].mod_revision));
    }
    // Until every one of them waits.
    loop {
        let waiting: usize = lock(&cache.inner.backfills.wanted).values().sum();
        if waiting == 201 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    gate.add_permits(1);

    for watch in watches {
        let (after, result) = watch.await.unwrap();
        let w = result.unwrap();
        let expected: Vec<Revision> = created
            .iter()
            .map(|kv| kv.mod_revision)
            .filter(|r| *r > after)
            .collect();
        let revisions: Vec<Revision> = w.backlog.iter().map(|e| e.revision).collect();
        assert_eq!(revisions, expected, "from {after}");
    }
    // The cache's own watch and one backfill.
    assert_eq!(etcd.watches(), 2);
    assert!(lock(&cache.inner.backfills.wanted).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_backfill_etcd_does_not_answer_in_time_is_too_old() {
    let etcd = Arc::new(FakeEtcd::default());
    let a = etcd.create(&key("a"), v("a1")).await.unwrap();
    etcd.create(&key("b"), v("b1")).await.unwrap();
    let cache = ready_cache(etcd.clone(), 100).await;

    let _never_opened = etcd.close_gate();
    let err = cache.watch_from(a.mod_revision).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
    // A slow etcd is not a compacted one: the next watch tries again.
    let tries = etcd.watches();
    let err = cache.watch_from(a.mod_revision).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
    assert_eq!(etcd.watches(), tries + 1);
}
