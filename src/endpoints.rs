//! The HTTP face of the API: turns a request for `/apis/...` or `/openapi/...`
//! into a response: the discovery and OpenAPI documents, and every verb of
//! every resource.
//!
//! Owns request routing, content negotiation and the one place where an
//! [`ApiError`] becomes an HTTP response ([`error_response`]). It does not own
//! transport (TLS, connections), health checks or shutdown: that is `server`.

pub mod codec;
pub mod handler;
pub mod kinds;
pub mod negotiate;
pub mod request;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, Limited};
use serde::Serialize;

use crate::api::{self, errors::ApiError};
use crate::discovery;
use crate::registry::{Context, Store, StoreConfig, Strategy};
use crate::wire::MAX_BODY_BYTES;
use handler::{Call, Resource};
use kinds::Kinds;
use negotiate::IncludeObject;
use request::{Query, RequestInfo};

/// The body type of every response: boxed, so that streaming responses (watch)
/// and whole ones share one type.
pub type Body = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// The served kinds: their handlers by plural name, and the documents
/// that describe them.
#[derive(Debug, Clone)]
pub struct Api {
    kinds: Kinds,
    resources: BTreeMap<&'static str, Arc<dyn Resource>>,
    documents: Arc<discovery::Documents>,
}

impl Api {
    /// Serves `kinds`, each from a store made as `config` says.
    pub fn new(kinds: Kinds, config: &StoreConfig) -> Self {
        let resources = kinds
            .iter()
            .map(|kind| (kind.resource().plural, kind.install(config)))
            .collect();
        let documents = Arc::new(discovery::Documents::new(kinds.schemas()));
        Self {
            kinds,
            resources,
            documents,
        }
    }

    /// What is served.
    pub fn kinds(&self) -> &Kinds {
        &self.kinds
    }

    /// The store of strategy `S`'s kind, when it is served.
    pub fn store<S: Strategy>(&self) -> Option<Arc<Store<S>>> {
        let plural = <S::Object as crate::api::meta::Object>::resource().plural;
        self.resources.get(plural)?.store().downcast().ok()
    }

    /// Whether every kind's watch cache has synced.
    pub fn is_ready(&self) -> bool {
        self.resources.values().all(|r| r.is_ready())
    }

    /// How many objects the request may return, counted no further than
    /// `at_most` (see [`Resource::list_objects`]), for flow control's work
    /// estimate as kube's list estimator asks its storage; `None` for any
    /// request but a list, 0 for a resource we do not serve.
    pub fn objects_listed(&self, info: &RequestInfo, at_most: usize) -> Option<usize> {
        let request = info.resource().filter(|r| r.verb == request::Verb::List)?;
        Some(self.resources.get(request.resource.plural).map_or(0, |r| {
            r.list_objects(request.namespace.as_deref(), &info.query, at_most)
        }))
    }
}

/// Serves one request under `/apis`, as `ctx.user`; `info` is what the
/// filters before it made of the request.
pub async fn serve_api<B>(
    api: &Api,
    info: &RequestInfo,
    req: Request<B>,
    ctx: Context,
) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let notes = ctx.notes.clone();
    let resp = match route(api, info, req, ctx).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    };
    // What admission warned about goes back with the answer, refusals
    // included, as kube-apiserver sends it.
    with_warnings(resp, &notes.warnings())
}

/// Adds `Warning: 299 - "…"` headers (RFC 7234 warn-text: quotes and
/// backslashes escaped, control characters dropped).
pub fn with_warnings(mut resp: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let mut text = String::with_capacity(w.len() + 8);
        text.push_str("299 - \"");
        for c in w.chars() {
            match c {
                '"' | '\\' => {
                    text.push('\\');
                    text.push(c);
                }
                c if c.is_control() => text.push(' '),
                c => text.push(c),
            }
        }
        text.push('"');
        if let Ok(v) = http::HeaderValue::from_bytes(text.as_bytes()) {
            resp.headers_mut().append(http::header::WARNING, v);
        }
    }
    resp
}

async fn route<B>(
    api: &Api,
    info: &RequestInfo,
    req: Request<B>,
    mut ctx: Context,
) -> Result<Response<Body>, ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let query = &info.query;
    if let Some(resp) = discovery_document(
        &api.documents,
        &info.method,
        &info.path,
        query,
        req.headers(),
    )? {
        return Ok(resp);
    }
    let Some(request) = info.routed()?.cloned() else {
        return Err(ApiError::PathNotFound);
    };
    let resource = api
        .resources
        .get(request.resource.plural)
        .cloned()
        .ok_or(ApiError::PathNotFound)?;
    let header = |name: header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let include = IncludeObject::parse(query.get("includeObject"))?;
    let output = negotiate::output(header(header::ACCEPT).as_deref(), include)?;
    let content_type = header(header::CONTENT_TYPE);
    ctx.dry_run = query.dry_run()?;
    ctx.manager = crate::registry::fields::manager::manager_or_user_agent(
        query.get("fieldManager"),
        header(header::USER_AGENT).as_deref().unwrap_or_default(),
    );
    let body = match *req.method() {
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => {
            read_body(req.into_body()).await?
        }
        _ => Bytes::new(),
    };
    resource
        .serve(Call {
            request,
            query: query.clone(),
            output,
            content_type,
            body,
            ctx,
        })
        .await
}

