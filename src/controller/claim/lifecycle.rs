//! The EphemeralClaim life cycle (DESIGN §2.2) as one pure step function: from
//! what the controller observed ([`Facts`]) to the one [`Step`] it takes next.
//!
//! Owns the decision and nothing else: no I/O, no clock. The controller reads
//! the facts afresh on every reconcile, takes the step, and asks again, so the
//! same facts after a crash give the same step (level-triggered).
//!
//! Two rules shape every answer:
//! - **Never unbind before use.** A claim is released only once it was used
//!   and no pod that may still run references it, or once its owner pod has
//!   finished or is gone. A bound claim whose pod has not started is left
//!   alone, however long that takes.
//! - **Decide, record, then act.** `Deleting` is written before the claim is
//!   deleted, so that a crash in between finds the decision and carries it
//!   out; a claim once made is never made again. `Deleted` is written only
//!   once the claim is gone.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

use crate::api::ephemeral_claim::{ClaimReason, EphemeralClaimPhase as Phase, ReleasePolicy};

/// What one reconcile observed, reduced to what the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `status.phase`; `Pending` when unset.
    pub phase: Phase,
    pub release_policy: ReleasePolicy,
    /// The EphemeralClaim has a `deletionTimestamp`.
    pub deleting: bool,
    /// Our finalizer is on the EphemeralClaim.
    pub has_finalizer: bool,
    /// The status records that the claim was made (`ClaimCreated=True`).
    pub claim_created: bool,
    /// `status.firstUsedTime` is set.
    pub first_used: bool,
    /// The PersistentVolumeClaim named `status.claimName`.
    pub claim: ClaimState,
    /// The owner pod.
    pub owner: OwnerState,
    /// The pods that reference the claim.
    pub users: Users,
}

/// The PersistentVolumeClaim of the EphemeralClaim's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// No claim of that name exists.
    Absent,
    /// A claim of that name exists and this EphemeralClaim does not control it:
    /// it is never touched.
    Foreign,
    /// The claim this EphemeralClaim made (its controller ownerReference).
    Ours {
        /// `status.phase` is `Bound`.
        bound: bool,
        /// It has a `deletionTimestamp` (KCM's pvc-protection may hold it a
        /// while longer).
        deleting: bool,
    },
}

/// The owner pod, as far as the claim is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// No such pod. Once our claim exists, the owner is the pod whose uid the
    /// claim's ownerReference names; a pod of the same name with another uid is
    /// not it, and a reference the garbage collector removed means it is gone.
    Gone,
    /// It exists and may still run.
    Active,
    /// Succeeded, Failed, or being deleted: it will never run again.
    Finished,
}

/// How the pods of the namespace use the claim (by
/// `volumes[].persistentVolumeClaim.claimName`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Users {
    /// Some pod referencing the claim is Running.
    pub running: bool,
    /// Some pod referencing the claim is neither Succeeded nor Failed nor
    /// being deleted: it may still run and use it.
    pub active: bool,
}

/// Why a claim is let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// It was used, and no pod that may still run references it.
    NoLongerUsed,
    /// The owner pod succeeded, failed or is being deleted.
    OwnerFinished,
    /// The owner pod no longer exists.
    OwnerGone,
    /// The EphemeralClaim itself is being deleted.
    EphemeralClaimDeleted,
    /// The claim was deleted by someone else (a user, or the garbage
    /// collector) while nothing here called for it.
    ClaimDeleted,
}

impl Release {
    /// The CamelCase `status.reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Release::NoLongerUsed => ClaimReason::NoLongerUsed,
            Release::OwnerFinished => ClaimReason::OwnerFinished,
            Release::OwnerGone => ClaimReason::OwnerGone,
            Release::EphemeralClaimDeleted => ClaimReason::EphemeralClaimDeleted,
            Release::ClaimDeleted => ClaimReason::ClaimDeleted,
        }
        .as_str()
    }

    /// A sentence on why, for `status.message` and Events.
    pub fn explain(self) -> &'static str {
        match self {
            Release::NoLongerUsed => {
                "the claim was used, and no pod that may still run references it"
            }
            Release::OwnerFinished => "the owner pod has finished",
            Release::OwnerGone => "the owner pod no longer exists",
            Release::EphemeralClaimDeleted => "the EphemeralClaim is being deleted",
            Release::ClaimDeleted => "the claim was deleted by someone else",
        }
    }
}

