//! Why an EphemeralClaim is where it is: the one vocabulary of the `reason`
//! its status, conditions and Events carry.

use std::fmt;

use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::Deserialize;

/// The reason of an EphemeralClaim's status, condition or Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum ClaimReason {
    /// The owner pod does not exist yet; its uid goes into the claim.
    WaitingForOwner,
    /// The claim is made and waits to be bound.
    WaitingForBinding,
    /// The claim is bound to a volume.
    ClaimBound,
    /// A pod using the claim runs.
    PodRunning,
    /// The owner pod finished: before the claim could be made, or, as a
    /// release, after it.
    OwnerFinished,
    /// kube-apiserver refused to create the claim (validation, quota,
    /// admission); its message is kept.
    ClaimRefused,
    /// The requester no longer holds a right the claim needs.
    Forbidden,
    /// The template chooses a volume or sets reserved annotations (an
    /// object stored before validation refused that); no claim is made
    /// from it.
    UnsafeTemplate,
    /// The reason of `ClaimCreated=True`.
    Created,
    /// A claim named `status.claimName` exists and is not controlled by
    /// this EphemeralClaim, so it is never touched.
    ClaimConflict,
    /// No standing clone offer in the source namespace for this one.
    WaitingForConsent,
    /// The clone is being made and moved here.
    Cloning,
    /// The reason of `SourceConsented=True`.
    Offered,
    /// The handed-over clone's claim went before it was adopted.
    ClaimLost,
    /// Released: it was used, and no pod that may still run references it.
    NoLongerUsed,
    /// Released: the owner pod no longer exists.
    OwnerGone,
    /// Released: the EphemeralClaim itself is being deleted.
    EphemeralClaimDeleted,
    /// Released: the claim was deleted by someone else.
    ClaimDeleted,
}

impl ClaimReason {
    /// The reason as it is written: the variant's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClaimReason::WaitingForOwner => "WaitingForOwner",
            ClaimReason::WaitingForBinding => "WaitingForBinding",
            ClaimReason::ClaimBound => "ClaimBound",
            ClaimReason::PodRunning => "PodRunning",
            ClaimReason::OwnerFinished => "OwnerFinished",
            ClaimReason::ClaimRefused => "ClaimRefused",
            ClaimReason::Forbidden => "Forbidden",
            ClaimReason::UnsafeTemplate => "UnsafeTemplate",
            ClaimReason::Created => "Created",
            ClaimReason::ClaimConflict => "ClaimConflict",
            ClaimReason::WaitingForConsent => "WaitingForConsent",
            ClaimReason::Cloning => "Cloning",
            ClaimReason::Offered => "Offered",
            ClaimReason::ClaimLost => "ClaimLost",
            ClaimReason::NoLongerUsed => "NoLongerUsed",
            ClaimReason::OwnerGone => "OwnerGone",
            ClaimReason::EphemeralClaimDeleted => "EphemeralClaimDeleted",
            ClaimReason::ClaimDeleted => "ClaimDeleted",
        }
    }

    /// The reason `written` names, if this build knows it (a newer server
    /// may write one it does not): read as serde reads the variant's name.
    pub fn parse(written: &str) -> Option<ClaimReason> {
        ClaimReason::deserialize(StrDeserializer::<ValueError>::new(written)).ok()
    }
}

impl fmt::Display for ClaimReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reasons as the strings the server's decisions and tests compare with.
pub const REASON_WAITING_FOR_OWNER: &str = ClaimReason::WaitingForOwner.as_str();
pub const REASON_WAITING_FOR_BINDING: &str = ClaimReason::WaitingForBinding.as_str();
pub const REASON_CLAIM_BOUND: &str = ClaimReason::ClaimBound.as_str();
pub const REASON_POD_RUNNING: &str = ClaimReason::PodRunning.as_str();
pub const REASON_OWNER_FINISHED: &str = ClaimReason::OwnerFinished.as_str();
pub const REASON_CLAIM_REFUSED: &str = ClaimReason::ClaimRefused.as_str();
pub const REASON_FORBIDDEN: &str = ClaimReason::Forbidden.as_str();
pub const REASON_UNSAFE_TEMPLATE: &str = ClaimReason::UnsafeTemplate.as_str();
pub const REASON_CREATED: &str = ClaimReason::Created.as_str();
pub const REASON_CLAIM_CONFLICT: &str = ClaimReason::ClaimConflict.as_str();
pub const REASON_WAITING_FOR_CONSENT: &str = ClaimReason::WaitingForConsent.as_str();
pub const REASON_CLONING: &str = ClaimReason::Cloning.as_str();
pub const REASON_OFFERED: &str = ClaimReason::Offered.as_str();
pub const REASON_CLAIM_LOST: &str = ClaimReason::ClaimLost.as_str();
