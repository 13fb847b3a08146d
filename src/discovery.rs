//! Discovery documents for `/apis`, `/apis/storage.transfer.k8s.io` and
//! `/apis/storage.transfer.k8s.io/v1alpha1`, built from the resource table in
//! [`crate::api`].
//!
//! The aggregator reads these to route requests and to merge our group into
//! kube-apiserver's own discovery; `kubectl api-resources` shows what is here.
//! This module owns the documents, not the HTTP exchange that serves them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};

use crate::api::{self, ResourceInfo};

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
