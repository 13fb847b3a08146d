//! Why a transfer is where it is: the one vocabulary of the `reason` its
//! conditions and Events carry, written by the server and read by
//! `kubectl transfer`, so that a reason cannot mean one thing on one side
//! and another on the other.

use std::fmt;

use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::Deserialize;

/// The reason of a NamespaceTransfer's condition or Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum TransferReason {
    /// No transfer in the other namespace matches yet.
    WaitingForPeer,
    /// Another destination-side transfer already matched this source.
    PeerTaken,
    /// The source claim does not exist.
    SourceNotFound,
    /// The source claim is not (yet) bound to its volume.
    SourceNotBound,
    /// A pod uses the source claim.
    SourceInUse,
    /// Another active transfer holds the source claim or its volume.
    SourceLocked,
    /// The volume's StorageClass does not allow transfers.
    StorageClassNotAllowed,
    /// The destination claim name is held by a claim this transfer did not
    /// create.
    DestinationExists,
    /// kube-apiserver refuses (or would refuse) to create the destination
    /// claim (quota, admission, validation); its message is kept.
    DestinationRefused,
    /// A party's rights were revoked between create and rebind.
    Forbidden,
    /// kube-apiserver would refuse to delete the source claim at R5.
    SourceReleaseRefused,
    /// The volume vanished or was changed by someone else.
    VolumeChanged,
    /// One side was deleted before the commit point.
    Deleted,
    /// `spec.activeDeadlineSeconds` passed before the transfer finished.
    DeadlineExceeded,
    /// The transfer asks for a mode this server does not run.
    ModeNotSupported,
    /// Clone mode is waiting for the clone to be provisioned (C2).
    Cloning,
    /// A Clone-mode transfer's clone could not be made or provisioned.
    CloneFailed,
    /// The source claim's StorageClass binds WaitForFirstConsumer, so a clone
    /// nobody consumes would never be provisioned: refused at once, before it
    /// takes the source namespace's quota.
    CloneNeedsConsumer,
    /// A standing clone offer's clones alive reach its `maxClones`.
    WaitingForCapacity,
    /// After the commit, waiting for the cluster to bind the destination.
    WaitingForBinding,
    /// The destination claim was deleted after the commit; the volume is kept
    /// (reclaim policy Retain) for an administrator.
    DestinationLost,
    /// A populating request waits for a claim of its namespace that names it
    /// in `dataSourceRef` and fits the volume (DESIGN §2.3).
    WaitingForClaim,
    /// The claim a populating request adopted no longer fits the volume (it
    /// was bound elsewhere, or replaced), before the commit.
    ClaimMismatch,
    /// The source snapshot is not bound to a content, or not ready.
    SnapshotNotReady,
    /// The source snapshot is a member of a VolumeGroupSnapshot, which owns
    /// it.
    SnapshotInGroup,
    /// The snapshot's VolumeSnapshotClass does not allow transfers, or its
    /// deletion secret belongs to the source namespace.
    SnapshotClassNotAllowed,
    /// The reason of `PeerMatched=True`: the two sides found each other.
    Matched,
    /// The reason of `SourceReleased=True`: no pod uses the source claim.
    NotInUse,
    /// The reason of `Authorized=True`: both sides' rights were checked again.
    RightsConfirmed,
    /// The reason of a standing clone offer that is open.
    Offering,
    /// The reason of a standing populating request that is open.
    Serving,
    /// On a claim: kube-apiserver refused the request made for it.
    RequestRefused,
    /// On a claim: no NamespaceTransfer of the name it gives exists in its namespace.
    TransferNotFound,
    /// On a claim: the transfer it names fills no claims (not a populating request, finished, or being deleted).
    TransferNotPopulating,
    /// On a claim: the Move request it names adopted another claim.
    NotAdopted,
    /// On a claim: the request a standing populating request made for it finished without serving it.
    ClaimNotServed,
    /// The Event of R1: the source claim (or snapshot) is locked for the transfer.
    Locked,
    /// The Event of R2 in a snapshot move: both sides' rights were checked again.
    Authorized,
    /// The Event of the commit: the volume (or content) names the destination.
    Committed,
    /// The Event on a clone made to be handed over.
    CloneCreated,
    /// The transfer completed.
    Completed,
}

impl TransferReason {
    /// The reason as it is written: the variant's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TransferReason::WaitingForPeer => "WaitingForPeer",
            TransferReason::PeerTaken => "PeerTaken",
            TransferReason::SourceNotFound => "SourceNotFound",
            TransferReason::SourceNotBound => "SourceNotBound",
            TransferReason::SourceInUse => "SourceInUse",
            TransferReason::SourceLocked => "SourceLocked",
            TransferReason::StorageClassNotAllowed => "StorageClassNotAllowed",
            TransferReason::DestinationExists => "DestinationExists",
            TransferReason::DestinationRefused => "DestinationRefused",
            TransferReason::Forbidden => "Forbidden",
            TransferReason::SourceReleaseRefused => "SourceReleaseRefused",
            TransferReason::VolumeChanged => "VolumeChanged",
            TransferReason::Deleted => "Deleted",
            TransferReason::DeadlineExceeded => "DeadlineExceeded",
            TransferReason::ModeNotSupported => "ModeNotSupported",
            TransferReason::Cloning => "Cloning",
            TransferReason::CloneFailed => "CloneFailed",
            TransferReason::CloneNeedsConsumer => "CloneNeedsConsumer",
            TransferReason::WaitingForCapacity => "WaitingForCapacity",
            TransferReason::WaitingForBinding => "WaitingForBinding",
            TransferReason::DestinationLost => "DestinationLost",
            TransferReason::WaitingForClaim => "WaitingForClaim",
            TransferReason::ClaimMismatch => "ClaimMismatch",
            TransferReason::SnapshotNotReady => "SnapshotNotReady",
            TransferReason::SnapshotInGroup => "SnapshotInGroup",
            TransferReason::SnapshotClassNotAllowed => "SnapshotClassNotAllowed",
            TransferReason::Matched => "Matched",
            TransferReason::NotInUse => "NotInUse",
            TransferReason::RightsConfirmed => "RightsConfirmed",
            TransferReason::Offering => "Offering",
            TransferReason::Serving => "Serving",
            TransferReason::RequestRefused => "RequestRefused",
            TransferReason::TransferNotFound => "TransferNotFound",
            TransferReason::TransferNotPopulating => "TransferNotPopulating",
            TransferReason::NotAdopted => "NotAdopted",
            TransferReason::ClaimNotServed => "ClaimNotServed",
            TransferReason::Locked => "Locked",
            TransferReason::Authorized => "Authorized",
            TransferReason::Committed => "Committed",
            TransferReason::CloneCreated => "CloneCreated",
            TransferReason::Completed => "Completed",
        }
    }

    /// The reason `written` names, if this build knows it (a newer server
    /// may write one it does not): read as serde reads the variant's name.
    pub fn parse(written: &str) -> Option<TransferReason> {
        TransferReason::deserialize(StrDeserializer::<ValueError>::new(written)).ok()
    }
}

