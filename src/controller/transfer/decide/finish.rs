//! After the commit, only forward (R5, R6, a lost destination), and the
//! end of a pair: tidying a finished one, and the rollback of one that
//! failed or was cancelled before the commit.

use std::time::Duration;

use crate::controller::transfer::facts::{Claim, Facts, Peer, Volume};

use super::{
    destination_claim, destination_of, has_finalizer, is_our_clone, made_as, peer_or_self,
    recorded_destination, recorded_source, uid_of, Action, Question, Report,
    REASON_DESTINATION_LOST, REASON_WAITING_FOR_BINDING,
};
use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransferPhase as Phase, TransferMode, FINALIZER_TRANSFER_PROTECTION,
};
use crate::controller::transfer::matching::{holds_claim, receiver_uid};

pub(super) fn forward(f: &Facts, dest: &ClaimReference, volume: &Volume) -> Action {
    let s = &f.source;
    let source_ns = s.source_namespace();
    let mine = uid_of(s);
    // R5: the source claim no longer holds the volume.
    if let Some(snapshot) = recorded_source(s) {
        if let Some(claim) = &f.moved_claim {
            if claim.uid == snapshot.uid && !claim.deleting {
                // Its users are only reported (the volume is the
                // destination's already): asked for first, but from a
                // cache, as no step rests on them.
                if f.users.is_none() {
                    return Action::Ask(Question::ReportedUsers);
                }
                return Action::ReleaseSource {
                    uid: claim.uid.clone(),
                };
            }
        }
    }
    let ours = f.destination_claim.as_ref().filter(|c| c.uid == dest.uid);
    if let Some(claim) = ours.filter(|c| c.deleting) {
        // Deleted before the transfer completed: keep the volume, then let
        // the claim go. The hold is a write to the volume that records the
        // claim, so that it also fences: any decision made before it on the
        // volume (a stale leader's R6) fails its resourceVersion.
        if volume.marker.as_deref() != Some(mine)
            || volume.reclaim_policy != "Retain"
            || volume.destination_lost.as_deref() != Some(dest.uid.as_str())
        {
            return Action::Rehold {
                resource_version: volume.resource_version.clone(),
            };
        }
        if claim.protected() {
            return unprotect_destination(claim);
        }
    }
    let live = ours.filter(|c| !c.deleting);
    let Some(claim) = live else {
        let reason = s.status.as_ref().and_then(|st| st.reason.as_deref());
        if reason != Some(REASON_DESTINATION_LOST) {
            return Action::DestinationLost {
                report: Report::new(
                    REASON_DESTINATION_LOST,
                    format!(
                        "PersistentVolumeClaim {}/{} was deleted after volume {} was handed to it; the volume is kept (reclaim policy Retain) for an administrator",
                        dest.namespace, dest.name, volume.name
                    ),
                ),
            };
        }
        if finalizers_held(f) {
            return Action::DropFinalizers;
        }
        return Action::Nothing { after: None };
    };
    let _ = source_ns;
    let bound =
        claim.phase == "Bound" && claim.volume_name.as_deref() == Some(volume.name.as_str());
    let locked = claim
        .lock
        .as_deref()
        .is_some_and(|l| holds_claim(s, l, &dest.namespace, &dest.name));
    if !bound {
        if locked {
            return Action::UnlockDestination;
        }
        return Action::Wait {
            phase: Phase::Rebinding,
            report: Report::shared(
                REASON_WAITING_FOR_BINDING,
                format!(
                    "waiting for PersistentVolumeClaim {}/{} to be bound to its volume",
                    dest.namespace, dest.name
                ),
            ),
            in_use: false,
            after: Some(Duration::from_secs(1)),
        };
    }
    // R6: Bound to a live claim it names, so Delete may come back.
    if volume.marker.as_deref() == Some(mine) {
        if volume.phase == "Bound" {
            return Action::Settle {
                resource_version: volume.resource_version.clone(),
                policy: volume
                    .original_policy
                    .clone()
                    .unwrap_or_else(|| volume.reclaim_policy.clone()),
            };
        }
        return Action::Nothing {
            after: Some(Duration::from_secs(1)),
        };
    }
    if locked {
        return Action::UnlockDestination;
    }
    Action::Complete
}

/// Completed: let the destination claim go, make the peer say so, let
/// both objects go, mind the TTL.
pub(super) fn tidy(f: &Facts) -> Action {
    if let Some(dest) = recorded_destination(&f.source) {
        if let Some(claim) = f
            .destination_claim
            .as_ref()
            .filter(|c| c.uid == dest.uid && c.protected())
        {
            return unprotect_destination(claim);
        }
    }
    if let Peer::Found(d) = &f.peer {
        let peer_phase = d.status.as_ref().and_then(|st| st.phase);
        let source_phase = f.source.status.as_ref().and_then(|st| st.phase);
        if peer_phase != source_phase {
            return Action::Mirror;
        }
    }
    if finalizers_held(f) {
        return Action::DropFinalizers;
    }
    Action::Expire
}

