//! Bearer tokens, checked with a TokenReview against the cluster, with both
//! answers cached for a short TTL keyed on a hash of the token (never the
//! token itself).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use sha2::{Digest, Sha256};

use super::UserInfo;
use crate::api::errors::ApiError;

/// How long a TokenReview answer is reused.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);
const MAX_ENTRIES: usize = 10_000;

/// Answers by SHA-256 of the token: when asked, and who it was (if anyone).
type Answers = HashMap<[u8; 32], (Instant, Option<UserInfo>)>;

/// TokenReview-backed bearer token authentication.
pub struct TokenAuthenticator {
    client: kube::Client,
    audiences: Vec<String>,
    cache: Mutex<Answers>,
}

impl std::fmt::Debug for TokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthenticator")
            .field("audiences", &self.audiences)
            .finish_non_exhaustive()
    }
}

impl TokenAuthenticator {
    pub fn new(client: kube::Client, audiences: Vec<String>) -> Self {
        Self {
            client,
            audiences,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The user a token belongs to, or 401.
    pub async fn authenticate(&self, token: &str) -> Result<UserInfo, ApiError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some((at, answer)) = self.lock().get(&key).cloned() {
            if at.elapsed() < TOKEN_CACHE_TTL {
                return answer.ok_or(ApiError::Unauthorized);
            }
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let api: kube::Api<TokenReview> = kube::Api::all(self.client.clone());
        let reviewed = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| ApiError::ServiceUnavailable(format!("TokenReview failed: {e}")))?;
        let answer = reviewed.status.and_then(|s| {
            if s.authenticated != Some(true) {
                return None;
            }
            let user = s.user?;
            Some(UserInfo {
                username: user.username.unwrap_or_default(),
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default().into_iter().collect(),
            })
        });
        {
            let mut cache = self.lock();
            if cache.len() >= MAX_ENTRIES {
                cache.retain(|_, (at, _)| at.elapsed() < TOKEN_CACHE_TTL);
                // Still full of fresh answers: start over rather than grow.
                if cache.len() >= MAX_ENTRIES {
                    cache.clear();
                }
            }
            cache.insert(key, (Instant::now(), answer.clone()));
        }
        answer.ok_or(ApiError::Unauthorized)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}