impl fmt::Display for TransferReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reasons as the strings the server's decisions and tests compare with.
pub const REASON_WAITING_FOR_PEER: &str = TransferReason::WaitingForPeer.as_str();
pub const REASON_PEER_TAKEN: &str = TransferReason::PeerTaken.as_str();
pub const REASON_SOURCE_NOT_FOUND: &str = TransferReason::SourceNotFound.as_str();
pub const REASON_SOURCE_NOT_BOUND: &str = TransferReason::SourceNotBound.as_str();
pub const REASON_SOURCE_IN_USE: &str = TransferReason::SourceInUse.as_str();
pub const REASON_SOURCE_LOCKED: &str = TransferReason::SourceLocked.as_str();
pub const REASON_STORAGE_CLASS_NOT_ALLOWED: &str = TransferReason::StorageClassNotAllowed.as_str();
pub const REASON_DESTINATION_EXISTS: &str = TransferReason::DestinationExists.as_str();
pub const REASON_DESTINATION_REFUSED: &str = TransferReason::DestinationRefused.as_str();
pub const REASON_FORBIDDEN: &str = TransferReason::Forbidden.as_str();
pub const REASON_SOURCE_RELEASE_REFUSED: &str = TransferReason::SourceReleaseRefused.as_str();
pub const REASON_VOLUME_CHANGED: &str = TransferReason::VolumeChanged.as_str();
pub const REASON_DELETED: &str = TransferReason::Deleted.as_str();
pub const REASON_DEADLINE_EXCEEDED: &str = TransferReason::DeadlineExceeded.as_str();
pub const REASON_MODE_NOT_SUPPORTED: &str = TransferReason::ModeNotSupported.as_str();
pub const REASON_CLONING: &str = TransferReason::Cloning.as_str();
pub const REASON_CLONE_FAILED: &str = TransferReason::CloneFailed.as_str();
pub const REASON_CLONE_NEEDS_CONSUMER: &str = TransferReason::CloneNeedsConsumer.as_str();
pub const REASON_WAITING_FOR_CAPACITY: &str = TransferReason::WaitingForCapacity.as_str();
pub const REASON_WAITING_FOR_BINDING: &str = TransferReason::WaitingForBinding.as_str();
pub const REASON_DESTINATION_LOST: &str = TransferReason::DestinationLost.as_str();
pub const REASON_WAITING_FOR_CLAIM: &str = TransferReason::WaitingForClaim.as_str();
pub const REASON_CLAIM_MISMATCH: &str = TransferReason::ClaimMismatch.as_str();
pub const REASON_SNAPSHOT_NOT_READY: &str = TransferReason::SnapshotNotReady.as_str();
pub const REASON_SNAPSHOT_IN_GROUP: &str = TransferReason::SnapshotInGroup.as_str();
pub const REASON_SNAPSHOT_CLASS_NOT_ALLOWED: &str =
    TransferReason::SnapshotClassNotAllowed.as_str();
pub const REASON_LOCKED: &str = TransferReason::Locked.as_str();
pub const REASON_AUTHORIZED: &str = TransferReason::Authorized.as_str();
pub const REASON_COMMITTED: &str = TransferReason::Committed.as_str();
pub const REASON_CLONE_CREATED: &str = TransferReason::CloneCreated.as_str();
pub const REASON_COMPLETED: &str = TransferReason::Completed.as_str();
pub const REASON_MATCHED: &str = TransferReason::Matched.as_str();
pub const REASON_NOT_IN_USE: &str = TransferReason::NotInUse.as_str();
pub const REASON_RIGHTS_CONFIRMED: &str = TransferReason::RightsConfirmed.as_str();
pub const REASON_OFFERING: &str = TransferReason::Offering.as_str();
pub const REASON_SERVING: &str = TransferReason::Serving.as_str();
pub const REASON_REQUEST_REFUSED: &str = TransferReason::RequestRefused.as_str();
pub const REASON_TRANSFER_NOT_FOUND: &str = TransferReason::TransferNotFound.as_str();
pub const REASON_TRANSFER_NOT_POPULATING: &str = TransferReason::TransferNotPopulating.as_str();
pub const REASON_NOT_ADOPTED: &str = TransferReason::NotAdopted.as_str();
pub const REASON_CLAIM_NOT_SERVED: &str = TransferReason::ClaimNotServed.as_str();
