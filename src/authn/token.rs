//! Bearer tokens, checked with a TokenReview against the cluster, with both
//! answers cached for a short TTL keyed on a hash of the token (never the
//! token itself).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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

/// Who the cluster says a token belongs to: one TokenReview round trip.
#[async_trait::async_trait]
pub trait TokenReviewer: Send + Sync + std::fmt::Debug {
    /// The user, `None` when the token is not valid (for `audiences`, when
    /// given); an error when the cluster did not answer.
    async fn review(&self, token: &str, audiences: &[String])
        -> Result<Option<UserInfo>, ApiError>;
}

/// TokenReviews sent to the cluster's kube-apiserver.
pub struct KubeTokenReviews {
    client: kube::Client,
}

impl KubeTokenReviews {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl std::fmt::Debug for KubeTokenReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeTokenReviews").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl TokenReviewer for KubeTokenReviews {
    async fn review(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<UserInfo>, ApiError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
            },
            ..TokenReview::default()
        };
        let api: kube::Api<TokenReview> = kube::Api::all(self.client.clone());
        let reviewed = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| ApiError::ServiceUnavailable(format!("TokenReview failed: {e}")))?;
        Ok(reviewed.status.and_then(|s| {
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
        }))
    }
}

/// TokenReview-backed bearer token authentication.
#[derive(Debug)]
pub struct TokenAuthenticator {
    reviewer: Arc<dyn TokenReviewer>,
    audiences: Vec<String>,
    cache: Mutex<Answers>,
}

impl TokenAuthenticator {
    /// Reviews tokens with the cluster behind `client`.
    pub fn new(client: kube::Client, audiences: Vec<String>) -> Self {
        Self::with_reviewer(Arc::new(KubeTokenReviews::new(client)), audiences)
    }

    /// Reviews tokens with `reviewer`.
    pub fn with_reviewer(reviewer: Arc<dyn TokenReviewer>, audiences: Vec<String>) -> Self {
        Self {
            reviewer,
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
        let answer = self.reviewer.review(token, &self.audiences).await?;
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


#[cfg(test)]
mod tests;
