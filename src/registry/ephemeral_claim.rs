//! The EphemeralClaim strategy: its Table columns (Name, Owner, Claim, Phase,
//! Age), field selectors, and the claim-protection finalizer, which is the
//! controller's alone.

use serde_json::Value;

use crate::api::ephemeral_claim::{EphemeralClaim, FINALIZER_CLAIM_PROTECTION};

use super::strategy::{age_cell, text_cell, Strategy};
use super::table::TableColumn;

/// `ephemeralclaims.storage.transfer.k8s.io`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EphemeralClaimStrategy;

impl Strategy for EphemeralClaimStrategy {
    type Object = EphemeralClaim;

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
