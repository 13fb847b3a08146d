//! Standing clone offers (DESIGN §2.1.5b): the offer itself (counting its
//! clones under `maxClones`, waking its pairs, ending), and each pair of
//! the offer and one request, driven from the request one pair at a time
//! through the view [`standing_view`] builds.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::api::namespace_transfer::{
    CloneCounts, NamespaceTransfer, NamespaceTransferPhase as Phase, CONDITION_PEER_MATCHED,
    LABEL_CLONED_UNDER, REASON_DEADLINE_EXCEEDED,
};
use crate::controller::{object_key, Error, Next};

use super::decide::{has_finalizer, name_of, uid_of, Report};
use super::matching::{is_active, is_named, receiver_uid, reference};
use super::status::{remaining_until_deadline, set};
use super::{decide, matching, TransferController};

/// Reason of a standing clone offer that is open.
pub(super) const REASON_OFFERING: &str = "Offering";

/// The fault-injection point between R1's two writes for a standing
/// offer's pair: its record, and the offer's count of the clone.
pub(super) const R1_COUNT: &str = "R1-count";

/// How often an open standing offer counts its clones again (a claim's
/// deletion wakes no transfer).
pub(super) const OFFER_RECOUNT: Duration = Duration::from_secs(10);

impl TransferController {
    /// A pair of the standing offer `s` and its request `d`: driven from the
    /// request, one pair at a time, with the pair's memory on the request.
    pub(super) async fn drive_standing(
        &self,
        d: NamespaceTransfer,
        s: NamespaceTransfer,
    ) -> Result<Next, Error> {
        let offer = self.standing_lock(uid_of(&s));
        let _one_at_a_time = offer.lock().await;
        self.drive(standing_view(&s, &d)).await
    }

