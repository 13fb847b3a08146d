//! The NamespaceTransfer controller (DESIGN §2.1.3–2.1.6): it gathers the
//! facts of a pair, asks [`decide::decide`] what to do, and does that one
//! thing. Matching, the preconditions, the rebind protocol R1–R6 with its
//! rollback, phases, conditions, cancellation, finalizers, TTL and deadline,
//! and Events.
//!
//! # How it is built
//! - [`facts`]: what a reconcile reads, as plain data.
//! - [`decide`]: the protocol, one pure function from facts to an
//!   [`decide::Action`]. It holds every rule about what is safe when.
//! - this module: the gathering (our objects live from etcd; claims and
//!   volumes from the watch copies, live where a copy may be behind this
//!   controller's own writes, and all live again before a step that no
//!   precondition fences ([`needs_live_facts`]); pods, rights and admission
//!   always live) and the executor, which
//!   performs one action, conditional on the resourceVersion or uid it was
//!   decided on, after checking the leadership lease. Then the next
//!   reconcile starts from scratch (level-triggered): nothing is kept in
//!   memory between two writes, so a crash between any two loses nothing.
//!
//! The Source-role (or Both) object of a pair drives it; a Destination-role
//! object only reports that it waits or was taken, and wakes its Source.
//!
//! # What the facts mean
//! - `status.sourceClaim` on the source object: R1 is done.
//! - the volume's marker annotation (`storage.transfer.k8s.io/transfer`)
//!   names this transfer's uid: R2 is done (and `original-reclaim-policy`
//!   holds the policy to restore).
//! - `status.destinationClaim` on the source object: R3 is done, and this is
//!   the claim's uid.
//! - the volume's `claimRef` names that claim and uid: R4, the commit, is
//!   done. Before it, everything can be undone; after it, the transfer only
//!   goes forward.
//! - a finished phase (Failed, Cancelled) recorded before the commit: the
//!   rollback is being carried out. The phase is written *before* the
//!   rollback, so a crash mid-rollback never redoes a step.
//!
//! Only the controllers write status (the registry refuses clients), and
//! still nothing recorded there is acted on before it is checked against the
//! live objects.

pub mod decide;
pub mod facts;
pub mod matching;

#[cfg(test)]
mod model;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store as Reflector};
use serde_json::json;

use super::cluster::{Cluster, ClusterError};
use super::events::{claim_reference, reference_to, Events, Severity};
use super::leader::Leadership;
use super::queue::WorkQueue;
use super::{fault, object_key, Error, Next};
use crate::admission::{first_missing, transfer_rights};
use crate::api::errors::{ApiError, GroupResource};
use crate::api::meta::{self as apimeta, CONDITION_FALSE, CONDITION_TRUE};
use crate::api::namespace_transfer::{
    CloneCounts, NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus, Role,
    TransferMode, TransferStepName as StepName, ANNOTATION_ALLOW_NAMESPACE_TRANSFER,
    ANNOTATION_DESTINATION_LOST, ANNOTATION_ORIGINAL_RECLAIM_POLICY, ANNOTATION_TRANSFER_LOCK,
    CONDITION_AUTHORIZED, CONDITION_PEER_MATCHED, CONDITION_READY, CONDITION_REBOUND,
    CONDITION_SOURCE_RELEASED, FINALIZER_TRANSFER_PROTECTION, LABEL_CLONED_UNDER,
    REASON_CLONE_FAILED, REASON_DEADLINE_EXCEEDED, REASON_PEER_TAKEN,
};
use crate::authz::Authorizer;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, DeleteOptions, ListOptions, Shared, Store};

use decide::{
    decide, destination_claim, destination_of, destination_text, has_finalizer,
    moved_claim_name_of, name_of, peer_or_self, recorded_destination, recorded_source, uid_of,
    Action, Refusal, Report, Side, REASON_COMPLETED, REASON_DESTINATION_LOST,
    REASON_DESTINATION_REFUSED, REASON_SOURCE_IN_USE, REASON_SOURCE_RELEASE_REFUSED,
    REASON_WAITING_FOR_PEER,
};
use facts::{Admission, Claim, ClassPolicy, Facts, Peer, Volume, VOLUME_MARKER};
use matching::{is_active, is_named, receiver_uid, reference, rerecord, role_of, DestinationView};

/// The steps of the rebind protocol (§2.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// C1 (Clone mode): create the clone beside the source claim, locked.
    Clone,
    /// R1: annotate the source claim with the lock; keep a snapshot.
    Lock,
    /// R2: record the volume's reclaim policy, set it to Retain.
    Retain,
    /// R3: create the destination claim, pre-bound to the volume.
    CreateTarget,
    /// R4: point the volume's claimRef at the destination claim. The commit point.
    Commit,
    /// R5: delete the source claim.
    ReleaseSource,
    /// R6: once the destination is Bound, restore the reclaim policy; Completed.
    Settle,
}

impl Step {
    pub const ALL: [Step; 7] = [
        Step::Clone,
        Step::Lock,
        Step::Retain,
        Step::CreateTarget,
        Step::Commit,
        Step::ReleaseSource,
        Step::Settle,
    ];

    /// `R1` … `R6`.
    pub fn name(self) -> &'static str {
        match self {
            Step::Clone => "C1",
            Step::Lock => "R1",
            Step::Retain => "R2",
            Step::CreateTarget => "R3",
            Step::Commit => "R4",
            Step::ReleaseSource => "R5",
            Step::Settle => "R6",
        }
    }

    /// The Event `action` of the step.
    fn action(self) -> &'static str {
        match self {
            Step::Clone => "Clone",
            Step::Lock => "Lock",
            Step::Retain => "Retain",
            Step::CreateTarget => "CreateTarget",
            Step::Commit => "Commit",
            Step::ReleaseSource => "ReleaseSource",
            Step::Settle => "Settle",
        }
    }
}

/// What the transfer controller may be told.
#[derive(Debug, Clone, Default)]
pub struct TransferOptions {
    /// `--allow-all-storage-classes`: every class, and volumes without one,
    /// may be transferred.
    pub allow_all_storage_classes: bool,
    /// `--clone-timeout`.
    pub clone_timeout: Duration,
}

/// The reconciler of NamespaceTransfers.
#[derive(Debug, Clone)]
pub struct TransferController {
    store: Arc<Store<NamespaceTransferStrategy>>,
    cluster: Cluster,
    classes: Reflector<StorageClass>,
    authorizer: Arc<dyn Authorizer>,
    events: Events,
    leadership: Leadership,
    queue: WorkQueue,
    options: TransferOptions,
    ctx: Context,
    /// One lock per standing offer (by uid), held while one of its pairs
    /// decides, so that two pairs never both see room under `maxClones` for
    /// one clone; pairs of different offers go on side by side.
    standing: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl TransferController {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<Store<NamespaceTransferStrategy>>,
        cluster: Cluster,
        classes: Reflector<StorageClass>,
        authorizer: Arc<dyn Authorizer>,
        events: Events,
        leadership: Leadership,
        queue: WorkQueue,
        options: TransferOptions,
        ctx: Context,
    ) -> Self {
        Self {
            store,
            cluster,
            classes,
            authorizer,
            events,
            leadership,
            queue,
            options,
            ctx,
            standing: Arc::default(),
        }
    }

