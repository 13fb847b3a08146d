use super::*;
use crate::storage::memory::MemoryStorage;
use bytes::Bytes;

const PREFIX: &str = "/registry/g/things";

async fn ready_cache(storage: Arc<MemoryStorage>, capacity: usize) -> WatchCache {
    let cache = WatchCache::start(
        storage,
        PREFIX.to_owned(),
        capacity,
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
