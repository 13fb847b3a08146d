//! Create-time admission: the rights a tenant must hold for what an object
//! asks the server to do later with its own, broader rights (DESIGN §2.1.2,
//! §2.2). Each check is a SubjectAccessReview for the requester, and a
//! refusal is a 403 that names the missing permission.
//!
//! Owns the mapping from an object to the rights it needs; asks the
//! [`Authorizer`] whether the requester holds them. Runs after defaulting and
//! validation, before anything is stored (also for dry-run).

use std::sync::Arc;

use crate::api::ephemeral_claim::EphemeralClaim;
use crate::api::errors::ApiError;
use crate::api::meta::{Object, Requester};
use crate::api::namespace_transfer::{NamespaceTransfer, Role, TransferMode, SNAPSHOT_GROUP};
use crate::authz::{Attributes, Authorizer, Decision, ResourceAttributes};
use crate::registry::admission::{Attributes as Write, Operation, Phase, Plugin};
use crate::registry::Context;

/// One right an object needs its requester to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
    pub namespace: String,
    /// Empty for any name.
    pub name: String,
    /// Why the object needs it, for the refusal message.
    pub because: &'static str,
}

impl Right {
    fn pvcs(verb: &'static str, namespace: &str, name: &str, because: &'static str) -> Self {
        Self {
            verb,
            group: String::new(),
            resource: "persistentvolumeclaims".to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            because,
        }
    }

    fn snapshots(verb: &'static str, namespace: &str, name: &str, because: &'static str) -> Self {
        Self {
            verb,
            group: SNAPSHOT_GROUP.to_owned(),
            resource: "volumesnapshots".to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            because,
        }
    }

    /// `delete persistentvolumeclaims "db" in namespace "prod"`.
    pub fn describe(&self) -> String {
        let resource = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let target = if self.name.is_empty() {
            resource
        } else {
            format!("{resource} \"{}\"", self.name)
        };
        format!("{} {target} in namespace \"{}\"", self.verb, self.namespace)
    }
}

/// The rights a NamespaceTransfer's requester needs (§2.1.2, §2.1.5a):
/// giving a claim away is deleting it from the source namespace; giving a
/// clone of it is reading it and creating a claim (the clone) there;
/// receiving either is creating a claim in the destination namespace. A
/// VolumeSnapshot (§2.1.7) is given away by deleting it, and received by
/// creating one; a clone of it by reading it and creating the claim restored
/// from it, and received as any claim.
pub fn transfer_rights(obj: &NamespaceTransfer) -> Vec<Right> {
    let source_ns = obj.source_namespace();
    let source = obj.spec.source.name.as_str();
    if obj.moves_snapshot() {
        let give = || Right::snapshots("delete", source_ns, source, "giving a snapshot away");
        let receive = || {
            Right::snapshots(
                "create",
                obj.destination_namespace(),
                "",
                "receiving a snapshot",
            )
        };
        return match obj.role() {
            Ok(Role::Source) => vec![give()],
            Ok(Role::Destination) => vec![receive()],
            Ok(Role::Both) => vec![give(), receive()],
            Err(_) => Vec::new(),
        };
    }
    let give = || match obj.mode() {
        TransferMode::Clone if obj.source_is_snapshot() => vec![
            Right::snapshots("get", source_ns, source, "giving a clone of it"),
            Right::pvcs("create", source_ns, "", "restoring the clone"),
        ],
        TransferMode::Move => vec![Right::pvcs(
            "delete",
            source_ns,
            source,
            "giving a claim away",
        )],
        TransferMode::Clone => vec![
            Right::pvcs("get", source_ns, source, "giving a clone of it"),
            Right::pvcs("create", source_ns, "", "making the clone"),
        ],
    };
    let receive = || {
        Right::pvcs(
            "create",
            obj.destination_namespace(),
            "",
            "receiving a claim",
        )
    };
    match obj.role() {
        Ok(Role::Source) => give(),
        Ok(Role::Destination) => vec![receive()],
        Ok(Role::Both) => give().into_iter().chain([receive()]).collect(),
        // Validation has already refused an object without a role.
        Err(_) => Vec::new(),
    }
}

