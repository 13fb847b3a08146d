//! Aggregated discovery (`apidiscovery.k8s.io/v2`, and `v2beta1` for older
//! aggregators): the one `GET /apis` answer that lists every resource of every
//! version, so that clients and kube-apiserver's aggregator need no further
//! discovery requests.
//!
//! Owns the document types (mirroring `k8s.io/api/apidiscovery/v2`), the choice
//! between aggregated and legacy discovery from an `Accept` header, and the
//! encoded document (which [`super::Documents`] keeps). Serving it over HTTP is the caller's job.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use serde::Serialize;

use super::{Document, Error};
use crate::api::schema::KindSchema;
use crate::api::{self, ResourceInfo};

/// The `apidiscovery.k8s.io` version of an aggregated discovery document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `apidiscovery.k8s.io/v2`, GA since Kubernetes 1.30.
    V2,
    /// `apidiscovery.k8s.io/v2beta1`, the same shape, for aggregators before 1.30.
    V2Beta1,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V2 => "v2",
            Version::V2Beta1 => "v2beta1",
        }
    }

    /// `apiVersion` of the list.
    pub fn api_version(self) -> &'static str {
        match self {
            Version::V2 => "apidiscovery.k8s.io/v2",
            Version::V2Beta1 => "apidiscovery.k8s.io/v2beta1",
        }
    }

    /// The exact response `Content-Type`, which kube-apiserver's aggregator and
    /// client-go check parameter by parameter.
    pub fn content_type(self) -> &'static str {
        match self {
            Version::V2 => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            Version::V2Beta1 => {
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            }
        }
    }
}

/// `APIGroupDiscoveryList`: every group this server serves (only ours).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiGroupDiscoveryList {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: ListMeta,
    pub items: Vec<ApiGroupDiscovery>,
}

/// `APIGroupDiscovery`: one group; `metadata.name` is the group name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiGroupDiscovery {
    pub metadata: ObjectMeta,
    /// In order of preference: the first is the preferred version.
    pub versions: Vec<ApiVersionDiscovery>,
}

/// `APIVersionDiscovery`: the resources of one version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiVersionDiscovery {
    pub version: &'static str,
    pub resources: Vec<ApiResourceDiscovery>,
    /// `Current`: this server answers for itself, so its document is never stale.
    pub freshness: &'static str,
}

/// `APIResourceDiscovery`: one resource and its subresources.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceDiscovery {
    pub resource: &'static str,
    pub response_kind: GroupVersionKind,
    /// `Namespaced` or `Cluster`.
    pub scope: &'static str,
    pub singular_resource: &'static str,
    pub verbs: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<ApiSubresourceDiscovery>,
}

/// `APISubresourceDiscovery`, e.g. `status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiSubresourceDiscovery {
    pub subresource: &'static str,
    pub response_kind: GroupVersionKind,
    pub verbs: Vec<&'static str>,
}

/// `metav1.GroupVersionKind`, as discovery spells it (all three fields always set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GroupVersionKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
}

/// Picks aggregated discovery if the first media range of `accept` that names
/// JSON asks for it; `None` means legacy discovery (`APIGroupList`). Ranges with
/// `q=0`, and ones this server cannot produce, are skipped, as kube's negotiation
/// does.
pub fn negotiate(accept: Option<&str>) -> Option<Version> {
    for range in accept.unwrap_or_default().split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let (mut group, mut version, mut as_kind, mut refused) = (None, None, None, false);
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim() {
                "g" => group = Some(value),
                "v" => version = Some(value),
                "as" => as_kind = Some(value),
                "q" => refused = value.parse::<f32>().is_ok_and(|q| q <= 0.0),
                _ => {}
            }
        }
        if refused || !matches!(media.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        match (group, version, as_kind) {
            (None, None, None) => return None,
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                return Some(Version::V2)
            }
            (Some("apidiscovery.k8s.io"), Some("v2beta1"), Some("APIGroupDiscoveryList")) => {
                return Some(Version::V2Beta1)
            }
            // Some other conversion (a Table, say) that discovery cannot give.
            _ => continue,
        }
    }
    None
}

/// The aggregated discovery document of `kinds`.
pub fn group_discovery_list(version: Version, kinds: &[KindSchema]) -> ApiGroupDiscoveryList {
    ApiGroupDiscoveryList {
        api_version: version.api_version(),
        kind: "APIGroupDiscoveryList",
        metadata: ListMeta::default(),
        items: vec![ApiGroupDiscovery {
            metadata: ObjectMeta {
                name: Some(api::GROUP.to_owned()),
                ..ObjectMeta::default()
            },
            versions: vec![ApiVersionDiscovery {
                version: api::VERSION,
                resources: kinds.iter().map(|k| resource(k.resource)).collect(),
                freshness: "Current",
            }],
        }],
    }
}

fn resource(r: &ResourceInfo) -> ApiResourceDiscovery {
    let kind = GroupVersionKind {
        group: api::GROUP,
        version: api::VERSION,
        kind: r.kind,
    };
    let subresources = if r.has_status {
        vec![ApiSubresourceDiscovery {
            subresource: "status",
            response_kind: kind,
            verbs: api::STATUS_VERBS.to_vec(),
        }]
    } else {
        Vec::new()
    };
    ApiResourceDiscovery {
        resource: r.plural,
        response_kind: kind,
        scope: if r.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        },
        singular_resource: r.singular,
        verbs: api::VERBS.to_vec(),
        short_names: r.short_names.to_vec(),
        categories: vec![api::CATEGORY],
        subresources,
    }
}

/// The encoded document of `kinds` for `version`.
pub fn encode(version: Version, kinds: &[KindSchema]) -> Result<Document, Error> {
    let body = serde_json::to_vec(&group_discovery_list(version, kinds)).map_err(|source| {
        Error::Encode {
            document: "aggregated discovery",
            source,
        }
    })?;
    Ok(Document::new(body, version.content_type()))
}

#[cfg(test)]
mod tests;
