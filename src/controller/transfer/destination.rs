//! The destination side of a pair: a Destination-role object wakes the
//! Source that drives it, or says that it waits, was taken, or lost its
//! Source, and minds its own deadline.
//!
//! What to do is one pure function, [`destination_turn`], of what the
//! reconcile found ([`Found`]) and the clock; the model check runs it for
//! the request of its pair. The reconcile here only reads and carries the
//! turn out.

use std::time::Duration;

use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus,
    CONDITION_PEER_MATCHED, REASON_DEADLINE_EXCEEDED, REASON_PEER_TAKEN,
};
use crate::controller::{object_key, Error, Next};

use super::decide::remaining;
use super::decide::{has_finalizer, Report, REASON_WAITING_FOR_PEER};
use super::matching::{is_active, is_named, DestinationView};
use super::status::set;
use super::{decide, matching, TransferController};

/// What a Destination-role object's reconcile found of its Source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Found<'a> {
    /// The Source it recorded, still there (same uid).
    Recorded(&'a NamespaceTransfer),
    /// It recorded a Source, and no such object exists any more.
    Gone,
    /// It recorded none yet: how it stands among the offers.
    Unrecorded(DestinationView<'a>),
}

/// The one thing a Destination-role object's reconcile does.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Turn<'a> {
    /// Its Source is a standing offer: the pair is driven from here.
    DriveStanding(&'a NamespaceTransfer),
    /// Its Source drives the pair (and, once the pair is done, takes this
    /// side's finalizer off): wake it.
    Wake(&'a NamespaceTransfer),
    /// Done, and no Source will take the finalizer off: take it off here,
    /// then mind the TTL.
    LetGo,
    /// Done: mind the TTL.
    Expire,
    /// Its Source is gone before the pair finished: Cancelled, then the TTL.
    Finish { phase: Phase, report: Report },
    /// Not matched: say why (`PeerMatched=False`); then, by the deadline,
    /// nothing, look again, or fail.
    Unmatched {
        phase: Phase,
        reason: &'static str,
        message: String,
        deadline: Deadline,
    },
}

/// Where a Destination without a peer stands against its
/// `activeDeadlineSeconds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Deadline {
    None,
    After(Duration),
    Passed,
}

/// What the Destination-role object `d` does next, given what its
/// reconcile `found`, at `now` (Unix seconds).
pub(super) fn destination_turn<'a>(d: &NamespaceTransfer, found: Found<'a>, now: i64) -> Turn<'a> {
    let source = match found {
        Found::Recorded(s) => Some(s),
        _ => None,
    };
    if let Some(s) = source.filter(|s| s.is_standing_offer()) {
        // A standing offer's pair is driven from its request.
        return Turn::DriveStanding(s);
    }
    if !is_active(d) {
        if has_finalizer(d) {
            // The pair's Source takes this finalizer off when it is done;
            // if the Source is gone or done, it comes off here.
            return match source.filter(|s| has_finalizer(s)) {
                Some(s) => Turn::Wake(s),
                None => Turn::LetGo,
            };
        }
        return Turn::Expire;
    }
    let view = match found {
        // Matched: its Source drives the pair.
        Found::Recorded(s) => return Turn::Wake(s),
        // It was matched, and its Source is gone. Before the commit the
        // Source side undoes what was done; this side only says so.
        Found::Gone => {
            return Turn::Finish {
                phase: Phase::Cancelled,
                report: Report::shared(
                    decide::REASON_DELETED,
                    "the matched transfer in the source namespace was deleted",
                ),
            }
        }
        Found::Unrecorded(view) => view,
    };
    let (phase, reason, message) = match view {
        DestinationView::Matched(s) if s.is_standing_offer() => return Turn::DriveStanding(s),
        DestinationView::Matched(s) => return Turn::Wake(s),
        DestinationView::Taken { .. } => (
            Phase::Pending,
            REASON_PEER_TAKEN,
            format!(
                "the offer from namespace {:?} was matched first by another NamespaceTransfer in this namespace",
                d.source_namespace(),
            ),
        ),
        DestinationView::Unmatched => (
            Phase::WaitingForPeer,
            REASON_WAITING_FOR_PEER,
            format!(
                "waiting for a NamespaceTransfer in namespace {:?} that offers {} {:?} to this namespace",
                d.source_namespace(),
                if d.source_is_snapshot() { "VolumeSnapshot" } else { "claim" },
                d.spec.source.name
            ),
        ),
    };
    let deadline = match remaining(d, now) {
        None => Deadline::None,
        Some(left) if !left.is_zero() => Deadline::After(left),
        Some(_) => Deadline::Passed,
    };
    Turn::Unmatched {
        phase,
        reason,
        message,
        deadline,
    }
}

/// An unmatched Destination's status: it waits in `phase`, saying why
/// (`PeerMatched=False`).
pub(super) fn unmatched(
    st: &mut NamespaceTransferStatus,
    phase: Phase,
    reason: &str,
    message: &str,
) {
    st.phase = Some(phase);
    st.reason = Some(reason.to_owned());
    st.message = Some(message.to_owned());
    set(st, CONDITION_PEER_MATCHED, false, reason, message);
}

/// The report of a Destination whose deadline passed unmatched.
pub(super) fn unmatched_past_deadline() -> Report {
    Report::shared(
        REASON_DEADLINE_EXCEEDED,
        "activeDeadlineSeconds passed before the transfer was matched",
    )
}

impl TransferController {
    /// A Destination-role object: reads what it needs, asks
    /// [`destination_turn`], and carries the turn out.
    pub(super) async fn reconcile_destination(&self, d: NamespaceTransfer) -> Result<Next, Error> {
        let recorded = d.status.as_ref().and_then(|st| st.peer.clone());
        let source = match &recorded {
            Some(p) => self
                .get(&p.namespace, &p.name)
                .await?
                .filter(|s| is_named(s, p, &d)),
            None => None,
        };
        let all;
        let found = match (&recorded, &source) {
            (Some(_), Some(s)) => Found::Recorded(s),
            (Some(_), None) => Found::Gone,
            (None, _) => {
                all = self.pair_transfers(&d).await?;
                Found::Unrecorded(matching::destination_view(&d, &all))
            }
        };
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        match destination_turn(&d, found, now) {
            Turn::DriveStanding(s) => self.drive_standing(d.clone(), s.clone()).await,
            Turn::Wake(s) => {
                self.queue.add(&object_key(s));
                Ok(Next::Done)
            }
            Turn::LetGo => {
                self.set_finalizer(&d, false).await?;
                self.expire(&d).await
            }
            Turn::Expire => self.expire(&d).await,
            Turn::Finish { phase, report } => {
                self.finish_alone(&d, phase, &report).await?;
                self.expire(&d).await
            }
            Turn::Unmatched {
                phase,
                reason,
                message,
                deadline,
            } => {
                self.update_status(&d, |st| unmatched(st, phase, reason, &message))
                    .await?;
                match deadline {
                    Deadline::None => Ok(Next::Done),
                    Deadline::After(left) => Ok(Next::After(left)),
                    Deadline::Passed => {
                        let report = unmatched_past_deadline();
                        self.finish_alone(&d, Phase::Failed, &report).await?;
                        self.expire(&d).await
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
