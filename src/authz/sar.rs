//! Authorization by SubjectAccessReview against the cluster, as
//! k8s.io/apiserver's delegating authorizer does it: allow and deny answers
//! are each cached for a short TTL, keyed on the whole review spec, in a
//! bounded cache that evicts the least recently used answer; concurrent
//! requests with one spec share one review.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes as SarResource, SubjectAccessReview,
    SubjectAccessReviewSpec,
};

use sha2::{Digest, Sha256};

use super::{Attributes, Authorizer, Decision};
use crate::api::errors::ApiError;
use crate::api::meta::SYSTEM_MASTERS;

pub use crate::review_cache::CacheStats;
use crate::review_cache::{ReviewCache, MAX_FLIGHTS, REQUEST_REVIEW_RATE};

/// How long an answer is reused.
pub const SAR_CACHE_TTL: Duration = Duration::from_secs(10);
/// How many answers are kept.
pub const MAX_ENTRIES: usize = 10_000;

/// The cluster's answer to one SubjectAccessReview: one round trip.
#[async_trait::async_trait]
pub trait AccessReviews: Send + Sync + std::fmt::Debug {
    async fn review(&self, spec: SubjectAccessReviewSpec) -> Result<Decision, ApiError>;
}

/// SubjectAccessReviews sent to the cluster's kube-apiserver.
pub struct KubeAccessReviews {
    client: kube::Client,
}

impl KubeAccessReviews {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl std::fmt::Debug for KubeAccessReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeAccessReviews").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl AccessReviews for KubeAccessReviews {
    async fn review(&self, spec: SubjectAccessReviewSpec) -> Result<Decision, ApiError> {
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.client.clone());
        let answer = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| {
                ApiError::ServiceUnavailable(format!("SubjectAccessReview failed: {e}"))
            })?;
        let status = answer.status.unwrap_or_default();
        Ok(if status.allowed && status.denied != Some(true) {
            Decision::Allow
        } else {
            Decision::Deny {
                reason: status.reason.unwrap_or_default(),
            }
        })
    }
}

/// The delegating authorizer.
#[derive(Debug)]
pub struct SubjectAccessReviewer {
    reviews: Arc<dyn AccessReviews>,
    /// Answers by SHA-256 of the JSON of the whole spec.
    cache: ReviewCache<[u8; 32], Decision>,
}

impl SubjectAccessReviewer {
    /// Reviews callers' requests with the cluster behind `client`: at most
    /// [`REQUEST_REVIEW_RATE`] new reviews a second.
    pub fn new(client: kube::Client) -> Self {
        let mut reviewer = Self::with_reviews(Arc::new(KubeAccessReviews::new(client)));
        reviewer.cache = ReviewCache::with_limits(
            SAR_CACHE_TTL,
            MAX_ENTRIES,
            MAX_FLIGHTS,
            Some(REQUEST_REVIEW_RATE),
        );
        reviewer
    }

    /// Reviews the controllers' rights checks with the cluster behind
    /// `client`, bounded in flight only: no flood of callers' requests
    /// spends their rate.
    pub fn for_controllers(client: kube::Client) -> Self {
        Self::with_reviews(Arc::new(KubeAccessReviews::new(client)))
    }

    /// Reviews with `reviews`.
    pub fn with_reviews(reviews: Arc<dyn AccessReviews>) -> Self {
        Self {
            reviews,
            cache: ReviewCache::new(SAR_CACHE_TTL, MAX_ENTRIES),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Asks the cluster (or the cache) whether `spec` is allowed.
    pub async fn review(&self, spec: SubjectAccessReviewSpec) -> Result<Decision, ApiError> {
        self.review_with(spec, true).await
    }

    /// Asks the cluster, with `use_cache` also the cache. Either way the
    /// answer refreshes the cache.
    async fn review_with(
        &self,
        spec: SubjectAccessReviewSpec,
        use_cache: bool,
    ) -> Result<Decision, ApiError> {
        let json = serde_json::to_vec(&spec)
            .map_err(|e| ApiError::Internal(format!("encoding a SubjectAccessReview: {e}")))?;
        let key: [u8; 32] = Sha256::digest(&json).into();
        if use_cache {
            let reviews = self.reviews.clone();
            return self
                .cache
                .get_or_review(key, move || async move { reviews.review(spec).await })
                .await;
        }
        let decision = self.reviews.review(spec).await?;
        self.cache.insert(key, decision.clone());
        Ok(decision)
    }
}

/// The review spec for a request's attributes.
pub fn spec_for(attributes: &Attributes) -> SubjectAccessReviewSpec {
    let user = &attributes.user;
    SubjectAccessReviewSpec {
        user: Some(user.username.clone()),
        uid: user.uid.clone(),
        groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
        resource_attributes: attributes.resource.as_ref().map(|r| SarResource {
            group: Some(r.group.clone()),
            version: Some(r.version.clone()),
            resource: Some(r.resource.clone()),
            subresource: (!r.subresource.is_empty()).then(|| r.subresource.clone()),
            namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
            name: (!r.name.is_empty()).then(|| r.name.clone()),
            verb: Some(attributes.verb.clone()),
            ..SarResource::default()
        }),
        non_resource_attributes: attributes
            .resource
            .is_none()
            .then(|| NonResourceAttributes {
                path: Some(attributes.path.clone()),
                verb: Some(attributes.verb.clone()),
            }),
    }
}

#[async_trait::async_trait]
impl Authorizer for SubjectAccessReviewer {
    async fn authorize(&self, attributes: &Attributes) -> Result<Decision, ApiError> {
        if attributes.user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Ok(Decision::Allow);
        }
        self.review(spec_for(attributes)).await
    }

    async fn authorize_fresh(&self, attributes: &Attributes) -> Result<Decision, ApiError> {
        if attributes.user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Ok(Decision::Allow);
        }
        self.review_with(spec_for(attributes), false).await
    }
}

#[cfg(test)]
mod tests;