/// The one thing to do next. Each step is idempotent: taken twice, or after a
/// crash, it leaves the same state as taken once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Put our finalizer on before anything is made. If the process dies right
    /// after, nothing exists yet that could be orphaned.
    AddFinalizer,
    /// The owner pod does not exist (yet): `Pending`, reason
    /// `WaitingForOwner`. Its uid goes into the claim, so it must exist first.
    WaitForOwner,
    /// The owner pod finished before the claim was made, and will never run
    /// again: `Failed`, reason `OwnerFinished`. Nothing was made.
    FailOwnerFinished,
    /// A claim of that name is not ours: `Failed`, reason `ClaimConflict`. That
    /// claim is never touched.
    FailConflict,
    /// Re-check the requester's rights, then make the claim from the template,
    /// and record `ClaimCreated`. If the process dies between the two, the next
    /// reconcile finds the claim ours and records it ([`Step::RecordCreated`]).
    CreateClaim,
    /// Our claim exists but the status does not say so yet: record it.
    RecordCreated,
    /// Our claim is not bound yet: `Pending`, reason `WaitingForBinding`. (A
    /// claim that loses its volume later is not sent back to `Pending`.)
    WaitForBinding,
    /// Our claim is bound: `Bound`, with its volume.
    RecordBound,
    /// A pod referencing the claim is Running for the first time: `InUse`, with
    /// `firstUsedTime`.
    RecordFirstUse,
    /// Released under `Retain`: `Released`. The claim stays until the
    /// EphemeralClaim is deleted.
    Retain(Release),
    /// Released under `Delete`, our claim gone, or the EphemeralClaim deleted:
    /// record `Deleting`. The deletion itself is the next step
    /// ([`Step::DeleteClaim`]), so that a crash in between cannot lose it.
    RecordDeleting(Release),
    /// `Deleting` (or `Deleted`, as an older server recorded it before the
    /// deletion) is recorded and our claim still exists: delete it, on the
    /// condition that it is still the one with our uid.
    DeleteClaim,
    /// Our claim is being deleted and something holds it (kube's
    /// pvc-protection, while a scheduled pod names it): say what.
    WaitForClaimGone,
    /// Our claim is gone: record `Deleted`.
    RecordDeleted,
    /// Nothing of ours is left to protect: drop the finalizer.
    RemoveFinalizer,
    /// Nothing to do until something changes (a pod starts or ends, the claim
    /// binds, the EphemeralClaim is deleted).
    Idle,
}

/// Whether the step for a claim in `phase` whose claim is `claim` reads the
/// namespace's pods (its owner, users and holders); `deleting`: the
/// EphemeralClaim itself is being deleted. A finished claim's step does
/// not, nor does a Deleting one's, except to say which pods hold a claim
/// that is being deleted while the EphemeralClaim waits for it: so a claim
/// whose release is decided is deleted, and its finalizer let go, without
/// waiting for a LIST of every pod in its namespace.
pub fn reads_pods(phase: Phase, claim: ClaimState, deleting: bool) -> bool {
    match phase {
        Phase::Deleting => !deleting && matches!(claim, ClaimState::Ours { deleting: true, .. }),
        phase => !phase.is_finished(),
    }
}

/// The step `facts` call for.
pub fn next_step(facts: &Facts) -> Step {
    let finalizer_or_idle = if facts.has_finalizer {
        Step::RemoveFinalizer
    } else {
        Step::Idle
    };
    match facts.phase {
        // Nothing was made, or the conflicting claim is someone else's.
        Phase::Failed => return finalizer_or_idle,
        Phase::Deleted => {
            return match facts.claim {
                ClaimState::Ours {
                    deleting: false, ..
                } => Step::DeleteClaim,
                _ => finalizer_or_idle,
            }
        }
        Phase::Deleting => {
            return match facts.claim {
                ClaimState::Ours {
                    deleting: false, ..
                } => Step::DeleteClaim,
                // The EphemeralClaim itself is going: its claim is on its
                // way out and orphans nothing, so it need not wait for it.
                ClaimState::Ours { deleting: true, .. } if facts.deleting => finalizer_or_idle,
                ClaimState::Ours { deleting: true, .. } => Step::WaitForClaimGone,
                ClaimState::Absent | ClaimState::Foreign => Step::RecordDeleted,
            };
        }
        _ => {}
    }
    let ours = matches!(facts.claim, ClaimState::Ours { .. });
    let made = facts.claim_created || ours;
    if facts.deleting {
        return if made {
            Step::RecordDeleting(Release::EphemeralClaimDeleted)
        } else {
            finalizer_or_idle
        };
    }
    if facts.phase == Phase::Released {
        // Retained until the EphemeralClaim is deleted; the finalizer stays.
        return Step::Idle;
    }
    if !facts.has_finalizer {
        return Step::AddFinalizer;
    }
    match facts.claim {
        ClaimState::Absent | ClaimState::Foreign if made => {
            // Ours is gone: never make it again (a pod may have written to it).
            Step::RecordDeleting(release(facts).unwrap_or(Release::ClaimDeleted))
        }
        ClaimState::Foreign => Step::FailConflict,
        ClaimState::Absent => match facts.owner {
            OwnerState::Gone => Step::WaitForOwner,
            OwnerState::Finished => Step::FailOwnerFinished,
            OwnerState::Active => Step::CreateClaim,
        },
        ClaimState::Ours { deleting: true, .. } => {
            Step::RecordDeleting(release(facts).unwrap_or(Release::ClaimDeleted))
        }
        ClaimState::Ours { bound, .. } => {
            if !facts.claim_created {
                Step::RecordCreated
            } else if bound && facts.phase == Phase::Pending {
                Step::RecordBound
            } else if facts.users.running && !facts.first_used {
                Step::RecordFirstUse
            } else if let Some(why) = release(facts) {
                match facts.release_policy {
                    ReleasePolicy::Retain => Step::Retain(why),
                    ReleasePolicy::Delete => Step::RecordDeleting(why),
                }
            } else if !bound && facts.phase == Phase::Pending {
                Step::WaitForBinding
            } else {
                Step::Idle
            }
        }
    }
}

