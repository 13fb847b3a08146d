//! The etcd backend against a real etcd (the pinned 3.6 release): transactions,
//! preconditions, guarded creates, consistent paged lists, watch resume and
//! compaction.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::Duration;

use bytes::Bytes;
use storage_transfer_apiserver::storage::etcd::{EtcdConfig, EtcdStorage};
use storage_transfer_apiserver::storage::{
    Event, Fence, Guard, ListOptions, Release, Storage, StorageError, WatchMessage,
};

async fn etcd(name: &str) -> (sta_testenv::Etcd, EtcdStorage) {
    let etcd = sta_testenv::Etcd::for_test(name);
    let storage = EtcdStorage::connect(&EtcdConfig {
        endpoints: vec![etcd.url.clone()],
        ..EtcdConfig::default()
    })
    .await
    .unwrap();
    (etcd, storage)
}

const P: &str = "/registry/storage.transfer.k8s.io/namespacetransfers";

fn v(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

#[tokio::test]
async fn create_is_refused_for_an_existing_key() {
    let (_etcd, s) = etcd("create").await;
    let key = format!("{P}/ns/a");
    let kv = s.create(&key, v("1")).await.unwrap();
    assert_eq!(kv.create_revision, kv.mod_revision);
    assert_eq!(
        s.create(&key, v("2")).await.unwrap_err(),
        StorageError::AlreadyExists { key: key.clone() }
    );
    assert_eq!(s.get(&key).await.unwrap().value, v("1"));
}

#[tokio::test]
async fn update_and_delete_hold_to_the_expected_revision() {
    let (_etcd, s) = etcd("update").await;
    let key = format!("{P}/ns/a");
    let first = s.create(&key, v("1")).await.unwrap();
    let second = s.update(&key, first.mod_revision, v("2")).await.unwrap();
    assert!(second.mod_revision > first.mod_revision);

    let stale = s
        .update(&key, first.mod_revision, v("3"))
        .await
        .unwrap_err();
    assert_eq!(
        stale,
        StorageError::Conflict {
            key: key.clone(),
            expected: first.mod_revision,
            actual: second.mod_revision
        }
    );
    assert!(matches!(
        s.delete(&key, first.mod_revision).await,
        Err(StorageError::Conflict { .. })
    ));
    assert_eq!(s.get(&key).await.unwrap().value, v("2"));

    let (gone, at) = s.delete(&key, second.mod_revision).await.unwrap();
    assert_eq!(gone.value, v("2"));
    assert!(at > second.mod_revision);
    assert!(matches!(
        s.get(&key).await,
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        s.update(&key, at, v("4")).await,
        Err(StorageError::NotFound { .. })
    ));
}

const INDEX: &str = "/registry/storage.transfer.k8s.io/_index/namespacetransfers";

fn guard(key: &str, expected: Option<i64>, value: &'static str) -> Guard {
    Guard {
        key: key.to_owned(),
        expected,
        value: v(value),
    }
}

#[tokio::test]
async fn a_guarded_create_writes_the_object_and_its_guard_keys_in_one_transaction() {
    let (_etcd, s) = etcd("guarded").await;
    let (a, b) = (format!("{P}/ns/a"), format!("{P}/ns/b"));
    let (source, destination) = (
        format!("{INDEX}/source/ns/db"),
        format!("{INDEX}/destination/dev/db"),
    );
    let created = s
        .create_guarded(
            &a,
            v("a"),
            &[
                guard(&source, None, "held by a"),
                guard(&destination, None, "held by a"),
            ],
            None,
        )
        .await
        .unwrap();
    for key in [&source, &destination] {
        let entry = s.get(key).await.unwrap();
        assert_eq!(
            (entry.value, entry.mod_revision),
            (v("held by a"), created.mod_revision)
        );
    }

    // A guard that expects an absent key which now exists.
    assert_eq!(
        s.create_guarded(&b, v("b"), &[guard(&source, None, "held by b")], None)
            .await
            .unwrap_err(),
        StorageError::Conflict {
            key: source.clone(),
            expected: 0,
            actual: created.mod_revision
        }
    );
    // A guard that expects a key that does not exist.
    let missing = format!("{INDEX}/source/ns/missing");
    assert_eq!(
        s.create_guarded(
            &b,
            v("b"),
            &[guard(&missing, Some(created.mod_revision), "b")],
            None
        )
        .await
        .unwrap_err(),
        StorageError::Conflict {
            key: missing.clone(),
            expected: created.mod_revision,
            actual: 0
        }
    );
    // Nothing of a failed create is written.
    assert!(matches!(
        s.get(&b).await,
        Err(StorageError::NotFound { .. })
    ));
    assert!(matches!(
        s.get(&missing).await,
        Err(StorageError::NotFound { .. })
    ));
    assert_eq!(s.get(&source).await.unwrap().value, v("held by a"));

    // An existing object is AlreadyExists, whatever the guards say.
    assert_eq!(
        s.create_guarded(&a, v("a again"), &[guard(&source, Some(1), "x")], None)
            .await
            .unwrap_err(),
        StorageError::AlreadyExists { key: a.clone() }
    );

    // A guard at the revision it was read at takes the key over.
    let taken = s
        .create_guarded(
            &b,
            v("b"),
            &[guard(&source, Some(created.mod_revision), "held by b")],
            None,
        )
        .await
        .unwrap();
    let entry = s.get(&source).await.unwrap();
    assert_eq!(
        (entry.value, entry.mod_revision),
        (v("held by b"), taken.mod_revision)
    );
}

#[tokio::test]
async fn an_update_or_delete_releases_index_keys_still_at_their_revision_in_one_transaction() {
    let (_etcd, s) = etcd("release").await;
    let (a, b) = (format!("{P}/ns/a"), format!("{P}/ns/b"));
    let (source, destination) = (
        format!("{INDEX}/source/ns/db"),
        format!("{INDEX}/destination/dev/db"),
    );
    let created = s
        .create_guarded(
            &a,
            v("a"),
            &[
                guard(&source, None, "held by a"),
                guard(&destination, None, "held by a"),
            ],
            None,
        )
        .await
        .unwrap();
    // The destination entry moved since: taken over by someone else.
    let moved = s
        .update(&destination, created.mod_revision, v("held by c"))
        .await
        .unwrap();
    let release = |key: &str| Release {
        key: key.to_owned(),
        revision: created.mod_revision,
    };
    let stale = s
        .update_releasing(
            &a,
            moved.mod_revision,
            v("a done"),
            &[release(&source)],
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(stale, StorageError::Conflict { .. }), "{stale:?}");
    assert_eq!(
        s.get(&source).await.unwrap().value,
        v("held by a"),
        "a refused write releases nothing"
    );
    let finished = s
        .update_releasing(
            &a,
            created.mod_revision,
            v("a done"),
            &[release(&source), release(&destination)],
            None,
        )
        .await
        .unwrap();
    assert!(matches!(
        s.get(&source).await,
        Err(StorageError::NotFound { .. })
    ));
    assert_eq!(
        s.get(&destination).await.unwrap().value,
        v("held by c"),
        "a key that moved is left alone"
    );
    assert_eq!(s.get(&a).await.unwrap().value, v("a done"));

    let held = s
        .create_guarded(&b, v("b"), &[guard(&source, None, "held by b")], None)
        .await
        .unwrap();
    s.delete_releasing(&a, finished.mod_revision, &[], None)
        .await
        .unwrap();
    let (last, at) = s
        .delete_releasing(
            &b,
            held.mod_revision,
            &[Release {
                key: source.clone(),
                revision: held.mod_revision,
            }],
            None,
        )
        .await
        .unwrap();
    assert_eq!(last.value, v("b"));
    assert!(at > held.mod_revision);
    assert!(matches!(
        s.get(&source).await,
        Err(StorageError::NotFound { .. })
    ));
}

#[tokio::test]
async fn a_fenced_write_goes_through_only_while_its_fence_key_is_as_created() {
    let (_etcd, s) = etcd("fence").await;
    let term = "/registry/storage.transfer.k8s.io/_leader/controllers/694d";
    let (a, b, index) = (
        format!("{P}/ns/a"),
        format!("{P}/ns/b"),
        format!("{P}-index"),
    );
    let started = s.create(term, v("replica-a")).await.unwrap();
    let fence = Fence {
        key: term.to_owned(),
        create_revision: started.create_revision,
    };
    let created = s
        .create_guarded(&a, v("1"), &[guard(&index, None, "a")], Some(&fence))
        .await
        .unwrap();
    let updated = s
        .update_releasing(&a, created.mod_revision, v("2"), &[], Some(&fence))
        .await
        .unwrap();
    // A put to the fence key keeps its create revision: still the same term.
    s.update(term, started.mod_revision, v("renewed"))
        .await
        .unwrap();
    let updated = s
        .update_releasing(&a, updated.mod_revision, v("3"), &[], Some(&fence))
        .await
        .unwrap();

    // The term ends (etcd deletes an expired lease's keys).
    let ended = s.get(term).await.unwrap();
    s.delete(term, ended.mod_revision).await.unwrap();
    let fenced = |actual| StorageError::Fenced {
        key: term.to_owned(),
        expected: started.create_revision,
        actual,
    };
    assert_eq!(
        s.update_releasing(&a, updated.mod_revision, v("late"), &[], Some(&fence))
            .await
            .unwrap_err(),
        fenced(0)
    );
    assert_eq!(
        s.delete_releasing(&a, updated.mod_revision, &[], Some(&fence))
            .await
            .unwrap_err(),
        fenced(0)
    );
    // Refused on the fence first, though the object's own check fails too.
    assert_eq!(
        s.create_guarded(&a, v("late"), &[guard(&index, None, "late")], Some(&fence))
            .await
            .unwrap_err(),
        fenced(0)
    );
    // A new term under the same key is another term.
    let again = s.create(term, v("replica-a")).await.unwrap();
    assert_eq!(
        s.create_guarded(&b, v("late"), &[], Some(&fence))
            .await
            .unwrap_err(),
        fenced(again.create_revision)
    );
    let now = s.get(&a).await.unwrap();
    assert_eq!(
        (now.value, now.mod_revision),
        (v("3"), updated.mod_revision)
    );
    assert_eq!(s.get(&index).await.unwrap().value, v("a"));
    assert!(matches!(
        s.get(&b).await.unwrap_err(),
        StorageError::NotFound { .. }
    ));
    // Without a fence, or with the new term's, the same writes go through.
    let renewed = Fence {
        key: term.to_owned(),
        create_revision: again.create_revision,
    };
    s.update_releasing(&a, updated.mod_revision, v("4"), &[], Some(&renewed))
        .await
        .unwrap();
    s.create_guarded(&b, v("1"), &[], None).await.unwrap();
}

#[tokio::test]
async fn a_list_and_a_watch_larger_than_grpcs_default_message_limit_are_read_whole() {
    // 600 objects of 10 KiB: 6 MiB, past gRPC's default 4 MiB per message.
    let (_etcd, s) = etcd("large").await;
    let value = Bytes::from(vec![b'x'; 10 * 1024]);
    let start = s.current_revision().await.unwrap();
    for chunk in (0..600).collect::<Vec<_>>().chunks(50) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("{P}/ns/o{i:03}")).collect();
        let creates = keys.iter().map(|key| s.create(key, value.clone()));
        for created in futures::future::join_all(creates).await {
            created.unwrap();
        }
    }
    let page = s
        .list(&format!("{P}/"), ListOptions::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), 600);
    assert!(!page.more);

    // A watch from before the writes catches up on all of them.
    let mut watch = s.watch(&format!("{P}/"), start).await.unwrap();
    let mut seen = 0;
    while seen < 600 {
        match tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("the watch delivered")
            .unwrap()
            .expect("the watch is open")
        {
            WatchMessage::Events(events) => seen += events.len(),
            WatchMessage::Progress(_) => {}
        }
    }
    assert_eq!(seen, 600);
}

