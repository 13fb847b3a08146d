use super::*;
use crate::api::meta::Requester;
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase, NamespaceTransferStatus, Role,
    FINALIZER_TRANSFER_PROTECTION,
};
use crate::registry::admission::{Phase, Plugin};
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::storage::memory::MemoryStorage;

type NstStore = Store<NamespaceTransferStrategy>;

async fn store() -> NstStore {
    store_on(Arc::new(MemoryStorage::default())).await
}

async fn store_on(storage: Arc<dyn Storage>) -> NstStore {
    let store = Store::new(
        NamespaceTransferStrategy,
        storage,
        "/registry",
        Arc::new(Notify::new()),
    );
    for _ in 0..200 {
        if store.is_ready() {
            return store;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("cache never synced");
}

fn ctx(user: &str) -> Context {
    Context {
        user: Requester {
            username: user.to_owned(),
            ..Requester::default()
        },
        dry_run: false,
        writer: crate::registry::Writer::Client,
        manager: String::new(),
        notes: Default::default(),
        fence: None,
    }
}

/// The controllers' context: the only writer of status and of their
/// finalizers.
fn controller() -> Context {
    Context {
        writer: crate::registry::Writer::Controller,
        ..ctx("system:controller:test")
    }
}

/// An offer, from `prod` to `dev`, of a claim of its own (`<name>-data`), so
/// that offers with different names never compete for a claim.
fn offer(name: &str) -> NamespaceTransfer {
    offer_of(name, &format!("{name}-data"))
}

/// An offer of the claim `claim`, from `prod` to `dev`.
fn offer_of(name: &str, claim: &str) -> NamespaceTransfer {
    transfer(
        name,
        serde_json::json!({"source": {"name": claim}, "destination": {"namespace": "dev"}}),
    )
}

fn transfer(name: &str, spec: serde_json::Value) -> NamespaceTransfer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name, "labels": {"app": "db"}},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn create_sets_server_fields_and_stamps_the_requester() {
    let s = store().await;
    let mut obj = offer("a");
    obj.spec.requester = Some(Requester {
        username: "mallory".to_owned(),
        ..Requester::default()
    });
    obj.status = Some(NamespaceTransferStatus {
        phase: Some(NamespaceTransferPhase::Completed),
        ..Default::default()
    });
    let created = s.create(&ctx("alice"), "prod", obj).await.unwrap();
    let m = &created.metadata;
    assert!(m.uid.is_some());
    assert!(m.creation_timestamp.is_some());
    assert_eq!(m.generation, Some(1));
    assert!(m.resource_version.is_some());
    assert_eq!(created.spec.requester.as_ref().unwrap().username, "alice");
    let status = created.status.as_ref().unwrap();
    assert_eq!(
        (status.phase, status.role),
        (Some(NamespaceTransferPhase::Pending), Some(Role::Source)),
        "a client's status is replaced by the initial one"
    );
    assert_eq!(created.spec.source.namespace, "prod", "defaulted");
    let read = s.get("prod", "a").await.unwrap();
    assert_eq!(read, created);
}

#[tokio::test]
async fn generate_name_makes_a_fresh_name_each_time() {
    let s = store().await;
    let generated = |claim: &str| {
        let mut obj = offer_of("", claim);
        obj.metadata.name = None;
        obj.metadata.generate_name = Some("db-".to_owned());
        obj
    };
    let a = s
        .create(&ctx("alice"), "prod", generated("one"))
        .await
        .unwrap();
    let b = s
        .create(&ctx("alice"), "prod", generated("two"))
        .await
        .unwrap();
    let (a, b) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    assert!(a.starts_with("db-") && a.len() == 8, "{a}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn create_of_an_existing_name_is_already_exists() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let err = s
        .create(&ctx("alice"), "prod", offer("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(err.reason(), "AlreadyExists");
}

#[tokio::test]
async fn an_invalid_object_is_refused_with_its_causes() {
    let s = store().await;
    let mut obj = offer("Not_A_Name");
    obj.spec.source.name = String::new();
    let err = s.create(&ctx("alice"), "prod", obj).await.unwrap_err();
    let ApiError::Invalid { causes, .. } = &err else {
        panic!("{err:?}")
    };
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert!(fields.contains(&"metadata.name"), "{fields:?}");
    assert!(fields.contains(&"spec.source.name"), "{fields:?}");
}

#[tokio::test]
async fn dry_run_create_validates_but_stores_nothing() {
    let s = store().await;
    let mut c = ctx("alice");
    c.dry_run = true;
    let obj = s.create(&c, "prod", offer("a")).await.unwrap();
    assert!(obj.metadata.uid.is_some());
    assert_eq!(s.get("prod", "a").await.unwrap_err().code(), 404);
}

#[tokio::test]
async fn update_needs_the_current_resource_version() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();

    let mut unversioned = created.clone();
    unversioned.metadata.resource_version = None;
    let err = s
        .update(&ctx("alice"), "prod", "a", unversioned, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);

    let mut labelled = created.clone();
    labelled.metadata.labels = Some([("tier".to_owned(), "gold".to_owned())].into());
    let updated = s
        .update(&ctx("alice"), "prod", "a", labelled, false)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        updated.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );

    let err = s
        .update(&ctx("alice"), "prod", "a", created, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409, "a stale resourceVersion is a conflict");
}

#[tokio::test]
async fn a_spec_change_is_invalid_because_spec_is_immutable() {
    let s = store().await;
    let mut obj = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    obj.spec.source.name = "other".to_owned();
    let err = s
        .update(&ctx("alice"), "prod", "a", obj, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert!(err.to_string().contains("spec.source.name"), "{err}");
}

#[tokio::test]
async fn a_client_status_write_that_changes_a_field_is_refused_naming_it() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let mut forged = created.clone();
    forged.status = Some(
        serde_json::from_value(serde_json::json!({
            "phase": "Rebinding",
            "role": "Both",
            "peer": {"namespace": "thief", "name": "grab"}
        }))
        .unwrap(),
    );
    let err = s
        .update(&ctx("thief"), "prod", "a", forged, true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    let text = err.to_string();
    for field in ["status.phase", "status.role", "status.peer"] {
        assert!(text.contains(field), "{field} is named: {text}");
    }
    let stored = s.get("prod", "a").await.unwrap();
    assert_eq!(stored.status, created.status, "nothing was written");
}

#[tokio::test]
async fn a_client_status_write_that_changes_nothing_is_a_no_op() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let same = s
        .update(&ctx("alice"), "prod", "a", created.clone(), true)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        created.metadata.resource_version
    );
}

#[tokio::test]
async fn a_cluster_admin_may_write_status_as_a_break_glass() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let mut admin = ctx("admin");
    admin.user.groups = vec!["system:masters".to_owned()];
    let mut failed = created.clone();
    failed.status = Some(serde_json::from_value(serde_json::json!({"phase": "Failed"})).unwrap());
    let written = s.update(&admin, "prod", "a", failed, true).await.unwrap();
    assert_eq!(written.phase(), Some("Failed"));
}

#[tokio::test]
async fn a_client_can_neither_remove_nor_add_the_controllers_finalizer() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let protected = s
        .guaranteed_update(&controller(), "prod", "a", false, |current| {
            let mut next = current.clone();
            next.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
            Ok(next)
        })
        .await
        .unwrap();
    let mut stripped = protected.clone();
    stripped.metadata.finalizers = None;
    let err = s
        .update(&ctx("alice"), "prod", "a", stripped, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert!(err.to_string().contains("metadata.finalizers"), "{err}");
    assert!(
        err.to_string().contains(FINALIZER_TRANSFER_PROTECTION),
        "{err}"
    );

    let other = s.create(&ctx("alice"), "prod", offer("b")).await.unwrap();
    let mut added = other.clone();
    added.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
    let err = s
        .update(&ctx("alice"), "prod", "b", added, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    // Their own finalizers stay theirs.
    let mut own = s.get("prod", "b").await.unwrap();
    own.metadata.finalizers = Some(vec!["example.com/mine".to_owned()]);
    s.update(&ctx("alice"), "prod", "b", own, false)
        .await
        .unwrap();
    let _ = created;
}

#[tokio::test]
async fn status_writes_change_only_status_and_main_writes_ignore_status() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();

    let mut with_status = created.clone();
    with_status.status =
        Some(serde_json::from_value(serde_json::json!({"phase": "Pending"})).unwrap());
    with_status.metadata.labels = Some([("sneaky".to_owned(), "yes".to_owned())].into());
    let after_status = s
        .update(&controller(), "prod", "a", with_status.clone(), true)
        .await
        .unwrap();
    assert_eq!(after_status.phase(), Some("Pending"));
    assert_eq!(
        after_status.metadata.labels, created.metadata.labels,
        "status writes keep metadata"
    );

    let mut main = after_status.clone();
    main.status = None;
    let after_main = s
        .update(&ctx("alice"), "prod", "a", main, false)
        .await
        .unwrap();
    assert_eq!(
        after_main.phase(),
        Some("Pending"),
        "main writes keep status"
    );
}

/// The controller's write of `prod/name`'s `part`, made by `mutate`.
async fn controller_write(
    s: &NstStore,
    name: &str,
    part: Part,
    mutate: impl Fn(&NamespaceTransfer) -> Result<NamespaceTransfer, ApiError>,
) -> NamespaceTransfer {
    s.guaranteed_update_from(&controller(), "prod", name, part, None, mutate)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_controllers_match_write_changes_status_and_finalizers_and_nothing_else() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let protect = |current: &NamespaceTransfer| {
        let mut next = current.clone();
        next.metadata.resource_version = None;
        next.status = Some(NamespaceTransferStatus {
            phase: Some(NamespaceTransferPhase::WaitingForRelease),
            ..NamespaceTransferStatus::default()
        });
        crate::api::meta::set_finalizer(&mut next.metadata, FINALIZER_TRANSFER_PROTECTION, true);
        next.metadata.labels = Some([("sneaky".to_owned(), "yes".to_owned())].into());
        next.spec.source.name = "other".to_owned();
        Ok(next)
    };
    let before = s.get("prod", "a").await.unwrap();
    let written = controller_write(&s, "a", Part::StatusAndFinalizers, protect).await;
    assert_eq!(written.phase(), Some("WaitingForRelease"));
    assert_eq!(
        written.metadata.finalizers.as_deref(),
        Some(&[FINALIZER_TRANSFER_PROTECTION.to_owned()][..]),
        "the finalizer came with the status"
    );
    assert_eq!(
        written.metadata.labels, created.metadata.labels,
        "labels are kept"
    );
    assert_eq!(written.spec, created.spec, "spec is kept");
    let stored = s.get("prod", "a").await.unwrap();
    assert_eq!(stored, written, "one write stored both");
    assert_ne!(
        stored.metadata.resource_version,
        before.metadata.resource_version
    );

    // A plain status write with the same mutation leaves the finalizers.
    s.create(&ctx("alice"), "prod", offer("b")).await.unwrap();
    let status_only = controller_write(&s, "b", Part::Status, protect).await;
    assert_eq!(status_only.metadata.finalizers, None);

    // Never a new finalizer on an object being deleted: its status is
    // still written, and its finalizers stay as they were.
    let mut held = offer("c");
    held.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    s.create(&ctx("alice"), "prod", held).await.unwrap();
    s.delete(&ctx("alice"), "prod", "c", &DeleteOptions::default())
        .await
        .unwrap();
    let deleting = controller_write(&s, "c", Part::StatusAndFinalizers, protect).await;
    assert_eq!(deleting.phase(), Some("WaitingForRelease"));
    assert_eq!(
        deleting.metadata.finalizers.as_deref(),
        Some(&["example.com/hold".to_owned()][..])
    );
}