/// Reads a request body, refusing more than [`MAX_BODY_BYTES`].
async fn read_body<B>(body: B) -> Result<Bytes, ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::TooLarge(format!(
            "the request body is larger than the limit of {MAX_BODY_BYTES} bytes"
        ))),
        Err(e) => Err(ApiError::BadRequest(format!(
            "reading the request body: {e}"
        ))),
    }
}

/// Serves the discovery and OpenAPI documents:
/// - `/apis` (legacy `APIGroupList`, or aggregated discovery when `Accept` asks for
///   `apidiscovery.k8s.io` `v2`/`v2beta1`), `/apis/<group>`, `/apis/<group>/<version>`;
/// - `/openapi/v2`, `/openapi/v3` and `/openapi/v3/apis/<group>/<version>`.
///
/// Aggregated discovery and OpenAPI carry an `ETag`; an `If-None-Match` naming it is
/// answered `304 Not Modified`. A v3 group-version request whose `?hash=` is the
/// current one may be cached forever; a stale hash is redirected to the current one,
/// as kube-openapi does. `Ok(None)` for any other path.
fn discovery_document(
    documents: &discovery::Documents,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &header::HeaderMap,
) -> Result<Option<Response<Body>>, ApiError> {
    /// Which document a path names.
    enum Doc {
        Apis,
        Group,
        ResourceList,
        OpenApiV2,
        OpenApiV3Root,
        OpenApiV3GroupVersion,
    }

    /// A tagged document, or `304` when the client's copy is current.
    fn tagged(
        doc: &discovery::Document,
        headers: &header::HeaderMap,
        cache_control: Option<&'static str>,
    ) -> Response<Body> {
        let if_none_match = headers
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok());
        let mut resp = if doc.is_current_for(if_none_match) {
            let mut resp = Response::new(Full::new(Bytes::new()).boxed_unsync());
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            resp
        } else {
            let mut resp = Response::new(Full::new(doc.body()).boxed_unsync());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(doc.content_type()),
            );
            resp
        };
        let h = resp.headers_mut();
        if let Ok(etag) = header::HeaderValue::from_str(doc.etag()) {
            h.insert(header::ETAG, etag);
        }
        h.insert(header::VARY, header::HeaderValue::from_static("Accept"));
        if let Some(cache_control) = cache_control {
            h.insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static(cache_control),
            );
        }
        resp
    }

    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .collect();
    let doc = match segments.as_slice() {
        ["apis"] => Doc::Apis,
        ["apis", g] if *g == api::GROUP => Doc::Group,
        ["apis", g, v] if *g == api::GROUP && *v == api::VERSION => Doc::ResourceList,
        ["openapi", "v2"] => Doc::OpenApiV2,
        ["openapi", "v3"] => Doc::OpenApiV3Root,
        ["openapi", "v3", "apis", g, v] if *g == api::GROUP && *v == api::VERSION => {
            Doc::OpenApiV3GroupVersion
        }
        _ => return Ok(None),
    };
    if method != Method::GET && method != Method::HEAD {
        return Err(ApiError::MethodNotAllowed);
    }
    let internal = |e: &discovery::Error| ApiError::Internal(e.to_string());
    let resp = match doc {
        Doc::Apis => {
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            match discovery::aggregated::negotiate(accept) {
                Some(version) => tagged(
                    documents.aggregated(version).map_err(internal)?,
                    headers,
                    Some("public"),
                ),
                None => json_response(StatusCode::OK, serialize(&discovery::api_group_list())?),
            }
        }
        Doc::Group => json_response(StatusCode::OK, serialize(&discovery::api_group())?),
        Doc::ResourceList => {
            json_response(StatusCode::OK, serialize(&documents.api_resource_list())?)
        }
        Doc::OpenApiV2 => tagged(&documents.openapi().map_err(internal)?.v2, headers, None),
        Doc::OpenApiV3Root => tagged(
            &documents.openapi().map_err(internal)?.v3_root,
            headers,
            None,
        ),
        Doc::OpenApiV3GroupVersion => {
            let doc = &documents.openapi().map_err(internal)?.v3_group_version;
            match query.get("hash") {
                None | Some("") => tagged(doc, headers, None),
                Some(hash) if hash == doc.hash() => tagged(doc, headers, Some("public, immutable")),
                Some(_) => {
                    let location = format!(
                        "/openapi/v3/{}?hash={}",
                        discovery::openapi::group_version_path(),
                        doc.hash()
                    );
                    let mut resp = Response::new(Full::new(Bytes::new()).boxed_unsync());
                    *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
                    if let Ok(location) = header::HeaderValue::from_str(&location) {
                        resp.headers_mut().insert(header::LOCATION, location);
                    }
                    resp
                }
            }
        }
    };
    Ok(Some(resp))
}

fn serialize<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|e| ApiError::Internal(format!("encoding response: {e}")))
}

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The one mapping from an [`ApiError`] to an HTTP response: a `metav1.Status`
/// body with the error's code.
pub fn error_response(err: &ApiError) -> Response<Body> {
    let status = StatusCode::from_u16(err.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // Serializing a Status built from strings cannot fail; fall back to a fixed
    // body rather than a panic if it ever does.
    let body = serde_json::to_vec(&err.to_status()).unwrap_or_else(|_| {
        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"InternalError","code":500}"#.to_vec()
    });
    let mut resp = json_response(status, body);
    if let Some(seconds) = err.retry_after_seconds() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
    }
    resp
}

#[cfg(test)]
mod tests;
