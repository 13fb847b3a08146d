//! The NamespaceTransfer kind (DESIGN §2.1): its types, its defaulting and role
//! derivation (§2.1.1), and its validation.
//!
//! This module owns only what can be decided from the object itself. Admission
//! (SubjectAccessReview, the one-active-transfer rule), matching and the rebind
//! protocol live in the registry and the controller; they use [`NamespaceTransfer::role`]
//! and the names defined here rather than restating them.
//!
//! Enums (`mode`, `status.phase`, `status.role`) deserialize strictly: an unknown
//! value is a serde error whose message names the allowed values (for example
//! ``unknown variant `Copy`, expected `Move` or `Clone` ``). `spec.source.kind` stays a
//! string so that a later version can add kinds; validation limits it to
//! `PersistentVolumeClaim`.

use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};

use crate::errors::FieldCause;
use crate::meta::{string_enum_schema, Object, Requester};
use crate::validation::{self, BadValue, FieldErrors};
use crate::NAMESPACE_TRANSFERS;

pub mod reason;
pub use reason::*;

/// `spec.source.kind` for a claim's volume, and the default.
pub const SOURCE_KIND_PERSISTENT_VOLUME_CLAIM: &str = "PersistentVolumeClaim";
/// `spec.source.kind` for a VolumeSnapshot (group `snapshot.storage.k8s.io`,
/// DESIGN §2.1.7).
pub const SOURCE_KIND_VOLUME_SNAPSHOT: &str = "VolumeSnapshot";
/// The API group of VolumeSnapshots, their contents and classes.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// Condition: a peer transfer has been matched (§2.1.3).
pub const CONDITION_PEER_MATCHED: &str = "PeerMatched";
/// Condition: both parties' rights were re-checked just before the volume was touched.
pub const CONDITION_AUTHORIZED: &str = "Authorized";
/// Condition: no running pod uses the source claim any more.
pub const CONDITION_SOURCE_RELEASED: &str = "SourceReleased";
/// Condition: the volume's `claimRef` names the destination claim (R4 done).
pub const CONDITION_REBOUND: &str = "Rebound";
/// Condition: the transfer has completed and the destination claim is bound.
pub const CONDITION_READY: &str = "Ready";

/// How many clones of a standing offer may exist at once when its
/// `spec.maxClones` is unset.
pub const DEFAULT_MAX_CLONES: i32 = 10;

/// The largest `spec.maxClones`: the offer keeps a record of each pair in
/// its status, and a status must fit in the room the store keeps for the
/// controllers' writes.
pub const MAX_MAX_CLONES: i32 = 100;

/// Clone-claim annotation naming the claim it was cloned from,
/// `<namespace>/<name>`, or the VolumeSnapshot it was restored from,
/// `volumesnapshot/<namespace>/<name>` (C1).
pub const ANNOTATION_CLONE_OF: &str = "storage.transfer.k8s.io/clone-of";
/// Clone-claim annotation naming the receiving transfer it was made for
/// (C1), by the uid the giving transfer records for it (never the receiver's
/// own, which the source namespace may not learn): the pairs of one standing
/// offer share its lock, and a clone's five-character name suffix may repeat.
pub const ANNOTATION_CLONE_FOR: &str = "storage.transfer.k8s.io/clone-for";

/// Annotation on the request a standing populating Clone request makes for
/// one claim (DESIGN §2.3): the uid of that claim, the only one the request
/// may adopt. The request is controlled by the standing one (its
/// ownerReference), whose name the claim names in `dataSourceRef`. Set at
/// create or never: an update may not add, change or remove it.
pub const ANNOTATION_SERVES_CLAIM: &str = "storage.transfer.k8s.io/serves-claim";

/// Label on a clone's PersistentVolume naming the uid of the offer it was
/// cloned under (R2; never removed): what a standing offer's `maxClones`
/// counts. The volume is cluster-scoped, so no tenant of either namespace can
/// take it off to free a slot.
pub const LABEL_CLONED_UNDER: &str = "storage.transfer.k8s.io/cloned-under";

/// StorageClass annotation that allows transfers of its volumes (§2.1.4).
pub const ANNOTATION_ALLOW_NAMESPACE_TRANSFER: &str =
    "storage.transfer.k8s.io/allow-namespace-transfer";
/// Source-PVC annotation holding the uid of the transfer that locked it (R1).
pub const ANNOTATION_TRANSFER_LOCK: &str = "storage.transfer.k8s.io/transfer";
/// PV annotation recording the reclaim policy to restore (R2).
pub const ANNOTATION_ORIGINAL_RECLAIM_POLICY: &str =
    "storage.transfer.k8s.io/original-reclaim-policy";
/// VolumeSnapshotContent annotation recording the deletion policy to restore
/// (the snapshot protocol's R2).
pub const ANNOTATION_ORIGINAL_DELETION_POLICY: &str =
    "storage.transfer.k8s.io/original-deletion-policy";