#[tokio::test]
async fn the_controllers_completion_write_takes_its_finalizer_off_with_the_status_but_never_off_a_deleting_object(
) {
    let s = store().await;
    let release = |current: &NamespaceTransfer| {
        let mut next = current.clone();
        next.metadata.resource_version = None;
        next.status = Some(NamespaceTransferStatus {
            phase: Some(NamespaceTransferPhase::Completed),
            ..NamespaceTransferStatus::default()
        });
        crate::api::meta::set_finalizer(&mut next.metadata, FINALIZER_TRANSFER_PROTECTION, false);
        Ok(next)
    };
    let held = |name: &str| {
        let mut t = offer(name);
        t.metadata.finalizers = Some(vec![
            "example.com/hold".to_owned(),
            FINALIZER_TRANSFER_PROTECTION.to_owned(),
        ]);
        t
    };
    s.create(&ctx("alice"), "prod", held("a")).await.unwrap();
    let written = controller_write(&s, "a", Part::StatusAndFinalizers, release).await;
    assert_eq!(written.phase(), Some("Completed"));
    assert_eq!(
        written.metadata.finalizers.as_deref(),
        Some(&["example.com/hold".to_owned()][..]),
        "ours came off with the status, the other stays"
    );
    assert_eq!(s.get("prod", "a").await.unwrap(), written);

    // Being deleted: the status is written, every finalizer stays (ours
    // comes off in a write of its own, which may finish the object).
    s.create(&ctx("alice"), "prod", held("b")).await.unwrap();
    s.delete(&ctx("alice"), "prod", "b", &DeleteOptions::default())
        .await
        .unwrap();
    let deleting = controller_write(&s, "b", Part::StatusAndFinalizers, release).await;
    assert_eq!(deleting.phase(), Some("Completed"));
    assert_eq!(
        deleting.metadata.finalizers.as_deref(),
        Some(
            &[
                "example.com/hold".to_owned(),
                FINALIZER_TRANSFER_PROTECTION.to_owned()
            ][..]
        )
    );
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_the_last_one_goes() {
    let s = store().await;
    let mut obj = offer("a");
    obj.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    s.create(&ctx("alice"), "prod", obj).await.unwrap();

    let outcome = s
        .delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    let DeleteOutcome::Pending(held) = outcome else {
        panic!("expected a pending deletion")
    };
    assert!(held.metadata.deletion_timestamp.is_some());

    let mut more = held.clone();
    more.metadata.finalizers = Some(vec![
        "example.com/hold".to_owned(),
        "example.com/new".to_owned(),
    ]);
    let err = s
        .update(&ctx("alice"), "prod", "a", more, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "no new finalizers while deleting: {err}");

    let mut released = held;
    released.metadata.finalizers = Some(Vec::new());
    s.update(&ctx("alice"), "prod", "a", released, false)
        .await
        .unwrap();
    assert_eq!(s.get("prod", "a").await.unwrap_err().code(), 404);
}

#[tokio::test]
async fn delete_preconditions_are_checked() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let opts = DeleteOptions {
        precondition_uid: Some("not-the-uid".to_owned()),
        ..DeleteOptions::default()
    };
    let err = s
        .delete(&ctx("alice"), "prod", "a", &opts)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409);
    assert!(
        err.to_string().contains("Precondition failed: UID"),
        "{err}"
    );
    assert!(s.get("prod", "a").await.is_ok());
}

#[tokio::test]
async fn lists_filter_by_labels_fields_and_namespace() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let mut other = offer("b");
    other.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    s.create(&ctx("alice"), "prod", other).await.unwrap();
    let mut elsewhere = offer("c");
    elsewhere.spec.destination.namespace = "qa".to_owned();
    s.create(&ctx("alice"), "staging", elsewhere).await.unwrap();

    let names = |l: ObjectList<Shared<NamespaceTransfer>>| -> Vec<String> {
        l.items
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect()
    };
    let all = s.list(None, &ListOptions::default()).await.unwrap();
    assert_eq!(names(all), ["a", "b", "c"]);
    let prod = s.list(Some("prod"), &ListOptions::default()).await.unwrap();
    assert_eq!(names(prod), ["a", "b"]);
    let db = ListOptions {
        label_selector: LabelSelector::parse("app=db").unwrap(),
        ..ListOptions::default()
    };
    assert_eq!(names(s.list(None, &db).await.unwrap()), ["a", "c"]);
    let by_name = ListOptions {
        field_selector: s.parse_field_selector("metadata.name=b").unwrap(),
        ..ListOptions::default()
    };
    assert_eq!(names(s.list(None, &by_name).await.unwrap()), ["b"]);
}

#[tokio::test]
async fn paged_lists_continue_where_they_stopped() {
    let s = store().await;
    for i in 0..5 {
        s.create(&ctx("alice"), "prod", offer(&format!("t{i}")))
            .await
            .unwrap();
    }
    let mut opts = ListOptions {
        limit: Some(2),
        ..ListOptions::default()
    };
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = s.list(Some("prod"), &opts).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|o| o.metadata.name.clone().unwrap()));
        match page.continue_token {
            Some(token) => opts.continue_token = Some(token),
            None => break,
        }
    }
    assert_eq!(seen, ["t0", "t1", "t2", "t3", "t4"]);
    assert_eq!(pages, 3);
}

#[tokio::test]
async fn list_honours_limit_says_which_lists_return_at_most_their_limit() {
    let s = store().await;
    for i in 0..5 {
        s.create(&ctx("alice"), "prod", offer(&format!("t{i}")))
            .await
            .unwrap();
    }
    // Wait for the cache, so that rv=0 sees every object.
    let current = s.list(None, &ListOptions::default()).await.unwrap();
    let rv = current.resource_version.clone();
    for (resource_version, continued) in [
        (None, false),
        (Some("0"), false),
        (Some(rv.as_str()), false),
        (None, true),
    ] {
        let mut opts = ListOptions {
            limit: Some(2),
            resource_version: resource_version.map(str::to_owned),
            ..ListOptions::default()
        };
        if continued {
            let first = s.list(Some("prod"), &opts).await.unwrap();
            opts.continue_token = first.continue_token;
        }
        let returned = s.list(Some("prod"), &opts).await.unwrap().items.len();
        let honours = list_honours_limit(resource_version, opts.continue_token.as_deref());
        assert_eq!(
            returned <= 2,
            honours,
            "rv {resource_version:?}, continued {continued}: {returned} returned"
        );
    }
}

#[tokio::test]
async fn count_in_counts_a_lists_scope_and_stops_at_its_bound() {
    let s = store().await;
    for (ns, n) in [("prod", 3), ("stage", 5)] {
        for i in 0..n {
            s.create(&ctx("alice"), ns, offer(&format!("t{i}")))
                .await
                .unwrap();
        }
    }
    s.list(None, &ListOptions::default()).await.unwrap();
    assert_eq!(s.count_in(Some("prod"), 1000), 3);
    assert_eq!(s.count_in(Some("stage"), 1000), 5);
    assert_eq!(
        s.count_in(Some("pro"), 1000),
        0,
        "a namespace, not a prefix of one"
    );
    assert_eq!(s.count_in(None, 1000), 8);
    assert_eq!(s.count_in(None, 4), 4);
}

#[tokio::test]
async fn bad_continue_tokens_and_limits_are_bad_requests() {
    let s = store().await;
    for token in [
        "%%%",
        "aGVsbG8=",
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiJhIn0=",
    ] {
        let opts = ListOptions {
            continue_token: Some(token.to_owned()),
            ..ListOptions::default()
        };
        let err = s.list(None, &opts).await.unwrap_err();
        assert_eq!(err.code(), 400, "{token}: {err}");
    }
    let negative = ListOptions {
        limit: Some(-1),
        ..ListOptions::default()
    };
    assert_eq!(s.list(None, &negative).await.unwrap_err().code(), 400);
    let bad_rv = ListOptions {
        resource_version: Some("abc".to_owned()),
        ..ListOptions::default()
    };
    assert_eq!(s.list(None, &bad_rv).await.unwrap_err().code(), 400);
}

