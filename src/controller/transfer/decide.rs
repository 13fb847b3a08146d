//! The rebind protocol (DESIGN §2.1.5) as one pure function: given every
//! fact a reconcile read ([`Facts`]), [`decide`] names the one thing to do
//! next ([`Action`]). No I/O, no clock, no memory between calls: the
//! controller gathers the facts, the executor performs the action with its
//! precondition, and the next reconcile decides again from what is then
//! true. A crash between any two writes therefore loses nothing, and a
//! model checker can run this very function against a model of the cluster
//! (`model/`).
//!
//! What it holds to:
//! - **The commit is a fact on the volume.** R4 happened exactly when the
//!   volume's `claimRef` names the destination claim and uid recorded after
//!   R3. After it, the protocol only goes forward, whatever any status says
//!   and whether or not the destination claim still exists.
//! - **Status is memory, never authority.** What the source object recorded
//!   (the uid it records for its peer, the source snapshot, the destination's uid) is checked
//!   against the live objects before anything is done with it; roles come
//!   from the spec.
//! - **Ownership is proven, not claimed.** A destination claim is ours when
//!   its uid is the one recorded; before that (a crash right after R3), only
//!   when it is exactly the claim R3 makes. A lock annotation alone proves
//!   nothing: a tenant can write it.
//! - **`Delete` is never restored on a volume that is not Bound to a live
//!   claim it names**, so a rollback can never hand a volume to the
//!   provisioner for deletion.
//! - **The volume is fenced first.** A rollback's first write is to the
//!   volume, conditional on its resourceVersion, so that a stale leader's R4
//!   decided on the old volume fails.
//! - **The destination claim cannot vanish under a decision.** R3 makes it
//!   with the transfer-protection finalizer, and the finalizer comes off only
//!   once the transfer has Completed, or once the volume is under Retain
//!   again. A claim deleted between the decision to restore `Delete` and the
//!   write therefore still exists; the next decision sees it deleting, puts
//!   the volume back under Retain, and only then lets the claim go. (The
//!   model check found this race.)
//!
//! Where each part is: this module holds the entry ([`decide`]), the
//! actions, and the steps before the commit (the preconditions, R1 to R4);
//! `clone` holds Clone mode's C1 and C2 and which claim is moved; `finish`
//! holds what comes after the commit (R5, R6, a lost destination), the
//! tidying of a finished pair and the rollback; `made` holds the objects
//! the protocol makes (R1's snapshot, R3's claim) and how it knows them
//! again.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::facts::{Admission, ClassPolicy, Facts, Peer};
pub use super::facts::{Refusal, Refused, Side};
use super::matching::{holds_claim, is_named};
use super::Step;
use crate::api::namespace_transfer::REASON_LOCKED;
use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransfer, NamespaceTransferPhase as Phase, Role, SourceClaimSnapshot,
    TransferMode, FINALIZER_TRANSFER_PROTECTION, REASON_CLONE_FAILED, REASON_DEADLINE_EXCEEDED,
    REASON_DESTINATION_EXISTS, REASON_FORBIDDEN,
};
use crate::api::GROUP;

mod adopt;
mod clone;
mod finish;
mod made;
pub mod snapshot;

pub use adopt::{adopted_misfit, candidate, charged, misfit, misfits};
use clone::{before_clone_bound, is_our_clone};
pub use clone::{clone_claim, moved_claim_name, moved_claim_name_of, restore_shape, RestoreBasis};
use finish::{forward, roll_back, tidy};
pub use made::{destination_claim, made_as, snapshot_of};

// The reasons this module decides on, from the one vocabulary kubectl
// transfer reads too.
pub use crate::api::namespace_transfer::{
    REASON_CLAIM_MISMATCH, REASON_CLONE_NEEDS_CONSUMER, REASON_CLONING, REASON_COMPLETED,
    REASON_DELETED, REASON_DESTINATION_LOST, REASON_DESTINATION_REFUSED, REASON_MODE_NOT_SUPPORTED,
    REASON_SOURCE_IN_USE, REASON_SOURCE_LOCKED, REASON_SOURCE_NOT_BOUND, REASON_SOURCE_NOT_FOUND,
    REASON_SOURCE_RELEASE_REFUSED, REASON_STORAGE_CLASS_NOT_ALLOWED, REASON_VOLUME_CHANGED,
    REASON_WAITING_FOR_BINDING, REASON_WAITING_FOR_CAPACITY, REASON_WAITING_FOR_CLAIM,
    REASON_WAITING_FOR_PEER,
};

/// How often a waiting pair looks again even without a triggering event.
pub const WAIT_POLL: Duration = Duration::from_secs(5);

/// How long a pair whose R5 delete kube-apiserver refused waits before it
/// tries again (the volume is the destination's already).
pub const RELEASE_RETRY: Duration = Duration::from_secs(30);