/// PV annotation saying that R2 took the CSI external-provisioner's
/// finalizer off with `Retain` (value `taken`), so that R6 puts it back
/// with `Delete`, as the provisioner would.
pub const ANNOTATION_PROVISIONER_FINALIZER: &str = "storage.transfer.k8s.io/provisioner-finalizer";
/// The finalizer the CSI external-provisioner keeps on the volumes it would
/// delete (reclaim policy `Delete`, Bound), and takes off under `Retain`.
pub const PROVISIONER_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";
/// Destination-PVC annotation naming the source claim, `<namespace>/<name>` (R3).
pub const ANNOTATION_TRANSFERRED_FROM: &str = "storage.transfer.k8s.io/transferred-from";
/// PV annotation naming the uid of a destination claim that was deleted after
/// the commit and before the transfer completed: the volume is kept (reclaim
/// policy Retain) for an administrator.
pub const ANNOTATION_DESTINATION_LOST: &str = "storage.transfer.k8s.io/destination-lost";
/// Finalizer holding both transfer objects from R2 until completion or rollback,
/// and the destination claim from R3 until the transfer is done with it.
pub const FINALIZER_TRANSFER_PROTECTION: &str = "storage.transfer.k8s.io/transfer-protection";

/// A request, made in one namespace, to give a PersistentVolumeClaim's volume to
/// another namespace or to receive one from it. Each namespace consents by creating
/// its own NamespaceTransfer; a transfer created in a namespace that is both the
/// source and the destination renames the claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceTransfer {
    /// APIVersion defines the versioned schema of this representation of an object:
    /// `storage.transfer.k8s.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Kind is the REST resource this object represents: `NamespaceTransfer`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Standard object metadata. The namespace is the namespace that consents: the
    /// source namespace, the destination namespace, or both for a rename.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What to transfer, from where, to where. Immutable after create: to change a
    /// transfer, delete it and create another.
    #[serde(default)]
    pub spec: NamespaceTransferSpec,
    /// Where the transfer stands, as the server last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NamespaceTransferStatus>,
}

/// The specification of a NamespaceTransfer: its source and destination, how
/// the volume is handed over, and the limits on its life.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceTransferSpec {
    /// What is given away: the claim whose volume moves, or a VolumeSnapshot.
    #[serde(default)]
    pub source: TransferSource,
    /// Where the volume goes.
    #[serde(default)]
    pub destination: TransferDestination,
    /// `Move` (the default) hands over the source claim's own volume. `Clone` first
    /// clones the source claim in the source namespace and hands over the clone,
    /// leaving the original in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<TransferMode>,
    /// The user who created this transfer, whose rights the controller re-checks
    /// with a SubjectAccessReview before it acts, so that the server's own rights
    /// never stand in for a tenant's. Set by the server from the authenticated
    /// user; anything a client sends is replaced, and it never changes afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<Requester>,
    /// If set, the transfer is deleted this many seconds after it finishes (Completed,
    /// Failed or Cancelled). Must be 0 or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// If set, a transfer still unmatched or waiting this many seconds after it was
    /// created fails with reason `DeadlineExceeded`. Must be 1 or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// For a standing clone offer (mode `Clone`, on the source side, with no
    /// `destination.name`): how many of its clones may exist at once; more
    /// requests wait with reason `WaitingForCapacity`. Unset means 10: each
    /// clone takes the source namespace's quota and storage, so an offer
    /// never lets the destination make clones without bound. From 1 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clones: Option<i32>,
}

/// A PersistentVolumeClaim or a VolumeSnapshot, by kind, namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferSource {
    /// The kind of the source object: `PersistentVolumeClaim` (the default), or
    /// `VolumeSnapshot` (group `snapshot.storage.k8s.io`). In mode `Move` the
    /// snapshot itself moves to a VolumeSnapshot of the destination namespace; in
    /// mode `Clone` a claim restored from it beside it moves, and the snapshot stays.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The namespace of the source claim. Defaults to the transfer's own namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The name of the source claim. Required.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// A receiving namespace and its claim: one the server creates there under
/// `name`, or, with `populate`, those of its claims that name the transfer as
/// their data source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferDestination {
    /// The namespace that receives the volume. Defaults to the transfer's own
    /// namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The name of the claim created in the destination namespace. On the source side
    /// it may be left empty, meaning "whatever name the destination picks"; on the
    /// destination side it defaults to `source.name`; for a rename within one
    /// namespace it is required and must differ from `source.name`. Empty when
    /// `populate` is set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// On the destination side only: instead of creating a claim, serve the claims
    /// of this namespace whose `spec.dataSourceRef` names this transfer
    /// (`{apiGroup: storage.transfer.k8s.io, kind: NamespaceTransfer, name: ...}`),
    /// as a volume populator. A Move serves one claim, the oldest that fits the
    /// volume. A Clone serves every such claim, each with a clone of its own,
    /// through a request the server makes for that claim (named after this one,
    /// controlled by it, and listed in `status.served`). `name` must then be
    /// empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub populate: Option<bool>,
}