#[tokio::test]
async fn a_continue_token_from_another_namespace_is_refused() {
    let s = store().await;
    for i in 0..3 {
        s.create(&ctx("alice"), "prod", offer(&format!("t{i}")))
            .await
            .unwrap();
    }
    let page = s
        .list(
            Some("prod"),
            &ListOptions {
                limit: Some(1),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    let opts = ListOptions {
        continue_token: page.continue_token,
        ..ListOptions::default()
    };
    assert_eq!(s.list(Some("dev"), &opts).await.unwrap_err().code(), 400);
}

#[tokio::test]
async fn a_watch_from_a_resource_version_sees_later_changes_only() {
    let s = store().await;
    let a = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let rv = a.metadata.resource_version.clone();
    s.create(&ctx("alice"), "prod", offer("b")).await.unwrap();
    let mut w = s
        .watch(
            Some("prod"),
            WatchOptions {
                resource_version: rv,
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchEvent::Added(obj) = first else {
        panic!("{first:?}")
    };
    assert_eq!(obj.metadata.name.as_deref(), Some("b"));
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(second, WatchEvent::Deleted(ref o) if o.metadata.name.as_deref() == Some("a")),
        "{second:?}"
    );
}

#[tokio::test]
async fn a_label_change_out_of_a_selector_is_seen_as_deleted() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let mut w = s
        .watch(
            Some("prod"),
            WatchOptions {
                label_selector: LabelSelector::parse("app=db").unwrap(),
                resource_version: created.metadata.resource_version.clone(),
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    let mut relabelled = created;
    relabelled.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    s.update(&ctx("alice"), "prod", "a", relabelled, false)
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(event, WatchEvent::Deleted(_)), "{event:?}");
}

#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let mut w = s
        .watch(
            Some("prod"),
            WatchOptions {
                send_initial_events: Some(true),
                resource_version_match: Some("NotOlderThan".to_owned()),
                allow_bookmarks: true,
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        w.next().await.unwrap().unwrap(),
        WatchEvent::Added(_)
    ));
    let end = w.next().await.unwrap().unwrap();
    assert!(
        matches!(
            end,
            WatchEvent::Bookmark {
                initial_events_end: true,
                ..
            }
        ),
        "{end:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_watch_with_bookmarks_gets_one_per_interval() {
    let s = store()
        .await
        .with_bookmark_interval(Duration::from_secs(10));
    let a = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let mut w = s
        .watch(
            Some("prod"),
            WatchOptions {
                resource_version: a.metadata.resource_version.clone(),
                allow_bookmarks: true,
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    let event = w.next().await.unwrap().unwrap();
    let WatchEvent::Bookmark {
        resource_version,
        initial_events_end,
    } = event
    else {
        panic!("{event:?}")
    };
    assert!(!initial_events_end);
    let rv: i64 = resource_version.parse().unwrap();
    assert!(rv >= a.metadata.resource_version.unwrap().parse::<i64>().unwrap());
}

#[test]
fn continue_tokens_round_trip_in_kubes_format() {
    let token = encode_continue(42, "/registry/g/r", "/registry/g/r/ns/name");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&token)
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"v": "meta.k8s.io/v1", "rv": 42, "start": "ns/name\u{0}"})
    );
    let (rv, after) = decode_continue(&token, "/registry/g/r", "/registry/g/r/ns/").unwrap();
    assert_eq!((rv, after.as_str()), (Some(42), "/registry/g/r/ns/name"));
}

#[tokio::test]
async fn a_filtered_page_never_holds_more_than_the_limit() {
    let s = store().await;
    for i in 0..6 {
        let mut obj = offer(&format!("t{i}"));
        if i == 0 {
            obj.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
        }
        s.create(&ctx("alice"), "prod", obj).await.unwrap();
    }
    let mut opts = ListOptions {
        limit: Some(2),
        label_selector: LabelSelector::parse("app=db").unwrap(),
        ..ListOptions::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = s.list(Some("prod"), &opts).await.unwrap();
        assert!(page.items.len() <= 2, "{} items", page.items.len());
        seen.extend(page.items.iter().map(|o| o.metadata.name.clone().unwrap()));
        match page.continue_token {
            Some(token) => opts.continue_token = Some(token),
            None => break,
        }
    }
    assert_eq!(seen, ["t1", "t2", "t3", "t4", "t5"]);
}

#[tokio::test]
async fn a_watch_without_initial_events_or_resource_version_starts_from_now() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("before"))
        .await
        .unwrap();
    let mut w = s
        .watch(
            Some("prod"),
            WatchOptions {
                send_initial_events: Some(false),
                resource_version_match: Some("NotOlderThan".to_owned()),
                allow_bookmarks: true,
                ..WatchOptions::default()
            },
        )
        .await
        .unwrap();
    s.create(&ctx("alice"), "prod", offer("after"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchEvent::Added(obj) = event else {
        panic!("{event:?}")
    };
    assert_eq!(obj.metadata.name.as_deref(), Some("after"));
}

/// A request for `claim` from `prod`, made in `dev`, naming the claim to create
/// (`None`: the default, the source claim's name).
fn request_of(name: &str, claim: &str, destination_name: Option<&str>) -> NamespaceTransfer {
    transfer(
        name,
        serde_json::json!({
            "source": {"namespace": "prod", "name": claim},
            "destination": {"name": destination_name.unwrap_or_default()},
        }),
    )
}

/// A rename within `prod` of `claim` to `to`.
fn rename_of(name: &str, claim: &str, to: &str) -> NamespaceTransfer {
    transfer(
        name,
        serde_json::json!({"source": {"name": claim}, "destination": {"name": to}}),
    )
}

/// Asserts a 409 Conflict whose message names what is claimed and its holder.
fn assert_claim_conflict(err: &ApiError, what: &str, holder: &str) {
    assert_eq!((err.code(), err.reason()), (409, "Conflict"), "{err}");
    let expected = format!("{what} already has an active NamespaceTransfer: {holder}");
    assert!(err.to_string().contains(&expected), "{err}");
}

async fn finish(s: &NstStore, namespace: &str, name: &str, phase: NamespaceTransferPhase) {
    let mut obj = s.get(namespace, name).await.unwrap();
    obj.status.get_or_insert_with(Default::default).phase = Some(phase);
    s.update(&controller(), namespace, name, obj, true)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_second_active_offer_of_a_claim_is_a_conflict_naming_the_first() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    let err = s
        .create(&ctx("alice"), "prod", offer_of("b", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/a");
    assert!(
        err.to_string().starts_with(
            "Operation cannot be fulfilled on namespacetransfers.storage.transfer.k8s.io \"b\""
        ),
        "{err}"
    );
    assert_eq!(s.get("prod", "b").await.unwrap_err().code(), 404);
}

#[tokio::test]
async fn a_finished_transfer_releases_its_claims() {
    for phase in [
        NamespaceTransferPhase::Completed,
        NamespaceTransferPhase::Failed,
        NamespaceTransferPhase::Cancelled,
    ] {
        let s = store().await;
        s.create(&ctx("alice"), "prod", offer_of("a", "db"))
            .await
            .unwrap();
        finish(&s, "prod", "a", phase).await;
        s.create(&ctx("alice"), "prod", offer_of("b", "db"))
            .await
            .unwrap_or_else(|e| panic!("after {phase}: {e}"));
        let err = s
            .create(&ctx("alice"), "prod", offer_of("c", "db"))
            .await
            .unwrap_err();
        assert_claim_conflict(&err, "source claim prod/db", "prod/b");
    }
}

#[tokio::test]
async fn a_transfer_that_is_still_under_way_keeps_its_claims() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    finish(&s, "prod", "a", NamespaceTransferPhase::Rebinding).await;
    let err = s
        .create(&ctx("alice"), "prod", offer_of("b", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/a");
}

#[tokio::test]
async fn a_deleted_transfer_releases_its_claims() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    s.create(&ctx("alice"), "prod", offer_of("b", "db"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_transfer_recreated_under_the_same_name_takes_a_claim_afresh() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    // The index still names "a", but another uid: the new "a" does not hold "db".
    s.create(&ctx("alice"), "prod", offer_of("a", "web"))
        .await
        .unwrap();
    s.create(&ctx("alice"), "prod", offer_of("b", "db"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_second_active_request_for_a_destination_claim_name_is_a_conflict() {
    let s = store().await;
    // The destination name defaults to the source claim's: dev/db.
    s.create(&ctx("bob"), "dev", request_of("a", "db", None))
        .await
        .unwrap();
    let err = s
        .create(&ctx("bob"), "dev", request_of("b", "other", Some("db")))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "destination claim dev/db", "dev/a");
    s.create(&ctx("bob"), "dev", request_of("c", "other", None))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_rename_holds_both_its_source_claim_and_its_destination_claim_name() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", rename_of("r", "db", "db2"))
        .await
        .unwrap();
    let err = s
        .create(&ctx("alice"), "prod", offer_of("give", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/r");
    let incoming = transfer(
        "take",
        serde_json::json!({
            "source": {"namespace": "staging", "name": "cache"},
            "destination": {"name": "db2"},
        }),
    );
    let err = s.create(&ctx("alice"), "prod", incoming).await.unwrap_err();
    assert_claim_conflict(&err, "destination claim prod/db2", "prod/r");
    let err = s
        .create(&ctx("alice"), "prod", rename_of("r2", "web", "db2"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "destination claim prod/db2", "prod/r");
}

#[tokio::test]
async fn transfers_of_different_claims_do_not_conflict() {
    let s = store().await;
    for (namespace, obj) in [
        ("prod", offer_of("db", "db")),
        ("prod", offer_of("web", "web")),
        // Another namespace's claim of the same name.
        ("staging", offer_of("db", "db")),
        // The peer of prod's offer holds dev/db, not prod/db.
        ("dev", request_of("db", "db", None)),
        ("dev", request_of("web", "web", Some("web-copy"))),
        // An offer leaves the destination name open, so holds none.
        ("prod", {
            let mut o = offer_of("named", "cache");
            o.spec.destination.name = "db".to_owned();
            o
        }),
    ] {
        s.create(&ctx("alice"), namespace, obj)
            .await
            .unwrap_or_else(|e| panic!("{namespace}: {e}"));
    }
}

#[tokio::test]
async fn a_dry_run_create_checks_claims_but_writes_no_index_key() {
    let storage = Arc::new(MemoryStorage::default());
    let s = store_on(storage.clone()).await;
    let index = "/registry/storage.transfer.k8s.io/_index/namespacetransfers/";
    let index_keys = || async {
        storage
            .list(index, storage::ListOptions::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|kv| kv.key)
            .collect::<Vec<_>>()
    };
    let mut dry = ctx("alice");
    dry.dry_run = true;
    s.create(&dry, "prod", offer_of("a", "db")).await.unwrap();
    assert_eq!(index_keys().await, Vec::<String>::new());

    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    assert_eq!(index_keys().await, [format!("{index}source/prod/db")]);
    let err = s
        .create(&dry, "prod", offer_of("b", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_creates_for_one_claim_exactly_one_wins() {
    const CREATES: usize = 16;
    let s = Arc::new(store().await);
    let barrier = Arc::new(tokio::sync::Barrier::new(CREATES));
    let tasks: Vec<_> = (0..CREATES)
        .map(|i| {
            let (s, barrier) = (s.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                s.create(&ctx("alice"), "prod", offer_of(&format!("t{i}"), "db"))
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(obj) => winners.push(obj.metadata.name.unwrap()),
            Err(e) => losers.push(e),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    for err in &losers {
        assert_claim_conflict(err, "source claim prod/db", &format!("prod/{}", winners[0]));
    }
}

/// Memory storage on which another replica's create, for the same claims,
/// lands between this replica's read of the index and its write.
#[derive(Debug, Default)]
struct RacedStorage {
    inner: MemoryStorage,
    raced: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Storage for RacedStorage {
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[Guard],
        fence: Option<&crate::storage::Fence>,
    ) -> storage::Result<KeyValue> {
        if !guards.is_empty() && !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut winner: serde_json::Value = serde_json::from_slice(&value).unwrap();
            winner["metadata"]["name"] = "winner".into();
            winner["metadata"]["uid"] = "winner-uid".into();
            let holder =
                serde_json::json!({"namespace": "prod", "name": "winner", "uid": "winner-uid"});
            let theirs: Vec<Guard> = guards
                .iter()
                .map(|g| Guard {
                    value: Bytes::from(holder.to_string()),
                    ..g.clone()
                })
                .collect();
            let (dir, _) = key.rsplit_once('/').unwrap();
            self.inner
                .create_guarded(
                    &format!("{dir}/winner"),
                    Bytes::from(winner.to_string()),
                    &theirs,
                    None,
                )
                .await
                .unwrap();
        }
        self.inner.create_guarded(key, value, guards, fence).await
    }

    async fn get(&self, key: &str) -> storage::Result<KeyValue> {
        self.inner.get(key).await
    }

    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[storage::Release],
        fence: Option<&crate::storage::Fence>,
    ) -> storage::Result<KeyValue> {
        self.inner
            .update_releasing(key, expected, value, releases, fence)
            .await
    }

    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[storage::Release],
        fence: Option<&crate::storage::Fence>,
    ) -> storage::Result<(KeyValue, Revision)> {
        self.inner
            .delete_releasing(key, expected, releases, fence)
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        opts: storage::ListOptions,
    ) -> storage::Result<storage::ListPage> {
        self.inner.list(prefix, opts).await
    }

    async fn current_revision(&self) -> storage::Result<Revision> {
        self.inner.current_revision().await
    }

    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
    ) -> storage::Result<Box<dyn storage::WatchStream>> {
        self.inner.watch(prefix, after).await
    }
}

#[tokio::test]
async fn the_loser_of_a_race_for_a_claim_is_told_the_winner() {
    let s = store_on(Arc::new(RacedStorage::default())).await;
    let err = s
        .create(&ctx("alice"), "prod", offer_of("loser", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/winner");
    assert_eq!(s.get("prod", "loser").await.unwrap_err().code(), 404);
    assert!(s.get("prod", "winner").await.is_ok());
}

#[tokio::test]
async fn every_list_and_watch_of_one_revision_shares_one_decoded_object_and_one_encoding() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let before = s
        .list(Some("prod"), &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    let watch_from = |rv: String| {
        s.watch(
            Some("prod"),
            WatchOptions {
                resource_version: Some(rv),
                ..WatchOptions::default()
            },
        )
    };
    let (mut w1, mut w2) = (
        watch_from(before.clone()).await.unwrap(),
        watch_from(before).await.unwrap(),
    );
    let first = s.list(Some("prod"), &ListOptions::default()).await.unwrap();
    let second = s.list(Some("prod"), &ListOptions::default()).await.unwrap();
    assert_eq!(*first.items[0], created);
    let json = first.items[0].json().unwrap();
    assert_eq!(
        json.as_ptr(),
        second.items[0].json().unwrap().as_ptr(),
        "the second list reuses the first one's encoding"
    );

    let mut changed = created.clone();
    changed.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
    let updated = s
        .update(&ctx("alice"), "prod", "a", changed, false)
        .await
        .unwrap();
    let (seen1, seen2) = (modified(&mut w1).await, modified(&mut w2).await);
    assert_eq!(*seen1, updated);
    let encoded = seen1.json().unwrap();
    assert_eq!(encoded, serde_json::to_vec(&updated).unwrap());
    assert_eq!(
        encoded.as_ptr(),
        seen2.json().unwrap().as_ptr(),
        "two watchers share one encoding of the event"
    );
    assert_ne!(encoded, json, "a new revision is encoded afresh");
}

async fn modified(w: &mut Watch<NamespaceTransferStrategy>) -> Shared<NamespaceTransfer> {
    match tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Modified(o) => o,
        other => panic!("{other:?}"),
    }
}

/// Memory storage that counts range reads and gets, as etcd round trips,
/// and can hold back its watch events ([`Self::hold_watches`]), so that the
/// watch cache falls behind etcd.
#[derive(Debug, Default)]
struct CountingStorage {
    inner: MemoryStorage,
    lists: std::sync::atomic::AtomicUsize,
    gets: std::sync::atomic::AtomicUsize,
    hold: Hold,
}

/// Whether watch events are held back.
#[derive(Debug)]
struct Hold(tokio::sync::watch::Sender<bool>);

impl Default for Hold {
    fn default() -> Self {
        Hold(tokio::sync::watch::channel(false).0)
    }
}

/// A watch whose events wait while [`Hold`] says so.
#[derive(Debug)]
struct HeldWatch {
    inner: Box<dyn storage::WatchStream>,
    hold: tokio::sync::watch::Receiver<bool>,
}

#[async_trait::async_trait]
impl storage::WatchStream for HeldWatch {
    async fn next(&mut self) -> storage::Result<Option<storage::WatchMessage>> {
        let message = self.inner.next().await;
        let _ = self.hold.wait_for(|held| !held).await;
        message
    }

    async fn request_progress(&mut self) -> storage::Result<()> {
        self.inner.request_progress().await
    }
}

impl CountingStorage {
    fn lists(&self) -> usize {
        self.lists.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn gets(&self) -> usize {
        self.gets.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// From now on, every watch event waits until [`Self::release_watches`].
    fn hold_watches(&self) {
        self.hold.0.send_replace(true);
    }

    fn release_watches(&self) {
        self.hold.0.send_replace(false);
    }

    /// Writes `count` offers into `prod` directly, as another replica would
    /// have created them, each of its own claim and labelled `app=<app(i)>`.
    async fn seed(&self, count: usize, app: impl Fn(usize) -> &'static str) {
        for i in 0..count {
            let name = format!("t{i:05}");
            let mut obj = offer(&name);
            obj.metadata.labels = Some([("app".to_owned(), app(i).to_owned())].into());
            obj.metadata.namespace = Some("prod".to_owned());
            obj.apply_defaults();
            obj.metadata.uid = Some(format!("uid-{name}"));
            let key = format!("/registry/storage.transfer.k8s.io/namespacetransfers/prod/{name}");
            self.inner
                .create(&key, Bytes::from(serde_json::to_vec(&obj).unwrap()))
                .await
                .unwrap();
        }
    }
}

#[async_trait::async_trait]
impl Storage for CountingStorage {
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[Guard],
        fence: Option<&crate::storage::Fence>,
    ) -> storage::Result<KeyValue> {
        self.inner.create_guarded(key, value, guards, fence).await
    }

    async fn get(&self, key: &str) -> storage::Result<KeyValue> {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get(key).await
    }

    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[storage::Release],
        fence: Option<&crate::storage::Fence>,
    ) -> storage::Result<KeyValue> {
        self.inner
            .update_releasing(key, expected, value, releases, fence)
            .await
    }

    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[storage::Release],
        fence: Option<&crate::storage::Fence>,
    ) -> storage::Result<(KeyValue, Revision)> {
        self.inner
            .delete_releasing(key, expected, releases, fence)
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        opts: storage::ListOptions,
    ) -> storage::Result<storage::ListPage> {
        self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.list(prefix, opts).await
    }

    async fn current_revision(&self) -> storage::Result<Revision> {
        self.inner.current_revision().await
    }

    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
    ) -> storage::Result<Box<dyn storage::WatchStream>> {
        Ok(Box::new(HeldWatch {
            inner: self.inner.watch(prefix, after).await?,
            hold: self.hold.0.subscribe(),
        }))
    }
}

#[tokio::test]
async fn a_selective_page_of_one_among_ten_thousand_costs_a_few_etcd_reads_not_ten_thousand() {
    let storage = Arc::new(CountingStorage::default());
    storage.seed(10_000, |_| "db").await;
    let s = store_on(storage.clone()).await;
    let before = storage.lists();
    let nothing = ListOptions {
        limit: Some(1),
        label_selector: LabelSelector::parse("app=none").unwrap(),
        ..ListOptions::default()
    };
    let page = s.list(Some("prod"), &nothing).await.unwrap();
    assert!(page.items.is_empty());
    assert_eq!(page.continue_token, None);
    // Pages of 1, 2, 4, … cover 10,000 keys in 14 reads.
    let reads = storage.lists() - before;
    assert!(reads <= 14, "{reads} etcd reads for one page");
}

#[tokio::test]
async fn filtered_pages_of_any_size_add_up_to_the_filtered_list() {
    let storage = Arc::new(CountingStorage::default());
    // Every seventh object matches, so pages come back mostly filtered out.
    storage
        .seed(300, |i| if i % 7 == 0 { "web" } else { "db" })
        .await;
    let s = store_on(storage.clone()).await;
    let web = LabelSelector::parse("app=web").unwrap();
    let everything = s
        .list(
            Some("prod"),
            &ListOptions {
                label_selector: web.clone(),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    let expected: Vec<String> = everything
        .items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(expected.len(), 43);
    for limit in [1, 2, 3, 5, 40, 43, 44, 1000] {
        let mut opts = ListOptions {
            limit: Some(limit),
            label_selector: web.clone(),
            ..ListOptions::default()
        };
        let mut seen = Vec::new();
        let mut revisions = std::collections::BTreeSet::new();
        loop {
            let page = s.list(Some("prod"), &opts).await.unwrap();
            assert!(
                page.items.len() as i64 <= limit,
                "limit {limit}: {} items",
                page.items.len()
            );
            revisions.insert(page.resource_version.clone());
            seen.extend(page.items.iter().map(|o| o.metadata.name.clone().unwrap()));
            match page.continue_token {
                Some(token) => opts.continue_token = Some(token),
                None => break,
            }
        }
        assert_eq!(seen, expected, "limit {limit}");
        assert_eq!(
            revisions.len(),
            1,
            "limit {limit}: one revision for every page"
        );
    }
}

const INDEX: &str = "/registry/storage.transfer.k8s.io/_index/namespacetransfers/";

/// The index keys left in `storage`, with the holder each names.
async fn index_entries(storage: &dyn Storage) -> Vec<(String, String)> {
    storage
        .list(INDEX, storage::ListOptions::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|kv| {
            let holder: serde_json::Value = serde_json::from_slice(&kv.value).unwrap();
            (
                kv.key.trim_start_matches(INDEX).to_owned(),
                format!(
                    "{}/{}",
                    holder["namespace"].as_str().unwrap(),
                    holder["name"].as_str().unwrap()
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_transfer_that_finishes_removes_its_index_keys() {
    for phase in [
        NamespaceTransferPhase::Completed,
        NamespaceTransferPhase::Failed,
        NamespaceTransferPhase::Cancelled,
    ] {
        let storage = Arc::new(MemoryStorage::default());
        let s = store_on(storage.clone()).await;
        s.create(&ctx("alice"), "prod", rename_of("r", "db", "db2"))
            .await
            .unwrap();
        assert_eq!(
            index_entries(storage.as_ref()).await,
            [
                ("destination/prod/db2".to_owned(), "prod/r".to_owned()),
                ("source/prod/db".to_owned(), "prod/r".to_owned()),
            ]
        );
        finish(&s, "prod", "r", NamespaceTransferPhase::Rebinding).await;
        assert_eq!(
            index_entries(storage.as_ref()).await.len(),
            2,
            "still active"
        );
        finish(&s, "prod", "r", phase).await;
        assert_eq!(index_entries(storage.as_ref()).await, [], "after {phase}");
    }
}

#[tokio::test]
async fn a_deleted_transfer_removes_its_index_keys() {
    let storage = Arc::new(MemoryStorage::default());
    let s = store_on(storage.clone()).await;
    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(index_entries(storage.as_ref()).await, []);
}

#[tokio::test]
async fn an_active_transfer_held_by_a_finalizer_keeps_its_index_keys_until_it_is_gone() {
    let storage = Arc::new(MemoryStorage::default());
    let s = store_on(storage.clone()).await;
    let mut obj = offer_of("a", "db");
    obj.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    s.create(&ctx("alice"), "prod", obj).await.unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        index_entries(storage.as_ref()).await,
        [("source/prod/db".to_owned(), "prod/a".to_owned())],
        "marked for deletion, but still under way"
    );
    let err = s
        .create(&ctx("alice"), "prod", offer_of("b", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/a");
    let mut held = s.get("prod", "a").await.unwrap();
    held.metadata.finalizers = None;
    s.update(&ctx("alice"), "prod", "a", held, false)
        .await
        .unwrap();
    assert_eq!(index_entries(storage.as_ref()).await, []);
}

#[tokio::test]
async fn a_transfer_never_removes_an_index_key_another_transfer_has_taken_over() {
    let storage = Arc::new(MemoryStorage::default());
    let s = store_on(storage.clone()).await;
    s.create(&ctx("alice"), "prod", offer_of("a", "db"))
        .await
        .unwrap();
    // "a" finished behind the store's back (a write from before index keys
    // were removed): its stale key is taken over by "b".
    let key = "/registry/storage.transfer.k8s.io/namespacetransfers/prod/a";
    let stale = storage.get(key).await.unwrap();
    let mut finished: NamespaceTransfer = serde_json::from_slice(&stale.value).unwrap();
    finished.status.get_or_insert_with(Default::default).phase =
        Some(NamespaceTransferPhase::Completed);
    storage
        .update(
            key,
            stale.mod_revision,
            Bytes::from(serde_json::to_vec(&finished).unwrap()),
        )
        .await
        .unwrap();
    s.create(&ctx("alice"), "prod", offer_of("b", "db"))
        .await
        .unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        index_entries(storage.as_ref()).await,
        [("source/prod/db".to_owned(), "prod/b".to_owned())]
    );
    let err = s
        .create(&ctx("alice"), "prod", offer_of("c", "db"))
        .await
        .unwrap_err();
    assert_claim_conflict(&err, "source claim prod/db", "prod/b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_creates_after_the_holder_finished_exactly_one_wins() {
    const CREATES: usize = 16;
    let storage = Arc::new(MemoryStorage::default());
    let s = Arc::new(store_on(storage.clone()).await);
    s.create(&ctx("alice"), "prod", offer_of("first", "db"))
        .await
        .unwrap();
    finish(&s, "prod", "first", NamespaceTransferPhase::Completed).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(CREATES));
    let tasks: Vec<_> = (0..CREATES)
        .map(|i| {
            let (s, barrier) = (s.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                s.create(&ctx("alice"), "prod", offer_of(&format!("t{i}"), "db"))
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(obj) => winners.push(obj.metadata.name.unwrap()),
            Err(e) => losers.push(e),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let holder = format!("prod/{}", winners[0]);
    for err in &losers {
        assert_claim_conflict(err, "source claim prod/db", &holder);
    }
    assert_eq!(
        index_entries(storage.as_ref()).await,
        [("source/prod/db".to_owned(), holder)]
    );
}

/// Asserts kube-apiserver's answer to a resourceVersion the store has not
/// reached: 504 Timeout, "Too large resource version: X, current: Y", a
/// `ResourceVersionTooLarge` cause and a retry after one second.
#[track_caller]
fn assert_too_large(case: &str, err: &ApiError, requested: i64, current: &str) {
    assert_eq!(
        (err.code(), err.reason()),
        (504, "Timeout"),
        "{case}: {err}"
    );
    let status = serde_json::to_value(err.to_status()).unwrap();
    assert_eq!(
        status["message"],
        format!("Timeout: Too large resource version: {requested}, current: {current}"),
        "{case}: {status}"
    );
    assert_eq!(
        status["details"]["retryAfterSeconds"], 1,
        "{case}: {status}"
    );
    assert_eq!(
        status["details"]["causes"],
        serde_json::json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
        "{case}: {status}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_list_at_a_future_resource_version_times_out_as_too_large() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let current = s
        .list(Some("prod"), &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    let future = current.parse::<i64>().unwrap() + 1000;
    for (case, limit, matching) in [
        ("legacy", None, None),
        ("NotOlderThan", None, Some("NotOlderThan")),
        ("NotOlderThan, paged", Some(1), Some("NotOlderThan")),
        ("Exact", None, Some("Exact")),
        ("Exact, paged", Some(1), Some("Exact")),
    ] {
        let opts = ListOptions {
            resource_version: Some(future.to_string()),
            resource_version_match: matching.map(str::to_owned),
            limit,
            ..ListOptions::default()
        };
        let err = s.list(Some("prod"), &opts).await.unwrap_err();
        assert_too_large(case, &err, future, &current);
    }
}

#[tokio::test(start_paused = true)]
async fn a_watch_from_a_future_resource_version_ends_with_a_too_large_error() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let current = s
        .list(Some("prod"), &ListOptions::default())
        .await
        .unwrap()
        .resource_version;
    let future = current.parse::<i64>().unwrap() + 1000;
    for (case, initial) in [("plain", None), ("sendInitialEvents", Some(true))] {
        let opts = WatchOptions {
            resource_version: Some(future.to_string()),
            resource_version_match: initial.map(|_| "NotOlderThan".to_owned()),
            send_initial_events: initial,
            allow_bookmarks: true,
            ..WatchOptions::default()
        };
        // As kube-apiserver's watch cache: the watch starts, and its one
        // event is the error; then it ends.
        let mut w = s.watch(Some("prod"), opts).await.unwrap();
        let first = tokio::time::timeout(Duration::from_secs(60), w.next())
            .await
            .unwrap_or_else(|_| panic!("{case}: no event"));
        let err = match first {
            Some(Err(e)) => e,
            other => panic!("{case}: {other:?}"),
        };
        assert_too_large(case, &err, future, &current);
        let after = tokio::time::timeout(Duration::from_secs(60), w.next()).await;
        assert!(
            matches!(after, Ok(None)),
            "{case}: the watch ends: {after:?}"
        );
    }
}

fn apply_config(labels: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t", "labels": labels},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"}},
    })
}

fn decode_config(v: serde_json::Value) -> Result<NamespaceTransfer, ApiError> {
    serde_json::from_value(v).map_err(|e| ApiError::BadRequest(e.to_string()))
}

fn with_manager(user: &str, manager: &str) -> Context {
    Context {
        manager: manager.to_owned(),
        ..ctx(user)
    }
}

#[tokio::test]
async fn every_write_records_its_manager_and_a_status_write_its_subresource() {
    let store = store().await;
    let created = store
        .create(&with_manager("alice", "creator"), "prod", offer("t"))
        .await
        .unwrap();
    let entries = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("creator"));
    assert_eq!(entries[0].operation.as_deref(), Some("Update"));
    // The controllers write status under their own name and subresource.
    let mut status = created.clone();
    status.status.as_mut().unwrap().message = Some("working".to_owned());
    let written = store
        .update(&controller(), "prod", "t", status, true)
        .await
        .unwrap();
    let ctl = written
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some(crate::registry::CONTROLLER_MANAGER))
        .unwrap();
    assert_eq!(ctl.subresource.as_deref(), Some("status"));
}

#[tokio::test]
async fn an_apply_creates_then_conflicts_with_another_manager() {
    let store = store().await;
    let (obj, created) = store
        .apply(
            &with_manager("alice", "a"),
            "prod",
            "t",
            false,
            &apply_config(serde_json::json!({"x": "1"})),
            false,
            decode_config,
        )
        .await
        .unwrap();
    assert!(created);
    assert!(obj.metadata.uid.is_some());
    let err = store
        .apply(
            &with_manager("bob", "b"),
            "prod",
            "t",
            false,
            &apply_config(serde_json::json!({"x": "2"})),
            false,
            decode_config,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409, "{err}");
    assert_eq!(
        err.to_status().details.unwrap().causes.unwrap()[0]
            .reason
            .as_deref(),
        Some("FieldManagerConflict")
    );
    // Nothing changed.
    let live = store.get("prod", "t").await.unwrap();
    assert_eq!(live.metadata.labels.unwrap()["x"], "1");
}

#[tokio::test]
async fn an_object_never_grows_past_the_limit_through_its_entries() {
    let store = store().await;
    // Labels that fit in an object, but not twice (as values and as the
    // field names an entry lists).
    let labels: serde_json::Map<String, serde_json::Value> = (0..9000)
        .map(|i| {
            (
                format!("l{i:05}-{}", "x".repeat(53)),
                serde_json::json!("v".repeat(60)),
            )
        })
        .collect();
    let config = apply_config(serde_json::Value::Object(labels));
    // An apply owns what it applies: past the limit, it is refused.
    let err = store
        .apply(
            &with_manager("alice", "a"),
            "prod",
            "t",
            false,
            &config,
            false,
            decode_config,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 413, "{err}");
    assert_eq!(store.get("prod", "t").await.unwrap_err().code(), 404);
    // A create only records who wrote: it loses the entries instead.
    let created = store
        .create(
            &with_manager("alice", "a"),
            "prod",
            decode_config(config).unwrap(),
        )
        .await
        .unwrap();
    assert!(created.metadata.managed_fields.is_none());
    assert!(store.encode(&created).is_ok());
    assert_eq!(created.metadata.labels.unwrap().len(), 9000);
}

#[tokio::test]
async fn an_apply_pinned_to_an_old_resource_version_is_a_conflict() {
    let store = store().await;
    let ctx = with_manager("alice", "a");
    let config = apply_config(serde_json::json!({"x": "1"}));
    let (first, _) = store
        .apply(&ctx, "prod", "t", false, &config, false, decode_config)
        .await
        .unwrap();
    let (second, _) = store
        .apply(
            &ctx,
            "prod",
            "t",
            false,
            &apply_config(serde_json::json!({"x": "2"})),
            false,
            decode_config,
        )
        .await
        .unwrap();
    let mut stale = apply_config(serde_json::json!({"x": "3"}));
    stale["metadata"]["resourceVersion"] = first.metadata.resource_version.clone().into();
    let err = store
        .apply(&ctx, "prod", "t", false, &stale, false, decode_config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409, "{err}");
    let mut current = apply_config(serde_json::json!({"x": "3"}));
    current["metadata"]["resourceVersion"] = second.metadata.resource_version.clone().into();
    let (third, _) = store
        .apply(&ctx, "prod", "t", false, &current, false, decode_config)
        .await
        .unwrap();
    assert_eq!(third.metadata.labels.unwrap()["x"], "3");
}

/// Records every admission call, and in its mutating phase sets a label
/// and tries to change what only the server sets.
#[derive(Debug, Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<(String, &'static str, String)>>,
    refuse: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Plugin for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn handles(&self, _: Operation, _: Phase) -> bool {
        true
    }

    async fn admit(
        &self,
        _ctx: &Context,
        attrs: &mut crate::registry::Attributes,
        _passes: &mut crate::registry::admission::Reinvocation,
    ) -> Result<(), ApiError> {
        self.calls.lock().unwrap().push((
            "mutate".to_owned(),
            attrs.operation.as_str(),
            attrs.subresource.clone(),
        ));
        if let Some(obj) = attrs.object.as_mut() {
            obj["metadata"]["labels"]["admitted"] = "yes".into();
            obj["spec"]["requester"] = serde_json::json!({"username": "mallory"});
            obj["metadata"]["uid"] = "forged".into();
            obj["status"] = serde_json::json!({"phase": "Completed"});
        }
        Ok(())
    }

    async fn validate(
        &self,
        _ctx: &Context,
        attrs: &crate::registry::Attributes,
    ) -> Result<(), ApiError> {
        self.calls.lock().unwrap().push((
            "validate".to_owned(),
            attrs.operation.as_str(),
            attrs.subresource.clone(),
        ));
        if self.refuse.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ApiError::Denied {
                code: 403,
                reason: "Forbidden".to_owned(),
                message: "refused by the test".to_owned(),
                details: None,
            });
        }
        Ok(())
    }
}

impl Recorder {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
            .into_iter()
            .map(|(phase, op, sub)| {
                format!(
                    "{phase} {op}{}",
                    if sub.is_empty() {
                        String::new()
                    } else {
                        format!(" {sub}")
                    }
                )
            })
            .collect()
    }
}

async fn admitted_store() -> (NstStore, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let s = store()
        .await
        .with_admission(Chain::new(vec![recorder.clone()]));
    (s, recorder)
}

#[tokio::test]
async fn every_client_write_passes_both_admission_phases_and_mutations_keep_server_fields() {
    let (s, rec) = admitted_store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    assert_eq!(rec.take(), ["mutate CREATE", "validate CREATE"]);
    let labels = created.metadata.labels.clone().unwrap();
    assert_eq!(labels["admitted"], "yes");
    assert_eq!(created.spec.requester.as_ref().unwrap().username, "alice");
    assert_ne!(created.metadata.uid.as_deref(), Some("forged"));
    assert_eq!(
        created.status.as_ref().unwrap().phase,
        Some(NamespaceTransferPhase::Pending)
    );

    let mut changed = created.clone();
    changed
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".to_owned(), "gold".to_owned());
    let updated = s
        .update(&ctx("alice"), "prod", "a", changed, false)
        .await
        .unwrap();
    assert_eq!(rec.take(), ["mutate UPDATE", "validate UPDATE"]);
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    assert_eq!(updated.spec.requester.as_ref().unwrap().username, "alice");
    assert_eq!(
        updated.status.as_ref().unwrap().phase,
        Some(NamespaceTransferPhase::Pending)
    );

    // A mutation is the client's change: on /status it may not write what
    // only the controllers write either.
    let err = s
        .guaranteed_update(&ctx("alice"), "prod", "a", true, |cur| Ok(cur.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert_eq!(rec.take(), ["mutate UPDATE status"]);

    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(rec.take(), ["mutate DELETE", "validate DELETE"]);
}

#[tokio::test]
async fn a_validating_refusal_stores_nothing_and_the_controllers_are_not_admitted() {
    let (s, rec) = admitted_store().await;
    rec.refuse.store(true, std::sync::atomic::Ordering::Relaxed);
    let err = s
        .create(&ctx("alice"), "prod", offer("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 403, "{err}");
    assert!(matches!(
        s.get("prod", "a").await,
        Err(ApiError::NotFound { .. })
    ));
    rec.take();
    // The controllers' own writes are the protocol's, not admitted.
    s.create(&controller(), "prod", offer("b")).await.unwrap();
    assert!(rec.take().is_empty());
}

#[tokio::test]
async fn a_get_sees_every_write_acknowledged_before_it() {
    let s = store().await;
    let mut live = s.create(&ctx("alice"), "prod", offer("t")).await.unwrap();
    for i in 0..50 {
        live.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("step".to_owned(), i.to_string());
        live = s
            .update(&ctx("alice"), "prod", "t", live, false)
            .await
            .unwrap();
        let read = s.read("prod", "t", None).await.unwrap();
        assert_eq!(
            read.metadata.resource_version, live.metadata.resource_version,
            "step {i}: the cache answered before it had the write"
        );
        assert_eq!(
            read.metadata.labels.as_ref().unwrap()["step"],
            i.to_string()
        );
    }
    s.delete(&ctx("alice"), "prod", "t", &DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(s.read("prod", "t", None).await.unwrap_err().code(), 404);
}

#[tokio::test]
async fn a_get_honours_its_resource_version_as_kube_apiserver_does() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("t")).await.unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    // "0" is whatever the cache has: once a read of the most recent has
    // waited for the create, that includes it.
    for asked in [None, Some(""), Some("0"), Some(rv.as_str())] {
        let read = s.read("prod", "t", asked).await.unwrap();
        assert_eq!(read.metadata.resource_version.as_deref(), Some(rv.as_str()));
    }
    assert_eq!(
        s.read("prod", "nope", Some("0")).await.unwrap_err().code(),
        404
    );
    let err = s.read("prod", "t", Some("-1")).await.unwrap_err();
    assert_eq!(err.code(), 400, "{err}");
    let err = s.read("prod", "t", Some("soon")).await.unwrap_err();
    assert_eq!(err.code(), 400, "{err}");
    // Newer than anything written: kube-apiserver's watch cache waits, then
    // answers 504 "Too large resource version".
    let future = (rv.parse::<i64>().unwrap() + 1000).to_string();
    let err = s.read("prod", "t", Some(&future)).await.unwrap_err();
    assert_eq!(err.code(), 504, "{err}");
    assert!(
        err.to_string().contains("Too large resource version"),
        "{err}"
    );
}

#[tokio::test]
async fn a_controller_write_fenced_on_an_ended_term_changes_nothing() {
    let storage = Arc::new(MemoryStorage::default());
    let s = store_on(storage.clone()).await;
    let term = storage
        .create("/election/replica-a", Bytes::from_static(b"a"))
        .await
        .unwrap();
    let leader = Context {
        fence: Some(crate::storage::Fence {
            key: "/election/replica-a".to_owned(),
            create_revision: term.create_revision,
        }),
        ..controller()
    };
    let mut held = offer("held");
    held.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    s.create(&leader, "prod", held).await.unwrap();
    let plain = s.create(&leader, "prod", offer("plain")).await.unwrap();
    let mut finishing = offer("finishing");
    finishing.metadata.finalizers = Some(vec!["example.com/hold".to_owned()]);
    s.create(&leader, "prod", finishing).await.unwrap();
    s.delete(
        &ctx("alice"),
        "prod",
        "finishing",
        &DeleteOptions::default(),
    )
    .await
    .unwrap();

    // The lease expires: etcd deletes the term's key.
    storage
        .delete("/election/replica-a", term.mod_revision)
        .await
        .unwrap();
    let before = s.list(None, &ListOptions::default()).await.unwrap();
    let fenced = |result: Result<_, ApiError>, what: &str| {
        let err = result
            .err()
            .unwrap_or_else(|| panic!("{what} went through"));
        assert!(matches!(err, ApiError::Fenced(_)), "{what}: {err:?}");
        assert!(err.to_string().contains("no longer leads"), "{what}: {err}");
    };
    fenced(
        s.create(&leader, "prod", offer("new")).await.map(drop),
        "create",
    );
    let mut status = plain.clone();
    status.status = Some(NamespaceTransferStatus {
        phase: Some(NamespaceTransferPhase::Failed),
        ..Default::default()
    });
    fenced(
        s.update(&leader, "prod", "plain", status, true)
            .await
            .map(drop),
        "status update",
    );
    fenced(
        s.delete(&leader, "prod", "held", &DeleteOptions::default())
            .await
            .map(drop),
        "marking for deletion",
    );
    fenced(
        s.delete(&leader, "prod", "plain", &DeleteOptions::default())
            .await
            .map(drop),
        "delete",
    );
    fenced(
        s.guaranteed_update(&leader, "prod", "finishing", false, |current| {
            let mut current = current.clone();
            current.metadata.finalizers = Some(Vec::new());
            Ok(current)
        })
        .await
        .map(drop),
        "removing the last finalizer",
    );
    let after = s.list(None, &ListOptions::default()).await.unwrap();
    let versions = |list: &ObjectList<Shared<NamespaceTransfer>>| -> Vec<(String, String)> {
        list.items
            .iter()
            .map(|o| {
                let m = &o.metadata;
                (
                    m.name.clone().unwrap_or_default(),
                    m.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    assert_eq!(versions(&after), versions(&before));
    assert_eq!(versions(&after).len(), 3);
}

/// `offer(name)` carrying `labels` labels of 63-character names and values
/// and one annotation of `annotation` bytes: a tenant's padding.
fn padded(name: &str, labels: usize, annotation: usize) -> NamespaceTransfer {
    let mut t = offer(name);
    let map = t.metadata.labels.get_or_insert_with(Default::default);
    for i in 0..labels {
        map.insert(format!("l{i:06}{}", "x".repeat(56)), "v".repeat(63));
    }
    t.metadata.annotations = Some([("pad".to_owned(), "a".repeat(annotation))].into());
    t
}

/// The largest padding a client's create of `name` is allowed, found with
/// dry runs: the biggest object a tenant can make. Whether a padding is
/// allowed grows with it (past the limit the managedFields entries go
/// first, and the rest decides), so bisections find it: first the labels
/// (about 132 bytes each), then an annotation for the rest.
async fn largest_padded(s: &NstStore, name: &str) -> NamespaceTransfer {
    let mut dry = ctx("alice");
    dry.dry_run = true;
    let fits = |labels: usize, annotation: usize| {
        let dry = dry.clone();
        async move {
            match s
                .create(&dry, "prod", padded(name, labels, annotation))
                .await
            {
                Ok(_) => true,
                Err(e) => {
                    assert_eq!(e.code(), 413, "{e}");
                    false
                }
            }
        }
    };
    // The largest number of labels that fits, and the annotation after them.
    let (mut labels, mut too_many) = (0, 13_000);
    assert!(!fits(too_many, 0).await);
    while too_many - labels > 1 {
        let mid = (labels + too_many) / 2;
        if fits(mid, 0).await {
            labels = mid;
        } else {
            too_many = mid;
        }
    }
    let (mut annotation, mut too_long) = (0, 1_000);
    assert!(!fits(labels, too_long).await);
    while too_long - annotation > 1 {
        let mid = (annotation + too_long) / 2;
        if fits(labels, mid).await {
            annotation = mid;
        } else {
            too_long = mid;
        }
    }
    padded(name, labels, annotation)
}

/// A status at its largest: every name at its longest, every text far past
/// its bound, every condition and step the protocol writes.
fn largest_status() -> NamespaceTransferStatus {
    let name = "n".repeat(253);
    let text = "m".repeat(100_000);
    let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    );
    let conditions: Vec<serde_json::Value> = [
        "PeerMatched",
        "Authorized",
        "SourceReleased",
        "Rebound",
        "Ready",
    ]
    .iter()
    .map(|t| {
        serde_json::json!({
            "type": t, "status": "False", "reason": text, "message": text,
            "lastTransitionTime": time, "observedGeneration": i64::MAX,
        })
    })
    .collect();
    // A standing offer's records, one per clone alive, at most maxClones.
    let pairs: Vec<serde_json::Value> = (0..crate::api::namespace_transfer::MAX_MAX_CLONES)
        .map(|_| {
            serde_json::json!({
                "request": {"namespace": &name[..63], "name": name, "uid": uuid::Uuid::new_v4().to_string()},
                "sourceClaim": {
                    "name": name, "uid": uuid::Uuid::new_v4().to_string(), "volumeName": name,
                    "storageRequest": "1000Ti", "storageClassName": name,
                    "accessModes": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"],
                    "volumeMode": "Filesystem", "volumeAttributesClassName": name,
                },
            })
        })
        .collect();
    let steps: Vec<serde_json::Value> = [
        "Locked",
        "Retained",
        "Created",
        "Committed",
        "Released",
        "Settled",
    ]
    .iter()
    .map(|n| serde_json::json!({"name": n, "time": time}))
    .collect();
    serde_json::from_value(serde_json::json!({
        "phase": "Rebinding",
        "role": "Source",
        "peer": {"namespace": &name[..63], "name": name, "uid": uuid::Uuid::new_v4().to_string()},
        "peerPhase": "Rebinding",
        "volumeName": name,
        "sourceClaim": {
            "name": name, "uid": uuid::Uuid::new_v4().to_string(), "volumeName": name,
            "storageRequest": "1000Ti", "storageClassName": name,
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"],
            "volumeMode": "Filesystem", "volumeAttributesClassName": name,
        },
        "destinationClaim": {"namespace": &name[..63], "name": name, "uid": uuid::Uuid::new_v4().to_string()},
        "pairs": pairs,
        "completionTime": time,
        "clones": {"made": i64::MAX, "alive": i64::MAX},
        "conditions": conditions,
        "reason": text,
        "message": text,
        "observedGeneration": i64::MAX,
        "steps": steps,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_clients_create_may_not_take_the_room_kept_for_the_controllers() {
    let s = store().await;
    let err = s
        .create(&ctx("alice"), "prod", padded("fat", 11_600, 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 413, "{err}");
    assert!(
        err.to_string().contains("a client's write may take"),
        "{err}"
    );
    assert!(s.get("prod", "fat").await.is_err());
}

#[tokio::test]
async fn the_controllers_status_and_finalizer_fit_on_an_object_padded_to_the_clients_limit() {
    let s = store().await;
    let fat = largest_padded(&s, "fat").await;
    let created = s.create(&ctx("alice"), "prod", fat).await.unwrap();
    assert!(
        serde_json::to_vec(&created).unwrap().len() > CLIENT_OBJECT_BYTES - 1024,
        "the padding should come within 1 KiB of the client's limit"
    );
    let written = s
        .guaranteed_update(&controller(), "prod", "fat", false, |current| {
            let mut next = current.clone();
            next.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
            Ok(next)
        })
        .await
        .unwrap();
    assert!(written.metadata.finalizers.is_some());
    let written = s
        .guaranteed_update(&controller(), "prod", "fat", true, |current| {
            let mut next = current.clone();
            next.status = Some(largest_status());
            Ok(next)
        })
        .await
        .unwrap();
    let status = written.status.unwrap();
    assert_eq!(status.phase, Some(NamespaceTransferPhase::Rebinding));
    assert!(status.message.unwrap().len() <= crate::api::meta::MAX_STATUS_TEXT_BYTES);
    // And the client can still delete what it padded.
    s.delete(&ctx("alice"), "prod", "fat", &DeleteOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_status_at_its_largest_fits_in_the_room_kept_for_the_controllers() {
    let mut t = offer("a");
    t.status = Some(largest_status());
    t.bound_status();
    let status = serde_json::to_vec(&t.status).unwrap().len();
    // The controllers' managedFields entries name each field once, with
    // no values (`pairs` is an atomic list: one entry): a few KiB.
    assert!(
        status + 16 * 1024 < CONTROLLER_HEADROOM_BYTES,
        "a status of {status} bytes leaves too little room"
    );
}

#[tokio::test]
async fn a_client_create_past_max_objects_per_namespace_is_refused_naming_the_flag() {
    let s = store().await.with_max_objects_per_namespace(2);
    for name in ["a", "b"] {
        s.create(&ctx("alice"), "prod", offer(name)).await.unwrap();
    }
    // The watch cache counts what was written.
    for _ in 0..200 {
        if s.count_in(Some("prod"), 10) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let err = s
        .create(&ctx("alice"), "prod", offer("c"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 403, "{err:?}");
    assert_eq!(
        err.to_string(),
        "namespacetransfers.storage.transfer.k8s.io \"c\" is forbidden: namespace \"prod\" already holds 2 namespacetransfers, the most this server allows in one namespace (--max-objects-per-namespace=2)"
    );
    let dry = Context {
        dry_run: true,
        ..ctx("alice")
    };
    assert!(s.create(&dry, "prod", offer("c")).await.is_err());
    // Another namespace, and the controllers, are not held back.
    s.create(&ctx("alice"), "staging", offer("c"))
        .await
        .unwrap();
    s.create(&controller(), "prod", offer("d")).await.unwrap();
}

/// Quota admission that records the creates it is asked about, and refuses
/// them when told to.
#[derive(Debug, Default)]
struct QuotaRecorder {
    asked: std::sync::Mutex<Vec<(String, String, bool)>>,
    refuse: bool,
}

#[async_trait::async_trait]
impl Plugin for QuotaRecorder {
    fn name(&self) -> &'static str {
        "QuotaRecorder"
    }

    fn handles(&self, operation: Operation, phase: Phase) -> bool {
        operation == Operation::Create && phase == Phase::Validating
    }

    async fn validate(
        &self,
        ctx: &Context,
        attrs: &crate::registry::Attributes,
    ) -> Result<(), ApiError> {
        let resource = GroupResource::new(&attrs.group, &attrs.resource);
        self.asked.lock().unwrap().push((
            format!("{resource} {}/{}", attrs.namespace, attrs.name),
            ctx.field_manager().to_owned(),
            ctx.dry_run,
        ));
        if self.refuse {
            return Err(ApiError::Forbidden {
                message: "exceeded quota".to_owned(),
            });
        }
        Ok(())
    }
}

#[tokio::test]
async fn quota_is_asked_once_per_valid_client_create_dry_runs_included() {
    let quota = Arc::new(QuotaRecorder::default());
    let s = store()
        .await
        .with_admission(Chain::new(vec![quota.clone()]));
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let dry = Context {
        dry_run: true,
        ..ctx("alice")
    };
    s.create(&dry, "prod", offer("b")).await.unwrap();
    // Refused before quota: not charged.
    s.create(
        &ctx("alice"),
        "prod",
        transfer("bad", serde_json::json!({})),
    )
    .await
    .unwrap_err();
    // The controllers' own creates are not charged.
    s.create(&controller(), "prod", offer("c")).await.unwrap();
    let asked: Vec<_> = quota
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|(what, _, dry)| (what.clone(), *dry))
        .collect();
    assert_eq!(
        asked,
        [
            (
                "namespacetransfers.storage.transfer.k8s.io prod/a".to_owned(),
                false
            ),
            (
                "namespacetransfers.storage.transfer.k8s.io prod/b".to_owned(),
                true
            ),
        ]
    );
}

#[tokio::test]
async fn a_create_quota_refuses_is_not_written() {
    let s = store()
        .await
        .with_admission(Chain::new(vec![Arc::new(QuotaRecorder {
            refuse: true,
            ..Default::default()
        })]));
    let err = s
        .create(&ctx("alice"), "prod", offer("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 403);
    assert!(matches!(
        s.get("prod", "a").await,
        Err(ApiError::NotFound { .. })
    ));
}

#[tokio::test]
async fn an_update_from_a_current_copy_is_decided_once_on_that_copy() {
    let s = store().await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let updated = s
        .guaranteed_update_from(
            &controller(),
            "prod",
            "a",
            Part::Status,
            Some(&created),
            |current| {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(current, &created, "decided on the copy it was given");
                let mut next = current.clone();
                next.status = Some(NamespaceTransferStatus {
                    phase: Some(NamespaceTransferPhase::WaitingForPeer),
                    ..Default::default()
                });
                Ok(next)
            },
        )
        .await
        .unwrap();
    assert_eq!(calls.into_inner(), 1);
    assert_eq!(updated.phase(), Some("WaitingForPeer"));
    assert_eq!(s.get("prod", "a").await.unwrap(), updated);
}

#[tokio::test]
async fn an_update_from_a_stale_copy_is_decided_again_on_the_object_and_loses_no_write() {
    let s = store().await;
    let stale = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    // Another write lands after the copy was read.
    let mut relabelled = stale.clone();
    relabelled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("tier".to_owned(), "gold".to_owned());
    s.update(&ctx("alice"), "prod", "a", relabelled, false)
        .await
        .unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let updated = s
        .guaranteed_update_from(
            &controller(),
            "prod",
            "a",
            Part::Status,
            Some(&stale),
            |current| {
                seen.lock()
                    .unwrap()
                    .push(current.metadata.resource_version.clone());
                let mut next = current.clone();
                next.metadata.resource_version = None;
                next.status = Some(NamespaceTransferStatus {
                    phase: Some(NamespaceTransferPhase::WaitingForPeer),
                    ..Default::default()
                });
                Ok(next)
            },
        )
        .await
        .unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen.len(),
        2,
        "tried on the copy, then on the object: {seen:?}"
    );
    assert_eq!(seen[0], stale.metadata.resource_version);
    assert_ne!(seen[1], stale.metadata.resource_version);
    assert_eq!(updated.phase(), Some("WaitingForPeer"));
    assert_eq!(updated.metadata.labels.as_ref().unwrap()["tier"], "gold");
}

#[tokio::test]
async fn an_update_from_a_copy_of_a_deleted_object_is_not_found() {
    let s = store().await;
    let copy = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    let err = s
        .guaranteed_update_from(
            &controller(),
            "prod",
            "a",
            Part::Status,
            Some(&copy),
            |current| Ok(current.clone()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 404, "{err}");
}

#[tokio::test]
async fn a_write_that_changes_nothing_in_a_stale_copy_is_still_made_on_the_object() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let set = |present: bool| {
        move |current: &NamespaceTransfer| {
            let mut next = current.clone();
            next.metadata.resource_version = None;
            crate::api::meta::set_finalizer(
                &mut next.metadata,
                FINALIZER_TRANSFER_PROTECTION,
                present,
            );
            Ok(next)
        }
    };
    let protected = s
        .guaranteed_update(&controller(), "prod", "a", false, set(true))
        .await
        .unwrap();
    s.guaranteed_update(&controller(), "prod", "a", false, set(false))
        .await
        .unwrap();
    // The copy still shows the finalizer, so adding it changes nothing there.
    let updated = s
        .guaranteed_update_from(
            &controller(),
            "prod",
            "a",
            Part::Main,
            Some(&protected),
            set(true),
        )
        .await
        .unwrap();
    let finalizers = updated.metadata.finalizers.clone().unwrap_or_default();
    assert_eq!(finalizers, [FINALIZER_TRANSFER_PROTECTION]);
    assert_eq!(s.get("prod", "a").await.unwrap(), updated);
}

#[tokio::test]
async fn taking_the_last_finalizer_off_a_deleting_object_from_a_copy_finishes_it_once() {
    let s = store().await;
    s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    s.guaranteed_update(&controller(), "prod", "a", false, |current| {
        let mut next = current.clone();
        next.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
        Ok(next)
    })
    .await
    .unwrap();
    s.delete(&ctx("alice"), "prod", "a", &DeleteOptions::default())
        .await
        .unwrap();
    let deleting = s.get("prod", "a").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let last = s
        .guaranteed_update_from(
            &controller(),
            "prod",
            "a",
            Part::Main,
            Some(&deleting),
            |current| {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut next = current.clone();
                next.metadata.resource_version = None;
                next.metadata.finalizers = None;
                Ok(next)
            },
        )
        .await
        .unwrap();
    assert_eq!(
        calls.into_inner(),
        1,
        "the write finished it; nothing is tried again"
    );
    assert!(last.metadata.finalizers.is_none());
    let err = s.get("prod", "a").await.unwrap_err();
    assert_eq!(err.code(), 404, "{err}");
}

/// A store on [`CountingStorage`] holding offer `a` in `prod`, as its
/// watch cache has seen it.
async fn counted_with_offer() -> (Arc<CountingStorage>, NstStore, NamespaceTransfer) {
    let storage = Arc::new(CountingStorage::default());
    let s = store_on(storage.clone()).await;
    let created = s.create(&ctx("alice"), "prod", offer("a")).await.unwrap();
    let rv = created.metadata.resource_version.clone();
    s.read("prod", "a", rv.as_deref()).await.unwrap();
    (storage, s, created)
}

fn labelled(obj: &NamespaceTransfer, value: &str) -> NamespaceTransfer {
    let mut next = obj.clone();
    next.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("tier".to_owned(), value.to_owned());
    next
}

/// [`counted_with_offer`], then bob's write of a label, which the watch
/// cache has not seen (its events are held until `release_watches`).
async fn behind_bobs_write() -> (
    Arc<CountingStorage>,
    NstStore,
    NamespaceTransfer,
    NamespaceTransfer,
) {
    let (storage, s, created) = counted_with_offer().await;
    storage.hold_watches();
    let theirs = s
        .update(
            &ctx("bob"),
            "prod",
            "a",
            labelled(&created, "silver"),
            false,
        )
        .await
        .unwrap();
    (storage, s, created, theirs)
}

#[tokio::test]
async fn a_put_at_the_version_the_cache_holds_is_written_without_reading_etcd() {
    let (storage, s, created) = counted_with_offer().await;
    let before = storage.gets();
    let updated = s
        .update(
            &ctx("alice"),
            "prod",
            "a",
            labelled(&created, "gold"),
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        storage.gets(),
        before,
        "the cache's copy stood in for the read"
    );
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(s.get("prod", "a").await.unwrap(), updated);
}

#[tokio::test]
async fn a_put_at_a_version_only_the_lagging_cache_still_holds_is_a_conflict_and_changes_nothing() {
    let (storage, s, created, theirs) = behind_bobs_write().await;
    let err = s
        .update(
            &ctx("alice"),
            "prod",
            "a",
            labelled(&created, "gold"),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409, "{err}");
    assert_eq!(s.get("prod", "a").await.unwrap(), theirs);
    storage.release_watches();
}

#[tokio::test]
async fn a_put_that_changes_nothing_at_a_version_only_the_lagging_cache_holds_is_a_conflict() {
    let (storage, s, created, _) = behind_bobs_write().await;
    // Unchanged against the cache's copy, and yet stale.
    let err = s
        .update(&ctx("alice"), "prod", "a", created.clone(), false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 409, "{err}");
    storage.release_watches();
}

/// Offer `a`'s configuration, with the annotation `note`.
fn noted_config(note: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "a", "namespace": "prod", "annotations": {"note": note}},
        "spec": {"source": {"name": "a-data"}, "destination": {"namespace": "dev"}},
    })
}

async fn apply_as(s: &NstStore, config: &serde_json::Value) -> NamespaceTransfer {
    s.apply(
        &with_manager("alice", "kubectl"),
        "prod",
        "a",
        false,
        config,
        true,
        decode_config,
    )
    .await
    .map(|(obj, _)| obj)
    .unwrap()
}

fn note(obj: &NamespaceTransfer) -> &str {
    &obj.metadata.annotations.as_ref().unwrap()["note"]
}

#[tokio::test]
async fn an_apply_to_an_object_the_cache_holds_is_written_without_reading_etcd() {
    let (storage, s, _) = counted_with_offer().await;
    let before = storage.gets();
    let applied = apply_as(&s, &noted_config("one")).await;
    assert_eq!(
        storage.gets(),
        before,
        "the cache's copy stood in for the read"
    );
    assert_eq!(note(&applied), "one");
    assert_eq!(s.get("prod", "a").await.unwrap(), applied);
}

#[tokio::test]
async fn an_apply_over_a_lagging_cache_keeps_the_write_the_cache_has_not_seen() {
    let (storage, s, _, _) = behind_bobs_write().await;
    let applied = apply_as(&s, &noted_config("one")).await;
    assert_eq!(note(&applied), "one");
    assert_eq!(applied.metadata.labels.as_ref().unwrap()["tier"], "silver");
    assert_eq!(s.get("prod", "a").await.unwrap(), applied);
    storage.release_watches();
}

#[tokio::test]
async fn an_apply_that_changes_nothing_in_a_lagging_cache_is_still_made_on_the_object() {
    let (storage, s, _) = counted_with_offer().await;
    let first = apply_as(&s, &noted_config("one")).await;
    s.read("prod", "a", first.metadata.resource_version.as_deref())
        .await
        .unwrap();
    storage.hold_watches();
    // Another writer sets the note to "two"; the cache still shows "one".
    let mut theirs = first.clone();
    theirs
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("note".to_owned(), "two".to_owned());
    s.update(&ctx("bob"), "prod", "a", theirs, false)
        .await
        .unwrap();
    let applied = apply_as(&s, &noted_config("one")).await;
    assert_eq!(note(&applied), "one");
    assert_eq!(s.get("prod", "a").await.unwrap(), applied);
    storage.release_watches();
}

#[tokio::test]
async fn a_patch_over_a_lagging_cache_keeps_the_write_the_cache_has_not_seen() {
    let (storage, s, _, _) = behind_bobs_write().await;
    let patched = s
        .guaranteed_update(&ctx("alice"), "prod", "a", false, |current| {
            let mut next = current.clone();
            next.metadata.resource_version = None;
            next.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("note".to_owned(), "one".to_owned());
            Ok(next)
        })
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.as_ref().unwrap()["tier"], "silver");
    assert_eq!(s.get("prod", "a").await.unwrap(), patched);
    storage.release_watches();
}

/// Validating admission that refuses any update of an object stored with
/// the label `frozen`: a refusal that depends on the object as stored.
#[derive(Debug, Default)]
struct RefusesFrozen;

#[async_trait::async_trait]
impl Plugin for RefusesFrozen {
    fn name(&self) -> &'static str {
        "RefusesFrozen"
    }

    fn handles(&self, _: Operation, _: Phase) -> bool {
        true
    }

    async fn validate(
        &self,
        _ctx: &Context,
        attrs: &crate::registry::Attributes,
    ) -> Result<(), ApiError> {
        match &attrs.old_object {
            Some(old) if !old["metadata"]["labels"]["frozen"].is_null() => {
                Err(ApiError::BadRequest("frozen".to_owned()))
            }
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn a_refusal_that_only_a_stale_copy_earns_is_decided_again_on_the_object() {
    let s = store()
        .await
        .with_admission(Chain::new(vec![Arc::new(RefusesFrozen)]));
    let mut frozen = offer("a");
    frozen.metadata.labels = Some([("frozen".to_owned(), "yes".to_owned())].into());
    let copy = s.create(&ctx("alice"), "prod", frozen).await.unwrap();
    // Thawed since the copy was read, by a write admission does not see.
    s.guaranteed_update(&controller(), "prod", "a", false, |current| {
        let mut next = current.clone();
        next.metadata.resource_version = None;
        next.metadata.labels = None;
        Ok(next)
    })
    .await
    .unwrap();
    let updated = s
        .guaranteed_update_from(
            &ctx("alice"),
            "prod",
            "a",
            Part::Main,
            Some(&copy),
            |current| {
                let mut next = labelled(current, "gold");
                next.metadata.resource_version = None;
                Ok(next)
            },
        )
        .await
        .unwrap();
    assert_eq!(updated.metadata.labels.as_ref().unwrap()["tier"], "gold");
    assert!(!updated
        .metadata
        .labels
        .as_ref()
        .unwrap()
        .contains_key("frozen"));
}