    /// The lock of the standing offer with uid `offer`.
    pub(super) fn standing_lock(&self, offer: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.standing.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(offer.to_owned()).or_default())
    }

    /// Drops the lock of the finished standing offer `offer`, unless
    /// someone holds or waits for it: then it stays, so that it still
    /// excludes (its pairs only wind down now).
    pub(super) fn forget_standing_lock(&self, offer: &str) {
        let mut locks = self.standing.lock().unwrap_or_else(|p| p.into_inner());
        if locks.get(offer).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(offer);
        }
    }

    /// A standing offer itself: counts its clones, wakes its pairs, and ends
    /// once it is deleted or past its deadline and no pair still needs it.
    pub(super) async fn tend_offer(&self, s: NamespaceTransfer) -> Result<Next, Error> {
        // Counted under the offer's lock, which a pair holds across R1's two
        // writes (the offer's record and count, in one write, then the
        // request's state), so that a recount never races a pair's record.
        // `s` was read before the lock, so it is read again.
        let lock = self.standing_lock(uid_of(&s));
        let counting = lock.lock().await;
        let Some(s) = self
            .get(s.own_namespace(), name_of(&s))
            .await?
            .filter(|now| now.metadata.uid == s.metadata.uid)
        else {
            drop(counting);
            drop(lock);
            self.forget_standing_lock(uid_of(&s));
            return Ok(Next::Done);
        };
        let all = self.all_transfers().await?;
        let pairs: Vec<&NamespaceTransfer> = matching::standing_pairs(&s, &all).collect();
        // Woken once the lock is let go, so that they do not queue for it.
        let wake: Vec<String> = pairs
            .iter()
            .filter(|d| is_active(d) || has_finalizer(d))
            .map(|d| object_key(*d))
            .collect();
        // Each pair adds its clone at R1, in the write of its record; the
        // records only repair a count that an older server's two writes
        // left short.
        let made_before = s
            .status
            .as_ref()
            .and_then(|st| st.clones.as_ref())
            .map_or(0, |c| usize::try_from(c.made).unwrap_or(0));
        let made = pairs
            .iter()
            .filter(|d| standing_record(&s, d).is_some())
            .count()
            .max(made_before);
        // A pair's record is kept while the pair may still need it: until
        // it has finished and let go of its finalizer, or its request is
        // gone.
        let needed: Vec<&NamespaceTransfer> = pairs
            .iter()
            .filter(|d| is_active(d) || has_finalizer(d))
            .copied()
            .collect();
        let is_needed = |p: &crate::api::namespace_transfer::PairRecord| {
            needed.iter().any(|d| is_record_of(p, d, &s))
        };
        let stale_records = s
            .status
            .as_ref()
            .is_some_and(|st| st.pairs.iter().any(|p| !is_needed(p)));
        let alive = self.clones_alive(&s, &pairs, None).await?;
        let held = pairs.iter().any(|d| has_finalizer(d));
        let deleting = s.metadata.deletion_timestamp.is_some();
        let expired = remaining_until_deadline(&s).is_some_and(|left| left.is_zero());
        if is_active(&s) {
            if deleting || expired {
                if !held {
                    let report = if deleting {
                        Report::shared(
                            decide::REASON_DELETED,
                            "the standing offer was deleted; the clones already made are left alone",
                        )
                    } else {
                        Report::shared(
                            REASON_DEADLINE_EXCEEDED,
                            "activeDeadlineSeconds passed; the standing offer makes no more clones",
                        )
                    };
                    let phase = if deleting {
                        Phase::Cancelled
                    } else {
                        Phase::Failed
                    };
                    self.finish_alone(&s, phase, &report).await?;
                }
            } else {
                let message = format!(
                    "offering clones of PersistentVolumeClaim {}/{} to namespace {:?}: {made} made, {alive} alive",
                    s.source_namespace(),
                    s.spec.source.name,
                    s.destination_namespace()
                );
                let counts = CloneCounts {
                    made: i64::try_from(made).unwrap_or(i64::MAX),
                    alive: i64::try_from(alive).unwrap_or(i64::MAX),
                };
                let current = s.status.as_ref();
                let changed = current.and_then(|st| st.clones.as_ref()) != Some(&counts)
                    || current.and_then(|st| st.phase) != Some(Phase::WaitingForPeer)
                    || current.and_then(|st| st.message.as_deref()) != Some(message.as_str())
                    || stale_records;
                if changed {
                    self.update_status(&s, |st| {
                        st.pairs.retain(|p| is_needed(p));
                        st.phase = Some(Phase::WaitingForPeer);
                        st.reason = Some(REASON_OFFERING.to_owned());
                        st.message = Some(message.clone());
                        // Never lower: the clones of deleted requests are no
                        // longer among the pairs recounted.
                        let made = st.clones.as_ref().map_or(0, |c| c.made).max(counts.made);
                        st.clones = Some(CloneCounts {
                            made,
                            alive: counts.alive,
                        });
                        set(st, CONDITION_PEER_MATCHED, false, REASON_OFFERING, &message);
                    })
                    .await?;
                }
            }
        }
        drop(counting);
        drop(lock);
        for key in &wake {
            self.queue.add(key);
        }
        if (!is_active(&s) || deleting || expired) && !held {
            self.forget_standing_lock(uid_of(&s));
            self.set_finalizer(&s, false).await?;
            return self.expire(&s).await;
        }
        // Claims are deleted without waking a transfer: count again soon.
        match remaining_until_deadline(&s) {
            Some(left) if !left.is_zero() => Ok(Next::After(left.min(OFFER_RECOUNT))),
            _ => Ok(Next::After(OFFER_RECOUNT)),
        }
    }

    /// How many of a standing offer's clones are alive, not counting the
    /// pair of `except`: being made (the clone claim exists, or was
    /// recorded), or from R2 on, while their volume exists (labelled
    /// [`LABEL_CLONED_UNDER`]), whoever holds it and whether or not its
    /// request still exists.
    pub(super) async fn clones_alive(
        &self,
        s: &NamespaceTransfer,
        pairs: &[&NamespaceTransfer],
        except: Option<&str>,
    ) -> Result<usize, Error> {
        // Every clone from R2 on: its volume carries the offer's label until
        // it is gone, whatever became of the request or the claim.
        let mut labelled: HashSet<String> = self
            .cluster
            .volumes_labelled(LABEL_CLONED_UNDER, uid_of(s))
            .await?
            .into_iter()
            .filter(|v| v.metadata.deletion_timestamp.is_none())
            .filter_map(|v| v.metadata.name)
            .collect();
        // Before R2: the pairs with a clone claim made.
        let mut early = 0;
        for d in pairs {
            let volume = standing_record(s, d).map(|c| c.volume_name.as_str());
            if except.is_some_and(|uid| d.metadata.uid.as_deref() == Some(uid)) {
                if let Some(volume) = volume {
                    labelled.remove(volume);
                }
                continue;
            }
            if volume.is_some_and(|v| labelled.contains(v)) {
                continue;
            }
            // A pair that ended is done with its clone once it lets go of its
            // finalizer; until then its rollback may still have one.
            let finished = d
                .status
                .as_ref()
                .and_then(|st| st.phase)
                .is_some_and(Phase::is_finished);
            if finished && !has_finalizer(d) {
                continue;
            }
            let made = (!finished && volume.is_some())
                || self
                    .cluster
                    .claim(
                        s.source_namespace(),
                        &s.clone_claim_name(&receiver_uid(s, d)),
                    )
                    .await?
                    .is_some();
            early += usize::from(made);
        }
        Ok(labelled.len() + early)
    }
}

