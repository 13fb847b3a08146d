//! Discovery documents for `/apis`, `/apis/storage.transfer.k8s.io` and
//! `/apis/storage.transfer.k8s.io/v1alpha1`, built from the resource table in
//! [`crate::api`]; aggregated discovery ([`aggregated`]); and the OpenAPI v2 and v3
//! documents built from the API types ([`openapi`]).
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
pub fn api_resource_list() -> APIResourceList {
    let mut resources = Vec::with_capacity(api::RESOURCES.len() * 2);
    for r in api::RESOURCES {
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

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[cfg(test)]
mod tests;