    /// Brings the transfer `namespace/name` one step closer to where it
    /// should be.
    pub async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        let Some(t) = super::keyed(&self.leadership, &self.store, key).await? else {
            return Ok(Next::Done);
        };
        match role_of(&t) {
            Some(Role::Destination) => self.reconcile_destination(t).await,
            Some(Role::Source) if t.is_standing_offer() => self.tend_offer(t).await,
            Some(Role::Source | Role::Both) => self.drive(t).await,
            // Validation refuses a transfer without a role; nothing to do.
            None => Ok(Next::Done),
        }
    }

    async fn all_transfers(&self) -> Result<Vec<NamespaceTransfer>, Error> {
        let list = self.store.list(None, &ListOptions::default()).await?;
        Ok(list.items.into_iter().map(Shared::into_owned).collect())
    }

    /// The transfers that matching can weigh for a pair: those of the two
    /// namespaces it spans (a Source's candidate peers live in its
    /// destination namespace, the Sources competing for a Destination in its
    /// source namespace) that name the same source claim (peers always do,
    /// and spec is immutable). Reading these, not every transfer in the
    /// cluster, keeps one reconcile's cost independent of how many other
    /// pairs are under way.
    async fn pair_transfers(&self, t: &NamespaceTransfer) -> Result<Vec<NamespaceTransfer>, Error> {
        let (source_ns, claim) = (t.source_namespace(), t.spec.source.name.as_str());
        let opts = ListOptions::default();
        let mut namespaces = vec![t.own_namespace(), source_ns, t.destination_namespace()];
        namespaces.sort_unstable();
        namespaces.dedup();
        let mut found = Vec::new();
        for ns in namespaces {
            let list = self.store.list(Some(ns), &opts).await?;
            found.extend(
                list.items
                    .iter()
                    .filter(|o| o.source_namespace() == source_ns && o.spec.source.name == claim)
                    .map(|o| NamespaceTransfer::clone(o)),
            );
        }
        Ok(found)
    }

    // ----- the destination side ---------------------------------------------------

    /// A Destination-role object: wakes the Source that drives it, or says
    /// that it waits or was taken.
    async fn reconcile_destination(&self, d: NamespaceTransfer) -> Result<Next, Error> {
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
            self.write_finish(&d, None, Phase::Cancelled, &report)
                .await?;
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
    async fn unmatched(
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
                self.write_finish(t, None, Phase::Failed, &report).await?;
                self.expire(t).await
            }
        }
    }

    // ----- the source side: gather, decide, do ---------------------------------------

    /// A Source-role or Both object: decides the pair's next step from the
    /// facts, and takes it, acting for the pair's tenants: every request to
    /// kube-apiserver in it names the transfer (crate::audit::client).
    async fn drive(&self, s: NamespaceTransfer) -> Result<Next, Error> {
        let facts = self.gather(s).await?;
        let acting = crate::audit::ActingFor::pair(&facts.source, peer_or_self(&facts));
        acting.scope(self.decide_and_act(facts)).await
    }

    async fn decide_and_act(&self, mut facts: Facts) -> Result<Next, Error> {
        let mut paused = false;
        let mut live = false;
        // At most: users, rights, admission, one pause and its fresh facts,
        // one live confirmation and its fresh facts (whose users, rights and
        // admission are asked for again each time).
        for _ in 0..14 {
            let action = decide(&facts);
            match action {
                Action::CheckUsers => {
                    facts.users = Some(self.users_of(&facts).await?);
                }
                Action::CheckRights => {
                    facts.rights = Some(self.check_rights(&facts).await?);
                }
                Action::CheckAdmission => {
                    facts.admission = Some(self.check_admission(&facts).await?);
                }
                Action::Commit { .. } | Action::ReleaseSource { .. }
                    if !paused && fault::pauses_before(step_of(&action)) =>
                {
                    // The tests change the world here; decide again on what
                    // is then true, as a slow reconcile would.
                    fault::before(step_of(&action)).await;
                    paused = true;
                    let Some(fresh) = self.refresh(&facts).await? else {
                        return Ok(Next::Now);
                    };
                    facts = self.gather(fresh).await?;
                }
                action if !live && needs_live_facts(&action) => {
                    // Decided on the watch copies of claims and volumes, and
                    // not fenced by a precondition on what it rests on: decide
                    // again on live reads, and do what that says.
                    live = true;
                    let Some(fresh) = self.refresh(&facts).await? else {
                        return Ok(Next::Now);
                    };
                    facts = self.gather_live(fresh).await?;
                }
                action @ (Action::Lock { .. } | Action::RecordSource(_))
                    if facts.source.mode() == TransferMode::Clone
                        && recorded_source(&facts.source).is_none() =>
                {
                    // C2 writes nothing: it is done once R1 is next.
                    fault::after_named("C2");
                    return self.execute(&facts, action).await;
                }
                action => return self.execute(&facts, action).await,
            }
        }
        Ok(Next::Now)
    }

    /// The object that drives the pair, read again: the source, or for a
    /// standing offer's pair its view built from both objects read again.
    async fn refresh(&self, f: &Facts) -> Result<Option<NamespaceTransfer>, Error> {
        let s = &f.source;
        let Some(fresh) = self.get(s.own_namespace(), name_of(s)).await? else {
            return Ok(None);
        };
        if !fresh.is_standing_offer() {
            return Ok(Some(fresh));
        }
        let Some(d) = peer_or_self(f) else {
            return Ok(None);
        };
        Ok(self
            .get(d.own_namespace(), name_of(d))
            .await?
            .filter(|current| current.metadata.uid == d.metadata.uid)
            .map(|d| standing_view(&fresh, &d)))
    }

    // ----- standing clone offers (DESIGN §2.1.5b) ------------------------------------

    /// A pair of the standing offer `s` and its request `d`: driven from the
    /// request, one pair at a time, with the pair's memory on the request.
    async fn drive_standing(
        &self,
        d: NamespaceTransfer,
        s: NamespaceTransfer,
    ) -> Result<Next, Error> {
        let offer = self.standing_lock(uid_of(&s));
        let _one_at_a_time = offer.lock().await;
        self.drive(standing_view(&s, &d)).await
    }

    /// The lock of the standing offer with uid `offer`.
    fn standing_lock(&self, offer: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.standing.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(offer.to_owned()).or_default())
    }

    /// Drops the lock of the finished standing offer `offer`, unless
    /// someone holds or waits for it: then it stays, so that it still
    /// excludes (its pairs only wind down now).
    fn forget_standing_lock(&self, offer: &str) {
        let mut locks = self.standing.lock().unwrap_or_else(|p| p.into_inner());
        if locks.get(offer).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(offer);
        }
    }

    /// A standing offer itself: counts its clones, wakes its pairs, and ends
    /// once it is deleted or past its deadline and no pair still needs it.
    async fn tend_offer(&self, s: NamespaceTransfer) -> Result<Next, Error> {
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
                    self.write_finish(&s, None, phase, &report).await?;
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
    async fn clones_alive(
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

    /// Reads every fact the decision needs: our objects live from etcd,
    /// claims and volumes from the watch copies where they can be trusted
    /// (cluster::ReadCache), pods and rights live when the decision asks.
    async fn gather(&self, s: NamespaceTransfer) -> Result<Facts, Error> {
        self.gather_from(&self.cluster, s).await
    }

    /// The facts with every claim and volume read live: what a step that no
    /// precondition fences is decided on (see [`needs_live_facts`]).
    async fn gather_live(&self, s: NamespaceTransfer) -> Result<Facts, Error> {
        self.gather_from(&self.cluster.uncached(), s).await
    }

    async fn gather_from(&self, cluster: &Cluster, s: NamespaceTransfer) -> Result<Facts, Error> {
        let recorded = s.status.as_ref().and_then(|st| st.peer.clone());
        let peer = if role_of(&s) == Some(Role::Both) {
            Peer::Itself
        } else if let Some(p) = &recorded {
            match self.get(&p.namespace, &p.name).await? {
                Some(d) if is_named(&d, p, &s) => Peer::Found(Box::new(d)),
                _ => Peer::Gone,
            }
        } else {
            let all = self.pair_transfers(&s).await?;
            match matching::peer_of(&s, &all) {
                Some(d) => Peer::Found(Box::new(d.clone())),
                None => Peer::Unmatched,
            }
        };
        let source_ns = s.source_namespace().to_owned();
        let clone_mode = s.mode() == TransferMode::Clone;
        // The claim the protocol moves: the source claim, or its clone.
        let moved = moved_claim_name_of(&s, &peer);
        let destination = match &peer {
            Peer::Itself => Some(destination_of(&s, &s)),
            Peer::Found(d) => Some(destination_of(&s, d)),
            _ => None,
        }
        .map(|(ns, name)| (ns.to_owned(), name.to_owned()));
        // The three claims are independent reads: asked side by side.
        let claim = |namespace: &str, name: Option<&str>| {
            let namespace = namespace.to_owned();
            let name = name.filter(|n| !n.is_empty()).map(str::to_owned);
            async move {
                match name {
                    Some(name) => Ok::<_, Error>(
                        cluster
                            .claim(&namespace, &name)
                            .await?
                            .as_ref()
                            .map(Claim::from),
                    ),
                    None => Ok(None),
                }
            }
        };
        let (source_claim, origin, destination_claim) = tokio::try_join!(
            claim(&source_ns, moved.as_deref()),
            claim(
                &source_ns,
                clone_mode.then_some(s.spec.source.name.as_str())
            ),
            claim(
                destination.as_ref().map_or("", |(ns, _)| ns.as_str()),
                destination.as_ref().map(|(_, name)| name.as_str()),
            ),
        )?;
        let clone_failure = match source_claim
            .as_ref()
            .filter(|c| clone_mode && c.phase != "Bound")
        {
            Some(clone) => cluster.provisioning_failure(&source_ns, &clone.uid).await?,
            None => None,
        };
        // Before C1 only, once there is a pair to clone for: a clone is
        // made in its origin's class.
        let clone_waits_for_consumer = match origin
            .as_ref()
            .filter(|_| source_claim.is_none() && !matches!(peer, Peer::Unmatched | Peer::Gone))
            .and_then(|o| o.shape.storage_class_name.as_deref())
        {
            Some(class) => self
                .storage_class(class)
                .await?
                .filter(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
                .map(|_| class.to_owned()),
            None => None,
        };
        let volume_name = recorded_source(&s)
            .map(|snap| snap.volume_name.clone())
            .or_else(|| source_claim.as_ref().and_then(|c| c.volume_name.clone()));
        let volume = match &volume_name {
            Some(name) => cluster.volume(name).await?.as_ref().map(Volume::from),
            None => None,
        };
        let class = match (&volume, &origin) {
            (Some(v), _) => {
                let object = format!("PersistentVolume {}", v.name);
                self.class_policy(&object, v.storage_class_name.as_deref())
                    .await?
            }
            // A clone is made in the source claim's class.
            (None, Some(o)) => {
                let object = format!("PersistentVolumeClaim {source_ns}/{}", o.name);
                self.class_policy(&object, o.shape.storage_class_name.as_deref())
                    .await?
            }
            (None, None) => ClassPolicy::Unknown,
        };
        let at_capacity = match (s.max_clones(), &peer) {
            (Some(max), Peer::Found(d))
                if recorded_source(&s).is_none() && source_claim.is_none() =>
            {
                let all = self.all_transfers().await?;
                let pairs: Vec<&NamespaceTransfer> = matching::standing_pairs(&s, &all).collect();
                let alive = self
                    .clones_alive(&s, &pairs, d.metadata.uid.as_deref())
                    .await?;
                alive >= usize::try_from(max).unwrap_or(0)
            }
            _ => false,
        };
        let mine = uid_of(&s).to_owned();
        let lock_holder_active = match source_claim.as_ref() {
            Some(c) if c.lock.as_deref().is_some_and(|holder| holder != mine) => {
                let holder = c.lock.as_deref().unwrap_or_default();
                self.lock_holder_is_active(holder, s.source_namespace(), &c.name)
                    .await?
            }
            _ => false,
        };
        Ok(Facts {
            now: Timestamp::now().as_second(),
            allow_all_storage_classes: self.options.allow_all_storage_classes,
            source: s,
            peer,
            source_claim,
            origin,
            clone_failure,
            clone_timeout: i64::try_from(self.options.clone_timeout.as_secs()).unwrap_or(i64::MAX),
            clone_waits_for_consumer,
            at_capacity,
            destination_claim,
            volume,
            class,
            users: None,
            lock_holder_active,
            rights: None,
            admission: None,
        })
    }

    /// Performs one decided action, each write conditional on what it was
    /// decided on; a lost race just decides again.
    async fn execute(&self, f: &Facts, action: Action) -> Result<Next, Error> {
        let s = &f.source;
        let d = peer_or_self(f);
        let source_ns = s.source_namespace();
        let mine = uid_of(s);
        match action {
            Action::Nothing { after } => Ok(after.map_or(Next::Done, Next::After)),
            Action::Wait {
                phase,
                report,
                in_use,
                after,
            } => {
                let was = s.status.as_ref().and_then(|st| st.reason.clone());
                self.update_pair(s, d, &report, |st, _| {
                    st.phase = Some(phase);
                    if in_use {
                        set(
                            st,
                            CONDITION_SOURCE_RELEASED,
                            false,
                            report.reason,
                            st.message.clone().unwrap_or_default().as_str(),
                        );
                    }
                })
                .await?;
                if was.as_deref() != Some(report.reason) && report.reason == REASON_SOURCE_IN_USE {
                    let claim = claim_reference(
                        source_ns,
                        &moved_claim_name_of(s, &f.peer).unwrap_or_default(),
                        None,
                    );
                    for regarding in [reference_to(s), claim] {
                        self.events
                            .publish(
                                &regarding,
                                Severity::Warning,
                                report.reason,
                                "Wait",
                                &report.source,
                            )
                            .await;
                    }
                }
                Ok(after.map_or(Next::Done, Next::After))
            }
            Action::RecordMatch => {
                let report = Report::shared(
                    "Matched",
                    "matched with the transfer in the other namespace",
                );
                self.update_pair(s, d, &report, |st, _| {
                    st.phase = Some(Phase::WaitingForRelease);
                    set(
                        st,
                        CONDITION_PEER_MATCHED,
                        true,
                        "Matched",
                        "matched with the transfer in the other namespace",
                    );
                })
                .await?;
                Ok(Next::Now)
            }
            Action::Finish { phase, report } => {
                self.write_finish(s, d, phase, &report).await?;
                if let Some(claim) = &f.source_claim {
                    self.events
                        .publish(
                            &claim_reference(source_ns, &claim.name, Some(&claim.uid)),
                            Severity::Warning,
                            report.reason,
                            "Transfer",
                            &format!("NamespaceTransfer {}: {}", object_key(s), report.source),
                        )
                        .await;
                }
                Ok(Next::Now)
            }
            Action::CheckUsers | Action::CheckRights | Action::CheckAdmission => Ok(Next::Now),
            Action::Protect => {
                self.set_finalizer(s, true).await?;
                if let Some(d) = d {
                    self.set_finalizer(d, true).await?;
                }
                Ok(Next::Now)
            }
            Action::CreateClone(clone) => {
                let name = clone.metadata.name.clone().unwrap_or_default();
                let origin = &s.spec.source.name;
                self.leadership.check()?;
                match self.cluster.create_claim(source_ns, &clone).await {
                    Ok(created) => {
                        fault::after(Step::Clone);
                        let uid = created.metadata.uid.clone().unwrap_or_default();
                        for regarding in [
                            claim_reference(source_ns, &name, Some(&uid)),
                            reference_to(s),
                        ] {
                            self.events
                                .publish(
                                    &regarding,
                                    Severity::Normal,
                                    "CloneCreated",
                                    Step::Clone.action(),
                                    &format!(
                                        "created {source_ns}/{name}, a clone of {source_ns}/{origin}, to hand over"
                                    ),
                                )
                                .await;
                        }
                        // The destination learns that its clone is on the
                        // way, not the clone's name (it names the offer).
                        if let Some(d) = d.filter(|d| d.metadata.uid != s.metadata.uid) {
                            self.events
                                .publish(
                                    &reference_to(d),
                                    Severity::Normal,
                                    "CloneCreated",
                                    Step::Clone.action(),
                                    &format!(
                                        "the provisioner is making a clone of {source_ns}/{origin} for this transfer"
                                    ),
                                )
                                .await;
                        }
                        Ok(Next::Now)
                    }
                    Err(ClusterError::AlreadyExists { .. }) => Ok(Next::Now),
                    Err(ClusterError::Refused { message, .. }) => {
                        // Quota or admission in the source namespace: nothing
                        // was made, nothing to undo.
                        let report = Report::new(
                            REASON_CLONE_FAILED,
                            format!(
                                "creating the clone {source_ns}/{name} of {source_ns}/{origin} was refused: {message}"
                            ),
                        );
                        self.write_finish(s, d, Phase::Failed, &report).await?;
                        Ok(Next::Now)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Action::DeleteClone { name, uid } => {
                self.leadership.check()?;
                self.cluster.delete_claim(source_ns, &name, &uid).await?;
                self.events
                    .publish(
                        &reference_to(s),
                        Severity::Normal,
                        "CloneDeleted",
                        "RollBack",
                        &format!(
                            "deleted the clone {source_ns}/{name}, which was never handed over"
                        ),
                    )
                    .await;
                Ok(Next::Now)
            }
            Action::Lock { resource_version } => {
                self.leadership.check()?;
                let lock = json!({"metadata": {
                    "resourceVersion": resource_version,
                    "annotations": {ANNOTATION_TRANSFER_LOCK: mine},
                }});
                let name = moved_claim_name_of(s, &f.peer).unwrap_or_default();
                match self.cluster.patch_claim(source_ns, &name, &lock).await {
                    Ok(_) => {}
                    Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {
                        return Ok(Next::Now)
                    }
                    Err(e) => return Err(e.into()),
                }
                Ok(Next::Now)
            }
            Action::RecordSource(snapshot) => {
                let volume_name = snapshot.volume_name.clone();
                let report = Report::new(
                    "Locked",
                    format!(
                        "locked PersistentVolumeClaim {source_ns}/{}; moving volume {volume_name}",
                        snapshot.name
                    ),
                );
                let released = format!(
                    "no pod uses PersistentVolumeClaim {source_ns}/{}",
                    snapshot.name
                );
                let now = now();
                if let (true, Some(d)) = (is_standing_pair(s), d) {
                    // The offer keeps the pair's record and counts its clone,
                    // once, in one write, under its lock; the request learns
                    // only that the claim is locked.
                    let record = crate::api::namespace_transfer::PairRecord {
                        request: reference(d, s),
                        source_claim: snapshot.clone(),
                    };
                    self.update_status(s, |st| {
                        if !st.pairs.iter().any(|p| is_record_of(p, d, s)) {
                            st.pairs.push(record.clone());
                            let counts = st.clones.get_or_insert_with(CloneCounts::default);
                            counts.made = counts.made.saturating_add(1);
                        }
                    })
                    .await?;
                    fault::before_named(R1_COUNT).await;
                }
                self.update_pair(s, d, &report, |st, is_source| {
                    st.phase = Some(Phase::Rebinding);
                    st.reason = None;
                    if is_source {
                        st.source_claim = Some(snapshot.clone());
                    }
                    // The claim freed is the clone in Clone mode: the
                    // destination reads only that the source's is free.
                    let released = if is_source {
                        released.as_str()
                    } else {
                        "no pod in the source namespace uses the source claim"
                    };
                    set(st, CONDITION_SOURCE_RELEASED, true, "NotInUse", released);
                    st.record_step(StepName::Locked, &now);
                })
                .await?;
                fault::after(Step::Lock);
                if let Some(claim) = &f.source_claim {
                    let (dest_ns, dest_name) = d.map_or((source_ns, ""), |d| destination_of(s, d));
                    self.events
                        .publish(
                            &claim_reference(source_ns, &claim.name, Some(&claim.uid)),
                            Severity::Normal,
                            "Locked",
                            Step::Lock.action(),
                            &format!(
                                "locked for NamespaceTransfer {}: its volume {volume_name} moves to {dest_ns}/{dest_name}",
                                object_key(s)
                            ),
                        )
                        .await;
                }
                Ok(Next::Now)
            }
            Action::Retain {
                resource_version,
                policy,
            } => {
                let authorized = "both parties still hold the rights the transfer needs";
                self.update_pair(s, d, &Report::shared("Authorized", authorized), |st, _| {
                    set(
                        st,
                        CONDITION_AUTHORIZED,
                        true,
                        "RightsConfirmed",
                        authorized,
                    );
                    st.reason = None;
                })
                .await?;
                self.leadership.check()?;
                let mut retain = json!({
                    "metadata": {
                        "resourceVersion": resource_version,
                        "annotations": {
                            ANNOTATION_ORIGINAL_RECLAIM_POLICY: policy,
                            VOLUME_MARKER: mine,
                        },
                    },
                    "spec": {"persistentVolumeReclaimPolicy": "Retain"},
                });
                if s.mode() == TransferMode::Clone {
                    // For good: what maxClones counts (clones_alive).
                    retain["metadata"]["labels"] = json!({ LABEL_CLONED_UNDER: mine });
                }
                let Some(volume) = &f.volume else {
                    return Ok(Next::Now);
                };
                match self.cluster.patch_volume(&volume.name, &retain).await {
                    Ok(_) => {
                        fault::after(Step::Retain);
                        self.mark_step(s, d, StepName::Retained).await?;
                    }
                    Err(ClusterError::Conflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                Ok(Next::Now)
            }
            Action::CreateDestination(claim) => {
                let Some(d) = d else { return Ok(Next::Now) };
                let (dest_ns, dest_name) = destination_of(s, d);
                self.leadership.check()?;
                match self.cluster.create_claim(dest_ns, &claim).await {
                    Ok(created) => {
                        fault::after(Step::CreateTarget);
                        let uid = created.metadata.uid.clone().unwrap_or_default();
                        self.record_destination(s, Some(d), dest_ns, dest_name, &uid)
                            .await?;
                        // The record carried the step to its holder; the
                        // other side gets it here.
                        if !is_standing_pair(s) && d.metadata.uid != s.metadata.uid {
                            let now = now();
                            self.update_status(d, |st| st.record_step(StepName::Created, &now))
                                .await?;
                        }
                        // Seen in the destination namespace: named by what
                        // the destination asked for, never by the clone.
                        self.events
                            .publish(
                                &claim_reference(dest_ns, dest_name, Some(&uid)),
                                Severity::Normal,
                                "Created",
                                Step::CreateTarget.action(),
                                &format!("created to receive {}", received_from(s)),
                            )
                            .await;
                        Ok(Next::Now)
                    }
                    Err(ClusterError::AlreadyExists { .. }) => Ok(Next::Now),
                    Err(ClusterError::Refused { message, .. }) => {
                        let report = Report::shared(
                            REASON_DESTINATION_REFUSED,
                            format!(
                                "creating PersistentVolumeClaim {dest_ns}/{dest_name} was refused: {message}"
                            ),
                        );
                        self.write_finish(s, Some(d), Phase::Failed, &report)
                            .await?;
                        Ok(Next::Now)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Action::RecordDestination(reference) => {
                self.record_destination(
                    s,
                    d,
                    &reference.namespace,
                    &reference.name,
                    &reference.uid,
                )
                .await?;
                Ok(Next::Now)
            }
            Action::Commit {
                resource_version,
                destination,
            } => {
                let Some(volume) = &f.volume else {
                    return Ok(Next::Now);
                };
                self.leadership.check()?;
                let commit = json!({
                    "metadata": {"resourceVersion": resource_version},
                    "spec": {"claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": destination.namespace,
                        "name": destination.name,
                        "uid": destination.uid,
                        "resourceVersion": null,
                        "fieldPath": null,
                    }},
                });
                match self.cluster.patch_volume(&volume.name, &commit).await {
                    Ok(_) => {}
                    Err(ClusterError::Conflict { .. }) => return Ok(Next::Now),
                    Err(e) => return Err(e.into()),
                }
                fault::after(Step::Commit);
                // The lock has done its work on the destination claim. Taking
                // it off also changes the claim, which makes the cluster's PV
                // controller bind it now rather than at its next resync.
                self.unlock_destination(&destination.namespace, &destination.name)
                    .await?;
                let committed = now();
                let rebound = format!(
                    "the volume now names {}/{}",
                    destination.namespace, destination.name
                );
                self.update_pair(
                    s,
                    d,
                    &Report::shared("Committed", rebound.clone()),
                    |st, _| {
                        set(st, CONDITION_REBOUND, true, "ClaimRefMoved", &rebound);
                        st.reason = None;
                        st.record_step(StepName::Committed, &committed);
                    },
                )
                .await?;
                self.events
                    .publish(
                        &reference_to(s),
                        Severity::Normal,
                        "Committed",
                        Step::Commit.action(),
                        &format!(
                            "PersistentVolume {} now names {}/{}",
                            volume.name, destination.namespace, destination.name
                        ),
                    )
                    .await;
                Ok(Next::Now)
            }
            Action::ProtectDestination {
                resource_version,
                finalizers,
            }
            | Action::ReleaseDestination {
                resource_version,
                finalizers,
            } => {
                let Some(dest) = recorded_destination(s) else {
                    return Ok(Next::Now);
                };
                self.leadership.check()?;
                let patch = json!({"metadata": {
                    "resourceVersion": resource_version,
                    "finalizers": finalizers,
                }});
                match self
                    .cluster
                    .patch_claim(&dest.namespace, &dest.name, &patch)
                    .await
                {
                    Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {
                        Ok(Next::Now)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Action::Rehold { resource_version } => {
                let Some(volume) = &f.volume else {
                    return Ok(Next::Now);
                };
                self.leadership.check()?;
                let original = volume
                    .original_policy
                    .clone()
                    .unwrap_or_else(|| volume.reclaim_policy.clone());
                let lost = recorded_destination(s)
                    .map(|d| d.uid.clone())
                    .unwrap_or_default();
                let rehold = json!({
                    "metadata": {
                        "resourceVersion": resource_version,
                        "annotations": {
                            ANNOTATION_ORIGINAL_RECLAIM_POLICY: original,
                            VOLUME_MARKER: mine,
                            ANNOTATION_DESTINATION_LOST: lost,
                        },
                    },
                    "spec": {"persistentVolumeReclaimPolicy": "Retain"},
                });
                match self.cluster.patch_volume(&volume.name, &rehold).await {
                    Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {
                        Ok(Next::Now)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Action::UnlockDestination => {
                if let Some(dest) = recorded_destination(s) {
                    self.unlock_destination(&dest.namespace, &dest.name).await?;
                }
                Ok(Next::Now)
            }
            Action::ReleaseSource { uid } => {
                let name = recorded_source(s)
                    .map(|snap| snap.name.clone())
                    .unwrap_or_else(|| s.spec.source.name.clone());
                // Scheduled between the last check and the commit: only
                // reported, the volume is the destination's already.
                let users = self
                    .cluster
                    .pods_using_for_transfer(source_ns, &name)
                    .await?;
                if !users.is_empty() {
                    let volume = f
                        .volume
                        .as_ref()
                        .map(|v| v.name.as_str())
                        .unwrap_or_default();
                    let note = format!(
                        "{}, but its volume {volume} was already handed over",
                        decide::in_use_message(source_ns, &name, &users)
                    );
                    for regarding in [
                        reference_to(s),
                        claim_reference(source_ns, &name, Some(&uid)),
                    ] {
                        self.events
                            .publish(
                                &regarding,
                                Severity::Warning,
                                REASON_SOURCE_IN_USE,
                                Step::ReleaseSource.action(),
                                &note,
                            )
                            .await;
                    }
                }
                self.leadership.check()?;
                match self.cluster.delete_claim(source_ns, &name, &uid).await {
                    Ok(()) => {
                        fault::after(Step::ReleaseSource);
                        self.mark_step(s, d, StepName::Released).await?;
                        Ok(Next::Now)
                    }
                    Err(ClusterError::Refused { message, .. }) => {
                        // Admission said yes to the dry run before R2, and no
                        // now: the volume is the destination's already, so
                        // wait, saying why, and try again.
                        let report = Report::new(
                            REASON_SOURCE_RELEASE_REFUSED,
                            format!(
                                "the volume was handed over, but deleting PersistentVolumeClaim {source_ns}/{name} is refused: {message}"
                            ),
                        );
                        self.update_pair(s, d, &report, |st, _| st.phase = Some(Phase::Rebinding))
                            .await?;
                        self.events
                            .publish(
                                &reference_to(s),
                                Severity::Warning,
                                report.reason,
                                Step::ReleaseSource.action(),
                                &report.source,
                            )
                            .await;
                        Ok(Next::After(Duration::from_secs(30)))
                    }
                    Err(ClusterError::Conflict { .. }) => Ok(Next::Now),
                    Err(e) => Err(e.into()),
                }
            }
            Action::Settle {
                resource_version,
                policy,
            } => {
                let Some(volume) = &f.volume else {
                    return Ok(Next::Now);
                };
                self.restore_volume(volume, &resource_version, Some(&policy))
                    .await?;
                fault::after(Step::Settle);
                Ok(Next::Now)
            }
            Action::Complete => {
                let (volume_name, dest) = match (&f.volume, recorded_destination(s)) {
                    (Some(v), Some(dest)) => (v.name.clone(), dest.clone()),
                    _ => return Ok(Next::Now),
                };
                let from = recorded_source(s)
                    .map(|snap| format!("{source_ns}/{}", snap.name))
                    .unwrap_or_default();
                let to = format!("{}/{}", dest.namespace, dest.name);
                let report = Report {
                    reason: REASON_COMPLETED,
                    source: format!("volume {volume_name} moved from {from} to {to}"),
                    destination: completed_for_destination(s, &volume_name, &to),
                };
                let now = now();
                self.update_pair(s, d, &report, |st, _| {
                    st.phase = Some(Phase::Completed);
                    st.volume_name = Some(volume_name.clone());
                    st.completion_time = Some(now.clone());
                    let message = st.message.clone().unwrap_or_default();
                    set(st, CONDITION_READY, true, REASON_COMPLETED, &message);
                    st.record_step(StepName::Settled, &now);
                })
                .await?;
                self.events
                    .publish(
                        &claim_reference(&dest.namespace, &dest.name, Some(&dest.uid)),
                        Severity::Normal,
                        "TransferCompleted",
                        Step::Settle.action(),
                        &report.destination,
                    )
                    .await;
                Ok(Next::Now)
            }
            Action::DestinationLost { report } => {
                self.update_pair(s, d, &report, |st, _| {
                    st.phase = Some(Phase::Rebinding);
                    set(
                        st,
                        CONDITION_READY,
                        false,
                        report.reason,
                        st.message.clone().unwrap_or_default().as_str(),
                    );
                })
                .await?;
                self.events
                    .publish(
                        &reference_to(s),
                        Severity::Warning,
                        REASON_DESTINATION_LOST,
                        "Settle",
                        &report.source,
                    )
                    .await;
                Ok(Next::Now)
            }
            Action::Unmark {
                resource_version,
                restore,
            } => {
                let Some(volume) = &f.volume else {
                    return Ok(Next::Now);
                };
                self.restore_volume(volume, &resource_version, restore.as_deref())
                    .await?;
                Ok(Next::Now)
            }
            Action::DeleteDestination { uid } => {
                if let Some(dest) = recorded_destination(s) {
                    self.leadership.check()?;
                    self.cluster
                        .delete_claim(&dest.namespace, &dest.name, &uid)
                        .await?;
                }
                Ok(Next::Now)
            }
            Action::Unlock { resource_version } => {
                self.leadership.check()?;
                let name = recorded_source(s)
                    .map(|snap| snap.name.clone())
                    .unwrap_or_else(|| s.spec.source.name.clone());
                let unlock = json!({"metadata": {
                    "resourceVersion": resource_version,
                    "annotations": {ANNOTATION_TRANSFER_LOCK: null},
                }});
                match self.cluster.patch_claim(source_ns, &name, &unlock).await {
                    Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {
                        Ok(Next::Now)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Action::Mirror => {
                if let Some(d) =
                    d.filter(|d| d.metadata.uid != s.metadata.uid && !is_standing_pair(s))
                {
                    let status = s.status.clone().unwrap_or_default();
                    self.update_status(d, |st| mirror(st, &status, s, d))
                        .await?;
                }
                Ok(Next::Now)
            }
            Action::Release if is_standing_pair(s) => {
                // The offer's finalizer is its own to let go (tend_offer).
                if let Some(d) = d {
                    self.set_finalizer(d, false).await?;
                }
                self.queue.add(&object_key(s));
                Ok(Next::Now)
            }
            Action::Release => {
                self.release_finalizers(s, d).await?;
                Ok(Next::Now)
            }
            Action::Expire if is_standing_pair(s) => match d {
                Some(d) => self.expire(d).await,
                None => Ok(Next::Done),
            },
            Action::Expire => self.expire(s).await,
        }
    }

    // ----- reads ------------------------------------------------------------------------

    /// Whether the volume's StorageClass allows transfers.
    /// Whether the class of `object` (a volume, or the claim a clone is
    /// made from) allows transfers.
    async fn class_policy(&self, object: &str, class: Option<&str>) -> Result<ClassPolicy, Error> {
        if self.options.allow_all_storage_classes {
            return Ok(ClassPolicy::Allowed);
        }
        let Some(class) = class.filter(|c| !c.is_empty()).map(str::to_owned) else {
            return Ok(ClassPolicy::Refused(format!(
                "{object} has no StorageClass, and this server does not run with --allow-all-storage-classes"
            )));
        };
        let allowed = self
            .storage_class(&class)
            .await?
            .and_then(|c| c.metadata.annotations)
            .is_some_and(|a| {
                a.get(ANNOTATION_ALLOW_NAMESPACE_TRANSFER)
                    .is_some_and(|v| v == "true")
            });
        Ok(if allowed {
            ClassPolicy::Allowed
        } else {
            ClassPolicy::Refused(format!(
                "StorageClass {class:?} of {object} does not allow namespace transfers: it lacks the annotation {ANNOTATION_ALLOW_NAMESPACE_TRANSFER}: \"true\""
            ))
        })
    }

    /// The StorageClass `name`, from the watch copy, or read live when the
    /// copy does not have it (yet).
    async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, Error> {
        match self.classes.get(&ObjectRef::new(name)) {
            Some(class) => Ok(Some(class.as_ref().clone())),
            None => Ok(self.cluster.storage_class(name).await?),
        }
    }

    /// Whether an active transfer holds the lock `holder` read on claim
    /// `namespace/name` ([`matching::holds_claim`]).
    async fn lock_holder_is_active(
        &self,
        holder: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool, Error> {
        Ok(self
            .all_transfers()
            .await?
            .iter()
            .any(|t| is_active(t) && matching::holds_claim(t, holder, namespace, name)))
    }

    /// The pods that use the claim the protocol moves (the source claim or
    /// its clone), live.
    async fn users_of(&self, f: &Facts) -> Result<Vec<String>, Error> {
        let Some(name) = moved_claim_name_of(&f.source, &f.peer) else {
            // The decision asks only once the claim is known; never answer
            // "nobody" for a claim that is not.
            return Err(ClusterError::NotFound {
                message: "the claim to check for users is not known yet".to_owned(),
            }
            .into());
        };
        Ok(self
            .cluster
            .pods_using_for_transfer(f.source.source_namespace(), &name)
            .await?)
    }

    /// Re-runs the create-time SubjectAccessReviews for both stored
    /// requesters, never from a cache.
    async fn check_rights(&self, f: &Facts) -> Result<Result<(), Refusal>, Error> {
        let s = &f.source;
        let mut parties = vec![(s, Side::Source)];
        if let Some(d) = peer_or_self(f).filter(|d| d.metadata.uid != s.metadata.uid) {
            parties.push((d, Side::Destination));
        }
        // Both parties are asked side by side; the answer is read in order.
        let missing = futures::future::join_all(parties.iter().map(|(t, _)| async move {
            match &t.spec.requester {
                Some(requester) => {
                    first_missing(
                        self.authorizer.as_ref(),
                        requester,
                        transfer_rights(t),
                        true,
                    )
                    .await
                }
                None => Ok(None),
            }
        }))
        .await;
        for ((t, side), missing) in parties.into_iter().zip(missing) {
            let Some(requester) = &t.spec.requester else {
                return Ok(Err(Refusal {
                    side,
                    message: format!("NamespaceTransfer {} records no requester", object_key(t)),
                }));
            };
            if let Some(right) = missing? {
                return Ok(Err(Refusal {
                    side,
                    message: format!(
                        "User {:?}, who created NamespaceTransfer {}, can no longer {}, which {} requires",
                        requester.username,
                        object_key(t),
                        right.describe(),
                        right.because
                    ),
                }));
            }
        }
        Ok(Ok(()))
    }

    /// Asks kube-apiserver, with `dryRun=All`, whether it would admit the R3
    /// create and the R5 delete, so that a policy that would refuse them
    /// after the commit refuses them before anything is touched.
    async fn check_admission(&self, f: &Facts) -> Result<Admission, Error> {
        let s = &f.source;
        let (Some(d), Some(snapshot), Some(volume)) =
            (peer_or_self(f), recorded_source(s), &f.volume)
        else {
            return Ok(Admission::Admitted);
        };
        let (dest_ns, dest_name) = destination_of(s, d);
        let claim = destination_claim(s, dest_ns, dest_name, snapshot, volume);
        match self.cluster.create_claim_dry_run(dest_ns, &claim).await {
            Ok(()) | Err(ClusterError::AlreadyExists { .. }) => {}
            Err(ClusterError::Refused { message, .. }) => {
                return Ok(Admission::DestinationRefused(message))
            }
            Err(e) => return Err(e.into()),
        }
        match self
            .cluster
            .delete_claim_dry_run(s.source_namespace(), &snapshot.name, &snapshot.uid)
            .await
        {
            Ok(()) | Err(ClusterError::NotFound { .. }) => Ok(Admission::Admitted),
            Err(ClusterError::Refused { message, .. }) => {
                Ok(Admission::SourceReleaseRefused(message))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<NamespaceTransfer>, Error> {
        super::current(&self.store, namespace, name).await
    }

    // ----- writes -----------------------------------------------------------------------

    /// Records R3's claim, uid and all, on the object that holds the pair's
    /// record (the source object, or a standing offer's request): from now
    /// on only that claim is the destination.
    async fn record_destination(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), Error> {
        let reference = crate::api::namespace_transfer::ClaimReference {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        };
        // A standing offer's pair keeps its record on the request.
        let holder = if is_standing_pair(s) { d } else { Some(s) };
        if let Some(holder) = holder {
            let now = now();
            self.update_status(holder, |st| {
                st.destination_claim = Some(reference.clone());
                st.record_step(StepName::Created, &now);
            })
            .await?;
        }
        Ok(())
    }

    /// Writes a finished phase on `t` and, if given, its peer, each with the
    /// words its side may read.
    async fn write_finish(
        &self,
        t: &NamespaceTransfer,
        peer: Option<&NamespaceTransfer>,
        phase: Phase,
        report: &Report,
    ) -> Result<(), Error> {
        let change = |st: &mut NamespaceTransferStatus, _: bool| {
            st.phase = Some(phase);
            let message = st.message.clone().unwrap_or_default();
            set(st, CONDITION_READY, false, report.reason, &message);
        };
        match peer {
            Some(_) => {
                self.update_pair(t, peer, report, change).await?;
            }
            // A pair ended without its request: the offer goes on.
            None if is_standing_pair(t) => {}
            None => {
                let text = if role_of(t) == Some(Role::Destination) {
                    report.destination.clone()
                } else {
                    report.source.clone()
                };
                self.update_status(t, |st| {
                    st.reason = Some(report.reason.to_owned());
                    st.message = Some(text.clone());
                    change(st, true);
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Takes our lock annotation off the destination claim.
    async fn unlock_destination(&self, namespace: &str, name: &str) -> Result<(), Error> {
        self.leadership.check()?;
        let unlock = json!({"metadata": {"annotations": {ANNOTATION_TRANSFER_LOCK: null}}});
        match self.cluster.patch_claim(namespace, name, &unlock).await {
            Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes our marks from the volume, at the version decided on, and
    /// sets its reclaim policy to `policy` if given (else leaves it).
    async fn restore_volume(
        &self,
        volume: &Volume,
        resource_version: &str,
        policy: Option<&str>,
    ) -> Result<(), Error> {
        self.leadership.check()?;
        let mut patch = json!({
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": {
                    ANNOTATION_ORIGINAL_RECLAIM_POLICY: null,
                    VOLUME_MARKER: null,
                },
            },
        });
        if let Some(policy) = policy {
            patch["spec"] = json!({"persistentVolumeReclaimPolicy": policy});
        }
        match self.cluster.patch_volume(&volume.name, &patch).await {
            Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the protection finalizer from the destination side, then the
    /// source side (so that a Destination never waits on a vanished Source).
    async fn release_finalizers(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
    ) -> Result<(), Error> {
        if let Some(d) = d.filter(|d| d.metadata.uid != s.metadata.uid) {
            if let Some(current) = self.get(d.own_namespace(), name_of(d)).await? {
                self.set_finalizer(&current, false).await?;
            }
        }
        if let Some(current) = self.get(s.own_namespace(), name_of(s)).await? {
            self.set_finalizer(&current, false).await?;
        }
        Ok(())
    }

    /// Deletes a finished object whose `ttlSecondsAfterFinished` has passed,
    /// or asks to be woken when it will.
    async fn expire(&self, t: &NamespaceTransfer) -> Result<Next, Error> {
        let Some(ttl) = t.spec.ttl_seconds_after_finished else {
            return Ok(Next::Done);
        };
        if has_finalizer(t) || t.metadata.deletion_timestamp.is_some() || is_active(t) {
            return Ok(Next::Done);
        }
        let Some(finished) = finish_time(t) else {
            return Ok(Next::Done);
        };
        let due = finished.as_second().saturating_add(i64::from(ttl.max(0)));
        let left = due - Timestamp::now().as_second();
        if left > 0 {
            return Ok(Next::After(Duration::from_secs(left.unsigned_abs())));
        }
        self.leadership.check()?;
        let opts = DeleteOptions {
            precondition_uid: t.metadata.uid.clone(),
            ..DeleteOptions::default()
        };
        match self
            .store
            .delete(&self.ctx, t.own_namespace(), name_of(t), &opts)
            .await
        {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(Next::Done),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies `change` to the status of `s` and of its peer `d` (once when
    /// they are the same object), each with its own role, peer (by uid) and
    /// peer phase, and each with the words of `report` its side may read.
    /// The Source is written first: its record is the one the pair goes by.
    async fn update_pair(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
        report: &Report,
        change: impl Fn(&mut NamespaceTransferStatus, bool),
    ) -> Result<(), Error> {
        let d = d.filter(|d| d.metadata.uid != s.metadata.uid);
        if is_standing_pair(s) {
            // The pair's state is the request's alone; the offer is shared
            // (its record is the offer's, written at R1).
            let Some(d) = d else { return Ok(()) };
            let offer_phase = self
                .get(s.own_namespace(), name_of(s))
                .await?
                .and_then(|o| o.status.and_then(|st| st.phase));
            self.update_status(d, |st| {
                st.reason = Some(report.reason.to_owned());
                st.message = Some(report.destination.clone());
                change(st, false);
                st.peer = Some(rerecord(st.peer.as_ref(), s, d));
                st.peer_phase = offer_phase;
            })
            .await?;
            return Ok(());
        }
        let itself = role_of(s) == Some(Role::Both);
        let new_s = self
            .update_status(s, |st| {
                st.reason = Some(report.reason.to_owned());
                st.message = Some(report.source.clone());
                change(st, true);
                if let Some(d) = d {
                    st.peer = Some(rerecord(st.peer.as_ref(), d, s));
                } else if itself {
                    st.peer = Some(rerecord(st.peer.as_ref(), s, s));
                }
                st.peer_phase = st.phase;
            })
            .await?;
        if let Some(d) = d {
            let phase = new_s.status.as_ref().and_then(|st| st.phase);
            self.update_status(d, |st| {
                st.reason = Some(report.reason.to_owned());
                st.message = Some(report.destination.clone());
                change(st, false);
                st.peer = Some(rerecord(st.peer.as_ref(), s, d));
                st.peer_phase = phase;
            })
            .await?;
        }
        Ok(())
    }

    /// Records `step` on the pair, as [`Self::update_pair`] writes it (a
    /// standing offer's pair on the request alone), leaving reason and
    /// message as they are.
    async fn mark_step(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
        step: StepName,
    ) -> Result<(), Error> {
        let now = now();
        let d = d.filter(|d| d.metadata.uid != s.metadata.uid);
        let own = (!is_standing_pair(s)).then_some(s);
        for t in own.into_iter().chain(d) {
            self.update_status(t, |st| st.record_step(step, &now))
                .await?;
        }
        Ok(())
    }

    /// A read-modify-write of `t`'s status; emits an Event when the phase
    /// changes.
    async fn update_status(
        &self,
        t: &NamespaceTransfer,
        change: impl Fn(&mut NamespaceTransferStatus),
    ) -> Result<NamespaceTransfer, Error> {
        self.leadership.check()?;
        let before = t.status.as_ref().and_then(|st| st.phase);
        let updated = self
            .store
            .guaranteed_update(&self.ctx, t.own_namespace(), name_of(t), true, |current| {
                if current.metadata.uid != t.metadata.uid {
                    return Err(ApiError::Conflict {
                        resource: GroupResource::new(crate::api::GROUP, "namespacetransfers"),
                        name: name_of(t).to_owned(),
                        message: "the transfer was replaced while it was being reconciled"
                            .to_owned(),
                    });
                }
                // A decision made on an active transfer never overwrites an
                // outcome recorded meanwhile.
                if is_active(t) && !is_active(current) {
                    return Err(ApiError::Conflict {
                        resource: GroupResource::new(crate::api::GROUP, "namespacetransfers"),
                        name: name_of(t).to_owned(),
                        message: "the transfer finished while it was being reconciled".to_owned(),
                    });
                }
                let mut next = current.clone();
                next.metadata.resource_version = None;
                let role = role_of(current);
                let status = next
                    .status
                    .get_or_insert_with(NamespaceTransferStatus::default);
                // Before `change`, so that its conditions carry it too.
                status.observed_generation = current.metadata.generation;
                change(status);
                status.role = role;
                Ok(next)
            })
            .await?;
        let after = updated.status.as_ref().and_then(|st| st.phase);
        if before != after {
            if let Some(phase) = after {
                let severity = match phase {
                    Phase::Failed | Phase::Cancelled => Severity::Warning,
                    _ => Severity::Normal,
                };
                let status = updated.status.clone().unwrap_or_default();
                let reason = status
                    .reason
                    .clone()
                    .unwrap_or_else(|| phase.as_str().to_owned());
                let note = format!(
                    "{}: {}",
                    phase.as_str(),
                    status.message.clone().unwrap_or_default()
                );
                self.events
                    .publish(
                        &reference_to(&updated),
                        severity,
                        &reason,
                        "Reconcile",
                        &note,
                    )
                    .await;
            }
        }
        Ok(updated)
    }

    /// Adds (`true`) or removes our finalizer.
    async fn set_finalizer(&self, t: &NamespaceTransfer, present: bool) -> Result<(), Error> {
        if has_finalizer(t) == present {
            return Ok(());
        }
        self.leadership.check()?;
        let result = self
            .store
            .guaranteed_update(&self.ctx, t.own_namespace(), name_of(t), false, |current| {
                let mut next = current.clone();
                next.metadata.resource_version = None;
                let finalizers = next.metadata.finalizers.get_or_insert_with(Vec::new);
                finalizers.retain(|f| f != FINALIZER_TRANSFER_PROTECTION);
                if present {
                    finalizers.push(FINALIZER_TRANSFER_PROTECTION.to_owned());
                }
                if finalizers.is_empty() {
                    next.metadata.finalizers = None;
                }
                Ok(next)
            })
            .await;
        match result {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

// ----- pure helpers ---------------------------------------------------------------------

/// Reason of a standing clone offer that is open.
pub const REASON_OFFERING: &str = "Offering";

/// The fault-injection point between R1's two writes for a standing
/// offer's pair: its record, and the offer's count of the clone.
const R1_COUNT: &str = "R1-count";

/// How often an open standing offer counts its clones again (a claim's
/// deletion wakes no transfer).
const OFFER_RECOUNT: Duration = Duration::from_secs(10);

/// The pair of standing offer `s` and its request `d` as the decision sees
/// a pair: the offer, carrying the pair's state (the request's status,
/// naming the request as the peer) and the pair's R1 record, which the
/// offer keeps (`status.pairs`) where the destination cannot read it. The
/// phase and the steps live on the request because the offer is shared by
/// all its pairs; the lock and the volume marker still name the offer, each
/// pair's clone by its own name.
fn standing_view(s: &NamespaceTransfer, d: &NamespaceTransfer) -> NamespaceTransfer {
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

/// The destination's words for a completed transfer `s`: the volume is its
/// own now; the claim it came from (in Clone mode, the clone) is not.
fn completed_for_destination(s: &NamespaceTransfer, volume: &str, to: &str) -> String {
    let origin = format!("{}/{}", s.source_namespace(), s.spec.source.name);
    match s.mode() {
        TransferMode::Move => format!("volume {volume} moved from {origin} to {to}"),
        TransferMode::Clone => {
            format!("volume {volume}, a clone of {origin}, was handed over to {to}")
        }
    }
}

/// What the destination receives from the transfer `s`, in words it may
/// read: the claim its own spec names, never the clone that carries it.
fn received_from(s: &NamespaceTransfer) -> String {
    let origin = format!("{}/{}", s.source_namespace(), s.spec.source.name);
    match s.mode() {
        TransferMode::Clone => format!("a clone of {origin}"),
        TransferMode::Move => format!("the volume of {origin}"),
    }
}

/// The R1 record the standing offer `s` keeps for its request `d`.
fn standing_record<'a>(
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
fn is_record_of(
    record: &crate::api::namespace_transfer::PairRecord,
    d: &NamespaceTransfer,
    s: &NamespaceTransfer,
) -> bool {
    record.request.uid.is_some() && is_named(d, &record.request, s)
}

/// Whether `t` is a standing offer's pair view (see [`standing_view`]): an
/// offer itself never records a peer.
/// Whether `action` must be decided on live reads of the claims and the
/// volume rather than the watch copies: the steps that end a transfer or
/// give the volume back its policy rest on a claim's presence, absence or
/// state, which no precondition of theirs fences (the others are writes
/// conditional on the resourceVersion or uid they were decided on, so a
/// stale copy costs a refused write, never a wrong step).
fn needs_live_facts(action: &Action) -> bool {
    matches!(
        action,
        Action::Finish { .. }
            | Action::Settle { .. }
            | Action::Complete
            | Action::DestinationLost { .. }
            | Action::Unmark { .. }
    )
}

fn is_standing_pair(t: &NamespaceTransfer) -> bool {
    t.is_standing_offer()
        && t.status
            .as_ref()
            .and_then(|st| st.peer.as_ref())
            .is_some_and(|p| p.uid.is_some() && p.uid != t.metadata.uid)
}

/// The protocol step an action carries out, for the fault hooks.
fn step_of(action: &Action) -> Step {
    match action {
        Action::CreateClone(_) => Step::Clone,
        Action::Lock { .. } | Action::RecordSource(_) => Step::Lock,
        Action::Retain { .. } => Step::Retain,
        Action::CreateDestination(_) | Action::RecordDestination(_) => Step::CreateTarget,
        Action::Commit { .. } => Step::Commit,
        Action::ReleaseSource { .. } => Step::ReleaseSource,
        _ => Step::Settle,
    }
}

fn now() -> Time {
    Time(Timestamp::now())
}

fn set(st: &mut NamespaceTransferStatus, type_: &str, ok: bool, reason: &str, message: &str) {
    apimeta::set_condition(
        &mut st.conditions,
        Condition {
            type_: type_.to_owned(),
            status: if ok { CONDITION_TRUE } else { CONDITION_FALSE }.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now(),
            observed_generation: st.observed_generation,
        },
    );
}

/// The peer's view of a finished pair: the same outcome and reason, in the
/// words the receiving side may read, and its own role.
fn mirror(
    st: &mut NamespaceTransferStatus,
    source: &NamespaceTransferStatus,
    s: &NamespaceTransfer,
    d: &NamespaceTransfer,
) {
    st.phase = source.phase;
    st.reason = source.reason.clone();
    let reason = source.reason.clone().unwrap_or_default();
    st.message = Some(
        match (source.phase, &source.volume_name, &source.destination_claim) {
            (Some(Phase::Completed), Some(volume), Some(to)) => {
                completed_for_destination(s, volume, &format!("{}/{}", to.namespace, to.name))
            }
            _ => destination_text(&reason).to_owned(),
        },
    );
    if source.phase == Some(Phase::Completed) {
        st.volume_name = source.volume_name.clone();
    }
    st.completion_time = source.completion_time.clone();
    let message = st.message.clone().unwrap_or_default();
    if let Some(ready) = apimeta::find_condition(&source.conditions, CONDITION_READY) {
        let ok = ready.status == CONDITION_TRUE;
        set(st, CONDITION_READY, ok, &ready.reason, &message);
    }
    st.peer = Some(rerecord(st.peer.as_ref(), s, d));
    st.peer_phase = source.phase;
}

/// When a finished transfer finished: its completion time, or when Ready
/// last changed.
fn finish_time(t: &NamespaceTransfer) -> Option<Timestamp> {
    let st = t.status.as_ref()?;
    st.completion_time.as_ref().map(|c| c.0).or_else(|| {
        apimeta::find_condition(&st.conditions, CONDITION_READY).map(|c| c.last_transition_time.0)
    })
}

/// The time left before `activeDeadlineSeconds` runs out; `None` without one.
fn remaining_until_deadline(t: &NamespaceTransfer) -> Option<Duration> {
    let deadline = t.spec.active_deadline_seconds?;
    let created = t.metadata.creation_timestamp.as_ref()?.0.as_second();
    let left = created.saturating_add(deadline) - Timestamp::now().as_second();
    Some(Duration::from_secs(left.max(0).unsigned_abs()))
}

#[cfg(test)]
mod tests;