/// What each side is told: a reason from a fixed vocabulary, the whole story
/// for the side that gives the volume away, and for the receiving side only
/// what it may know (never the source's pods, requester or volume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub reason: &'static str,
    pub source: String,
    pub destination: String,
}

impl Report {
    /// `source` in full for the source side; the reason's fixed sentence for
    /// the destination.
    pub fn new(reason: &'static str, source: impl Into<String>) -> Self {
        Self {
            reason,
            source: source.into(),
            destination: destination_text(reason).to_owned(),
        }
    }

    /// The same words for both sides: the facts are the destination's own.
    pub fn shared(reason: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            reason,
            source: message.clone(),
            destination: message,
        }
    }
}

/// The one next thing to do. Every write carries what it was decided on
/// (a resourceVersion or uid), so that it fails if the world moved.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing to do now; look again after `after`, if given.
    Nothing { after: Option<Duration> },
    /// Say on both sides why the pair waits, and look again after `after`;
    /// without it, only an event (the peer's arrival, the object's change)
    /// has anything new to show. `in_use` also marks `SourceReleased=False`.
    Wait {
        phase: Phase,
        report: Report,
        in_use: bool,
        after: Option<Duration>,
    },
    /// Record the match on both objects, each naming the other by the uid it
    /// records for it (derived from the other's, which it may not learn).
    RecordMatch,
    /// Record the end before the commit: Failed or Cancelled, on both. The
    /// rollback is decided afterwards, from the recorded phase.
    Finish { phase: Phase, report: Report },
    /// Not a write: a fact the decision needs before it can say what to
    /// do. The controller answers it and decides again.
    Ask(Question),
    /// Put the transfer-protection finalizer on both objects.
    Protect,
    /// C1 (Clone mode): create the clone of the source claim beside it, born
    /// with our lock.
    CreateClone(Box<PersistentVolumeClaim>),
    /// Clone mode, rolling back: delete the clone we made, by its uid (its
    /// volume goes with it: it is ours).
    DeleteClone { name: String, uid: String },
    /// R1: put our lock on the source claim, at the version decided on.
    Lock { resource_version: String },
    /// R1's memory: the source snapshot, on the source object.
    RecordSource(SourceClaimSnapshot),
    /// R2: mark the volume as ours, record its reclaim policy, set Retain.
    Retain {
        resource_version: String,
        policy: String,
    },
    /// R3: create the destination claim.
    CreateDestination(Box<PersistentVolumeClaim>),
    /// R3's memory: the destination claim's uid, on the source object.
    RecordDestination(ClaimReference),
    /// R3 for a populating request: the claim of its namespace that names
    /// it and fits the volume becomes the destination, recorded by uid on
    /// both objects (DESIGN §2.3). Nothing is created.
    Adopt(ClaimReference),
    /// R4, the commit: point the volume's `claimRef` at the destination.
    Commit {
        resource_version: String,
        destination: ClaimReference,
    },
    /// Before R4: put the transfer-protection finalizer on the destination
    /// claim (one adopted after a crash may lack it), at the version seen;
    /// a claim a populating request adopted is also pinned to the volume
    /// (`volume_name`).
    ProtectDestination {
        resource_version: String,
        finalizers: Vec<String>,
        volume_name: Option<String>,
    },
    /// Take the transfer-protection finalizer off the destination claim, at
    /// the version seen: the transfer is done with it.
    UnprotectDestination {
        resource_version: String,
        finalizers: Vec<String>,
    },
    /// After R4 the destination claim is being deleted before the transfer
    /// completed: put the volume back under Retain (marked as ours, naming
    /// the lost claim) before letting the claim go.
    Rehold { resource_version: String },
    /// After R4: take our lock off the destination claim, which also makes
    /// the cluster's PV controller look at it again.
    UnlockDestination,
    /// R5: delete the source claim, if it is still the one locked.
    ReleaseSource { uid: String },
    /// R6: the destination is Bound; restore the reclaim policy and remove
    /// our marks from the volume.
    Settle {
        resource_version: String,
        policy: String,
    },
    /// R6: record Completed on both.
    Complete,
    /// After R4 the destination claim is gone: say so, keep the volume.
    DestinationLost { report: Report },
    /// Rollback, first: remove our marks from the volume, restoring the
    /// reclaim policy only if that is safe (`restore`).
    Unmark {
        resource_version: String,
        restore: Option<String>,
    },
    /// Rollback: delete the destination claim we made, by its uid.
    DeleteDestination { uid: String },
    /// Rollback: take our lock off the source claim.
    Unlock { resource_version: String },
    /// Make the peer show the source side's outcome.
    Mirror,
    /// Take the transfer-protection finalizer off both objects (the
    /// protocol's "release" is R5's, of the source claim).
    DropFinalizers,
    /// Delete the finished source object once its TTL has passed.
    Expire,
    /// A step of moving a VolumeSnapshot (DESIGN §2.1.7).
    Snapshot(snapshot::SnapshotAction),
}