/// How the volume is handed over.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[schemars(transform = string_enum_schema)]
pub enum TransferMode {
    /// The source claim's own volume is rebound to the destination claim; the source
    /// claim is deleted. No data is copied.
    #[default]
    Move,
    /// A clone of the source claim is made in the source namespace and moved; the
    /// original claim stays where it is.
    Clone,
}

impl TransferMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferMode::Move => "Move",
            TransferMode::Clone => "Clone",
        }
    }
}

impl fmt::Display for TransferMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A side of a transfer (§2.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = string_enum_schema)]
pub enum Role {
    /// Created in the source namespace: it gives the claim away.
    Source,
    /// Created in the destination namespace: it receives the volume.
    Destination,
    /// Created in a namespace that is both source and destination: a rename. It is
    /// its own peer.
    Both,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Source => "Source",
            Role::Destination => "Destination",
            Role::Both => "Both",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phases of a transfer (§2.1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = string_enum_schema)]
pub enum NamespaceTransferPhase {
    /// Accepted, not yet looked at by the controller, or waiting for a peer that
    /// another transfer took.
    Pending,
    /// Waiting for the other namespace to create its matching transfer.
    WaitingForPeer,
    /// Matched, waiting until no running pod uses the source claim.
    WaitingForRelease,
    /// The volume is being rebound to the destination claim.
    Rebinding,
    /// The destination claim is bound to the volume. Final.
    Completed,
    /// The transfer was refused or rolled back; the source is as it was. Final.
    Failed,
    /// One side was deleted before the commit point; the source is as it was. Final.
    Cancelled,
}

impl NamespaceTransferPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            NamespaceTransferPhase::Pending => "Pending",
            NamespaceTransferPhase::WaitingForPeer => "WaitingForPeer",
            NamespaceTransferPhase::WaitingForRelease => "WaitingForRelease",
            NamespaceTransferPhase::Rebinding => "Rebinding",
            NamespaceTransferPhase::Completed => "Completed",
            NamespaceTransferPhase::Failed => "Failed",
            NamespaceTransferPhase::Cancelled => "Cancelled",
        }
    }

    /// Completed, Failed or Cancelled: the transfer will not move again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            NamespaceTransferPhase::Completed
                | NamespaceTransferPhase::Failed
                | NamespaceTransferPhase::Cancelled
        )
    }
}

impl fmt::Display for NamespaceTransferPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observed state of a NamespaceTransfer, which the server writes through
/// the `/status` subresource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceTransferStatus {
    /// Where this transfer is in its life. Completed, Failed and Cancelled are
    /// final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NamespaceTransferPhase>,
    /// Which side this object speaks for, as its namespace decides: the source,
    /// the destination, or both for a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The matched transfer in the other namespace. Set only once matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerReference>,
    /// The phase of the matched transfer, so that each side sees how the other is
    /// doing without being able to read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_phase: Option<NamespaceTransferPhase>,
    /// The PersistentVolume that was transferred. Set when the transfer completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// A copy of the source claim taken when it was locked, so that the destination
    /// claim can be made identical even after the source claim is gone. Set on the
    /// side that gives the volume away (Source or Both) only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_claim: Option<SourceClaimSnapshot>,
    /// The destination claim the controller created, with its uid, recorded right
    /// after it was created (step R3). The transfer is committed exactly when the
    /// volume's `claimRef` names this claim and uid. Set on the side that gives the
    /// volume away (Source or Both) only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_claim: Option<ClaimReference>,
    /// For a VolumeSnapshot source: the snapshot given away and its content,
    /// recorded when the snapshot was locked (R1). Set on the side that gives
    /// it away (Source or Both) only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_snapshot: Option<SourceSnapshotRecord>,
    /// For a VolumeSnapshot source: the destination snapshot and the content
    /// made for it, recorded right after they were created (R3). The move is
    /// committed once that content is bound to that snapshot (by uid) and
    /// ready to use. Set on the side that gives the snapshot away only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_snapshot: Option<SnapshotReference>,
    /// When the transfer completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// On a standing clone offer: how many clones it has made, and how many of
    /// them are alive, the number `spec.maxClones` limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clones: Option<CloneCounts>,
    /// On a standing clone offer: the record of each of its pairs from R1
    /// until the pair has finished, by request. Written by the controller
    /// only, on the offer, which the destination cannot read: what a pair
    /// knows of its clone (name, uid, volume, class, size) is the source
    /// namespace's business.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairRecord>,
    /// On a populating Clone request: the claims that name it, each with the
    /// request made for it and how that request stands, oldest claim first.
    /// At most 100 are listed; the message counts them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served: Vec<ServedClaim>,
    /// The latest observations of the transfer's state: PeerMatched, Authorized,
    /// SourceReleased, Rebound and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-map-keys" = ["type"],
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-patch-merge-key" = "type",
        "x-kubernetes-patch-strategy" = "merge"
    ))]
    pub conditions: Vec<Condition>,
    /// A CamelCase reason for the current phase, e.g. `DestinationExists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable explanation of the current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The steps of the rebind protocol this transfer has passed, in order,
    /// each once, with when the controller recorded it: Locked, Retained,
    /// Created, Committed, Released, Settled. Both sides see them. For a
    /// person to follow; the protocol never reads them back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-map-keys" = ["name"],
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-patch-merge-key" = "name",
        "x-kubernetes-patch-strategy" = "merge"
    ))]
    pub steps: Vec<TransferStep>,
}

