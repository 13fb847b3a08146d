use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::*;

/// A TokenReview stand-in: tokens named `good-<user>` belong to `<user>`,
/// every other token to nobody. Counts the reviews of each token, and while
/// `held` keeps every review waiting.
#[derive(Debug, Default)]
struct FakeReviewer {
    calls: Mutex<HashMap<String, usize>>,
    held: AtomicBool,
    released: tokio::sync::Notify,
    failing: AtomicBool,
}

impl FakeReviewer {
    fn calls(&self, token: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(token)
            .copied()
            .unwrap_or_default()
    }

    fn total(&self) -> usize {
        self.calls.lock().unwrap().values().sum()
    }

    fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
        self.released.notify_waiters();
    }
}

#[async_trait::async_trait]
impl TokenReviewer for FakeReviewer {
    async fn review(
        &self,
        token: &str,
        _audiences: &[String],
    ) -> Result<Option<UserInfo>, ApiError> {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(token.to_owned())
            .or_default() += 1;
        while self.held.load(Ordering::SeqCst) {
            let released = self.released.notified();
            if !self.held.load(Ordering::SeqCst) {
                break;
            }
            released.await;
        }
        if self.failing.load(Ordering::SeqCst) {
            return Err(ApiError::ServiceUnavailable(
                "TokenReview failed: connection refused".to_owned(),
            ));
        }
        Ok(token.strip_prefix("good-").map(|user| UserInfo {
            username: user.to_owned(),
            ..UserInfo::default()
        }))
    }
}

fn authenticator() -> (Arc<FakeReviewer>, Arc<TokenAuthenticator>) {
    let reviewer = Arc::new(FakeReviewer::default());
    let tokens = Arc::new(TokenAuthenticator::with_reviewer(
        reviewer.clone(),
        Vec::new(),
    ));
    (reviewer, tokens)
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_with_one_token_cause_one_review() {
    let (reviewer, tokens) = authenticator();
    reviewer.held.store(true, Ordering::SeqCst);
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let tokens = tokens.clone();
            tokio::spawn(async move { tokens.authenticate("good-alice").await })
        })
        .collect();
    // Every request is waiting on the (held) review by now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    reviewer.release();
    for request in requests {
        assert_eq!(request.await.unwrap().unwrap().username, "alice");
    }
    assert_eq!(reviewer.calls("good-alice"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_distinct_tokens_does_not_evict_a_token_in_use() {
    let (reviewer, tokens) = authenticator();
    assert_eq!(
        tokens.authenticate("good-alice").await.unwrap().username,
        "alice"
    );
    // Twice the cache's capacity of random tokens, while alice keeps working.
    for i in 0..2 * MAX_ENTRIES {
        let err = tokens
            .authenticate(&format!("random-{i}"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), 401);
        if i % 100 == 0 {
            assert_eq!(
                tokens.authenticate("good-alice").await.unwrap().username,
                "alice"
            );
        }
    }
    assert_eq!(
        reviewer.calls("good-alice"),
        1,
        "alice's answer outlived the flood"
    );
}

#[tokio::test]
async fn answers_both_ways_are_reused_and_failures_are_not() {
    let (reviewer, tokens) = authenticator();
    for _ in 0..3 {
        assert_eq!(
            tokens.authenticate("good-bob").await.unwrap().username,
            "bob"
        );
        assert_eq!(tokens.authenticate("nobody").await.unwrap_err().code(), 401);
    }
    assert_eq!(
        (reviewer.calls("good-bob"), reviewer.calls("nobody")),
        (1, 1)
    );

    reviewer.failing.store(true, Ordering::SeqCst);
    for _ in 0..2 {
        let err = tokens.authenticate("good-carol").await.unwrap_err();
        assert_eq!(err.code(), 503, "{err}");
    }
    assert_eq!(
        reviewer.calls("good-carol"),
        2,
        "a failed review is asked again"
    );
}

#[tokio::test]
async fn a_token_no_authenticator_could_accept_is_refused_without_a_review() {
    let (reviewer, tokens) = authenticator();
    let too_long = "a".repeat(MAX_TOKEN_BYTES + 1);
    for token in [
        "two words",
        "quote\"d",
        "comma,separated",
        "semi;colon",
        "{\"json\":true}",
        "back\\slash",
        "=leading-padding",
        "padding=in-the-middle",
        too_long.as_str(),
    ] {
        let err = tokens.authenticate(token).await.unwrap_err();
        assert_eq!(err.code(), 401, "{token}");
    }
    assert_eq!(reviewer.total(), 0, "no TokenReview for a malformed token");
}

#[tokio::test]
async fn tokens_of_every_form_kube_issues_are_reviewed() {
    let (reviewer, tokens) = authenticator();
    for token in [
        // A bootstrap token.
        "abcdef.0123456789abcdef",
        // A JWT (ServiceAccount or OIDC), here of another issuer.
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2lkcC5leGFtcGxlIn0.c2lnbmF0dXJl",
        // An opaque token, base64 with padding.
        "c3RhdGljLXRva2Vu==",
        "good-dave",
        "with~tilde+plus/slash_underscore",
    ] {
        let _ = tokens.authenticate(token).await;
        assert_eq!(reviewer.calls(token), 1, "{token}");
    }
}
