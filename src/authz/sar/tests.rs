use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use crate::authz::ResourceAttributes;

/// A SubjectAccessReview stand-in: allows users whose name starts with
/// `admin`, counts the reviews, and while `held` keeps them waiting.
#[derive(Debug, Default)]
struct FakeReviews {
    calls: AtomicUsize,
    held: AtomicBool,
    released: tokio::sync::Notify,
}

impl FakeReviews {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
        self.released.notify_waiters();
    }
}

#[async_trait::async_trait]
impl AccessReviews for FakeReviews {
    async fn review(&self, spec: SubjectAccessReviewSpec) -> Result<Decision, ApiError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        while self.held.load(Ordering::SeqCst) {
            let released = self.released.notified();
            if !self.held.load(Ordering::SeqCst) {
                break;
            }
            released.await;
        }
        Ok(
            if spec.user.as_deref().is_some_and(|u| u.starts_with("admin")) {
                Decision::Allow
            } else {
                Decision::Deny {
                    reason: "no RBAC policy matched".to_owned(),
                }
            },
        )
    }
}

fn list_in(user: &str, namespace: &str) -> Attributes {
    Attributes {
        user: crate::authn::UserInfo {
            username: user.to_owned(),
            groups: vec!["system:authenticated".to_owned()],
            ..Default::default()
        },
        verb: "list".to_owned(),
        resource: Some(ResourceAttributes {
            group: "storage.transfer.k8s.io".to_owned(),
            version: "v1alpha1".to_owned(),
            resource: "namespacetransfers".to_owned(),
            subresource: String::new(),
            namespace: namespace.to_owned(),
            name: String::new(),
        }),
        path: String::new(),
    }
}

fn authorizer() -> (Arc<FakeReviews>, Arc<SubjectAccessReviewer>) {
    let reviews = Arc::new(FakeReviews::default());
    let authorizer = Arc::new(SubjectAccessReviewer::with_reviews(reviews.clone()));
    (reviews, authorizer)
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_with_one_review_spec_cause_one_review() {
    let (reviews, authorizer) = authorizer();
    reviews.held.store(true, Ordering::SeqCst);
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let authorizer = authorizer.clone();
            tokio::spawn(async move { authorizer.authorize(&list_in("admin-ann", "prod")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    reviews.release();
    for request in requests {
        assert_eq!(request.await.unwrap().unwrap(), Decision::Allow);
    }
    assert_eq!(reviews.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_distinct_reviews_does_not_evict_an_answer_in_use() {
    let (reviews, authorizer) = authorizer();
    let busy = list_in("admin-ann", "prod");
    assert_eq!(authorizer.authorize(&busy).await.unwrap(), Decision::Allow);
    for i in 0..2 * MAX_ENTRIES {
        let denied = authorizer
            .authorize(&list_in("mallory", &format!("ns-{i}")))
            .await
            .unwrap();
        assert!(matches!(denied, Decision::Deny { .. }));
        if i % 100 == 0 {
            assert_eq!(authorizer.authorize(&busy).await.unwrap(), Decision::Allow);
        }
    }
    assert_eq!(
        reviews.calls(),
        1 + 2 * MAX_ENTRIES,
        "the answer in use outlived the flood: one review for it"
    );
}

#[tokio::test]
async fn allow_and_deny_are_reused_but_a_fresh_check_always_asks() {
    let (reviews, authorizer) = authorizer();
    for _ in 0..3 {
        authorizer
            .authorize(&list_in("admin-ann", "a"))
            .await
            .unwrap();
        authorizer.authorize(&list_in("bob", "a")).await.unwrap();
    }
    assert_eq!(reviews.calls(), 2);
    for _ in 0..2 {
        authorizer
            .authorize_fresh(&list_in("admin-ann", "a"))
            .await
            .unwrap();
    }
    assert_eq!(reviews.calls(), 4);
    let stats = authorizer.stats();
    assert_eq!((stats.hits, stats.misses), (4, 2));
}

#[tokio::test]
async fn system_masters_is_allowed_without_a_review() {
    let (reviews, authorizer) = authorizer();
    let mut attributes = list_in("root", "kube-system");
    attributes.user.groups.push("system:masters".to_owned());
    assert_eq!(
        authorizer.authorize(&attributes).await.unwrap(),
        Decision::Allow
    );
    assert_eq!(reviews.calls(), 0);
}
