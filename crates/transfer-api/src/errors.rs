//! The closed set of API errors, and the one function that turns them into a
//! `metav1.Status`.
//!
//! Every layer above `api` returns [`ApiError`]; nothing else is allowed to build a
//! Status body. The reasons and codes follow k8s.io/apimachinery's `api/errors`, so
//! that clients (kubectl, client-go, kube-rs) recognise them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

/// A `group/resource` pair, the way Status details name what an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_owned(),
            resource: resource.to_owned(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One invalid field of an `Invalid` error: `details.causes[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, …
    pub reason: String,
    /// The JSON path of the field, e.g. `spec.source.name`.
    pub field: String,
    pub message: String,
}

/// Every error the API can answer with. Closed on purpose: a new failure must pick
/// (or add) a variant here, and so gets a code and reason in [`ApiError::to_status`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        resource: GroupResource,
        name: String,
    },
    /// A path this server does not serve.
    #[error("the server could not find the requested resource")]
    PathNotFound,
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        resource: GroupResource,
        name: String,
    },
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        resource: GroupResource,
        name: String,
        message: String,
    },
    #[error("{} \"{name}\" is invalid: {}", qualified(kind, group), join_causes(.causes))]
    Invalid {
        group: String,
        kind: String,
        name: String,
        causes: Vec<FieldCause>,
    },
    #[error("{message}")]
    Forbidden { message: String },
    /// A server-side apply that would change fields other managers own:
    /// kube's `NewApplyConflict`, one `FieldManagerConflict` cause per field
    /// (field path, "conflict with …").
    #[error("{message}")]
    ApplyConflict {
        message: String,
        causes: Vec<(String, String)>,
    },
    #[error("Unauthorized")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Expired(String),
    #[error("the request entity is too large: {0}")]
    TooLarge(String),
    #[error("the body of the request was in an unknown format - {0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    NotAcceptable(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("Internal error occurred: {0}")]
    Internal(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    /// A limit on load was reached (in-flight seats, a user's queue, a
    /// user's watches): kube's `NewTooManyRequests`. The message says which.
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_seconds: i32,
    },
    /// The server could not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// A read or watch asked for a resourceVersion the server had not reached
    /// after waiting for it: kube's `storage.NewTooLargeResourceVersionError`,
    /// a Timeout the client retries after a second.
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: i64, current: i64 },
    /// A write of this server's own controllers that etcd refused because
    /// their term of leadership has ended (the election key the write was
    /// fenced on is gone). Only controllers fence their writes, so no client
    /// ever receives it; the controller stops leading.
    #[error("Operation cannot be fulfilled: {0}")]
    Fenced(String),
    /// An admission plugin's refusal, with the code, reason and details it
    /// chose (a webhook's own Status, a policy's reason), as kube passes
    /// them through. `code` is at least 400.
    #[error("{message}")]
    Denied {
        code: u16,
        reason: String,
        message: String,
        details: Option<Box<StatusDetails>>,
    },
}

/// The cause kube-apiserver attaches to [`ApiError::TooLargeResourceVersion`]
/// (`metav1.CauseTypeResourceVersionTooLarge`), by which clients recognise it.
pub const CAUSE_RESOURCE_VERSION_TOO_LARGE: &str = "ResourceVersionTooLarge";

/// `Kind.group`, as kube qualifies a kind in messages.
fn qualified(kind: &str, group: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

/// kube's aggregate message: each distinct cause once, in order.
fn join_causes(causes: &[FieldCause]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in causes {
        let part = format!("{}: {}", c.field, c.message);
        if !parts.contains(&part) {
            parts.push(part);
        }
    }
    if parts.len() == 1 {
        parts.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    /// The HTTP status code of this error.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::PathNotFound => 404,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. }
            | ApiError::Fenced(_) => 409,
            ApiError::Invalid { .. } => 422,
            ApiError::Forbidden { .. } => 403,
            ApiError::Unauthorized => 401,
            ApiError::BadRequest(_) => 400,
            ApiError::Expired(_) => 410,
            ApiError::TooLarge(_) => 413,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::NotAcceptable(_) => 406,
            ApiError::MethodNotAllowed => 405,
            ApiError::Internal(_) => 500,
            ApiError::ServiceUnavailable(_) => 503,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::Timeout(_) | ApiError::TooLargeResourceVersion { .. } => 504,
            ApiError::Denied { code, .. } => (*code).max(400),
        }
    }

    /// The `metav1.StatusReason` of this error.
    pub fn reason(&self) -> &str {
        match self {
            ApiError::NotFound { .. } | ApiError::PathNotFound => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } | ApiError::Fenced(_) => {
                "Conflict"
            }
            ApiError::Invalid { .. } => "Invalid",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Expired(_) => "Expired",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::Internal(_) => "InternalError",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::Timeout(_) | ApiError::TooLargeResourceVersion { .. } => "Timeout",
            ApiError::Denied { reason, .. } => reason,
        }
    }

    /// How long the client should wait before it retries, when the error
    /// says (`details.retryAfterSeconds`, and the `Retry-After` header).
    pub fn retry_after_seconds(&self) -> Option<i32> {
        match self {
            ApiError::TooLargeResourceVersion { .. } => Some(1),
            ApiError::TooManyRequests {
                retry_after_seconds,
                ..
            } => Some(*retry_after_seconds),
            _ => None,
        }
    }

    /// The one mapping from an error to the `metav1.Status` a client receives.
    pub fn to_status(&self) -> Status {
        let details = match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. } => Some(StatusDetails {
                group: Some(resource.group.clone()),
                kind: Some(resource.resource.clone()),
                name: Some(name.clone()),
                ..Default::default()
            }),
            ApiError::Invalid {
                group,
                kind,
                name,
                causes,
            } => Some(StatusDetails {
                group: Some(group.clone()),
                kind: Some(kind.clone()),
                name: Some(name.clone()).filter(|n| !n.is_empty()),
                causes: Some(
                    causes
                        .iter()
                        .map(|c| StatusCause {
                            field: Some(c.field.clone()),
                            message: Some(c.message.clone()),
                            reason: Some(c.reason.clone()),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ApiError::ApplyConflict { causes, .. } => Some(StatusDetails {
                causes: Some(
                    causes
                        .iter()
                        .map(|(field, message)| StatusCause {
                            field: Some(field.clone()),
                            message: Some(message.clone()),
                            reason: Some("FieldManagerConflict".to_owned()),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ApiError::TooLargeResourceVersion { .. } => Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    field: None,
                    message: Some("Too large resource version".to_owned()),
                    reason: Some(CAUSE_RESOURCE_VERSION_TOO_LARGE.to_owned()),
                }]),
                retry_after_seconds: self.retry_after_seconds(),
                ..Default::default()
            }),
            ApiError::TooManyRequests { .. } => Some(StatusDetails {
                retry_after_seconds: self.retry_after_seconds(),
                ..Default::default()
            }),
            ApiError::Denied { details, .. } => details.as_deref().cloned(),
            _ => None,
        };
        Status {
            code: Some(i32::from(self.code())),
            details,
            message: Some(self.to_string()),
            metadata: ListMeta::default(),
            reason: Some(self.reason().to_owned()),
            status: Some("Failure".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests;
