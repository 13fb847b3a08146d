//! The OpenAPI documents of this server, built from the API types:
//! - `/openapi/v2`: one Swagger 2.0 document;
//! - `/openapi/v3`: the root, listing `apis/storage.transfer.k8s.io/v1alpha1` with a
//!   `serverRelativeURL` whose `?hash=` is the hash of that document;
//! - `/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1`: one OpenAPI 3.0 document.
//!
//! kube-apiserver's aggregator downloads these and merges them into its own, which
//! is what `kubectl explain` and kubectl's validation read. The documents are built
//! once per list of kinds ([`build`], kept by [`super::Documents`]) and encoded
//! with sorted keys, so the same code always yields
//! the same bytes; copies are checked in under `openapi/` ([`checked_in`],
//! [`write_checked_in`]) and a test fails when they drift.
//!
//! Owns the documents' assembly. Schemas are built by the API crate
//! (`api::schema`), operations in `paths`; serving them over HTTP is the
//! caller's job.

mod paths;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{Document, Error, Result};
use crate::api;
use crate::api::schema::{self as schemas, KindSchema};

/// The `Content-Type` of every OpenAPI document served here.
pub const CONTENT_TYPE: &str = "application/json";

/// The `info.title` of both documents.
const TITLE: &str = "storage-transfer-apiserver";

/// The two shapes a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// Swagger 2.0, for `/openapi/v2`.
    Swagger2,
    /// OpenAPI 3.0, for `/openapi/v3/...`.
    OpenApi3,
}

/// `apis/storage.transfer.k8s.io/v1alpha1`: the group-version's key in the v3 root,
/// and its path under `/openapi/v3/`.
pub fn group_version_path() -> String {
    format!("apis/{}", api::GROUP_VERSION)
}

/// The Swagger 2.0 document served at `/openapi/v2`.
pub fn swagger_v2(kinds: &[KindSchema]) -> Value {
    json!({
        "swagger": "2.0",
        "info": { "title": TITLE, "version": api::VERSION },
        "paths": paths::paths(Dialect::Swagger2, kinds),
        "definitions": schemas::definitions(kinds),
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "in": "header",
                "name": "authorization",
                "type": "apiKey",
            },
        },
        "security": [{ "BearerToken": [] }],
    })
}

/// The OpenAPI 3.0 document served at
/// `/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1`.
pub fn openapi_v3_group_version(kinds: &[KindSchema]) -> Value {
    let mut document = json!({
        "openapi": "3.0.0",
        "info": { "title": TITLE, "version": api::VERSION },
        "paths": paths::paths(Dialect::OpenApi3, kinds),
        "components": {
            "schemas": schemas::definitions(kinds),
            "securitySchemes": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "in": "header",
                    "name": "authorization",
                    "type": "apiKey",
                },
            },
        },
    });
    schemas::refs_to_components(&mut document);
    document
}

/// The OpenAPI v3 root served at `/openapi/v3`, given the hash of the
/// group-version document (see [`Document::hash`]).
pub fn openapi_v3_root(group_version_hash: &str) -> Value {
    let path = group_version_path();
    let url = format!("/openapi/v3/{path}?hash={group_version_hash}");
    let mut paths = serde_json::Map::new();
    paths.insert(path, json!({ "serverRelativeURL": url }));
    json!({ "paths": paths })
}

/// The encoded documents, as served.
#[derive(Debug)]
pub struct Served {
    /// `/openapi/v2`.
    pub v2: Document,
    /// `/openapi/v3`.
    pub v3_root: Document,
    /// `/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1`.
    pub v3_group_version: Document,
}

/// The three documents of `kinds`, encoded.
pub fn build(kinds: &[KindSchema]) -> Result<Served> {
    let v3_group_version = Document::new(
        encode("OpenAPI v3", &openapi_v3_group_version(kinds))?,
        CONTENT_TYPE,
    );
    let v3_root = Document::new(
        encode("OpenAPI v3 root", &openapi_v3_root(v3_group_version.hash()))?,
        CONTENT_TYPE,
    );
    let v2 = Document::new(encode("OpenAPI v2", &swagger_v2(kinds))?, CONTENT_TYPE);
    Ok(Served {
        v2,
        v3_root,
        v3_group_version,
    })
}

fn encode(document: &'static str, value: &Value) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|source| Error::Encode { document, source })
}

/// The files checked in under `openapi/`: paths relative to that directory, and
/// their contents (pretty-printed, keys sorted, ending in a newline). `make
/// openapi` writes them.
pub fn checked_in(kinds: &[KindSchema]) -> Result<Vec<(PathBuf, String)>> {
    let pretty = |document: &'static str, value: &Value| {
        serde_json::to_string_pretty(value)
            .map(|text| text + "\n")
            .map_err(|source| Error::Encode { document, source })
    };
    let v3_name = format!("{}.json", group_version_path().replace('/', "__"));
    Ok(vec![
        (
            PathBuf::from("v2.json"),
            pretty("OpenAPI v2", &swagger_v2(kinds))?,
        ),
        (
            Path::new("v3").join(v3_name),
            pretty("OpenAPI v3", &openapi_v3_group_version(kinds))?,
        ),
    ])
}

/// Writes [`checked_in`] under `dir`, creating directories as needed.
pub fn write_checked_in(dir: &Path, kinds: &[KindSchema]) -> std::io::Result<()> {
    for (relative, contents) in checked_in(kinds).map_err(std::io::Error::other)? {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