#[tokio::test]
async fn of_concurrent_guarded_creates_on_one_key_exactly_one_wins() {
    let (_etcd, s) = etcd("guarded-race").await;
    let index = format!("{INDEX}/source/ns/db");
    let creates = (0..8).map(|i| {
        let (s, index) = (s.clone(), index.clone());
        tokio::spawn(async move {
            s.create_guarded(
                &format!("{P}/ns/t{i}"),
                v("t"),
                &[guard(&index, None, "t")],
                None,
            )
            .await
        })
    });
    let mut won = 0;
    for create in creates.collect::<Vec<_>>() {
        match create.await.unwrap() {
            Ok(_) => won += 1,
            Err(StorageError::Conflict { key, .. }) => assert_eq!(key, index),
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test]
async fn a_paged_list_stays_at_its_revision_under_concurrent_writes() {
    let (_etcd, s) = etcd("paging").await;
    for i in 0..10 {
        s.create(&format!("{P}/ns/obj-{i:02}"), v("x"))
            .await
            .unwrap();
    }
    let first = s
        .list(
            &format!("{P}/"),
            ListOptions {
                limit: Some(4),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(first.items.len(), 4);
    assert!(first.more);
    assert_eq!(first.remaining, 6);

    // Writes between pages must not show up in later pages.
    s.create(&format!("{P}/ns/obj-05a"), v("new"))
        .await
        .unwrap();
    let victim = s.get(&format!("{P}/ns/obj-09")).await.unwrap();
    s.delete(&victim.key, victim.mod_revision).await.unwrap();

    let mut keys: Vec<String> = first.items.iter().map(|kv| kv.key.clone()).collect();
    let mut opts = ListOptions {
        revision: Some(first.revision),
        start_after: keys.last().cloned(),
        limit: Some(4),
    };
    loop {
        let page = s.list(&format!("{P}/"), opts.clone()).await.unwrap();
        assert_eq!(page.revision, first.revision);
        keys.extend(page.items.iter().map(|kv| kv.key.clone()));
        if !page.more {
            break;
        }
        opts.start_after = keys.last().cloned();
    }
    let expected: Vec<String> = (0..10).map(|i| format!("{P}/ns/obj-{i:02}")).collect();
    assert_eq!(keys, expected);
}

#[tokio::test]
async fn a_list_at_a_compacted_revision_is_refused() {
    let (_etcd, s) = etcd("compact-list").await;
    let a = s.create(&format!("{P}/ns/a"), v("1")).await.unwrap();
    s.update(&a.key, a.mod_revision, v("2")).await.unwrap();
    let now = s.current_revision().await.unwrap();
    s.client().compact(now, None).await.unwrap();
    let err = s
        .list(
            &format!("{P}/"),
            ListOptions {
                revision: Some(a.mod_revision),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StorageError::Compacted {
            requested: a.mod_revision
        }
    );
}

#[tokio::test]
async fn a_watch_resumes_after_a_revision_and_sees_puts_and_deletes() {
    let (_etcd, s) = etcd("watch").await;
    let a = s.create(&format!("{P}/ns/a"), v("1")).await.unwrap();
    let b = s.update(&a.key, a.mod_revision, v("2")).await.unwrap();
    s.create("/registry/other/x", v("elsewhere")).await.unwrap();
    let (_, deleted) = s.delete(&a.key, b.mod_revision).await.unwrap();

    let mut w = s.watch(&format!("{P}/"), a.mod_revision).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match w.next().await.unwrap().unwrap() {
            WatchMessage::Events(events) => seen.extend(events),
            WatchMessage::Progress(_) => {}
        }
    }
    match &seen[0] {
        Event::Put { kv, prev } => {
            assert_eq!(kv.value, v("2"));
            assert_eq!(prev.as_ref().unwrap().value, v("1"));
        }
        other => panic!("expected a put, got {other:?}"),
    }
    match &seen[1] {
        Event::Delete { prev, revision } => {
            assert_eq!(*revision, deleted);
            assert_eq!(prev.value, v("2"));
        }
        other => panic!("expected a delete, got {other:?}"),
    }
}

#[tokio::test]
async fn a_progress_request_reports_the_current_revision() {
    let (_etcd, s) = etcd("progress").await;
    s.create("/registry/other/x", v("1")).await.unwrap();
    let now = s.current_revision().await.unwrap();
    let mut w = s.watch(&format!("{P}/"), now).await.unwrap();
    // A write outside the watched prefix: etcd (3.5.13+, 3.6) answers a
    // progress request only once the store has reached the watch's start
    // revision and every watcher on the stream has caught up; one that comes
    // earlier is dropped (etcd issue 17507). So ask until it answers, as the
    // watch cache does.
    let elsewhere = s.create("/registry/other/y", v("2")).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            w.request_progress().await.unwrap();
            if let Ok(message) = tokio::time::timeout(Duration::from_millis(200), w.next()).await {
                match message.unwrap().unwrap() {
                    WatchMessage::Progress(rev) => return rev,
                    WatchMessage::Events(events) => {
                        panic!("no event under the prefix: {events:?}")
                    }
                }
            }
        }
    })
    .await
    .expect("etcd answered a progress request within 10 s");
    assert!(
        answered >= elsewhere.mod_revision,
        "{answered} < {}",
        elsewhere.mod_revision
    );
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_fails_as_compacted() {
    let (_etcd, s) = etcd("compact-watch").await;
    let a = s.create(&format!("{P}/ns/a"), v("1")).await.unwrap();
    let b = s.update(&a.key, a.mod_revision, v("2")).await.unwrap();
    s.update(&a.key, b.mod_revision, v("3")).await.unwrap();
    let now = s.current_revision().await.unwrap();
    s.client().compact(now, None).await.unwrap();
    let mut w = s.watch(&format!("{P}/"), a.mod_revision - 1).await.unwrap();
    let err = w.next().await.unwrap_err();
    assert!(matches!(err, StorageError::Compacted { .. }), "{err:?}");
}
