//! Request info: what a URL and method ask for, as k8s.io/apiserver's
//! `RequestInfoFactory` derives it (verb, namespace, resource, name,
//! subresource), plus the query parameters every verb shares.

use http::Method;

use crate::api::{self, errors::ApiError, ResourceInfo};

use super::kinds::Kinds;

/// The verb of a resource request, in RBAC terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// A request for one of our resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    pub verb: Verb,
    pub resource: &'static ResourceInfo,
    /// `None` for a request across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// Only `status` exists.
    pub status: bool,
}

/// The query string, decoded once.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        Self {
            pairs: form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        }
    }

    /// The last value of `key` (kube takes the last of repeated values).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean parameter: `true`/`1` or `false`/`0`; anything else is a 400.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some("true" | "1" | "True") => Ok(Some(true)),
            Some("false" | "0" | "False" | "") => Ok(Some(false)),
            Some(other) => Err(ApiError::BadRequest(format!(
                "invalid value for {key}: {other:?} is not a boolean"
            ))),
        }
    }

    /// A non-negative integer parameter.
    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("invalid value for {key}: {v:?} is not an integer"))
            }),
        }
    }

    /// `dryRun=All`; any other value is refused as kube refuses it.
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::BadRequest(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            ))),
        }
    }
}

/// What a request asks for, derived once from its method, path and query
/// (k8s.io/apiserver's `RequestInfo`) and handed down the filter chain:
/// authorization, flow control, audit, metrics and the router all read this
/// one.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub method: Method,
    pub path: String,
    pub query: Query,
    /// What [`parse`] made of the path: `Ok(None)` for a path that is not
    /// one of our resources'; an error for a malformed resource path, which
    /// the router answers and the filters treat as the non-resource path it
    /// is.
    parsed: Result<Option<ResourceRequest>, ApiError>,
}

impl RequestInfo {
    /// The request's info, its resource one of `kinds`.
    pub fn new(method: &Method, uri: &http::Uri, kinds: &Kinds) -> Self {
        let query = Query::parse(uri.query());
        let path = uri.path().to_owned();
        let parsed = parse(method, &path, &query, kinds);
        Self {
            method: method.clone(),
            path,
            query,
            parsed,
        }
    }

    /// The resource request, if the path names one of ours well formed.
    pub fn resource(&self) -> Option<&ResourceRequest> {
        self.parsed.as_ref().ok().and_then(Option::as_ref)
    }

    /// The resource request as the router needs it: a malformed path is its
    /// error, any other path `None`.
    pub fn routed(&self) -> Result<Option<&ResourceRequest>, ApiError> {
        self.parsed
            .as_ref()
            .map(Option::as_ref)
            .map_err(Clone::clone)
    }

    /// Whether the path is the API's (`/apis…`, `/openapi/…`), which
    /// [`crate::endpoints`] serves; any other is the server's own.
    pub fn is_api(&self) -> bool {
        self.path == "/apis"
            || self.path.starts_with("/apis/")
            || self.path.starts_with("/openapi/")
    }
}

/// Parses `/apis/<group>/<version>/[namespaces/<ns>/]<resource>[/<name>[/<sub>]]`.
/// Returns `Ok(None)` for paths that are not resource paths of ours; a
/// resource not among `kinds` is not found.
pub fn parse(
    method: &Method,
    path: &str,
    query: &Query,
    kinds: &Kinds,
) -> Result<Option<ResourceRequest>, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["apis", g, v, rest @ ..] if *g == api::GROUP && *v == api::VERSION && !rest.is_empty() => {
            rest
        }
        _ => return Ok(None),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return Err(ApiError::PathNotFound),
    };
    let Some(resource) = kinds.resource(plural) else {
        return Err(ApiError::PathNotFound);
    };
    let status = match sub {
        None => false,
        Some("status") if resource.has_status => true,
        Some(_) => return Err(ApiError::PathNotFound),
    };
    if name.is_some_and(str::is_empty) || namespace.as_deref().is_some_and(str::is_empty) {
        return Err(ApiError::PathNotFound);
    }
    let watch = query.bool("watch")?.unwrap_or(false);
    let verb = match (method.as_str(), name.is_some()) {
        ("GET" | "HEAD", true) if watch => Verb::Watch,
        ("GET" | "HEAD", true) => Verb::Get,
        ("GET" | "HEAD", false) if watch => Verb::Watch,
        ("GET" | "HEAD", false) => Verb::List,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return Err(ApiError::MethodNotAllowed),
    };
    if status && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
        return Err(ApiError::MethodNotAllowed);
    }
    if namespace.is_none() && resource.namespaced && !matches!(verb, Verb::List | Verb::Watch) {
        // Only list and watch work across namespaces.
        return Err(ApiError::PathNotFound);
    }
    Ok(Some(ResourceRequest {
        verb,
        resource,
        namespace,
        name: name.map(str::to_owned),
        status,
    }))
}

#[cfg(test)]
mod tests;