/// A step's name and the time it was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferStep {
    /// Which step of the rebind protocol, from R1 (Locked) to R6 (Settled).
    pub name: TransferStepName,
    /// When the controller recorded the step: right after it was done, or
    /// with the next step's record, for a step that has none of its own (a
    /// claim's Retained and Released) or whose record a crash lost.
    pub time: Time,
}

/// The steps of the rebind protocol, in the order they are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = string_enum_schema)]
pub enum TransferStepName {
    /// R1: the claim being moved (the source claim, or in Clone mode its
    /// clone) carries this transfer's lock.
    Locked,
    /// R2: the volume's reclaim policy is Retain, the original recorded.
    Retained,
    /// R3: the destination claim exists, pre-bound to the volume; for a
    /// populating request, the claim that names it was adopted.
    Created,
    /// R4: the volume's claimRef names the destination claim. The commit
    /// point: from here the transfer only goes forward.
    Committed,
    /// R5: the claim that was moved was deleted: the source claim, or in
    /// Clone mode the clone (the original stays).
    Released,
    /// R6: the destination claim is bound and the reclaim policy restored.
    Settled,
}

impl TransferStepName {
    /// Every step, in protocol order.
    pub const ALL: [TransferStepName; 6] = [
        TransferStepName::Locked,
        TransferStepName::Retained,
        TransferStepName::Created,
        TransferStepName::Committed,
        TransferStepName::Released,
        TransferStepName::Settled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TransferStepName::Locked => "Locked",
            TransferStepName::Retained => "Retained",
            TransferStepName::Created => "Created",
            TransferStepName::Committed => "Committed",
            TransferStepName::Released => "Released",
            TransferStepName::Settled => "Settled",
        }
    }
}

impl fmt::Display for TransferStepName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl NamespaceTransferStatus {
    /// Records that `step` was passed at `time`, with any earlier step whose
    /// record is missing (a crash between a step and its record) at the same
    /// time. Idempotent: a step already recorded keeps its time, so the list
    /// holds each step at most once, in protocol order.
    pub fn record_step(&mut self, step: TransferStepName, time: &Time) {
        for name in TransferStepName::ALL {
            if !self.steps.iter().any(|s| s.name == name) {
                self.steps.push(TransferStep {
                    name,
                    time: time.clone(),
                });
            }
            if name == step {
                break;
            }
        }
    }

    /// When `step` was recorded, if it was.
    pub fn step_time(&self, step: TransferStepName) -> Option<&Time> {
        self.steps.iter().find(|s| s.name == step).map(|s| &s.time)
    }
}

/// Counts of the clones made under a standing clone offer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneCounts {
    /// Clones made under this offer, each counted once, when its pair
    /// records it (R1); never goes down.
    pub made: i64,
    /// Clones that exist now: being made, or from R2 on while their volume
    /// exists, whoever holds it.
    pub alive: i64,
}

/// One pair of a standing clone offer: the request it serves, and what R1 took
/// of its clone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PairRecord {
    /// The request in the destination namespace, as the offer records it
    /// (the uid is derived from the request's, never the request's own).
    pub request: PeerReference,
    /// What the pair's R1 took of its clone: what `status.sourceClaim` is on a
    /// one-shot transfer's source side.
    pub source_claim: SourceClaimSnapshot,
}

/// Names a NamespaceTransfer in another namespace, with a uid that tells it
/// apart from one created later under the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerReference {
    /// The peer's namespace.
    pub namespace: String,
    /// The peer's name.
    pub name: String,
    /// So that a peer deleted and created again under the same name is never
    /// taken for the one that was matched: not the peer's uid, which this
    /// namespace may not learn, but a UUIDv5 of it in this object's uid as
    /// namespace, which the controller can check and this namespace cannot
    /// invert. (Records an older server wrote hold the peer's own uid.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// Names one PersistentVolumeClaim, uid and all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimReference {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's uid.
    pub uid: String,
}

