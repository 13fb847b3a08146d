//! Authentication: who is calling. The seam is [`Authenticator`]; delegated
//! authentication as k8s.io/apiserver does it (front-proxy headers, client
//! certificates, bearer tokens, then anonymous; DESIGN §3.2) plugs in here.
//!
//! Owns who the caller is; never what they may do.

use http::request::Parts;

use crate::api::errors::ApiError;
use crate::api::meta::Requester;

/// The authenticated user, as SubjectAccessReview and `spec.requester` name it.
pub type UserInfo = Requester;

/// Decides who sent a request.
#[async_trait::async_trait]
pub trait Authenticator: Send + Sync + std::fmt::Debug {
    /// The user, or 401 when credentials were presented and are invalid.
    async fn authenticate(&self, request: &Parts) -> Result<UserInfo, ApiError>;
}

/// Everyone is `system:anonymous` in `system:unauthenticated`. Request headers
/// such as `X-Remote-User` are never trusted here.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anonymous;

/// The anonymous user, as kube-apiserver names it.
pub fn anonymous_user() -> UserInfo {
    UserInfo {
        username: "system:anonymous".to_owned(),
        groups: vec!["system:unauthenticated".to_owned()],
        ..UserInfo::default()
    }
}

#[async_trait::async_trait]
impl Authenticator for Anonymous {
    async fn authenticate(&self, _request: &Parts) -> Result<UserInfo, ApiError> {
        Ok(anonymous_user())
    }
}