/// A fact the decision asks for ([`Action::Ask`]), gathered only when a
/// step needs it, right before the write it guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Question {
    /// The pods that use the claim the protocol moves (a live LIST).
    Users,
    /// The same pods, for a report only (R5, after the commit): read from
    /// kube-apiserver's cache, with no wait and no write.
    ReportedUsers,
    /// Both parties' rights, re-checked with uncached SubjectAccessReviews.
    Rights,
    /// Whether kube-apiserver would admit the R3 create and the R5 delete
    /// (`dryRun=All`).
    Admission,
    /// The claims and the volume read live: the decision was made on watch
    /// copies, and its step rests on something no precondition fences.
    LiveReads,
}

impl Question {
    /// Every question, in no order.
    pub const ALL: [Question; 5] = [
        Question::Users,
        Question::ReportedUsers,
        Question::Rights,
        Question::Admission,
        Question::LiveReads,
    ];
}

/// The next step for the pair that `f.source` drives.
///
/// A write this reconcile had refused ([`Facts::refused`]) is decided on
/// first; an action that must rest on live reads asks for them
/// ([`Question::LiveReads`]) when the facts are watch copies.
pub fn decide(f: &Facts) -> Action {
    if let Some(refused) = &f.refused {
        if f.snapshot.is_some() {
            return snapshot::after_refusal(f, refused);
        }
        return after_refusal(f, refused);
    }
    let action = protocol(f);
    if !f.live && needs_live_facts(&action) {
        return Action::Ask(Question::LiveReads);
    }
    action
}

/// Whether `action` must be decided on live reads of the claims and the
/// volume rather than the watch copies: the steps that end a transfer or
/// give the volume back its policy rest on a claim's presence, absence or
/// state, which no precondition of theirs fences (the others are writes
/// conditional on the resourceVersion or uid they were decided on, so a
/// stale copy costs a refused write, never a wrong step). Letting go of the
/// finalizers ends a finished pair: it rests on every claim of the pair
/// being as the rollback left it (a clone a watch copy does not show yet
/// would be left behind; the model check found this). C1 rests on the
/// count of a standing offer's clones alive, which no precondition fences
/// either: a watch copy that does not show another pair's clone yet would
/// make one clone more than `maxClones` (the two-pair model check found
/// this). An adoption (R3 of a populating request) rests on the claim's
/// fit, which a watch copy may not show changed (bound elsewhere, gone).
pub fn needs_live_facts(action: &Action) -> bool {
    matches!(
        action,
        Action::CreateClone(_)
            | Action::Adopt(_)
            | Action::Finish { .. }
            | Action::Settle { .. }
            | Action::Complete
            | Action::DestinationLost { .. }
            | Action::Unmark { .. }
            | Action::DropFinalizers
    )
}

/// What a refused create or delete means. Nothing was made, so nothing is
/// to undo: a refused clone (C1) or destination claim (R3) fails the pair;
/// a refused release of the source claim (R5) comes after the commit, so
/// the pair waits, saying why, and tries again.
fn after_refusal(f: &Facts, refused: &Refused) -> Action {
    let s = &f.source;
    let source_ns = s.source_namespace();
    let message = &refused.message;
    match refused.step {
        Step::Clone => {
            let name = moved_claim_name_of(s, &f.peer).unwrap_or_default();
            let origin = &s.spec.source.name;
            finish_failed(Report::new(
                REASON_CLONE_FAILED,
                format!(
                    "creating the clone {source_ns}/{name} of {source_ns}/{origin} was refused: {message}"
                ),
            ))
        }
        Step::ReleaseSource => {
            let name = recorded_source(s).map_or(s.spec.source.name.as_str(), |snap| &snap.name);
            Action::Wait {
                phase: Phase::Rebinding,
                report: Report::new(
                    REASON_SOURCE_RELEASE_REFUSED,
                    format!(
                        "the volume was handed over, but deleting PersistentVolumeClaim {source_ns}/{name} is refused: {message}"
                    ),
                ),
                in_use: false,
                after: Some(RELEASE_RETRY),
            }
        }
        // R3 (and any other step: only creates and deletes are refused).
        _ => {
            let (dest_ns, dest_name) = peer_or_self(f).map_or(("", ""), |d| destination_of(s, d));
            finish_failed(Report::shared(
                REASON_DESTINATION_REFUSED,
                format!(
                    "creating PersistentVolumeClaim {dest_ns}/{dest_name} was refused: {message}"
                ),
            ))
        }
    }
}

/// The protocol itself, on the facts as gathered.
fn protocol(f: &Facts) -> Action {
    if let Some(snapshots) = &f.snapshot {
        return snapshot::protocol(f, snapshots);
    }
    let s = &f.source;
    let status = s.status.as_ref();
    let phase = status.and_then(|st| st.phase);
    if phase == Some(Phase::Completed) {
        return tidy(f);
    }
    // The commit is a fact on the volume, whatever the phase says.
    if let (Some(dest), Some(volume)) = (recorded_destination(s), &f.volume) {
        if volume.names(&dest.namespace, &dest.name, &dest.uid) {
            return forward(f, dest, volume);
        }
    }
    if phase.is_some_and(Phase::is_finished) {
        return roll_back(f);
    }
    active(f)
}