/// Failed or Cancelled before the commit: undo in the order that fences a
/// stale leader first, then let go.
pub(super) fn roll_back(f: &Facts) -> Action {
    let s = &f.source;
    let mine = uid_of(s);
    let source_ns = s.source_namespace();
    if let Some(volume) = f
        .volume
        .as_ref()
        .filter(|v| v.marker.as_deref() == Some(mine))
    {
        let source_bound = f.moved_claim.as_ref().is_some_and(|c| {
            c.phase == "Bound" && !c.deleting && volume.names(source_ns, &c.name, &c.uid)
        });
        let restore = (volume.phase == "Bound" && source_bound)
            .then(|| volume.original_policy.clone())
            .flatten();
        return Action::Unmark {
            resource_version: volume.resource_version.clone(),
            restore,
        };
    }
    if let Some(dest) = recorded_destination(s) {
        let committed = f
            .volume
            .as_ref()
            .is_some_and(|v| v.names(&dest.namespace, &dest.name, &dest.uid));
        if let Some(claim) = f.destination_claim.as_ref().filter(|c| c.uid == dest.uid) {
            // A claim the tenant wrote is theirs: it is let go, never deleted.
            let adopted = adopted(f, claim, dest);
            if !claim.deleting && !committed && !adopted {
                return Action::DeleteDestination {
                    uid: claim.uid.clone(),
                };
            }
            if (claim.deleting || adopted) && claim.protected() {
                return unprotect_destination(claim);
            }
        }
    }
    if let Some(claim) = locked_unrecorded(f) {
        // R3 made it, and the pair ended before R3's record was written (its
        // deadline, or the other side, finished it in between), or a stale
        // leader made it late; never committed (the commit names the
        // recorded claim). Deleted only when no claim is recorded and it is
        // exactly what R3 makes (as the active pair would adopt it); in any
        // case let go, or it would hold its tenant's deletion for ever.
        if !claim.deleting && recorded_destination(s).is_none() && made_unrecorded(f, claim) {
            return Action::DeleteDestination {
                uid: claim.uid.clone(),
            };
        }
        if claim.protected() {
            return unprotect_destination(claim);
        }
    }
    if let Some(claim) = &f.moved_claim {
        if s.mode() == TransferMode::Clone {
            let receiver = match &f.peer {
                Peer::Itself => Some(receiver_uid(s, s)),
                Peer::Found(d) => Some(receiver_uid(s, d)),
                Peer::Gone | Peer::Unmatched => s
                    .status
                    .as_ref()
                    .and_then(|st| st.peer.as_ref())
                    .and_then(|p| p.uid.clone()),
            };
            let ours = receiver.is_some_and(|r| is_our_clone(s, &r, claim));
            if ours && !claim.deleting {
                return Action::DeleteClone {
                    name: claim.name.clone(),
                    uid: claim.uid.clone(),
                };
            }
            return tidy(f);
        }
        let snapshot_uid = recorded_source(s).map(|snap| snap.uid.as_str());
        let ours = snapshot_uid.is_none_or(|uid| uid == claim.uid);
        if ours && claim.lock.as_deref() == Some(mine) {
            return Action::Unlock {
                resource_version: claim.resource_version.clone(),
            };
        }
    }
    tidy(f)
}

/// A destination claim that carries this pair's lock though no record
/// names it: one R3 made before its record could be written, or one a
/// stale leader's R3 made after the recorded one went. A populating pair
/// makes no claim.
fn locked_unrecorded(f: &Facts) -> Option<&Claim> {
    let s = &f.source;
    let recorded = recorded_destination(s);
    let (ns, name) = match (recorded, peer_or_self(f)) {
        (_, Some(d)) if d.populates() => return None,
        (Some(r), _) => (r.namespace.as_str(), r.name.as_str()),
        (None, Some(d)) => destination_of(s, d),
        (None, None) => return None,
    };
    f.destination_claim.as_ref().filter(|c| {
        recorded.is_none_or(|r| r.uid != c.uid)
            && c.lock
                .as_deref()
                .is_some_and(|l| holds_claim(s, l, ns, name))
    })
}

/// Whether `claim`, with no claim recorded, is exactly what R3 makes (as
/// the active pair would adopt it: `RecordDestination`), so ours to delete.
fn made_unrecorded(f: &Facts, claim: &Claim) -> bool {
    let s = &f.source;
    let Some(d) = peer_or_self(f) else {
        return false;
    };
    let (ns, name) = destination_of(s, d);
    match (recorded_source(s), &f.volume) {
        (Some(snapshot), Some(volume)) => {
            made_as(claim, &destination_claim(s, ns, name, snapshot, volume))
        }
        _ => false,
    }
}

/// Whether the recorded destination `claim` is one a populating request
/// adopted rather than one R3 made: the request says so; without the
/// request to ask, any claim that does not carry R3's lock is taken for the
/// tenant's (leaving a claim we made is harmless, deleting one we did not
/// is not).
fn adopted(f: &Facts, claim: &Claim, dest: &ClaimReference) -> bool {
    match &f.peer {
        Peer::Itself => f.source.populates(),
        Peer::Found(d) => d.populates(),
        Peer::Gone | Peer::Unmatched => !claim
            .lock
            .as_deref()
            .is_some_and(|l| holds_claim(&f.source, l, &dest.namespace, &dest.name)),
    }
}

/// Takes our finalizer off `claim`, keeping everyone else's.
pub(super) fn unprotect_destination(claim: &Claim) -> Action {
    Action::UnprotectDestination {
        resource_version: claim.resource_version.clone(),
        finalizers: claim
            .finalizers
            .iter()
            .filter(|f| *f != FINALIZER_TRANSFER_PROTECTION)
            .cloned()
            .collect(),
    }
}

/// Whether the pair still holds a finalizer it must let go. A standing
/// offer's own finalizer is shared by all its pairs: the offer lets it go.
pub(super) fn finalizers_held(f: &Facts) -> bool {
    (has_finalizer(&f.source) && !f.source.is_standing_offer())
        || match &f.peer {
            Peer::Found(d) => has_finalizer(d),
            _ => false,
        }
}
