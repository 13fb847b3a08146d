//! The `storage.transfer.k8s.io` API: its group, versions and resources, the types,
//! defaulting and validation of its two kinds, their reasons and OpenAPI schemas,
//! and the error vocabulary every layer speaks. The server (which names this crate
//! `api`) and `kubectl-transfer` both build on it.
//!
//! This crate is pure: no I/O, no tokio, and its dependencies keep it so. It keeps
//! no list of the kinds: the server's table of kinds (`endpoints::kinds`) names
//! each kind once, and discovery, OpenAPI, routing and storage are built from it.

pub mod ephemeral_claim;
pub mod errors;
pub mod meta;
pub mod namespace_transfer;
pub mod schema;
pub mod validation;

pub use ephemeral_claim::EphemeralClaim;
pub use meta::{Object, Requester};
pub use namespace_transfer::NamespaceTransfer;

/// The API group this server owns.
pub const GROUP: &str = "storage.transfer.k8s.io";
/// The one version served in this release.
pub const VERSION: &str = "v1alpha1";
/// `group/version`, as it appears in `apiVersion`.
pub const GROUP_VERSION: &str = "storage.transfer.k8s.io/v1alpha1";
/// The category that `kubectl get storage-transfer` expands to.
pub const CATEGORY: &str = "storage-transfer";

/// The verbs every resource of this group supports (DESIGN §2).
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a `/status` subresource, as kube-apiserver lists them.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// Static facts about one served resource, which discovery, routing and
/// OpenAPI read from the server's table of kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The URL path segment, e.g. `namespacetransfers`.
    pub plural: &'static str,
    /// The lower-case singular, e.g. `namespacetransfer`.
    pub singular: &'static str,
    /// The `kind`, e.g. `NamespaceTransfer`.
    pub kind: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
    /// Whether a `/status` subresource is served.
    pub has_status: bool,
}

/// NamespaceTransfer: moves a PVC's volume to another namespace (DESIGN §2.1).
pub const NAMESPACE_TRANSFERS: ResourceInfo = ResourceInfo {
    plural: "namespacetransfers",
    singular: "namespacetransfer",
    kind: "NamespaceTransfer",
    short_names: &["nst"],
    namespaced: true,
    has_status: true,
};

/// EphemeralClaim: a claim tied to an owner pod's life (DESIGN §2.2).
pub const EPHEMERAL_CLAIMS: ResourceInfo = ResourceInfo {
    plural: "ephemeralclaims",
    singular: "ephemeralclaim",
    kind: "EphemeralClaim",
    short_names: &["ec"],
    namespaced: true,
    has_status: true,
};

#[cfg(test)]
mod tests;

/// `kube_core::Resource` for both kinds, for clients built on kube-rs.
#[cfg(feature = "kube")]
mod resource {
    use std::borrow::Cow;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube_core::{NamespaceResourceScope, Resource};

    use crate::{EphemeralClaim, NamespaceTransfer, EPHEMERAL_CLAIMS, NAMESPACE_TRANSFERS};

    macro_rules! resource {
        ($kind:ty, $info:expr) => {
            impl Resource for $kind {
                type DynamicType = ();
                type Scope = NamespaceResourceScope;

                fn kind(_: &()) -> Cow<'_, str> {
                    Cow::Borrowed($info.kind)
                }

                fn group(_: &()) -> Cow<'_, str> {
                    Cow::Borrowed(crate::GROUP)
                }

                fn version(_: &()) -> Cow<'_, str> {
                    Cow::Borrowed(crate::VERSION)
                }

                fn plural(_: &()) -> Cow<'_, str> {
                    Cow::Borrowed($info.plural)
                }

                fn meta(&self) -> &ObjectMeta {
                    &self.metadata
                }

                fn meta_mut(&mut self) -> &mut ObjectMeta {
                    &mut self.metadata
                }
            }
        };
    }

    resource!(NamespaceTransfer, NAMESPACE_TRANSFERS);
    resource!(EphemeralClaim, EPHEMERAL_CLAIMS);
}