// ----- before the commit ---------------------------------------------------------

fn active(f: &Facts) -> Action {
    let d = match paired(f) {
        Pairing::Ready(d) => d,
        Pairing::Act(action) => return action,
    };
    let s = &f.source;
    match recorded_source(s) {
        None => {
            if s.mode() == TransferMode::Clone {
                if let Some(action) = before_clone_bound(f, d) {
                    return action;
                }
            }
            before_lock(f, d)
        }
        Some(snapshot) => after_lock(f, d, snapshot),
    }
}

/// What [`paired`] found: the peer to go on with, or what to do instead.
enum Pairing<'a> {
    Ready(&'a NamespaceTransfer),
    Act(Action),
}

/// Before the commit, what any pair checks first, whatever it moves: its
/// peer (found, gone, or not yet matched), either side's deletion, the
/// deadlines, equal modes, and the match recorded on both. The peer, or
/// the action those checks call for.
fn paired(f: &Facts) -> Pairing<'_> {
    let s = &f.source;
    let d = match &f.peer {
        Peer::Itself => s,
        Peer::Found(d) => d.as_ref(),
        Peer::Gone => {
            return Pairing::Act(cancel(
                "the matched transfer in the destination namespace was deleted",
            ))
        }
        Peer::Unmatched => {
            let recorded_peer = s.status.as_ref().and_then(|st| st.peer.as_ref()).is_some();
            let locked = recorded_source(s).is_some() || snapshot::recorded_source(s).is_some();
            if recorded_peer || locked {
                return Pairing::Act(cancel(
                    "the matched transfer in the destination namespace was deleted",
                ));
            }
            if deadline_passed(s, f.now) {
                return Pairing::Act(finish_failed(Report::shared(
                    REASON_DEADLINE_EXCEEDED,
                    "activeDeadlineSeconds passed before the transfer was matched",
                )));
            }
            let what = if s.source_is_snapshot() {
                "VolumeSnapshot"
            } else {
                "claim"
            };
            return Pairing::Act(Action::Wait {
                phase: Phase::WaitingForPeer,
                report: Report::shared(
                    REASON_WAITING_FOR_PEER,
                    format!(
                        "waiting for a NamespaceTransfer in namespace {:?} that requests {what} {:?}",
                        s.destination_namespace(),
                        s.spec.source.name
                    ),
                ),
                in_use: false,
                // Its peer's arrival is an event on our own objects; only
                // a deadline needs a timer.
                after: remaining(s, f.now),
            });
        }
    };
    for t in [s, d] {
        if t.metadata.deletion_timestamp.is_some() {
            return Pairing::Act(cancel(&format!(
                "NamespaceTransfer {}/{} was deleted before the volume was handed over",
                t.own_namespace(),
                name_of(t)
            )));
        }
    }
    if deadline_passed(s, f.now) || deadline_passed(d, f.now) {
        return Pairing::Act(finish_failed(Report::shared(
            REASON_DEADLINE_EXCEEDED,
            "activeDeadlineSeconds passed before the volume could be moved",
        )));
    }
    if s.mode() != d.mode() {
        // Matching pairs equal modes; a rename has one.
        return Pairing::Act(finish_failed(Report::shared(
            REASON_MODE_NOT_SUPPORTED,
            format!(
                "the two sides ask for different modes ({} and {})",
                s.mode(),
                d.mode()
            ),
        )));
    }
    if !match_recorded(s, d) {
        return Pairing::Act(Action::RecordMatch);
    }
    Pairing::Ready(d)
}

/// The peer object of the facts, if there is one to write to.
pub fn peer_or_self(f: &Facts) -> Option<&NamespaceTransfer> {
    match &f.peer {
        Peer::Itself => Some(&f.source),
        Peer::Found(d) => Some(d.as_ref()),
        Peer::Gone | Peer::Unmatched => None,
    }
}

