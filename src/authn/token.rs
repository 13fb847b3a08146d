//! Bearer tokens that local verification leaves open, checked with a
//! TokenReview against the cluster.
//!
//! What a TokenReview costs is bounded, at least as well as
//! k8s.io/apiserver's cached token authenticator bounds it:
//! - both answers are reused for [`TOKEN_CACHE_TTL`], from a cache of at most
//!   [`MAX_ENTRIES`] that evicts the least recently used answer, keyed on a
//!   salted hash of the token (never the token itself);
//! - concurrent requests with one token share one review;
//! - a token that no kube token authenticator could accept (not of the
//!   bearer token syntax, or longer than [`MAX_TOKEN_BYTES`]) is refused
//!   without one. (k8s.io/apiserver sends every token.)

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use sha2::{Digest, Sha256};

use super::UserInfo;
use crate::api::errors::ApiError;
use crate::review_cache::{ReviewCache, MAX_FLIGHTS, REQUEST_REVIEW_RATE};

/// How long a TokenReview answer is reused.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);
/// How many TokenReview answers are kept.
pub const MAX_ENTRIES: usize = 10_000;
/// The longest bearer token sent to a TokenReview: far above any token kube
/// issues (a JWT with hundreds of group claims is a few KiB).
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;

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
    audiences: Arc<[String]>,
    /// Answers by salted SHA-256 of the token: who it is, if anyone.
    cache: ReviewCache<[u8; 32], Option<UserInfo>>,
    /// Per process, so that nobody can tell from hashes which tokens
    /// were seen, or aim collisions at the cache.
    salt: [u8; 32],
}

impl TokenAuthenticator {
    /// Reviews tokens with the cluster behind `client`: at most
    /// [`REQUEST_REVIEW_RATE`] new reviews a second.
    pub fn new(client: kube::Client, audiences: Vec<String>) -> Self {
        let mut authenticator =
            Self::with_reviewer(Arc::new(KubeTokenReviews::new(client)), audiences);
        authenticator.cache = ReviewCache::with_limits(
            TOKEN_CACHE_TTL,
            MAX_ENTRIES,
            MAX_FLIGHTS,
            Some(REQUEST_REVIEW_RATE),
        );
        authenticator
    }

    /// Reviews tokens with `reviewer`.
    pub fn with_reviewer(reviewer: Arc<dyn TokenReviewer>, audiences: Vec<String>) -> Self {
        let mut salt = [0; 32];
        salt[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        salt[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self {
            reviewer,
            audiences: audiences.into(),
            cache: ReviewCache::new(TOKEN_CACHE_TTL, MAX_ENTRIES),
            salt,
        }
    }

    /// The user a token belongs to, or 401.
    pub async fn authenticate(&self, token: &str) -> Result<UserInfo, ApiError> {
        if !is_bearer_token(token) {
            tracing::debug!("refused a bearer token of no form kube issues, without a review");
            return Err(ApiError::Unauthorized);
        }
        let key: [u8; 32] = Sha256::new()
            .chain_update(self.salt)
            .chain_update(token.as_bytes())
            .finalize()
            .into();
        let (reviewer, audiences, token) = (
            self.reviewer.clone(),
            self.audiences.clone(),
            token.to_owned(),
        );
        self.cache
            .get_or_review(key, move || async move {
                reviewer.review(&token, &audiences).await
            })
            .await?
            .ok_or(ApiError::Unauthorized)
    }
}

/// Whether `token` has the syntax of a bearer credential (RFC 6750 §2.1,
/// `b64token`: letters, digits and `-._~+/`, then optional `=` padding) and
/// at most [`MAX_TOKEN_BYTES`]. Every token kube's authenticators accept in
/// practice has it: ServiceAccount and OIDC JWTs (base64url segments joined
/// by dots), bootstrap tokens (`[a-z0-9]{6}.[a-z0-9]{16}`), and the
/// generated tokens of static token files and webhooks.
pub fn is_bearer_token(token: &str) -> bool {
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return false;
    }
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

#[cfg(test)]
mod tests;
