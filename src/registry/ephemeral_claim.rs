//! The EphemeralClaim strategy: its Table columns (Name, Owner, Claim, Phase,
//! Age), field selectors, and the claim-protection finalizer, which is the
//! controller's alone.

use serde_json::Value;

use crate::api::ephemeral_claim::{EphemeralClaim, FINALIZER_CLAIM_PROTECTION};

use super::rights::Right;
use super::strategy::{age_cell, text_cell, Strategy};
use super::table::TableColumn;

/// `ephemeralclaims.storage.transfer.k8s.io`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EphemeralClaimStrategy;

impl Strategy for EphemeralClaimStrategy {
    type Object = EphemeralClaim;

    fn create_rights(&self, obj: &EphemeralClaim) -> Vec<Right> {
        claim_rights(obj)
    }

    fn controller_finalizers(&self) -> &'static [&'static str] {
        &[FINALIZER_CLAIM_PROTECTION]
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        vec![
            TableColumn::name(),
            TableColumn::new(
                "Owner",
                "string",
                "The pod whose life the claim follows, as Kind/name.",
            ),
            TableColumn::new(
                "Claim",
                "string",
                "The PersistentVolumeClaim made from the template.",
            ),
            TableColumn::new("Phase", "string", "Where the claim is in its life."),
            TableColumn::age(),
        ]
    }

    fn table_cells(&self, obj: &EphemeralClaim) -> Vec<Value> {
        let owner = obj
            .spec
            .owner
            .as_ref()
            .map(|o| format!("{}/{}", o.kind, o.name))
            .unwrap_or_default();
        let status = obj.status.as_ref();
        let claim = status
            .and_then(|s| s.claim_name.clone())
            .unwrap_or_else(|| obj.claim_name());
        let phase = status
            .and_then(|s| s.phase)
            .map(|p| p.as_str())
            .unwrap_or_default();
        vec![
            text_cell(obj.metadata.name.clone().unwrap_or_default()),
            text_cell(owner),
            text_cell(claim),
            text_cell(phase),
            age_cell(obj),
        ]
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