/// Before R1 nothing has been touched: check every precondition, then lock.
fn before_lock(f: &Facts, d: &NamespaceTransfer) -> Action {
    let s = &f.source;
    let moved = moved_claim_name(s, d);
    let (source_ns, source_name) = (s.source_namespace(), moved.as_str());
    let Some(claim) = &f.moved_claim else {
        return finish_failed(Report::new(
            REASON_SOURCE_NOT_FOUND,
            format!("PersistentVolumeClaim {source_ns}/{source_name} does not exist"),
        ));
    };
    let volume = f.volume.as_ref().filter(|v| {
        claim.phase == "Bound"
            && claim.volume_name.as_deref() == Some(v.name.as_str())
            && v.names(source_ns, &claim.name, &claim.uid)
    });
    let Some(volume) = volume else {
        return wait(
            Phase::WaitingForRelease,
            Report::new(
                REASON_SOURCE_NOT_BOUND,
                format!(
                    "PersistentVolumeClaim {source_ns}/{source_name} is not bound to a volume yet"
                ),
            ),
            false,
        );
    };
    if let ClassPolicy::Refused(why) = &f.class {
        return finish_failed(Report::new(REASON_STORAGE_CLASS_NOT_ALLOWED, why.clone()));
    }
    let mine = uid_of(s);
    if claim.lock.as_deref().is_some_and(|l| l != mine) && f.lock_holder_active {
        return wait(
            Phase::WaitingForRelease,
            Report::new(
                REASON_SOURCE_LOCKED,
                format!(
                    "PersistentVolumeClaim {source_ns}/{source_name} is locked by another transfer ({})",
                    claim.lock.as_deref().unwrap_or_default()
                ),
            ),
            false,
        );
    }
    if volume.marker.as_deref().is_some_and(|m| m != mine) {
        return wait(
            Phase::WaitingForRelease,
            Report::new(
                REASON_SOURCE_LOCKED,
                format!(
                    "PersistentVolume {} is marked by another transfer ({})",
                    volume.name,
                    volume.marker.as_deref().unwrap_or_default()
                ),
            ),
            false,
        );
    }
    let (dest_ns, dest_name) = destination_of(s, d);
    if f.destination_claim.is_some() {
        return finish_failed(Report::shared(
            REASON_DESTINATION_EXISTS,
            format!(
                "PersistentVolumeClaim {dest_ns}/{dest_name} already exists and was not created by this transfer"
            ),
        ));
    }
    if d.populates() && candidate(f, volume).is_none() {
        // Locked for a claim that went: not kept locked for one that may
        // never come.
        if claim.lock.as_deref() == Some(mine) {
            return finish_failed(claim_went(d));
        }
        // Nothing is touched until a claim asks for the volume and fits it.
        return wait_for_claim(f, d, volume);
    }
    // The finalizers first: they touch nothing of the tenants', so they
    // need no check of the claim's users (the lock's own check follows).
    // The match's own writes put them on; this is for a pair matched
    // before they did.
    if !has_finalizer(s) || !has_finalizer(d) {
        return Action::Protect;
    }
    if claim.lock.as_deref() != Some(mine) {
        // Nobody may use the claim when it is locked; R2 and R4 ask again.
        if let Some(action) = while_in_use(f, |users| in_use_message(source_ns, source_name, users))
        {
            return action;
        }
        return Action::Lock {
            resource_version: claim.resource_version.clone(),
        };
    }
    Action::RecordSource(snapshot_of(claim, volume))
}