/// A VolumeSnapshot by name and uid, with its VolumeSnapshotContent and restore
/// size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceSnapshotRecord {
    /// The snapshot's name, in the source namespace.
    pub name: String,
    /// Its uid, so that a snapshot recreated under the same name is never
    /// mistaken for it.
    pub uid: String,
    /// The VolumeSnapshotContent it was bound to.
    pub content_name: String,
    /// Its `status.restoreSize`, if the driver reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<Quantity>,
}

/// Names a VolumeSnapshot, uid and all, and its VolumeSnapshotContent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotReference {
    /// The snapshot's namespace.
    pub namespace: String,
    /// The snapshot's name.
    pub name: String,
    /// The snapshot's uid.
    pub uid: String,
    /// The content made for it.
    pub content_name: String,
}

/// A claim by name and uid, with the NamespaceTransfer made for it and how that
/// transfer stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedClaim {
    /// The claim's name, in the request's namespace.
    pub name: String,
    /// The claim's uid.
    pub uid: String,
    /// The NamespaceTransfer made for the claim, in the same namespace.
    pub transfer: String,
    /// That transfer's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NamespaceTransferPhase>,
    /// That transfer's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How many claims `status.served` lists at most (its description says 100).
pub const MAX_SERVED_LISTED: usize = 100;

/// The parts of a PersistentVolumeClaim a destination claim is made from: its
/// name, uid and volume, and the spec fields the destination copies. Used to
/// create the destination claim (step R3) and to commit (step R4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceClaimSnapshot {
    /// The name of the claim being moved: `spec.source.name` in Move mode, the clone
    /// in Clone mode.
    pub name: String,
    /// The uid of that claim, so that a claim recreated under the same name is never
    /// mistaken for it.
    pub uid: String,
    /// The PersistentVolume bound to that claim.
    pub volume_name: String,
    /// The claim's `spec.resources.requests.storage`, given to the destination claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_request: Option<Quantity>,
    /// The claim's `spec.storageClassName`, given to the destination claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// The claim's `spec.accessModes`, given to the destination claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub access_modes: Vec<String>,
    /// The claim's `spec.volumeMode`, given to the destination claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
    /// The claim's `spec.volumeAttributesClassName`, given to the destination claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class_name: Option<String>,
}

impl NamespaceTransfer {
    /// The namespace the transfer lives in, or `""` before the server has set it.
    pub fn own_namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// `spec.source.namespace`, or its default, the transfer's own namespace.
    pub fn source_namespace(&self) -> &str {
        non_empty_or(&self.spec.source.namespace, self.own_namespace())
    }

    /// `spec.destination.namespace`, or its default, the transfer's own namespace.
    pub fn destination_namespace(&self) -> &str {
        non_empty_or(&self.spec.destination.namespace, self.own_namespace())
    }

    /// Whether the source is a VolumeSnapshot (DESIGN §2.1.7), not a claim,
    /// in either mode.
    pub fn source_is_snapshot(&self) -> bool {
        self.spec.source.kind == SOURCE_KIND_VOLUME_SNAPSHOT
    }

    /// `spec.source.kind`, or its default, `PersistentVolumeClaim`.
    pub fn source_kind(&self) -> &str {
        non_empty_or(&self.spec.source.kind, SOURCE_KIND_PERSISTENT_VOLUME_CLAIM)
    }

    /// Whether the VolumeSnapshot itself moves (mode Move): the snapshot
    /// protocol, not the claim's.
    pub fn moves_snapshot(&self) -> bool {
        self.source_is_snapshot() && self.mode() == TransferMode::Move
    }

    /// Whether a claim restored from the VolumeSnapshot beside it is what
    /// moves (mode Clone): the claim protocol, with a snapshot as the
    /// clone's data source.
    pub fn clones_snapshot(&self) -> bool {
        self.source_is_snapshot() && self.mode() == TransferMode::Clone
    }

    /// `spec.mode`, or its default, `Move`.
    pub fn mode(&self) -> TransferMode {
        self.spec.mode.unwrap_or_default()
    }

    /// Whether this is a standing clone offer (DESIGN §2.1.5b): mode Clone, on
    /// the source side only, with no `destination.name`. It matches every
    /// Clone request from its destination namespace, one clone each.
    pub fn is_standing_offer(&self) -> bool {
        self.mode() == TransferMode::Clone
            && self.role().ok() == Some(Role::Source)
            && self.spec.destination.name.is_empty()
    }

    /// Whether this object serves the claims that name it in `dataSourceRef`
    /// (`spec.destination.populate`, DESIGN §2.3) instead of creating one.
    pub fn populates(&self) -> bool {
        self.spec.destination.populate == Some(true)
    }

