//! The HTTP face of the API: turns a request for `/apis/...` into a response.
//!
//! Owns request routing, content negotiation and the one place where an
//! [`ApiError`] becomes an HTTP response ([`error_response`]). It does not own
//! transport (TLS, connections), health checks or shutdown: that is `server`.

pub mod codec;
pub mod handler;
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
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, Store};
use handler::{Call, Handler, Resource};
use negotiate::IncludeObject;
use request::Query;

/// The body type of every response: boxed, so that streaming responses (watch)
/// and whole ones share one type.
pub type Body = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// Request bodies larger than this are refused with 413, as kube-apiserver does.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The served resources, by plural name.
#[derive(Debug, Clone)]
pub struct Api {
    resources: BTreeMap<&'static str, Arc<dyn Resource>>,
}

impl Api {
    pub fn new(
        transfers: Arc<Store<NamespaceTransferStrategy>>,
        claims: Arc<Store<EphemeralClaimStrategy>>,
    ) -> Self {
        let mut resources: BTreeMap<&'static str, Arc<dyn Resource>> = BTreeMap::new();
        resources.insert(
            api::NAMESPACE_TRANSFERS.plural,
            Arc::new(Handler::new(transfers)),
        );
        resources.insert(api::EPHEMERAL_CLAIMS.plural, Arc::new(Handler::new(claims)));
        Self { resources }
    }
}

/// Serves one request under `/apis`, as `ctx.user`.
pub async fn serve_api<B>(api: &Api, req: Request<B>, ctx: Context) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match route(api, req, ctx).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    }
}

async fn route<B>(api: &Api, req: Request<B>, mut ctx: Context) -> Result<Response<Body>, ApiError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let query = Query::parse(req.uri().query());
    let path = req.uri().path().to_owned();
    if let Some(resp) = discovery_document(req.method(), &path)? {
        return Ok(resp);
    }
    let Some(request) = request::parse(req.method(), &path, &query)? else {
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
    let body = match *req.method() {
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => {
            read_body(req.into_body()).await?
        }
        _ => Bytes::new(),
    };
    resource
        .serve(Call {
            request,
            query,
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

fn discovery_document(method: &Method, path: &str) -> Result<Option<Response<Body>>, ApiError> {
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .collect();
    let doc = match segments.as_slice() {
        ["apis"] => serialize(&discovery::api_group_list())?,
        ["apis", g] if *g == api::GROUP => serialize(&discovery::api_group())?,
        ["apis", g, v] if *g == api::GROUP && *v == api::VERSION => {
            serialize(&discovery::api_resource_list())?
        }
        _ => return Ok(None),
    };
    if method != Method::GET && method != Method::HEAD {
        return Err(ApiError::MethodNotAllowed);
    }
    Ok(Some(json_response(StatusCode::OK, doc)))
}

fn serialize<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|e| ApiError::Internal(format!("encoding response: {e}")))
}

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
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
    json_response(status, body)
}

#[cfg(test)]
mod tests;