/// The pair of standing offer `s` and its request `d` as the decision sees
/// a pair: the offer, carrying the pair's state (the request's status,
/// naming the request as the peer) and the pair's R1 record, which the
/// offer keeps (`status.pairs`) where the destination cannot read it. The
/// phase and the steps live on the request because the offer is shared by
/// all its pairs; the lock and the volume marker still name the offer, each
/// pair's clone by its own name.
pub(super) fn standing_view(s: &NamespaceTransfer, d: &NamespaceTransfer) -> NamespaceTransfer {
    let mut view = s.clone();
    let mut status = d.status.clone().unwrap_or_default();
    status.source_claim = standing_record(s, d).cloned();
    // The offer's record of the request, in the form the request records
    // the offer (see [`rerecord`]): the pair's clone is named after it.
    status.peer = Some(if matching::records_raw(d, s) {
        crate::api::namespace_transfer::PeerReference {
            uid: d.metadata.uid.clone(),
            ..reference(d, s)
        }
    } else {
        reference(d, s)
    });
    status.clones = None;
    // The pair's own peer phase is the offer's: what a write of the pair's
    // state records on the request.
    status.peer_phase = s.status.as_ref().and_then(|st| st.phase);
    // Every pair's record, as the offer holds them: what its clones alive
    // are counted by.
    status.pairs = s
        .status
        .as_ref()
        .map(|st| st.pairs.clone())
        .unwrap_or_default();
    view.status = Some(status);
    view
}

/// The R1 record the standing offer `s` keeps for its request `d`.
pub(super) fn standing_record<'a>(
    s: &'a NamespaceTransfer,
    d: &NamespaceTransfer,
) -> Option<&'a crate::api::namespace_transfer::SourceClaimSnapshot> {
    s.status
        .as_ref()
        .and_then(|st| st.pairs.iter().find(|p| is_record_of(p, d, s)))
        .map(|p| &p.source_claim)
}

/// Whether `record`, kept by standing offer `s`, is the record of request
/// `d`: it names `d`, uid and all.
pub(super) fn is_record_of(
    record: &crate::api::namespace_transfer::PairRecord,
    d: &NamespaceTransfer,
    s: &NamespaceTransfer,
) -> bool {
    record.request.uid.is_some() && is_named(d, &record.request, s)
}

/// Whether `t` is a standing offer's pair view (see [`standing_view`]): an
/// offer itself never records a peer.
pub(super) fn is_standing_pair(t: &NamespaceTransfer) -> bool {
    t.is_standing_offer()
        && t.status
            .as_ref()
            .and_then(|st| st.peer.as_ref())
            .is_some_and(|p| p.uid.is_some() && p.uid != t.metadata.uid)
}
