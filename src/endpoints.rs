//! The HTTP face of the API: turns a request for `/apis/...` into a response.
//!
//! Owns request routing, content negotiation and the one place where an
//! [`ApiError`] becomes an HTTP response ([`error_response`]). It does not own
//! transport (TLS, connections), health checks or shutdown: that is `server`.

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use serde::Serialize;

use crate::api::{self, errors::ApiError};
use crate::discovery;

/// The body type of every response: boxed, so that streaming responses (watch)
/// and whole ones share one type.
pub type Body = BoxBody<Bytes, std::convert::Infallible>;

/// Serves one API request. `path` is already known to start with `/apis`.
pub fn serve_api<B>(req: &Request<B>) -> Response<Body> {
    match route(req.method(), req.uri().path()) {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    }
}

fn route(method: &Method, path: &str) -> Result<Response<Body>, ApiError> {
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .collect();
    let discovery_doc = match segments.as_slice() {
        ["apis"] => Some(serialize(&discovery::api_group_list())),
        ["apis", g] if *g == api::GROUP => Some(serialize(&discovery::api_group())),
        ["apis", g, v] if *g == api::GROUP && *v == api::VERSION => {
            Some(serialize(&discovery::api_resource_list()))
        }
        _ => None,
    };
    match discovery_doc {
        Some(_) if method != Method::GET && method != Method::HEAD => {
            Err(ApiError::MethodNotAllowed)
        }
        Some(doc) => Ok(json_response(StatusCode::OK, doc?)),
        None => Err(ApiError::PathNotFound),
    }
}

fn serialize<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|e| ApiError::Internal(format!("encoding response: {e}")))
}

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
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