/// After R1: R2, R3 and R4, each once, each after its own checks.
fn after_lock(f: &Facts, d: &NamespaceTransfer, snapshot: &SourceClaimSnapshot) -> Action {
    let s = &f.source;
    let source_ns = s.source_namespace();
    let mine = uid_of(s);
    let moved = moved_claim_name(s, d);
    if snapshot.name != moved {
        return finish_failed(Report::new(
            REASON_VOLUME_CHANGED,
            format!(
                "status.sourceClaim names claim {:?}, not {moved:?}; refusing to act on it",
                snapshot.name
            ),
        ));
    }
    let Some(volume) = f.volume.as_ref().filter(|v| v.name == snapshot.volume_name) else {
        return finish_failed(Report::new(
            REASON_VOLUME_CHANGED,
            format!(
                "PersistentVolume {} was deleted during the transfer",
                snapshot.volume_name
            ),
        ));
    };
    if !volume.names(source_ns, &snapshot.name, &snapshot.uid) {
        return finish_failed(Report::new(
            REASON_VOLUME_CHANGED,
            format!(
                "PersistentVolume {} is no longer bound to {source_ns}/{}; someone else changed it",
                volume.name, snapshot.name
            ),
        ));
    }
    if let Some(claim) = &f.moved_claim {
        if claim.uid != snapshot.uid {
            return finish_failed(Report::new(
                REASON_VOLUME_CHANGED,
                format!(
                    "PersistentVolumeClaim {source_ns}/{} was replaced by another claim of that name",
                    snapshot.name
                ),
            ));
        }
        if claim.lock.as_deref() != Some(mine) && !claim.deleting {
            // Someone took our lock off; put it back before going on.
            return Action::Lock {
                resource_version: claim.resource_version.clone(),
            };
        }
    }

    // R2: only once both parties' rights and the API's admission say yes.
    if volume.marker.as_deref() != Some(mine) {
        if volume.marker.is_some() {
            return finish_failed(Report::new(
                REASON_VOLUME_CHANGED,
                format!(
                    "PersistentVolume {} is marked by another transfer ({})",
                    volume.name,
                    volume.marker.as_deref().unwrap_or_default()
                ),
            ));
        }
        if let Some(action) =
            while_in_use(f, |users| in_use_message(source_ns, &snapshot.name, users))
        {
            return action;
        }
        if let Some(action) = rights_and_admission(f, true) {
            return action;
        }
        return Action::Retain {
            resource_version: volume.resource_version.clone(),
            policy: volume.reclaim_policy.clone(),
        };
    }

    // R3: the destination claim, made by us or exactly as we make it.
    let (dest_ns, dest_name) = destination_of(s, d);
    let expected = destination_claim(s, dest_ns, dest_name, snapshot, volume);
    let destination = match recorded_destination(s) {
        Some(recorded) => match &f.destination_claim {
            Some(c) if c.uid == recorded.uid && !c.deleting => {
                // An adopted claim is the tenant's: it must still fit (once
                // held, it names our volume: that is ours, and fits).
                if let Some(why) = d.populates().then(|| adopted_misfit(f, c, volume)).flatten() {
                    // What is wrong with the claim is the destination's to read.
                    return finish_failed(Report {
                        reason: REASON_CLAIM_MISMATCH,
                        source: destination_text(REASON_CLAIM_MISMATCH).to_owned(),
                        destination: format!(
                            "PersistentVolumeClaim {dest_ns}/{} can no longer receive the volume: {why}",
                            recorded.name
                        ),
                    });
                }
                recorded
            }
            _ => {
                let gone = format!(
                    "PersistentVolumeClaim {dest_ns}/{dest_name} was deleted before the volume was handed over"
                );
                // A claim the tenant wrote is the destination's to name.
                let report = if d.populates() {
                    Report {
                        reason: REASON_VOLUME_CHANGED,
                        source: destination_text(REASON_CLAIM_MISMATCH).to_owned(),
                        destination: gone,
                    }
                } else {
                    Report::shared(REASON_VOLUME_CHANGED, gone)
                };
                return finish_failed(report);
            }
        },
        None if d.populates() => {
            return match candidate(f, volume) {
                Some(c) => Action::Adopt(ClaimReference {
                    namespace: dest_ns.to_owned(),
                    name: c.name.clone(),
                    uid: c.uid.clone(),
                }),
                // The claim that was there at R1 went: the source is not
                // kept locked for a claim that may never come.
                None => finish_failed(claim_went(d)),
            };
        }
        None => {
            return match &f.destination_claim {
                None => Action::CreateDestination(Box::new(expected)),
                Some(c)
                    if !c.deleting
                        && c.lock.as_deref().is_some_and(|l| holds_claim(s, l, dest_ns, dest_name))
                        && made_as(c, &expected) =>
                {
                    Action::RecordDestination(ClaimReference {
                        namespace: dest_ns.to_owned(),
                        name: dest_name.to_owned(),
                        uid: c.uid.clone(),
                    })
                }
                Some(_) => finish_failed(Report::shared(
                    REASON_DESTINATION_EXISTS,
                    format!(
                        "PersistentVolumeClaim {dest_ns}/{dest_name} already exists and was not created by this transfer"
                    ),
                )),
            }
        }
    };

    // An adopted claim is also pinned to the volume (`spec.volumeName`, which
    // kube lets be set once): from then on neither its tenant nor the PV
    // controller can point it at another volume.
    let pin = d.populates().then(|| volume.name.clone());
    if let Some(c) = f.destination_claim.as_ref().filter(|c| {
        !c.protected()
            || pin
                .as_ref()
                .is_some_and(|v| c.volume_name.as_ref() != Some(v))
    }) {
        let mut finalizers = c.finalizers.clone();
        if !c.protected() {
            finalizers.push(FINALIZER_TRANSFER_PROTECTION.to_owned());
        }
        return Action::ProtectDestination {
            resource_version: c.resource_version.clone(),
            finalizers,
            volume_name: pin,
        };
    }

    // R4: a pod may have started using the source since it was checked, and
    // rights may have been revoked since R2.
    if let Some(action) = while_in_use(f, |users| {
        format!(
            "{}; it started after the claim was checked, so the rebind waits before committing",
            in_use_message(source_ns, &snapshot.name, users)
        )
    }) {
        return action;
    }
    if let Some(action) = rights_and_admission(f, false) {
        return action;
    }
    Action::Commit {
        resource_version: volume.resource_version.clone(),
        destination: destination.clone(),
    }
}

