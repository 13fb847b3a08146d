use super::*;
use crate::storage::memory::MemoryStorage;
use bytes::Bytes;

const PREFIX: &str = "/registry/g/things";

async fn ready_cache(storage: Arc<MemoryStorage>, capacity: usize) -> WatchCache {
    ready_bounded_cache(storage, capacity, DEFAULT_MAX_BYTES).await
}

async fn ready_bounded_cache(
    storage: Arc<MemoryStorage>,
    capacity: usize,
    max_bytes: usize,
) -> WatchCache {
    let cache = WatchCache::start_bounded(
        storage,
        PREFIX.to_owned(),
        capacity,
        max_bytes,
        Arc::new(Notify::new()),
    );
    for _ in 0..100 {
        if cache.is_ready() {
            return cache;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("cache never became ready");
}

fn key(ns: &str, name: &str) -> String {
    format!("{PREFIX}/{ns}/{name}")
}

#[tokio::test]
async fn cache_lists_what_existed_before_it_started() {
    let storage = Arc::new(MemoryStorage::default());
    storage
        .create(&key("a", "x"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    storage
        .create(&key("b", "y"), Bytes::from_static(b"2"))
        .await
        .unwrap();
    storage
        .create("/registry/g/other/a/z", Bytes::from_static(b"3"))
        .await
        .unwrap();
    let cache = ready_cache(storage, 10).await;
    let (all, _) = cache.snapshot(&format!("{PREFIX}/")).unwrap();
    assert_eq!(all.len(), 2);
    let (in_a, _) = cache.snapshot(&format!("{PREFIX}/a/")).unwrap();
    assert_eq!(in_a.len(), 1);
    assert_eq!(in_a[0].value, Bytes::from_static(b"1"));
}

#[tokio::test]
async fn a_consistent_read_waits_for_writes_made_before_it() {
    let storage = Arc::new(MemoryStorage::default());
    let cache = ready_cache(storage.clone(), 10).await;
    let kv = storage
        .create(&key("a", "x"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    let now = storage.current_revision().await.unwrap();
    cache
        .wait_for_revision(now, Duration::from_secs(5))
        .await
        .unwrap();
    let (found, rev) = cache.get(&kv.key).unwrap();
    assert_eq!(found.unwrap().mod_revision, kv.mod_revision);
    assert!(rev >= now);
}

#[tokio::test]
async fn a_consistent_read_without_writes_is_answered_through_progress() {
    let storage = Arc::new(MemoryStorage::default());
    storage
        .create("/registry/g/other/a/z", Bytes::from_static(b"3"))
        .await
        .unwrap();
    let cache = ready_cache(storage.clone(), 10).await;
    // A write elsewhere moves etcd's revision past anything our prefix saw.
    storage
        .create("/registry/g/other/a/w", Bytes::from_static(b"4"))
        .await
        .unwrap();
    let now = storage.current_revision().await.unwrap();
    cache
        .wait_for_revision(now, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(cache.revision() >= now);
}

#[tokio::test]
async fn watch_from_a_revision_replays_later_events_then_streams_live_ones() {
    let storage = Arc::new(MemoryStorage::default());
    let cache = ready_cache(storage.clone(), 10).await;
    let a = storage
        .create(&key("a", "x"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    let b = storage
        .update(&a.key, a.mod_revision, Bytes::from_static(b"2"))
        .await
        .unwrap();
    cache
        .wait_for_revision(b.mod_revision, Duration::from_secs(5))
        .await
        .unwrap();

    let mut w = cache.watch_from(a.mod_revision).await.unwrap();
    assert_eq!(w.backlog.len(), 1);
    assert_eq!(w.backlog[0].kind, EventKind::Modified);
    assert_eq!(
        w.backlog[0].prev.as_ref().unwrap().value,
        Bytes::from_static(b"1")
    );

    let (_, deleted_at) = storage.delete(&a.key, b.mod_revision).await.unwrap();
    let live = tokio::time::timeout(Duration::from_secs(5), w.live.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(live.kind, EventKind::Deleted);
    assert_eq!(live.revision, deleted_at);
    assert_eq!(live.object.mod_revision, deleted_at);
    assert_eq!(live.object.value, Bytes::from_static(b"2"));
}

#[tokio::test]
async fn watch_from_a_revision_older_than_a_full_buffer_is_too_old() {
    let storage = Arc::new(MemoryStorage::default());
    let cache = ready_cache(storage.clone(), 2).await;
    let first = storage
        .create(&key("a", "1"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    for n in 2..=5 {
        storage
            .create(&key("a", &n.to_string()), Bytes::from_static(b"x"))
            .await
            .unwrap();
    }
    let now = storage.current_revision().await.unwrap();
    cache
        .wait_for_revision(now, Duration::from_secs(5))
        .await
        .unwrap();
    let err = cache.watch_from(first.mod_revision).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
    assert!(cache.watch_from(now - 1).await.is_ok());
}

#[tokio::test]
async fn snapshot_and_watch_miss_nothing_between_them() {
    let storage = Arc::new(MemoryStorage::default());
    let cache = ready_cache(storage.clone(), 100).await;
    storage
        .create(&key("a", "1"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    let now = storage.current_revision().await.unwrap();
    cache
        .wait_for_revision(now, Duration::from_secs(5))
        .await
        .unwrap();
    let mut sw = cache.snapshot_and_watch(&format!("{PREFIX}/")).unwrap();
    assert_eq!(sw.objects.len(), 1);
    let later = storage
        .create(&key("a", "2"), Bytes::from_static(b"2"))
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), sw.live.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.revision, later.mod_revision);
    assert!(e.revision > sw.revision);
    assert_eq!(e.kind, EventKind::Added);
}

/// Memory storage whose open watches all fail (as a lost connection does)
/// at each `cut`, counting the lists and watches the cache asks for.
#[derive(Debug)]
struct Cuttable {
    inner: Arc<MemoryStorage>,
    cuts: tokio::sync::watch::Sender<u32>,
    lists: std::sync::atomic::AtomicUsize,
    watches: std::sync::Mutex<Vec<Revision>>,
}

impl Cuttable {
    fn new() -> Self {
        Self {
            inner: Arc::default(),
            cuts: tokio::sync::watch::channel(0).0,
            lists: Default::default(),
            watches: Default::default(),
        }
    }

    /// Fails every watch open now; later ones are not affected.
    fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

#[derive(Debug)]
struct CutWatch {
    inner: Box<dyn WatchStream>,
    cuts: tokio::sync::watch::Receiver<u32>,
}

#[async_trait::async_trait]
impl WatchStream for CutWatch {
    async fn next(&mut self) -> crate::storage::Result<Option<WatchMessage>> {
        tokio::select! {
            biased;
            _ = self.cuts.changed() => Err(StorageError::Unavailable("transport error".to_owned())),
            message = self.inner.next() => message,
        }
    }
    async fn request_progress(&mut self) -> crate::storage::Result<()> {
        self.inner.request_progress().await
    }
}

#[async_trait::async_trait]
impl Storage for Cuttable {
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[crate::storage::Guard],
        fence: Option<&crate::storage::Fence>,
    ) -> crate::storage::Result<KeyValue> {
        self.inner.create_guarded(key, value, guards, fence).await
    }
    async fn get(&self, key: &str) -> crate::storage::Result<KeyValue> {
        self.inner.get(key).await
    }
    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[crate::storage::Release],
        fence: Option<&crate::storage::Fence>,
    ) -> crate::storage::Result<KeyValue> {
        self.inner
            .update_releasing(key, expected, value, releases, fence)
            .await
    }
    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[crate::storage::Release],
        fence: Option<&crate::storage::Fence>,
    ) -> crate::storage::Result<(KeyValue, Revision)> {
        self.inner
            .delete_releasing(key, expected, releases, fence)
            .await
    }
    async fn list(
        &self,
        prefix: &str,
        opts: ListOptions,
    ) -> crate::storage::Result<crate::storage::ListPage> {
        self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.list(prefix, opts).await
    }
    async fn current_revision(&self) -> crate::storage::Result<Revision> {
        self.inner.current_revision().await
    }
    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
    ) -> crate::storage::Result<Box<dyn WatchStream>> {
        self.watches.lock().unwrap().push(after);
        let mut cuts = self.cuts.subscribe();
        cuts.borrow_and_update();
        Ok(Box::new(CutWatch {
            inner: self.inner.watch(prefix, after).await?,
            cuts,
        }))
    }
}

#[tokio::test]
async fn a_lost_etcd_watch_resumes_from_the_cache_revision_and_its_watchers_stay_open() {
    let storage = Arc::new(Cuttable::new());
    let cache = WatchCache::start(
        storage.clone(),
        PREFIX.to_owned(),
        100,
        Arc::new(Notify::new()),
    );
    let first = storage
        .create(&key("a", "x"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    let revision = storage.current_revision().await.unwrap();
    cache
        .wait_for_revision(revision, Duration::from_secs(5))
        .await
        .unwrap();
    let mut watcher = cache.watch_from(first.mod_revision).await.unwrap();

    storage.cut();
    // The cache watches again before anything more is written.
    for _ in 0..500 {
        if storage.watches.lock().unwrap().len() > 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = storage
        .create(&key("a", "y"), Bytes::from_static(b"2"))
        .await
        .unwrap();
    cache
        .wait_for_revision(second.mod_revision, Duration::from_secs(5))
        .await
        .unwrap();

    assert_eq!(
        storage.lists.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no second list"
    );
    let watches = storage.watches.lock().unwrap().clone();
    assert_eq!(watches.len(), 2, "{watches:?}");
    assert_eq!(watches[1], revision, "resumed from the cache's revision");
    // The watcher from before the cut gets the write after it.
    let event = tokio::time::timeout(Duration::from_secs(5), watcher.live.recv())
        .await
        .expect("an event in time")
        .expect("the watcher stays open");
    assert_eq!(event.object.key, key("a", "y"));
}

#[tokio::test]
async fn large_values_written_again_and_again_are_kept_by_bytes_not_by_count() {
    // A tenant rewriting one large object: each revision would otherwise
    // stay in the buffer (10,000 of them) with its decoded forms.
    let storage = Arc::new(MemoryStorage::default());
    let big = Bytes::from(vec![b'x'; 100_000]);
    let one = CacheEvent {
        kind: EventKind::Modified,
        revision: 0,
        object: Arc::new(KeyValue {
            key: key("a", "fat"),
            value: big.clone(),
            create_revision: 0,
            mod_revision: 0,
            memo: Default::default(),
        }),
        prev: None,
    };
    // Room for three revisions with their previous values, not four.
    let max_bytes = event_cost(&one) * 2 * 3 + 1;
    let cache = ready_bounded_cache(storage.clone(), 10_000, max_bytes).await;
    let mut kv = storage.create(&key("a", "fat"), big.clone()).await.unwrap();
    let first = kv.mod_revision;
    for _ in 0..10 {
        kv = storage
            .update(&key("a", "fat"), kv.mod_revision, big.clone())
            .await
            .unwrap();
    }
    cache
        .wait_for_revision(kv.mod_revision, Duration::from_secs(5))
        .await
        .unwrap();
    {
        let state = read(&cache.inner.state);
        assert!(
            state.event_bytes <= max_bytes,
            "{} bytes",
            state.event_bytes
        );
        assert_eq!(state.events.len(), 3, "kept by bytes");
        let summed: usize = state.events.iter().map(|e| event_cost(e)).sum();
        assert_eq!(state.event_bytes, summed);
    }
    let err = cache.watch_from(first).await.unwrap_err();
    assert!(matches!(err, CacheError::TooOld { .. }), "{err:?}");
    let recent = cache.watch_from(kv.mod_revision - 1).await.unwrap();
    assert_eq!(recent.backlog.len(), 1);
}

#[tokio::test]
async fn the_newest_event_stays_even_when_it_alone_is_over_the_bytes() {
    let storage = Arc::new(MemoryStorage::default());
    let cache = ready_bounded_cache(storage.clone(), 10_000, 1).await;
    let kv = storage
        .create(&key("a", "x"), Bytes::from_static(b"1"))
        .await
        .unwrap();
    cache
        .wait_for_revision(kv.mod_revision, Duration::from_secs(5))
        .await
        .unwrap();
    let watch = cache.watch_from(kv.mod_revision - 1).await.unwrap();
    assert_eq!(watch.backlog.len(), 1);
}