    /// Whether this is a standing populating request (DESIGN §2.3): a
    /// Destination-role Clone request with `populate: true` that is not
    /// itself one made for a claim ([`Self::served_claim_uid`]). It pairs
    /// with no offer; it makes a request for every claim that names it.
    pub fn is_standing_request(&self) -> bool {
        self.populates()
            && self.mode() == TransferMode::Clone
            && self.role().ok() == Some(Role::Destination)
            && self.served_claim_uid().is_none()
    }

    /// On a populating Clone request made for one claim (by a standing
    /// request, or by hand): that claim's uid ([`ANNOTATION_SERVES_CLAIM`],
    /// set at create or never). It stays one made for a claim when its
    /// owner goes or is removed, so that no edit turns a request under way
    /// into a standing one.
    pub fn served_claim_uid(&self) -> Option<&str> {
        if !self.populates() || self.mode() != TransferMode::Clone {
            return None;
        }
        serves_claim(self).filter(|uid| !uid.is_empty())
    }

    /// The NamespaceTransfer that controls this populating Clone request:
    /// the standing request that made it for one of its claims.
    pub fn populating_parent(&self) -> Option<&OwnerReference> {
        if !self.populates() || self.mode() != TransferMode::Clone {
            return None;
        }
        self.metadata.owner_references.iter().flatten().find(|r| {
            r.controller == Some(true)
                && r.kind == crate::NAMESPACE_TRANSFERS.kind
                && r.api_version == crate::GROUP_VERSION
        })
    }

    /// The name a claim's `dataSourceRef` gives to ask this populating
    /// request for a volume: its own, or for a request made for one claim,
    /// its standing request's.
    pub fn populated_name(&self) -> &str {
        match (self.served_claim_uid(), self.populating_parent()) {
            (Some(_), Some(parent)) => &parent.name,
            _ => self.metadata.name.as_deref().unwrap_or_default(),
        }
    }

    /// How many of a standing offer's clones may exist at once:
    /// `spec.maxClones`, or [`DEFAULT_MAX_CLONES`]. `None` for any other
    /// transfer, which makes one clone at most.
    pub fn max_clones(&self) -> Option<i32> {
        self.is_standing_offer()
            .then(|| self.spec.max_clones.unwrap_or(DEFAULT_MAX_CLONES))
    }

    /// Whether `claim`, in this transfer's own namespace, may be one of the
    /// clones it makes (a Clone-mode transfer on the source side): what
    /// wakes it when a clone is provisioned.
    pub fn may_be_clone(&self, namespace: &str, claim: &str) -> bool {
        // The name cut as a real suffix cuts it, without the suffix.
        let named = self.clone_claim_name("00000");
        let prefix = named.strip_suffix("00000").unwrap_or(&named);
        self.mode() == TransferMode::Clone
            && self.own_namespace() == self.source_namespace()
            && self.source_namespace() == namespace
            && claim.starts_with(prefix)
    }

    /// The claim a Clone-mode transfer makes in the source namespace and hands
    /// over (C1): `<this transfer's name>-clone-<the first 5 characters of
    /// `receiver_uid`>`, the uid this transfer records for the receiving
    /// transfer (never the receiver's own), the name cut so that the whole stays a
    /// valid object name. One clone per receiving transfer.
    pub fn clone_claim_name(&self, receiver_uid: &str) -> String {
        let suffix: String = receiver_uid
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(5)
            .collect::<String>()
            .to_ascii_lowercase();
        let own = self.metadata.name.as_deref().unwrap_or_default();
        let keep = 253 - "-clone-".len() - suffix.len();
        let base = own.get(..own.len().min(keep)).unwrap_or(own);
        let base = base.trim_end_matches(['-', '.']);
        format!("{base}-clone-{suffix}")
    }

    /// Which side this object speaks for (§2.1.1), from its own namespace and the
    /// (defaulted) source and destination namespaces. A transfer must be created in
    /// its source namespace, its destination namespace, or both; anything else is an
    /// error naming the namespace field to fix.
    pub fn role(&self) -> Result<Role, FieldCause> {
        let own = self.own_namespace();
        if own.is_empty() {
            return Err(validation::required("metadata.namespace", ""));
        }
        let source = self.source_namespace();
        let destination = self.destination_namespace();
        match (own == source, own == destination) {
            (true, true) => Ok(Role::Both),
            (true, false) => Ok(Role::Source),
            (false, true) => Ok(Role::Destination),
            (false, false) if source == destination => Err(validation::invalid(
                "spec.source.namespace",
                source,
                &format!(
                    "a rename within one namespace must be created in that namespace, not in \
                     {own:?}"
                ),
            )),
            (false, false) => Err(validation::invalid(
                "spec.destination.namespace",
                destination,
                &format!(
                    "neither spec.source.namespace nor spec.destination.namespace is this \
                     transfer's namespace {own:?}; create the transfer in the namespace that \
                     gives or receives the volume"
                ),
            )),
        }
    }