/// The rights an EphemeralClaim's requester needs (§2.2): creating the claim,
/// and reading what it is cloned from.
pub fn claim_rights(obj: &EphemeralClaim) -> Vec<Right> {
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let mut rights = vec![Right::pvcs("create", &namespace, "", "creating the claim")];
    let Some(template) = &obj.spec.claim_template else {
        return rights;
    };
    let spec = &template.spec;
    let source = spec
        .data_source_ref
        .as_ref()
        .map(|r| {
            (
                r.api_group.clone(),
                r.kind.clone(),
                r.name.clone(),
                r.namespace.clone(),
            )
        })
        .or_else(|| {
            spec.data_source
                .as_ref()
                .map(|r| (r.api_group.clone(), r.kind.clone(), r.name.clone(), None))
        });
    // A claim in another namespace is cloned through that namespace's
    // standing offer: the consent is the offer's, and its requester's right
    // to read the claim is checked before each clone.
    if obj.cross_namespace_source().is_some() {
        return rights;
    }
    if let Some((group, kind, name, ns)) = source {
        let group = group.unwrap_or_default();
        let resource = match (group.as_str(), kind.as_str()) {
            ("", "PersistentVolumeClaim") => "persistentvolumeclaims".to_owned(),
            ("snapshot.storage.k8s.io", "VolumeSnapshot") => "volumesnapshots".to_owned(),
            // kube's own guess for a kind's resource: lower-case plural.
            (_, other) => format!("{}s", other.to_ascii_lowercase()),
        };
        rights.push(Right {
            verb: "get",
            group,
            resource,
            namespace: ns.filter(|n| !n.is_empty()).unwrap_or(namespace),
            name,
            because: "cloning from it",
        });
    }
    rights
}

/// The first of `rights` that `user` lacks, asked of `authorizer` in order;
/// `fresh` bypasses any cache (the controller's re-check before it acts).
pub async fn first_missing(
    authorizer: &dyn Authorizer,
    user: &Requester,
    rights: Vec<Right>,
    fresh: bool,
) -> Result<Option<Right>, ApiError> {
    // Asked side by side (a fresh check is a round trip each), and read in
    // order, so the answer names the same right as asking one by one would.
    let decisions = futures::future::join_all(rights.iter().map(|right| async move {
        let attributes = Attributes {
            user: user.clone(),
            verb: right.verb.to_owned(),
            resource: Some(ResourceAttributes {
                group: right.group.clone(),
                version: String::new(),
                resource: right.resource.clone(),
                subresource: String::new(),
                namespace: right.namespace.clone(),
                name: right.name.clone(),
            }),
            path: String::new(),
        };
        if fresh {
            authorizer.authorize_fresh(&attributes).await
        } else {
            authorizer.authorize(&attributes).await
        }
    }))
    .await;
    for (right, decision) in rights.into_iter().zip(decisions) {
        if let Decision::Deny { .. } = decision? {
            return Ok(Some(right));
        }
    }
    Ok(None)
}

/// Checks each right with the authorizer, for the requester.
#[derive(Debug, Clone)]
pub struct RightsAdmission {
    authorizer: Arc<dyn Authorizer>,
}

impl RightsAdmission {
    pub fn new(authorizer: Arc<dyn Authorizer>) -> Self {
        Self { authorizer }
    }

    async fn require(
        &self,
        ctx: &Context,
        kind: &str,
        name: &str,
        rights: Vec<Right>,
    ) -> Result<(), ApiError> {
        match first_missing(self.authorizer.as_ref(), &ctx.user, rights, false).await? {
            None => Ok(()),
            Some(right) => Err(ApiError::Forbidden {
                message: format!(
                    "{kind} \"{name}\" is forbidden: User \"{}\" cannot {}, which {} requires",
                    ctx.user.username,
                    right.describe(),
                    right.because
                ),
            }),
        }
    }
}

/// The object of a create, decoded as the kind it is.
fn decoded<T: serde::de::DeserializeOwned>(write: &Write) -> Result<T, ApiError> {
    let object = write.object.as_ref().ok_or_else(|| {
        ApiError::Internal(format!(
            "admitting a create of {} without an object",
            write.kind
        ))
    })?;
    T::deserialize(object)
        .map_err(|e| ApiError::Internal(format!("decoding {} for admission: {e}", write.kind)))
}

/// Our own plugin, first in the chain: on a create, after validation, the
/// rights the object needs its requester to hold, dry runs included.
#[async_trait::async_trait]
impl Plugin for RightsAdmission {
    fn name(&self) -> &'static str {
        "TenantRights"
    }

    fn handles(&self, operation: Operation, phase: Phase) -> bool {
        operation == Operation::Create && phase == Phase::Validating
    }

    async fn validate(&self, ctx: &Context, write: &Write) -> Result<(), ApiError> {
        let rights = if write.resource == NamespaceTransfer::resource().plural {
            transfer_rights(&decoded(write)?)
        } else if write.resource == EphemeralClaim::resource().plural {
            claim_rights(&decoded(write)?)
        } else {
            return Ok(());
        };
        self.require(ctx, &write.kind, &write.name, rights).await
    }
}

#[cfg(test)]
mod tests;
