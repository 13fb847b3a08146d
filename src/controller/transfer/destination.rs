//! The destination side of a pair: a Destination-role object wakes the
//! Source that drives it, or says that it waits, was taken, or lost its
//! Source, and minds its own deadline.

use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, CONDITION_PEER_MATCHED,
    REASON_DEADLINE_EXCEEDED, REASON_PEER_TAKEN,
};
use crate::controller::{object_key, Error, Next};

use super::decide::{has_finalizer, Report, REASON_WAITING_FOR_PEER};
use super::matching::{is_active, is_named, DestinationView};
use super::status::{remaining_until_deadline, set};
use super::{decide, matching, TransferController};

impl TransferController {
    /// A Destination-role object: wakes the Source that drives it, or says
    /// that it waits or was taken.
    pub(super) async fn reconcile_destination(&self, d: NamespaceTransfer) -> Result<Next, Error> {
        let recorded = d.status.as_ref().and_then(|st| st.peer.clone());
        let source = match &recorded {
            Some(p) => self
                .get(&p.namespace, &p.name)
                .await?
                .filter(|s| is_named(s, p, &d)),
            None => None,
        };
        if let Some(s) = source.as_ref().filter(|s| s.is_standing_offer()) {
            // A standing offer's pair is driven from its request.
            return self.drive_standing(d, s.clone()).await;
        }
        if !is_active(&d) {
            if has_finalizer(&d) {
                // The pair's Source takes this finalizer off when it is done;
                // if the Source is gone or done, do it here.
                if let Some(s) = &source {
                    if has_finalizer(s) {
                        self.queue.add(&object_key(s));
                        return Ok(Next::Done);
                    }
                }
                self.set_finalizer(&d, false).await?;
            }
            return self.expire(&d).await;
        }
        if let Some(s) = source {
            // Matched: its Source drives the pair.
            self.queue.add(&object_key(&s));
            return Ok(Next::Done);
        }
        if recorded.is_some() {
            // It was matched, and its Source is gone. Before the commit the
            // Source side undoes what was done; this side only says so.
            let report = Report::shared(
                decide::REASON_DELETED,
                "the matched transfer in the source namespace was deleted",
            );
            self.finish_alone(&d, Phase::Cancelled, &report).await?;
            return self.expire(&d).await;
        }
        let all = self.pair_transfers(&d).await?;
        match matching::destination_view(&d, &all) {
            DestinationView::Matched(s) if s.is_standing_offer() => {
                self.drive_standing(d, s.clone()).await
            }
            DestinationView::Matched(s) => {
                self.queue.add(&object_key(s));
                Ok(Next::Done)
            }
            DestinationView::Taken { .. } => {
                let message = format!(
                    "the offer from namespace {:?} was matched first by another NamespaceTransfer in this namespace",
                    d.source_namespace(),
                );
                self.unmatched(&d, Phase::Pending, REASON_PEER_TAKEN, &message)
                    .await
            }
            DestinationView::Unmatched => {
                let message = format!(
                    "waiting for a NamespaceTransfer in namespace {:?} that offers claim {:?} to this namespace",
                    d.source_namespace(),
                    d.spec.source.name
                );
                self.unmatched(&d, Phase::WaitingForPeer, REASON_WAITING_FOR_PEER, &message)
                    .await
            }
        }
    }

    /// A destination without a peer: says why (`PeerMatched=False`), then
    /// minds its deadline.
    pub(super) async fn unmatched(
        &self,
        t: &NamespaceTransfer,
        phase: Phase,
        reason: &'static str,
        message: &str,
    ) -> Result<Next, Error> {
        self.update_status(t, |st| {
            st.phase = Some(phase);
            st.reason = Some(reason.to_owned());
            st.message = Some(message.to_owned());
            set(st, CONDITION_PEER_MATCHED, false, reason, message);
        })
        .await?;
        match remaining_until_deadline(t) {
            None => Ok(Next::Done),
            Some(left) if !left.is_zero() => Ok(Next::After(left)),
            Some(_) => {
                let report = Report::shared(
                    REASON_DEADLINE_EXCEEDED,
                    "activeDeadlineSeconds passed before the transfer was matched",
                );
                self.finish_alone(t, Phase::Failed, &report).await?;
                self.expire(t).await
            }
        }
    }
}