    /// The spec rules of §2.1.1, on the object as defaulting leaves it; an empty
    /// defaultable field is read as its default.
    fn validate_spec(&self, errs: &mut FieldErrors) {
        let spec = &self.spec;
        let kind = spec.source.kind.as_str();
        if !kind.is_empty()
            && kind != SOURCE_KIND_PERSISTENT_VOLUME_CLAIM
            && kind != SOURCE_KIND_VOLUME_SNAPSHOT
        {
            errs.not_supported(
                "spec.source.kind",
                kind,
                &[
                    SOURCE_KIND_PERSISTENT_VOLUME_CLAIM,
                    SOURCE_KIND_VOLUME_SNAPSHOT,
                ],
            );
        }
        if kind == SOURCE_KIND_VOLUME_SNAPSHOT
            && self.mode() == TransferMode::Move
            && spec.destination.populate == Some(true)
        {
            errs.invalid(
                "spec.destination.populate",
                "true",
                "a moved VolumeSnapshot is received as a VolumeSnapshot, not into a claim; \
                 mode: Clone fills a claim from it",
            );
        }
        if !spec.source.namespace.is_empty() {
            validation::validate_dns1123_label(
                errs,
                "spec.source.namespace",
                &spec.source.namespace,
            );
        }
        if spec.source.name.is_empty() {
            errs.required("spec.source.name", "");
        } else {
            validation::validate_dns1123_subdomain(errs, "spec.source.name", &spec.source.name);
        }
        if !spec.destination.namespace.is_empty() {
            validation::validate_dns1123_label(
                errs,
                "spec.destination.namespace",
                &spec.destination.namespace,
            );
        }
        if !spec.destination.name.is_empty() {
            validation::validate_dns1123_subdomain(
                errs,
                "spec.destination.name",
                &spec.destination.name,
            );
        }
        // Without a namespace there is no role; validate_object_meta reports it.
        if !self.own_namespace().is_empty() {
            match self.role() {
                Err(cause) => errs.push(cause),
                Ok(Role::Both) if spec.destination.name.is_empty() => errs.required(
                    "spec.destination.name",
                    "required when the source and destination namespaces are the same",
                ),
                Ok(Role::Both) if spec.destination.name == spec.source.name => errs.invalid(
                    "spec.destination.name",
                    &spec.destination.name,
                    "must differ from spec.source.name when the source and destination \
                     namespaces are the same",
                ),
                Ok(_) => {}
            }
            if self.populates() {
                self.validate_populate(errs);
            }
        }
        if let Some(ttl) = spec.ttl_seconds_after_finished {
            if ttl < 0 {
                errs.invalid(
                    "spec.ttlSecondsAfterFinished",
                    ttl,
                    "must be greater than or equal to 0",
                );
            }
        }
        if let Some(deadline) = spec.active_deadline_seconds {
            if deadline < 1 {
                errs.invalid(
                    "spec.activeDeadlineSeconds",
                    deadline,
                    "must be greater than or equal to 1",
                );
            }
        }
        if let Some(max) = spec.max_clones {
            if max < 1 {
                errs.invalid("spec.maxClones", max, "must be greater than or equal to 1");
            } else if max > MAX_MAX_CLONES {
                errs.invalid(
                    "spec.maxClones",
                    max,
                    &format!("must be less than or equal to {MAX_MAX_CLONES}"),
                );
            } else if !self.own_namespace().is_empty() && !self.is_standing_offer() {
                errs.invalid(
                    "spec.maxClones",
                    max,
                    "only a standing clone offer may set it: mode Clone, in the source \
                     namespace, with no destination.name",
                );
            }
        }
    }
}

impl NamespaceTransfer {
    /// `spec.destination.populate: true` (DESIGN §2.3): a request of the
    /// destination side whose claims are the tenant's own.
    fn validate_populate(&self, errs: &mut FieldErrors) {
        let spec = &self.spec;
        if self.role() != Ok(Role::Destination) {
            errs.invalid(
                "spec.destination.populate",
                true,
                "only a request in the destination namespace may populate claims: the \
                 source and destination namespaces must differ, and this transfer must be \
                 created in the destination namespace",
            );
        }
        if !spec.destination.name.is_empty() {
            errs.invalid(
                "spec.destination.name",
                &spec.destination.name,
                "must be empty when spec.destination.populate is true: the claims that \
                 name this transfer in dataSourceRef receive the volume",
            );
        }
    }
}

/// Whether a claim's `spec.dataSourceRef` names a NamespaceTransfer (DESIGN
/// §2.3): the claim asks a populating request for its volume.
pub fn names_a_transfer(r: &k8s_openapi::api::core::v1::TypedObjectReference) -> bool {
    r.api_group.as_deref() == Some(crate::GROUP) && r.kind == crate::NAMESPACE_TRANSFERS.kind
}

