//! Standing clone offers (DESIGN §2.1.5b): the offer itself (counting its
//! clones under `maxClones`, waking its pairs, ending), and each pair of
//! the offer and one request, driven from the request one pair at a time
//! through the view [`standing_view`] builds.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::api::namespace_transfer::{
    CloneCounts, NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus,
    PairRecord, CONDITION_PEER_MATCHED, LABEL_CLONED_UNDER, REASON_DEADLINE_EXCEEDED,
};
use crate::controller::cluster::Cluster;
use crate::controller::{object_key, Error, Next};

use super::decide::remaining;
use super::decide::{has_finalizer, name_of, uid_of, Report};
use super::matching::{is_active, is_named, receiver_uid, reference};
use super::status::set;
use super::{decide, matching, TransferController};

pub(super) use crate::api::namespace_transfer::REASON_OFFERING;

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
        let alive = self.clones_alive(&self.cluster, &s, &pairs, None).await?;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let turn = offer_turn(&s, &pairs, alive, now);
        match &turn.write {
            Some(OfferWrite::Finish { phase, report }) => {
                self.finish_alone(&s, *phase, report).await?;
            }
            Some(OfferWrite::Recount {
                counts,
                message,
                needed,
            }) => {
                self.update_status(&s, |st| recount(st, &s, counts, message, needed))
                    .await?;
            }
            None => {}
        }
        drop(counting);
        drop(lock);
        // Woken once the lock is let go, so that they do not queue for it.
        for key in &turn.wake {
            self.queue.add(key);
        }
        match turn.then {
            OfferNext::End => {
                self.forget_standing_lock(uid_of(&s));
                self.set_finalizer(&s, false).await?;
                self.expire(&s).await
            }
            OfferNext::After(after) => Ok(Next::After(after)),
        }
    }

    /// How many of a standing offer's clones are alive, not counting the
    /// pair of `except` ([`count_alive`]): reads the volumes labelled with
    /// the offer (a live LIST) and the pairs' clone claims through
    /// `cluster` (the watch copies, or live where C1 is decided).
    pub(super) async fn clones_alive(
        &self,
        cluster: &Cluster,
        s: &NamespaceTransfer,
        pairs: &[&NamespaceTransfer],
        except: Option<&str>,
    ) -> Result<usize, Error> {
        // Every clone from R2 on: its volume carries the offer's label until
        // it is gone, whatever became of the request or the claim.
        let labelled: HashSet<String> = cluster
            .volumes_labelled(LABEL_CLONED_UNDER, uid_of(s))
            .await?
            .into_iter()
            .filter(|v| v.metadata.deletion_timestamp.is_none())
            .filter_map(|v| v.metadata.name)
            .collect();
        let mut claims = HashSet::new();
        for d in pairs {
            let name = s.clone_claim_name(&receiver_uid(s, d));
            if cluster.claim(s.source_namespace(), &name).await?.is_some() {
                claims.insert(name);
            }
        }
        Ok(count_alive(s, pairs, &labelled, &claims, except))
    }
}

/// How many of standing offer `s`'s clones are alive, not counting the
/// pair of `except`: from R2 on, while their volume exists (`labelled`:
/// the volumes that carry [`LABEL_CLONED_UNDER`] with the offer's uid and
/// are not being deleted), whoever holds it and whether or not its request
/// still exists; before R2, the pairs whose clone claim exists (`claims`,
/// by name) or was recorded. A pair that ended is done with its clone once
/// it lets go of its finalizer.
pub(super) fn count_alive(
    s: &NamespaceTransfer,
    pairs: &[&NamespaceTransfer],
    labelled: &HashSet<String>,
    claims: &HashSet<String>,
    except: Option<&str>,
) -> usize {
    let mut labelled = labelled.clone();
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
        let finished = d
            .status
            .as_ref()
            .and_then(|st| st.phase)
            .is_some_and(Phase::is_finished);
        if finished && !has_finalizer(d) {
            continue;
        }
        let made = (!finished && volume.is_some())
            || claims.contains(&s.clone_claim_name(&receiver_uid(s, d)));
        early += usize::from(made);
    }
    labelled.len() + early
}

/// What a standing offer's own reconcile does ([`offer_turn`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct OfferTurn {
    /// The pairs to wake (`namespace/name`), once the offer's lock is let go.
    pub wake: Vec<String>,
    /// The offer's own status write, if any.
    pub write: Option<OfferWrite>,
    pub then: OfferNext,
}

/// A standing offer's status write.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum OfferWrite {
    /// Deleted or past its deadline, and no pair holds it: finished.
    Finish { phase: Phase, report: Report },
    /// Open: the counts and the message, and the records kept (those of the
    /// pairs in `needed`).
    Recount {
        counts: CloneCounts,
        message: String,
        needed: Vec<NamespaceTransfer>,
    },
}

