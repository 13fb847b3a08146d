//! The NamespaceTransfer strategy: its Table columns
//! (Name, Role, Mode, Source, Destination, Phase, Age), field selectors, and the
//! claims an active transfer holds alone (DESIGN §2.1.2 item 3): a Source-role
//! transfer its source claim, a Destination-role transfer its destination claim
//! name, a rename (`Both`) both; for a VolumeSnapshot source (§2.1.7), the
//! source and destination snapshots instead, under keys of their own, so that
//! a snapshot and a claim of the same name never hold each other up. The
//! transfer-protection finalizer is the controller's alone.

use serde_json::Value;

use crate::api::namespace_transfer::{
    NamespaceTransfer, Role, TransferMode, FINALIZER_TRANSFER_PROTECTION,
};

use super::rights::Right;

use super::strategy::{age_cell, text_cell, Strategy, UniqueClaim};
use super::table::TableColumn;

/// What a VolumeSnapshot transfer's Source and Destination cells, and its
/// index keys, put before `namespace/name` (`volumesnapshot/prod/db`, as
/// kubectl names the resource). A claim's are `prod/db` alone, as they
/// always were.
const SNAPSHOT_PREFIX: &str = "volumesnapshot/";

/// `namespacetransfers.storage.transfer.k8s.io`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NamespaceTransferStrategy;

impl Strategy for NamespaceTransferStrategy {
    type Object = NamespaceTransfer;

    fn create_rights(&self, obj: &NamespaceTransfer) -> Vec<Right> {
        transfer_rights(obj)
    }

    fn controller_finalizers(&self) -> &'static [&'static str] {
        &[FINALIZER_TRANSFER_PROTECTION]
    }

    fn unique_claims(&self, obj: &NamespaceTransfer) -> Vec<UniqueClaim> {
        // A claim's keys are `source/<ns>/<name>`, as they always were; a
        // snapshot's carry its kind as one more segment, which no claim's
        // key has (a name holds no `/`).
        // A snapshot Clone mode restores gives a claim: its destination
        // shares the claims' keys.
        let kind = |snapshot: bool| {
            if snapshot {
                (SNAPSHOT_PREFIX, "snapshot")
            } else {
                ("", "claim")
            }
        };
        let source = || {
            let (key, noun) = kind(obj.source_is_snapshot());
            let object = format!("{}/{}", obj.source_namespace(), obj.spec.source.name);
            UniqueClaim {
                index: format!("source/{key}{object}"),
                what: format!("source {noun} {object}"),
            }
        };
        // Defaulting names the destination object on the destination side, and
        // validation requires it for a rename; only an offer may leave it open.
        let destination = || {
            let (key, noun) = kind(obj.moves_snapshot());
            let name = &obj.spec.destination.name;
            (!name.is_empty()).then(|| {
                let object = format!("{}/{name}", obj.destination_namespace());
                UniqueClaim {
                    index: format!("destination/{key}{object}"),
                    what: format!("destination {noun} {object}"),
                }
            })
        };
        match obj.role() {
            Ok(Role::Source) => vec![source()],
            Ok(Role::Destination) => destination().into_iter().collect(),
            Ok(Role::Both) => std::iter::once(source()).chain(destination()).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn holds_claims(&self, obj: &NamespaceTransfer) -> bool {
        !obj.status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|phase| phase.is_finished())
    }

    fn table_columns(&self) -> Vec<TableColumn> {
        vec![
            TableColumn::name(),
            TableColumn::new(
                "Role",
                "string",
                "Which side this object speaks for: Source, Destination or Both.",
            ),
            TableColumn::new(
                "Mode",
                "string",
                "Move hands over the claim's own volume (or the VolumeSnapshot itself); Clone a clone of it.",
            ),
            TableColumn::new(
                "Source",
                "string",
                "The claim given away, as namespace/name; a VolumeSnapshot (moved, or restored into the clone) as volumesnapshot/namespace/name.",
            ),
            TableColumn::new(
                "Destination",
                "string",
                "The claim to create, as namespace/name; a moved VolumeSnapshot as volumesnapshot/namespace/name; * for any name the destination picks; <populate> for the claims that name a populating request, until it adopts one.",
            ),
            TableColumn::new("Phase", "string", "Where the transfer is in its protocol."),
            TableColumn::age(),
        ]
    }

    fn table_cells(&self, obj: &NamespaceTransfer) -> Vec<Value> {
        let role = obj
            .status
            .as_ref()
            .and_then(|s| s.role)
            .or_else(|| obj.role().ok())
            .map(|r| r.as_str())
            .unwrap_or_default();
        // A populating request shows the claim it adopted, once it has.
        let adopted = obj
            .status
            .as_ref()
            .and_then(|s| s.destination_claim.as_ref())
            .filter(|_| obj.populates())
            .map(|c| c.name.as_str());
        let destination_name = match adopted {
            Some(name) => name,
            None if obj.populates() => "<populate>",
            None if obj.spec.destination.name.is_empty() => "*",
            None => obj.spec.destination.name.as_str(),
        };
        let phase = obj
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .map(|p| p.as_str())
            .unwrap_or_default();
        let prefix = |snapshot: bool| if snapshot { SNAPSHOT_PREFIX } else { "" };
        vec![
            text_cell(obj.metadata.name.clone().unwrap_or_default()),
            text_cell(role),
            text_cell(obj.mode().as_str()),
            text_cell(format!(
                "{}{}/{}",
                prefix(obj.source_is_snapshot()),
                obj.source_namespace(),
                obj.spec.source.name
            )),
            text_cell(format!(
                "{}{}/{destination_name}",
                prefix(obj.moves_snapshot()),
                obj.destination_namespace()
            )),
            text_cell(phase),
            age_cell(obj),
        ]
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

#[cfg(test)]
mod tests;