fn non_empty_or<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() {
        default
    } else {
        value
    }
}

/// `t`'s [`ANNOTATION_SERVES_CLAIM`], whatever its spec.
fn serves_claim(t: &NamespaceTransfer) -> Option<&str> {
    t.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_SERVES_CLAIM)
        .map(String::as_str)
}

/// One `field is immutable` cause per spec field that differs, naming the leaf.
fn validate_spec_unchanged(
    errs: &mut FieldErrors,
    new: &NamespaceTransferSpec,
    old: &NamespaceTransferSpec,
) {
    let strings = [
        ("spec.source.kind", &new.source.kind, &old.source.kind),
        (
            "spec.source.namespace",
            &new.source.namespace,
            &old.source.namespace,
        ),
        ("spec.source.name", &new.source.name, &old.source.name),
        (
            "spec.destination.namespace",
            &new.destination.namespace,
            &old.destination.namespace,
        ),
        (
            "spec.destination.name",
            &new.destination.name,
            &old.destination.name,
        ),
    ];
    for (field, new_value, old_value) in strings {
        if new_value != old_value {
            errs.immutable(field, new_value);
        }
    }
    if new.destination.populate != old.destination.populate {
        errs.immutable("spec.destination.populate", new.destination.populate);
    }
    if new.mode != old.mode {
        errs.immutable("spec.mode", new.mode.map(TransferMode::as_str));
    }
    if new.ttl_seconds_after_finished != old.ttl_seconds_after_finished {
        errs.immutable(
            "spec.ttlSecondsAfterFinished",
            new.ttl_seconds_after_finished,
        );
    }
    if new.active_deadline_seconds != old.active_deadline_seconds {
        errs.immutable("spec.activeDeadlineSeconds", new.active_deadline_seconds);
    }
    if new.max_clones != old.max_clones {
        errs.immutable("spec.maxClones", new.max_clones);
    }
    if new.requester != old.requester {
        errs.immutable("spec.requester", BadValue::Omitted);
    }
}

impl Object for NamespaceTransfer {
    crate::meta::object_fields!(NAMESPACE_TRANSFERS);

    /// A new transfer is `Pending`, with the role its namespaces give it.
    fn reset_status(&mut self) {
        self.status = Some(NamespaceTransferStatus {
            phase: Some(NamespaceTransferPhase::Pending),
            role: self.role().ok(),
            ..Default::default()
        });
    }

    fn bound_status(&mut self) {
        if let Some(st) = &mut self.status {
            for text in [&mut st.message, &mut st.reason].into_iter().flatten() {
                crate::meta::bound_text(text);
            }
            crate::meta::bound_conditions(&mut st.conditions);
        }
    }

    fn phase(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .map(NamespaceTransferPhase::as_str)
    }

    fn requester(&self) -> Option<&Requester> {
        self.spec.requester.as_ref()
    }

    fn set_requester(&mut self, requester: Requester) {
        self.spec.requester = Some(requester);
    }

    /// §2.1.1: source.kind defaults to PersistentVolumeClaim; source.namespace and
    /// then destination.namespace default to metadata.namespace; mode defaults to
    /// Move; on the destination side only, destination.name defaults to source.name.
    fn apply_defaults(&mut self) {
        let own = self.own_namespace().to_owned();
        let spec = &mut self.spec;
        if spec.source.kind.is_empty() {
            SOURCE_KIND_PERSISTENT_VOLUME_CLAIM.clone_into(&mut spec.source.kind);
        }
        if spec.source.namespace.is_empty() {
            spec.source.namespace.clone_from(&own);
        }
        if spec.destination.namespace.is_empty() {
            spec.destination.namespace = own;
        }
        if spec.mode.is_none() {
            spec.mode = Some(TransferMode::Move);
        }
        if self.spec.destination.name.is_empty()
            && self.role() == Ok(Role::Destination)
            && !self.populates()
        {
            self.spec
                .destination
                .name
                .clone_from(&self.spec.source.name);
        }
    }

    fn validate_create(&self) -> Vec<FieldCause> {
        let mut errs = FieldErrors::new();
        validation::validate_object_meta(&mut errs, &self.metadata);
        self.validate_spec(&mut errs);
        errs.into_causes()
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldCause> {
        let mut errs = FieldErrors::new();
        errs.extend(self.validate_create());
        validate_spec_unchanged(&mut errs, &self.spec, &old.spec);
        // Which claim a request serves decides what it is (a standing
        // request or one made for a claim): set at create or never.
        let (new, was) = (serves_claim(self), serves_claim(old));
        if new != was {
            errs.immutable(
                &format!("metadata.annotations[{ANNOTATION_SERVES_CLAIM}]"),
                new,
            );
        }
        errs.into_causes()
    }
}

#[cfg(test)]
mod tests;