/// What a standing offer asks of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OfferNext {
    /// Done: let go of the lock and the finalizer, then mind the TTL.
    End,
    /// Count again after this long (a claim's deletion wakes no transfer).
    After(Duration),
}

/// What the standing offer `s`, with its requests `pairs` and `alive`
/// clones alive ([`count_alive`]), does at `now` (Unix seconds).
pub(super) fn offer_turn(
    s: &NamespaceTransfer,
    pairs: &[&NamespaceTransfer],
    alive: usize,
    now: i64,
) -> OfferTurn {
    // A pair may still need the offer (and its record) until it has
    // finished and let go of its finalizer, or its request is gone.
    let needed: Vec<&NamespaceTransfer> = pairs
        .iter()
        .filter(|d| is_active(d) || has_finalizer(d))
        .copied()
        .collect();
    let wake = needed.iter().map(|d| object_key(*d)).collect();
    // Each pair adds its clone at R1, in the write of its record; the
    // records only repair a count that an older server's two writes left
    // short.
    let made_before = s
        .status
        .as_ref()
        .and_then(|st| st.clones.as_ref())
        .map_or(0, |c| usize::try_from(c.made).unwrap_or(0));
    let made = pairs
        .iter()
        .filter(|d| standing_record(s, d).is_some())
        .count()
        .max(made_before);
    let is_needed = |p: &PairRecord| needed.iter().any(|d| is_record_of(p, d, s));
    let stale_records = s
        .status
        .as_ref()
        .is_some_and(|st| st.pairs.iter().any(|p| !is_needed(p)));
    let held = pairs.iter().any(|d| has_finalizer(d));
    let deleting = s.metadata.deletion_timestamp.is_some();
    let left = remaining(s, now);
    let expired = left.is_some_and(|left| left.is_zero());
    let mut write = None;
    if is_active(s) && (deleting || expired) && !held {
        let (phase, report) = if deleting {
            (
                Phase::Cancelled,
                Report::shared(
                    decide::REASON_DELETED,
                    "the standing offer was deleted; the clones already made are left alone",
                ),
            )
        } else {
            (
                Phase::Failed,
                Report::shared(
                    REASON_DEADLINE_EXCEEDED,
                    "activeDeadlineSeconds passed; the standing offer makes no more clones",
                ),
            )
        };
        write = Some(OfferWrite::Finish { phase, report });
    } else if is_active(s) && !deleting && !expired {
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
            write = Some(OfferWrite::Recount {
                counts,
                message,
                needed: needed.iter().map(|d| (*d).clone()).collect(),
            });
        }
    }
    let then = if (!is_active(s) || deleting || expired) && !held {
        OfferNext::End
    } else {
        match left {
            Some(left) if !left.is_zero() => OfferNext::After(left.min(OFFER_RECOUNT)),
            _ => OfferNext::After(OFFER_RECOUNT),
        }
    };
    OfferTurn { wake, write, then }
}

/// The recount of an open standing offer on its status `st`: the records
/// of the pairs still `needed` kept, its counts and message.
pub(super) fn recount(
    st: &mut NamespaceTransferStatus,
    s: &NamespaceTransfer,
    counts: &CloneCounts,
    message: &str,
    needed: &[NamespaceTransfer],
) {
    st.pairs
        .retain(|p| needed.iter().any(|d| is_record_of(p, d, s)));
    st.phase = Some(Phase::WaitingForPeer);
    st.reason = Some(REASON_OFFERING.to_owned());
    st.message = Some(message.to_owned());
    // Never lower: the clones of deleted requests are no longer among the
    // pairs recounted.
    let made = st.clones.as_ref().map_or(0, |c| c.made).max(counts.made);
    st.clones = Some(CloneCounts {
        made,
        alive: counts.alive,
    });
    set(st, CONDITION_PEER_MATCHED, false, REASON_OFFERING, message);
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

/// Whether `t` is a standing offer's pair view (see [`standing_view`]): a
/// standing offer whose status names a peer by a uid not its own. The
/// offer's own status never names a peer (it is shared by all its pairs,
/// each of which has its own); the view names the pair's request, by the
/// request's uid or the one derived from it (see [`reference`]).
pub(super) fn is_standing_pair(t: &NamespaceTransfer) -> bool {
    t.is_standing_offer()
        && t.status
            .as_ref()
            .and_then(|st| st.peer.as_ref())
            .is_some_and(|p| p.uid.is_some() && p.uid != t.metadata.uid)
}
