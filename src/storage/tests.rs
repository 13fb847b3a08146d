use super::*;

#[test]
fn keys_follow_the_kube_layout() {
    assert_eq!(
        key_for(
            "/registry",
            "storage.transfer.k8s.io",
            "namespacetransfers",
            "prod",
            "db"
        ),
        "/registry/storage.transfer.k8s.io/namespacetransfers/prod/db"
    );
    assert_eq!(resource_prefix("/registry/", "g", "r"), "/registry/g/r");
}

#[test]
fn prefix_end_is_the_next_key_after_the_prefix_range() {
    assert_eq!(prefix_end("/a/b/"), b"/a/b0".to_vec());
    assert_eq!(prefix_end("ab"), b"ac".to_vec());
}

#[test]
fn index_keys_are_never_under_a_resource_prefix() {
    let index = index_key(
        "/registry/",
        "storage.transfer.k8s.io",
        "namespacetransfers",
        "source/prod/db",
    );
    assert_eq!(
        index,
        "/registry/storage.transfer.k8s.io/_index/namespacetransfers/source/prod/db"
    );
    for resource in ["namespacetransfers", "ephemeralclaims"] {
        let watched = resource_prefix("/registry", "storage.transfer.k8s.io", resource);
        assert!(!index.starts_with(&watched), "{index} is under {watched}");
    }
}

#[tokio::test]
async fn the_memory_fake_guards_creates_as_etcd_does() {
    use bytes::Bytes;

    let s = memory::MemoryStorage::default();
    let guard = |expected, value: &'static str| Guard {
        key: "/i/source/ns/db".to_owned(),
        expected,
        value: Bytes::from_static(value.as_bytes()),
    };
    let a = s
        .create_guarded("/o/a", Bytes::from_static(b"a"), &[guard(None, "a")], None)
        .await
        .unwrap();
    let entry = s.get("/i/source/ns/db").await.unwrap();
    assert_eq!(
        (entry.value.as_ref(), entry.mod_revision),
        (&b"a"[..], a.mod_revision)
    );
    assert_eq!(
        s.create_guarded("/o/b", Bytes::from_static(b"b"), &[guard(None, "b")], None)
            .await
            .unwrap_err(),
        StorageError::Conflict {
            key: "/i/source/ns/db".to_owned(),
            expected: 0,
            actual: a.mod_revision
        }
    );
    assert_eq!(
        s.create_guarded(
            "/o/a",
            Bytes::from_static(b"a"),
            &[guard(Some(1), "a")],
            None
        )
        .await
        .unwrap_err(),
        StorageError::AlreadyExists {
            key: "/o/a".to_owned()
        }
    );
    assert!(s.get("/o/b").await.is_err());
    s.create_guarded(
        "/o/b",
        Bytes::from_static(b"b"),
        &[guard(Some(a.mod_revision), "b")],
        None,
    )
    .await
    .unwrap();
    assert_eq!(s.get("/i/source/ns/db").await.unwrap().value.as_ref(), b"b");
}

#[tokio::test]
async fn the_memory_fake_refuses_every_write_whose_fence_key_is_gone_or_made_again() {
    use bytes::Bytes;

    let s = memory::MemoryStorage::default();
    let term = s
        .create("/election/a", Bytes::from_static(b"a"))
        .await
        .unwrap();
    let fence = Fence {
        key: "/election/a".to_owned(),
        create_revision: term.create_revision,
    };
    let o = s
        .create_guarded("/o/a", Bytes::from_static(b"1"), &[], Some(&fence))
        .await
        .unwrap();
    let o = s
        .update_releasing(
            "/o/a",
            o.mod_revision,
            Bytes::from_static(b"2"),
            &[],
            Some(&fence),
        )
        .await
        .unwrap();

    // The term ends, and a new one starts under the same key.
    s.delete("/election/a", term.mod_revision).await.unwrap();
    let fenced = |actual| StorageError::Fenced {
        key: "/election/a".to_owned(),
        expected: term.create_revision,
        actual,
    };
    let refused = s
        .update_releasing(
            "/o/a",
            o.mod_revision,
            Bytes::from_static(b"3"),
            &[],
            Some(&fence),
        )
        .await;
    assert_eq!(refused, Err(fenced(0)));
    let again = s
        .create("/election/a", Bytes::from_static(b"a"))
        .await
        .unwrap();
    assert_eq!(
        s.delete_releasing("/o/a", o.mod_revision, &[], Some(&fence))
            .await,
        Err(fenced(again.create_revision))
    );
    assert_eq!(
        s.create_guarded("/o/b", Bytes::from_static(b"1"), &[], Some(&fence))
            .await,
        Err(fenced(again.create_revision))
    );
    assert_eq!(s.get("/o/a").await.unwrap().value.as_ref(), b"2");
    assert!(s.get("/o/b").await.is_err());
}