/// Whether, and why, the claim is released: used and no longer wanted, or its
/// owner is done. Never before use while the owner may still run.
pub fn release(facts: &Facts) -> Option<Release> {
    match facts.owner {
        OwnerState::Gone => Some(Release::OwnerGone),
        OwnerState::Finished => Some(Release::OwnerFinished),
        OwnerState::Active if facts.first_used && !facts.users.active => {
            Some(Release::NoLongerUsed)
        }
        OwnerState::Active => None,
    }
}

/// What the claim's ownerReferences say, given the EphemeralClaim's uid.
pub fn claim_state(claim: Option<&PersistentVolumeClaim>, our_uid: &str) -> ClaimState {
    let Some(claim) = claim else {
        return ClaimState::Absent;
    };
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && !our_uid.is_empty() && r.uid == our_uid);
    if !controlled {
        return ClaimState::Foreign;
    }
    ClaimState::Ours {
        bound: claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"),
        deleting: claim.metadata.deletion_timestamp.is_some(),
    }
}

/// The uid of the owner pod `owner` that our claim names, if it still does.
pub fn recorded_owner_uid<'a>(claim: &'a PersistentVolumeClaim, owner: &str) -> Option<&'a str> {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.api_version == "v1" && r.kind == "Pod" && r.name == owner)
        .map(|r| r.uid.as_str())
}

/// The owner pod's state. `recorded` is `None` before our claim exists (any
/// pod of that name is the owner), and `Some(uid)` after (only that pod is,
/// and `Some(None)` means the reference was removed: the owner is gone).
pub fn owner_state(pods: &[Pod], name: &str, recorded: Option<Option<&str>>) -> OwnerState {
    let wanted_uid = match recorded {
        Some(None) => return OwnerState::Gone,
        Some(Some(uid)) => Some(uid),
        None => None,
    };
    let Some(pod) = pods.iter().find(|p| {
        p.metadata.name.as_deref() == Some(name)
            && wanted_uid.is_none_or(|uid| p.metadata.uid.as_deref() == Some(uid))
    }) else {
        return OwnerState::Gone;
    };
    if pod.metadata.deletion_timestamp.is_some() || is_terminal(pod) {
        OwnerState::Finished
    } else {
        OwnerState::Active
    }
}

/// How the pods use claim `claim`, and the names of those Running.
/// The pods that keep `claim` from going once it is deleted: kube's
/// pvc-protection holds a claim while any scheduled pod names it, whatever
/// its phase.
pub fn holders(pods: &[Pod], claim: &str) -> Vec<String> {
    pods.iter()
        .filter(|p| references(p, claim))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| !n.is_empty())
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

pub fn users(pods: &[Pod], claim: &str) -> (Users, Vec<String>) {
    let mut users = Users::default();
    let mut running = Vec::new();
    for pod in pods.iter().filter(|p| references(p, claim)) {
        if pod_phase(pod) == "Running" {
            users.running = true;
            running.push(pod.metadata.name.clone().unwrap_or_default());
        }
        if !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none() {
            users.active = true;
        }
    }
    (users, running)
}

/// Whether `pod` names `claim` in a `persistentVolumeClaim` volume.
pub fn references(pod: &Pod, claim: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == claim)
        })
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}