/// A populating request with no claim to adopt: it waits, saying what to
/// create, or what is wrong with the claims that name it; they are told
/// too (`plan`), so that none waits in silence.
fn wait_for_claim(f: &Facts, d: &NamespaceTransfer, volume: &super::facts::Volume) -> Action {
    let (ns, name) = (d.own_namespace(), name_of(d));
    let wrong = misfits(f, volume);
    let message = if wrong.is_empty() {
        format!(
            "waiting for a PersistentVolumeClaim in namespace {ns:?} whose spec.dataSourceRef is {{apiGroup: {GROUP}, kind: NamespaceTransfer, name: {name}}}"
        )
    } else {
        // A bounded message, however many claims a tenant writes.
        let mut said: Vec<String> = wrong
            .iter()
            .take(MISFITS_SAID)
            .map(|(c, why)| format!("{}: {why}", c.name))
            .collect();
        if wrong.len() > MISFITS_SAID {
            said.push(format!("{} more", wrong.len() - MISFITS_SAID));
        }
        format!(
            "no claim that names NamespaceTransfer {ns}/{name} can receive the volume ({})",
            said.join("; ")
        )
    };
    // The claims are the destination's: the source side reads only that
    // the pair waits for one.
    Action::Wait {
        phase: Phase::WaitingForPeer,
        report: Report {
            reason: REASON_WAITING_FOR_CLAIM,
            source: SOURCE_WAITS_FOR_CLAIM.to_owned(),
            destination: message,
        },
        in_use: false,
        after: Some(CLAIM_POLL),
    }
}

/// The end of a populating pair whose claim went after the source was
/// locked for it; what went is the destination's to read.
fn claim_went(d: &NamespaceTransfer) -> Report {
    Report {
        reason: REASON_CLAIM_MISMATCH,
        source: destination_text(REASON_CLAIM_MISMATCH).to_owned(),
        destination: format!(
            "no claim that names NamespaceTransfer {}/{} fits the volume any more; the source was locked for one that went",
            d.own_namespace(),
            name_of(d)
        ),
    }
}

/// What the source side of a populating pair reads while it waits for a
/// claim (the destination's claims are not its to read).
pub const SOURCE_WAITS_FOR_CLAIM: &str =
    "matched; the request in the destination namespace waits for a claim of its own to receive the volume";

/// How many of the claims that do not fit a waiting request's message names.
const MISFITS_SAID: usize = 5;

/// How often a populating request with no fitting claim looks again (a new
/// claim wakes it at once), and tells the claims that do not fit why.
pub const CLAIM_POLL: Duration = Duration::from_secs(30);

/// Asks for the source claim's users, or waits while there are any (saying
/// so with `message`); `None` once nobody uses it.
fn while_in_use(f: &Facts, message: impl FnOnce(&[String]) -> String) -> Option<Action> {
    match f.users.as_deref() {
        None => Some(Action::Ask(Question::Users)),
        Some([]) => None,
        Some(users) => Some(wait(
            Phase::WaitingForRelease,
            Report::new(REASON_SOURCE_IN_USE, message(users)),
            true,
        )),
    }
}

/// Asks for, or acts on, the rights re-check (and before R2 the admission
/// dry run); `None` once both allow going on.
fn rights_and_admission(f: &Facts, with_admission: bool) -> Option<Action> {
    match &f.rights {
        None => return Some(Action::Ask(Question::Rights)),
        Some(Err(refusal)) => {
            let report = match refusal.side {
                Side::Source => Report::new(REASON_FORBIDDEN, refusal.message.clone()),
                Side::Destination => Report::shared(REASON_FORBIDDEN, refusal.message.clone()),
            };
            return Some(finish_failed(report));
        }
        Some(Ok(())) => {}
    }
    if !with_admission {
        return None;
    }
    match &f.admission {
        None => Some(Action::Ask(Question::Admission)),
        Some(Admission::Admitted) => None,
        Some(Admission::DestinationRefused(message)) => Some(finish_failed(Report::shared(
            REASON_DESTINATION_REFUSED,
            format!("creating the destination claim would be refused: {message}"),
        ))),
        Some(Admission::SourceReleaseRefused(message)) => Some(finish_failed(Report::new(
            REASON_SOURCE_RELEASE_REFUSED,
            format!("deleting the source claim after the hand-over would be refused: {message}"),
        ))),
    }
}

// ----- facts about our objects -------------------------------------------------------

/// The snapshot of R1, if recorded.
pub fn recorded_source(s: &NamespaceTransfer) -> Option<&SourceClaimSnapshot> {
    s.status.as_ref().and_then(|st| st.source_claim.as_ref())
}

/// The destination claim of R3, if recorded.
pub fn recorded_destination(s: &NamespaceTransfer) -> Option<&ClaimReference> {
    s.status
        .as_ref()
        .and_then(|st| st.destination_claim.as_ref())
}

/// Whether both objects record each other, uid and all.
fn match_recorded(s: &NamespaceTransfer, d: &NamespaceTransfer) -> bool {
    if s.metadata.uid == d.metadata.uid {
        return s.status.as_ref().and_then(|st| st.peer.as_ref()).is_some();
    }
    let named = |t: &NamespaceTransfer, other: &NamespaceTransfer| {
        t.status
            .as_ref()
            .and_then(|st| st.peer.as_ref())
            .is_some_and(|p| is_named(other, p, t) && p.uid.is_some())
    };
    named(s, d) && named(d, s)
}

pub fn has_finalizer(t: &NamespaceTransfer) -> bool {
    t.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER_TRANSFER_PROTECTION)
}

