//! Authorization: what a known user may do. The seam is [`Authorizer`]; the
//! cluster's answer comes from [`sar::SubjectAccessReviewer`] (DESIGN §3.2),
//! and `system:masters` is always allowed.
//!
//! Owns what a known user may do; never who they are.

pub mod sar;

use crate::api::errors::ApiError;
use crate::authn::UserInfo;

/// The attributes of one request, as a SubjectAccessReview carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub user: UserInfo,
    pub verb: String,
    /// `Some` for resource requests.
    pub resource: Option<ResourceAttributes>,
    /// The path, for non-resource requests.
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// An authorization answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny { reason: String },
}

/// Decides whether a request may proceed.
#[async_trait::async_trait]
pub trait Authorizer: Send + Sync + std::fmt::Debug {
    async fn authorize(&self, attributes: &Attributes) -> Result<Decision, ApiError>;

    /// Like [`Authorizer::authorize`], but never answered from a cache: for
    /// the controller's re-check just before it acts, where a right revoked a
    /// second ago must already count.
    async fn authorize_fresh(&self, attributes: &Attributes) -> Result<Decision, ApiError> {
        self.authorize(attributes).await
    }
}

/// Allows everything. Only for tests and local experiments: the server logs a
/// loud warning when it runs with it.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

#[async_trait::async_trait]
impl Authorizer for AllowAll {
    async fn authorize(&self, _attributes: &Attributes) -> Result<Decision, ApiError> {
        Ok(Decision::Allow)
    }
}

/// kube-apiserver's wording of a denial.
pub fn forbidden(attributes: &Attributes, reason: &str) -> ApiError {
    let user = &attributes.user.username;
    let mut message = match &attributes.resource {
        Some(r) => {
            let mut resource = format!("resource \"{}\"", r.resource);
            if !r.subresource.is_empty() {
                resource = format!("resource \"{}/{}\"", r.resource, r.subresource);
            }
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace \"{}\"", r.namespace)
            };
            format!(
                "User \"{user}\" cannot {} {resource} in API group \"{}\" {scope}",
                attributes.verb, r.group
            )
        }
        None => format!(
            "User \"{user}\" cannot {} path \"{}\"",
            attributes.verb, attributes.path
        ),
    };
    if !reason.is_empty() {
        message.push_str(&format!(": {reason}"));
    }
    ApiError::Forbidden { message }
}
