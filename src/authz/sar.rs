//! Authorization by SubjectAccessReview against the cluster, as
//! k8s.io/apiserver's delegating authorizer does it: allow and deny answers
//! are each cached for a short TTL, keyed on the whole review spec.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes as SarResource, SubjectAccessReview,
    SubjectAccessReviewSpec,
};

use super::{Attributes, Authorizer, Decision};
use crate::api::errors::ApiError;

/// How long an answer is reused.
pub const SAR_CACHE_TTL: Duration = Duration::from_secs(10);
const MAX_ENTRIES: usize = 10_000;

/// Counts of cache use, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

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
    cache: Mutex<HashMap<String, (Instant, Decision)>>,
    stats: Mutex<CacheStats>,
}

impl SubjectAccessReviewer {
    /// Reviews with the cluster behind `client`.
    pub fn new(client: kube::Client) -> Self {
        Self::with_reviews(Arc::new(KubeAccessReviews::new(client)))
    }

    /// Reviews with `reviews`.
    pub fn with_reviews(reviews: Arc<dyn AccessReviews>) -> Self {
        Self {
            reviews,
            cache: Mutex::new(HashMap::new()),
            stats: Mutex::new(CacheStats::default()),
        }
    }

    pub fn stats(&self) -> CacheStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
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
        let key = serde_json::to_string(&spec)
            .map_err(|e| ApiError::Internal(format!("encoding a SubjectAccessReview: {e}")))?;
        let cached = if use_cache {
            self.cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .filter(|(at, _)| at.elapsed() < SAR_CACHE_TTL)
                .map(|(_, d)| d.clone())
        } else {
            None
        };
        if use_cache {
            let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            if cached.is_some() {
                stats.hits += 1;
            } else {
                stats.misses += 1;
            }
        }
        if let Some(decision) = cached {
            return Ok(decision);
        }
        let decision = self.reviews.review(spec).await?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_ENTRIES {
            cache.retain(|_, (at, _)| at.elapsed() < SAR_CACHE_TTL);
            // Still full of fresh answers: start over rather than grow.
            if cache.len() >= MAX_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), decision.clone()));
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
        if attributes.user.groups.iter().any(|g| g == "system:masters") {
            return Ok(Decision::Allow);
        }
        self.review(spec_for(attributes)).await
    }

    async fn authorize_fresh(&self, attributes: &Attributes) -> Result<Decision, ApiError> {
        if attributes.user.groups.iter().any(|g| g == "system:masters") {
            return Ok(Decision::Allow);
        }
        self.review_with(spec_for(attributes), false).await
    }
}


#[cfg(test)]
mod tests;