pub fn name_of(t: &NamespaceTransfer) -> &str {
    t.metadata.name.as_deref().unwrap_or_default()
}

pub fn uid_of(t: &NamespaceTransfer) -> &str {
    t.metadata.uid.as_deref().unwrap_or_default()
}

/// The destination claim's namespace and name: the Destination side's
/// (defaulted from the source name at create), or a rename's own. A
/// populating request's is the claim R3 adopted, recorded on `s`; before
/// R3 its name is empty.
pub fn destination_of<'a>(
    s: &'a NamespaceTransfer,
    d: &'a NamespaceTransfer,
) -> (&'a str, &'a str) {
    if s.metadata.uid == d.metadata.uid || s.role().ok() == Some(Role::Both) {
        (s.destination_namespace(), &s.spec.destination.name)
    } else if d.populates() {
        let adopted = recorded_destination(s).filter(|r| r.namespace == d.own_namespace());
        (d.own_namespace(), adopted.map_or("", |r| r.name.as_str()))
    } else {
        (d.own_namespace(), &d.spec.destination.name)
    }
}

/// The time left before `t`'s `activeDeadlineSeconds` runs out at `now`
/// (Unix seconds); `None` without one.
pub(super) fn remaining(t: &NamespaceTransfer, now: i64) -> Option<Duration> {
    let deadline = t.spec.active_deadline_seconds?;
    let created = t.metadata.creation_timestamp.as_ref()?.0.as_second();
    let left = created.saturating_add(deadline) - now;
    Some(Duration::from_secs(left.max(0).unsigned_abs()))
}

fn deadline_passed(t: &NamespaceTransfer, now: i64) -> bool {
    remaining(t, now).is_some_and(|left| left.is_zero())
}

fn cancel(message: &str) -> Action {
    Action::Finish {
        phase: Phase::Cancelled,
        report: Report::shared(REASON_DELETED, format!("{message}; the source is restored")),
    }
}

fn finish_failed(report: Report) -> Action {
    Action::Finish {
        phase: Phase::Failed,
        report,
    }
}

fn wait(phase: Phase, report: Report, in_use: bool) -> Action {
    Action::Wait {
        phase,
        report,
        in_use,
        after: Some(WAIT_POLL),
    }
}

pub fn in_use_message(namespace: &str, claim: &str, pods: &[String]) -> String {
    format!(
        "PersistentVolumeClaim {namespace}/{claim} is in use by pod(s) {}",
        pods.join(", ")
    )
}

/// The sentence the receiving side gets for `reason`: what happened, never
/// the source namespace's pods, requester or volume.
pub fn destination_text(reason: &str) -> &'static str {
    match reason {
        REASON_WAITING_FOR_PEER => "waiting for the transfer in the other namespace",
        REASON_SOURCE_NOT_BOUND => "waiting for the source claim to be bound to a volume",
        REASON_SOURCE_IN_USE => "waiting until no pod in the source namespace uses the claim",
        REASON_SOURCE_LOCKED => "waiting: another transfer holds the source claim",
        REASON_WAITING_FOR_BINDING => "waiting for the new claim to be bound to its volume",
        REASON_FORBIDDEN => "refused: the source side no longer holds a right the transfer needs",
        REASON_DEADLINE_EXCEEDED => "activeDeadlineSeconds passed before the transfer finished",
        REASON_SOURCE_RELEASE_REFUSED => "refused: the source namespace would not let the claim go",
        REASON_STORAGE_CLASS_NOT_ALLOWED => {
            "refused: the volume's StorageClass does not allow transfers"
        }
        REASON_SOURCE_NOT_FOUND => "refused: the source claim does not exist",
        REASON_VOLUME_CHANGED => "refused: the source volume changed during the transfer",
        REASON_DELETED => "cancelled: one side was deleted before the volume was handed over",
        REASON_MODE_NOT_SUPPORTED => "refused: the two sides ask for different modes",
        REASON_CLONING => "waiting for the clone of the source claim to be provisioned",
        REASON_WAITING_FOR_CAPACITY => "waiting: the offer's clones alive reach its maxClones",
        REASON_CLONE_FAILED => "refused: the clone of the source claim could not be made",
        REASON_CLONE_NEEDS_CONSUMER => {
            "refused: the source claim's StorageClass provisions a volume only for a pod that uses it"
        }
        REASON_DESTINATION_LOST => "the new claim was deleted after the volume was handed to it",
        REASON_COMPLETED => "the volume was handed over",
        REASON_WAITING_FOR_CLAIM => "waiting for a claim in this namespace that names the transfer",
        REASON_CLAIM_MISMATCH => "refused: the adopted claim can no longer receive the volume",
        REASON_LOCKED => "the source claim is locked for the transfer; its volume is being handed over",
        _ => "see the transfer in the other namespace",
    }
}

#[cfg(test)]
pub(super) mod tests;
