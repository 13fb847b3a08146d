//! A document as it is served: its bytes, its media type and its entity tag.
//!
//! The tag is the SHA-512 of the bytes in upper-case hex, as kube-apiserver computes
//! it for aggregated discovery and OpenAPI v3, so that the same hash can appear in
//! an OpenAPI v3 `serverRelativeURL`. This module knows nothing of paths or of
//! which document is which.

use bytes::Bytes;
use sha2::{Digest, Sha512};

/// Encoded bytes ready to serve, with their media type and entity tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    body: Bytes,
    content_type: &'static str,
    hash: String,
    etag: String,
}

impl Document {
    /// Wraps encoded bytes, computing their hash once.
    pub fn new(body: Vec<u8>, content_type: &'static str) -> Self {
        let hash = content_hash(&body);
        let etag = format!("\"{hash}\"");
        Self {
            body: Bytes::from(body),
            content_type,
            hash,
            etag,
        }
    }

    /// The bytes to send; cloning is cheap.
    pub fn body(&self) -> Bytes {
        self.body.clone()
    }

    /// The exact `Content-Type` to answer with.
    pub fn content_type(&self) -> &'static str {
        self.content_type
    }

    /// The SHA-512 of the body in upper-case hex, unquoted: the `?hash=` of an
    /// OpenAPI v3 `serverRelativeURL`.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The `ETag` header value: the hash, quoted.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// Whether an `If-None-Match` header value names this document, so that the
    /// answer is `304 Not Modified`. Weak tags match too (RFC 9110 §13.1.2 uses
    /// weak comparison for `If-None-Match`).
    pub fn is_current_for(&self, if_none_match: Option<&str>) -> bool {
        let Some(value) = if_none_match else {
            return false;
        };
        value
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == self.etag)
    }
}

/// The SHA-512 of `bytes` in upper-case hex, as kube's `fmt.Sprintf("%X", sha512.Sum512(b))`.
pub fn content_hash(bytes: &[u8]) -> String {
    Sha512::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

#[cfg(test)]
mod tests;
