//! Discovery documents for `/apis`, `/apis/storage.transfer.k8s.io` and
//! `/apis/storage.transfer.k8s.io/v1alpha1`; aggregated discovery ([`aggregated`]);
//! and the OpenAPI v2 and v3 documents built from the API types ([`openapi`]). All
//! are built from the list of kinds they are given ([`Documents`]): the server's
//! table of kinds, in `endpoints::kinds`.
//!
//! The aggregator reads these to route requests and to merge our group into
//! kube-apiserver's own discovery and OpenAPI; `kubectl api-resources` and
//! `kubectl explain` show what is here. This module owns the documents, their
//! encoding and their entity tags ([`Document`]), not the HTTP exchange that serves
//! them.

pub mod aggregated;
pub mod document;
pub mod openapi;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};

use std::sync::OnceLock;

use crate::api::schema::KindSchema;
use crate::api::{self, ResourceInfo};

pub use document::Document;

/// Why a served document could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A document did not encode as JSON. The documents are plain data, so this is
    /// a bug, reported rather than panicked on.
    #[error("encoding the {document} document")]
    Encode {
        document: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// The result of building a document.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `GET /apis/storage.transfer.k8s.io/v1alpha1`.
pub fn api_resource_list(kinds: &[KindSchema]) -> APIResourceList {
    let mut resources = Vec::with_capacity(kinds.len() * 2);
    for r in kinds.iter().map(|k| k.resource) {
        resources.push(main_resource(r));
        if r.has_status {
            resources.push(status_subresource(r));
        }
    }
    APIResourceList {
        group_version: api::GROUP_VERSION.to_owned(),
        resources,
    }
}

fn main_resource(r: &ResourceInfo) -> APIResource {
    APIResource {
        name: r.plural.to_owned(),
        singular_name: r.singular.to_owned(),
        namespaced: r.namespaced,
        kind: r.kind.to_owned(),
        verbs: strings(api::VERBS),
        short_names: Some(strings(r.short_names)),
        categories: Some(vec![api::CATEGORY.to_owned()]),
        group: None,
        version: None,
        storage_version_hash: None,
    }
}

fn status_subresource(r: &ResourceInfo) -> APIResource {
    APIResource {
        name: format!("{}/status", r.plural),
        // kube-apiserver leaves singularName empty on subresources.
        singular_name: String::new(),
        namespaced: r.namespaced,
        kind: r.kind.to_owned(),
        verbs: strings(api::STATUS_VERBS),
        short_names: None,
        categories: None,
        group: None,
        version: None,
        storage_version_hash: None,
    }
}

/// `GET /apis/storage.transfer.k8s.io`.
pub fn api_group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: api::GROUP_VERSION.to_owned(),
        version: api::VERSION.to_owned(),
    };
    APIGroup {
        name: api::GROUP.to_owned(),
        versions: vec![version.clone()],
        preferred_version: Some(version),
        server_address_by_client_cidrs: None,
    }
}

/// `GET /apis`: only our group, as an aggregated server answers.
pub fn api_group_list() -> APIGroupList {
    APIGroupList {
        groups: vec![api_group()],
    }
}

/// Every document of one list of kinds, each encoded on first use and kept,
/// so that a document is built once however often it is asked for.
#[derive(Debug)]
pub struct Documents {
    kinds: Vec<KindSchema>,
    openapi: OnceLock<Result<openapi::Served>>,
    aggregated_v2: OnceLock<Result<Document>>,
    aggregated_v2beta1: OnceLock<Result<Document>>,
}

impl Documents {
    pub fn new(kinds: Vec<KindSchema>) -> Self {
        Self {
            kinds,
            openapi: OnceLock::new(),
            aggregated_v2: OnceLock::new(),
            aggregated_v2beta1: OnceLock::new(),
        }
    }

    /// The kinds described, in discovery order.
    pub fn kinds(&self) -> &[KindSchema] {
        &self.kinds
    }

    /// The legacy `APIResourceList`.
    pub fn api_resource_list(&self) -> APIResourceList {
        api_resource_list(&self.kinds)
    }

    /// The encoded aggregated discovery document of `version`.
    pub fn aggregated(&self, version: aggregated::Version) -> Result<&Document, &Error> {
        let cell = match version {
            aggregated::Version::V2 => &self.aggregated_v2,
            aggregated::Version::V2Beta1 => &self.aggregated_v2beta1,
        };
        cell.get_or_init(|| aggregated::encode(version, &self.kinds))
            .as_ref()
    }

    /// The encoded OpenAPI documents.
    pub fn openapi(&self) -> Result<&openapi::Served, &Error> {
        self.openapi
            .get_or_init(|| openapi::build(&self.kinds))
            .as_ref()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod tests;
