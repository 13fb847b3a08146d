//! The NamespaceTransfer controller (DESIGN §2.1.3–2.1.6): matching, the
//! preconditions, the rebind protocol R1–R6 with its rollback, phases,
//! conditions, cancellation, finalizers, TTL and deadline, and Events.
//!
//! # How it decides
//! The Source-role (or Both) object of a pair drives it; a Destination-role
//! object only reports that it waits or was taken, and wakes its Source.
//! Every reconcile starts from scratch: it reads our objects from etcd and the
//! PV and PVCs live from kube-apiserver, and works out where the protocol is
//! from that alone (level-triggered). Memory is only a hint of what to look
//! at. The facts it reads:
//!
//! - `status.sourceClaim` is set: R1 is done (the source claim carries our
//!   lock annotation and we know its uid and volume).
//! - the PV carries `original-reclaim-policy`: R2 is done.
//! - the destination claim exists with our lock annotation: R3 is done.
//! - the PV's `claimRef` names the destination claim's uid: R4, the commit
//!   point, is done (and the lock then leaves the destination claim). Before it, everything can be undone; after it, the
//!   transfer only ever goes forward.
//! - a finished phase (Failed, Cancelled) while our finalizer is still on:
//!   the rollback was decided and is being carried out. The phase is written
//!   *before* the rollback, so a crash mid-rollback never redoes a step.
//!
//! Each step is idempotent and conditional on the resourceVersion it was
//! decided on, and the leadership lease is checked before every write.

pub mod matching;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::core::PartialObjectMeta;
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
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus, Role,
    SourceClaimSnapshot, TransferMode, ANNOTATION_ALLOW_NAMESPACE_TRANSFER,
    ANNOTATION_ORIGINAL_RECLAIM_POLICY, ANNOTATION_TRANSFERRED_FROM, ANNOTATION_TRANSFER_LOCK,
    CONDITION_AUTHORIZED, CONDITION_PEER_MATCHED, CONDITION_READY, CONDITION_REBOUND,
    CONDITION_SOURCE_RELEASED, FINALIZER_TRANSFER_PROTECTION, REASON_DEADLINE_EXCEEDED,
    REASON_DESTINATION_EXISTS, REASON_FORBIDDEN, REASON_PEER_TAKEN,
};
use crate::authz::Authorizer;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, DeleteOptions, ListOptions, Shared, Store};

use matching::{is_active, reference, role_of, DestinationView};

/// Reason: no transfer in the other namespace matches yet.
pub const REASON_WAITING_FOR_PEER: &str = "WaitingForPeer";
/// Reason: the source claim does not exist.
pub const REASON_SOURCE_NOT_FOUND: &str = "SourceNotFound";
/// Reason: the source claim is not (yet) bound to its volume.
pub const REASON_SOURCE_NOT_BOUND: &str = "SourceNotBound";
/// Reason: a running pod uses the source claim.
pub const REASON_SOURCE_IN_USE: &str = "SourceInUse";
/// Reason: another active transfer holds the source claim's lock.
pub const REASON_SOURCE_LOCKED: &str = "SourceLocked";
/// Reason: the volume's StorageClass does not allow transfers.
pub const REASON_STORAGE_CLASS_NOT_ALLOWED: &str = "StorageClassNotAllowed";
/// Reason: kube-apiserver refused to create the destination claim (quota,
/// admission, validation); its message is kept.
pub const REASON_DESTINATION_REFUSED: &str = "DestinationRefused";
/// Reason: the volume vanished or was bound elsewhere by someone else.
pub const REASON_VOLUME_CHANGED: &str = "VolumeChanged";
/// Reason: one side was deleted before the commit point.
pub const REASON_DELETED: &str = "Deleted";
/// Reason: the transfer asks for a mode this server does not run (Clone).
pub const REASON_MODE_NOT_SUPPORTED: &str = "ModeNotSupported";
/// Reason: the transfer completed.
pub const REASON_COMPLETED: &str = "Completed";

/// How often a waiting pair looks again even without a triggering event.
const WAIT_POLL: Duration = Duration::from_secs(5);

/// The steps of the rebind protocol (§2.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
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
    pub const ALL: [Step; 6] = [
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
}

/// An outcome to record: the finished phase, why, and what to tell people.
#[derive(Debug, Clone)]
struct Outcome {
    phase: Phase,
    reason: &'static str,
    message: String,
}

impl Outcome {
    fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            phase: Phase::Failed,
            reason,
            message: message.into(),
        }
    }

    fn cancelled(message: impl Into<String>) -> Self {
        Self {
            phase: Phase::Cancelled,
            reason: REASON_DELETED,
            message: message.into(),
        }
    }
}

/// The reconciler of NamespaceTransfers.
#[derive(Debug, Clone)]
pub struct TransferController {
    store: Arc<Store<NamespaceTransferStrategy>>,
    cluster: Cluster,
    classes: Reflector<PartialObjectMeta<StorageClass>>,
    authorizer: Arc<dyn Authorizer>,
    events: Events,
    leadership: Leadership,
    queue: WorkQueue,
    options: TransferOptions,
    ctx: Context,
}

impl TransferController {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<Store<NamespaceTransferStrategy>>,
        cluster: Cluster,
        classes: Reflector<PartialObjectMeta<StorageClass>>,
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
        }
    }

    /// Brings the transfer `namespace/name` one step closer to where it
    /// should be.
    pub async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        let Some(t) = super::keyed(&self.leadership, &self.store, key).await? else {
            return Ok(Next::Done);
        };
        if t.mode() != TransferMode::Move && is_active(&t) {
            let outcome = Outcome::failed(
                REASON_MODE_NOT_SUPPORTED,
                format!(
                    "mode {} is not implemented by this server yet; only Move is",
                    t.mode()
                ),
            );
            self.record_outcome(&t, None, &outcome).await?;
            return Ok(Next::Done);
        }
        match role_of(&t) {
            Some(Role::Destination) => self.reconcile_destination(t).await,
            Some(Role::Source | Role::Both) => self.reconcile_source(t).await,
            // Validation refuses a transfer without a role; nothing to do.
            None => Ok(Next::Done),
        }
    }

    async fn all_transfers(&self) -> Result<Vec<NamespaceTransfer>, Error> {
        let list = self.store.list(None, &ListOptions::default()).await?;
        Ok(list.items.into_iter().map(Shared::into_owned).collect())
    }

    // ----- the destination side ---------------------------------------------------

    /// A Destination-role object: wakes the Source that drives it, or says
    /// that it waits or was taken.
    async fn reconcile_destination(&self, d: NamespaceTransfer) -> Result<Next, Error> {
        if !is_active(&d) {
            if has_finalizer(&d) {
                // The pair's Source removes this finalizer when it is done;
                // if the Source is gone or done, do it here.
                if let Some(peer) = recorded_peer(&d) {
                    if let Some(s) = self.get(&peer.namespace, &peer.name).await? {
                        if has_finalizer(&s) {
                            self.queue.add(&object_key(&s));
                            return Ok(Next::Done);
                        }
                    }
                }
                self.set_finalizer(&d, false).await?;
            }
            return self.expire(&d).await;
        }
        let all = self.all_transfers().await?;
        match matching::destination_view(&d, &all) {
            DestinationView::Matched(s) => {
                self.queue.add(&object_key(s));
                Ok(Next::Done)
            }
            DestinationView::Taken { winner, .. } => {
                let message = format!(
                    "the offer from namespace {:?} was matched first by NamespaceTransfer {:?} in this namespace",
                    d.source_namespace(),
                    winner.metadata.name.as_deref().unwrap_or_default()
                );
                self.unmatched(&d, Phase::Pending, REASON_PEER_TAKEN, &message)
                    .await
            }
            DestinationView::Unmatched => {
                if let Some(peer) = recorded_peer(&d) {
                    // It was matched, and its Source is gone or finished.
                    match self.get(&peer.namespace, &peer.name).await? {
                        Some(s) if !is_active(&s) => {
                            self.queue.add(&object_key(&s));
                            return Ok(Next::Done);
                        }
                        _ => {
                            let outcome = Outcome::cancelled(
                                "the peer transfer in the source namespace was deleted",
                            );
                            self.record_outcome(&d, None, &outcome).await?;
                            return self.expire(&d).await;
                        }
                    }
                }
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

    /// An object without a peer: says why (`PeerMatched=False`), then minds
    /// its deadline.
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
        self.check_deadline(t).await
    }

    /// Fails an unmatched object whose `activeDeadlineSeconds` has passed, or
    /// asks to be woken when it will.
    async fn check_deadline(&self, t: &NamespaceTransfer) -> Result<Next, Error> {
        match remaining_until_deadline(t) {
            None => Ok(Next::Done),
            Some(left) if !left.is_zero() => Ok(Next::After(left)),
            Some(_) => {
                let outcome = Outcome::failed(
                    REASON_DEADLINE_EXCEEDED,
                    "activeDeadlineSeconds passed before the transfer was matched",
                );
                self.record_outcome(t, None, &outcome).await?;
                self.expire(t).await
            }
        }
    }

    // ----- the source side: the pair ---------------------------------------------

    /// A Source-role or Both object: finds its peer and drives the pair.
    async fn reconcile_source(&self, s: NamespaceTransfer) -> Result<Next, Error> {
        let recorded = recorded_peer(&s);
        let peer = if role_of(&s) == Some(Role::Both) {
            Some(s.clone())
        } else if let Some(p) = &recorded {
            self.get(&p.namespace, &p.name).await?
        } else {
            let all = self.all_transfers().await?;
            matching::peer_of(&s, &all).cloned()
        };
        if !is_active(&s) {
            return self.finish(&s, peer.as_ref()).await;
        }
        let Some(d) = peer else {
            if recorded.is_some() {
                let outcome = Outcome::cancelled(
                    "the peer transfer in the destination namespace was deleted",
                );
                return self.abort(&s, None, outcome).await;
            }
            let message = format!(
                "waiting for a NamespaceTransfer in namespace {:?} that requests claim {:?}",
                s.destination_namespace(),
                s.spec.source.name
            );
            return self
                .unmatched(&s, Phase::WaitingForPeer, REASON_WAITING_FOR_PEER, &message)
                .await;
        };
        match source_snapshot(&s) {
            None => self.start(&s, &d).await,
            Some(snapshot) => self.advance(&s, &d, &snapshot).await,
        }
    }

    /// Before R1: nothing has been touched. Checks every precondition, then
    /// locks the source claim.
    async fn start(&self, s: &NamespaceTransfer, d: &NamespaceTransfer) -> Result<Next, Error> {
        if is_deleting(s) || is_deleting(d) {
            let outcome = Outcome::cancelled(format!(
                "NamespaceTransfer {} was deleted before the volume was touched",
                if is_deleting(s) {
                    object_key(s)
                } else {
                    object_key(d)
                }
            ));
            return self.abort(s, Some(d), outcome).await;
        }
        if deadline_passed(s) || deadline_passed(d) {
            let outcome = Outcome::failed(
                REASON_DEADLINE_EXCEEDED,
                "activeDeadlineSeconds passed before the volume could be moved",
            );
            return self.abort(s, Some(d), outcome).await;
        }
        let (s, d) = self.record_match(s, d).await?;
        let (s, d) = (&s, &d);
        let source_ns = s.source_namespace();
        let source_name = &s.spec.source.name;

        // The source claim exists and is bound to a volume that names it.
        let Some(claim) = self.cluster.claim(source_ns, source_name).await? else {
            let outcome = Outcome::failed(
                REASON_SOURCE_NOT_FOUND,
                format!("PersistentVolumeClaim {source_ns}/{source_name} does not exist"),
            );
            return self.abort(s, Some(d), outcome).await;
        };
        let volume_name = claim
            .spec
            .as_ref()
            .and_then(|sp| sp.volume_name.clone())
            .unwrap_or_default();
        let bound = claim_phase(&claim) == "Bound" && !volume_name.is_empty();
        let volume = if bound {
            self.cluster.volume(&volume_name).await?
        } else {
            None
        };
        let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
        let Some(volume) = volume.filter(|v| claim_ref_is(v, source_ns, source_name, &claim_uid))
        else {
            let message = format!(
                "PersistentVolumeClaim {source_ns}/{source_name} is not bound to a volume yet"
            );
            self.wait(s, d, REASON_SOURCE_NOT_BOUND, &message, false)
                .await?;
            return Ok(Next::After(WAIT_POLL));
        };

        // The StorageClass allows transfers.
        if let Some(refusal) = self.class_refusal(&volume).await? {
            let outcome = Outcome::failed(REASON_STORAGE_CLASS_NOT_ALLOWED, refusal);
            return self.abort(s, Some(d), outcome).await;
        }

        // No other active transfer holds the lock.
        let my_uid = uid_of(s);
        if let Some(holder) = annotation(&claim.metadata, ANNOTATION_TRANSFER_LOCK) {
            if holder != my_uid && self.lock_holder_is_active(holder).await? {
                let message = format!(
                    "PersistentVolumeClaim {source_ns}/{source_name} is locked by another transfer ({holder})"
                );
                self.wait(s, d, REASON_SOURCE_LOCKED, &message, false)
                    .await?;
                return Ok(Next::After(WAIT_POLL));
            }
        }

        // The destination name is free.
        let (dest_ns, dest_name) = destination_of(s, d);
        if let Some(existing) = self.cluster.claim(dest_ns, dest_name).await? {
            if annotation(&existing.metadata, ANNOTATION_TRANSFER_LOCK) != Some(my_uid) {
                let outcome = Outcome::failed(
                    REASON_DESTINATION_EXISTS,
                    format!(
                        "PersistentVolumeClaim {dest_ns}/{dest_name} already exists and was not created by this transfer"
                    ),
                );
                return self.abort(s, Some(d), outcome).await;
            }
        }

        // Nobody uses the source claim.
        let users = self.cluster.pods_using(source_ns, source_name).await?;
        if !users.is_empty() {
            let message = in_use_message(source_ns, source_name, &users);
            self.wait(s, d, REASON_SOURCE_IN_USE, &message, true)
                .await?;
            return Ok(Next::After(WAIT_POLL));
        }

        // From here on the finalizer holds both objects.
        self.set_finalizer(s, true).await?;
        if !same_object(s, d) {
            self.set_finalizer(d, true).await?;
        }

        // R1: lock, conditional on the claim we checked.
        self.leadership.check()?;
        let lock = json!({"metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "annotations": {ANNOTATION_TRANSFER_LOCK: my_uid},
        }});
        match self
            .cluster
            .patch_claim(source_ns, source_name, &lock)
            .await
        {
            Ok(_) => {}
            Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {
                return Ok(Next::Now)
            }
            Err(e) => return Err(e.into()),
        }
        let snapshot = snapshot_of(&claim, &volume_name);
        let released =
            format!("no running pod uses PersistentVolumeClaim {source_ns}/{source_name}");
        self.update_pair(s, d, |st, is_source| {
            st.phase = Some(Phase::Rebinding);
            st.reason = None;
            st.message = Some(format!(
                "locked PersistentVolumeClaim {source_ns}/{source_name}; moving volume {volume_name}"
            ));
            if is_source {
                st.source_claim = Some(snapshot.clone());
            }
            set(st, CONDITION_SOURCE_RELEASED, true, "NotInUse", &released);
        })
        .await?;
        fault::after(Step::Lock);
        self.events
            .publish(
                &claim_reference(source_ns, source_name, Some(&claim_uid)),
                Severity::Normal,
                "Locked",
                Step::Lock.action(),
                &format!(
                    "locked for NamespaceTransfer {}: its volume {volume_name} moves to {dest_ns}/{dest_name}",
                    object_key(s)
                ),
            )
            .await;
        Ok(Next::Now)
    }

    /// After R1: works out which steps are done from the volume and the
    /// claims, and takes the next one.
    async fn advance(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
        snapshot: &SourceClaimSnapshot,
    ) -> Result<Next, Error> {
        let source_ns = s.source_namespace();
        let (dest_ns, dest_name) = destination_of(s, d);
        let my_uid = uid_of(s);
        // Only the controller writes status; still, never act on a snapshot
        // of a claim other than the one both parties consented to.
        if snapshot.name != s.spec.source.name {
            let outcome = Outcome::failed(
                REASON_VOLUME_CHANGED,
                format!(
                    "status.sourceClaim names claim {:?}, not spec.source.name {:?}; refusing to act on it",
                    snapshot.name, s.spec.source.name
                ),
            );
            return self.abort(s, Some(d), outcome).await;
        }
        let Some(volume) = self.cluster.volume(&snapshot.volume_name).await? else {
            let outcome = Outcome::failed(
                REASON_VOLUME_CHANGED,
                format!(
                    "PersistentVolume {} was deleted during the transfer",
                    snapshot.volume_name
                ),
            );
            return self.abort(s, Some(d), outcome).await;
        };
        let destination = self.cluster.claim(dest_ns, dest_name).await?;
        // Committed: the volume names the destination claim, uid and all.
        // (Our lock leaves the destination claim right after R4, so this
        // does not look for it.)
        if let Some(dest) = &destination {
            if claim_ref_is(
                &volume,
                dest_ns,
                dest_name,
                dest.metadata.uid.as_deref().unwrap_or_default(),
            ) {
                return self.settle(s, d, snapshot, volume, dest.clone()).await;
            }
        }
        // Before R4 a destination claim is ours only if it carries our lock.
        let destination = destination
            .filter(|c| annotation(&c.metadata, ANNOTATION_TRANSFER_LOCK) == Some(my_uid));

        // Before R4: everything can still be undone.
        if is_deleting(s) || is_deleting(d) {
            let outcome = Outcome::cancelled(format!(
                "NamespaceTransfer {} was deleted before the volume was handed over; the source is restored",
                if is_deleting(s) { object_key(s) } else { object_key(d) }
            ));
            return self.abort(s, Some(d), outcome).await;
        }
        if deadline_passed(s) || deadline_passed(d) {
            let outcome = Outcome::failed(
                REASON_DEADLINE_EXCEEDED,
                "activeDeadlineSeconds passed before the volume could be moved; the source is restored",
            );
            return self.abort(s, Some(d), outcome).await;
        }
        if !claim_ref_is(&volume, source_ns, &snapshot.name, &snapshot.uid) {
            let outcome = Outcome::failed(
                REASON_VOLUME_CHANGED,
                format!(
                    "PersistentVolume {} is no longer bound to {source_ns}/{}; someone else changed it",
                    snapshot.volume_name, snapshot.name
                ),
            );
            return self.abort(s, Some(d), outcome).await;
        }

        // R2: re-check both parties' rights, then keep the volume whatever
        // happens to its claims.
        let mut volume = volume;
        if annotation(&volume.metadata, ANNOTATION_ORIGINAL_RECLAIM_POLICY).is_none() {
            if let Some(refusal) = self.recheck_rights(s, d).await? {
                let outcome = Outcome::failed(REASON_FORBIDDEN, refusal);
                return self.abort(s, Some(d), outcome).await;
            }
            let authorized = "both parties still hold the rights the transfer needs";
            self.update_pair(s, d, |st, _| {
                set(
                    st,
                    CONDITION_AUTHORIZED,
                    true,
                    "RightsConfirmed",
                    authorized,
                );
            })
            .await?;
            let policy = volume
                .spec
                .as_ref()
                .and_then(|sp| sp.persistent_volume_reclaim_policy.clone())
                .unwrap_or_else(|| "Retain".to_owned());
            self.leadership.check()?;
            let retain = json!({
                "metadata": {
                    "resourceVersion": volume.metadata.resource_version,
                    "annotations": {ANNOTATION_ORIGINAL_RECLAIM_POLICY: policy},
                },
                "spec": {"persistentVolumeReclaimPolicy": "Retain"},
            });
            volume = match self
                .cluster
                .patch_volume(&snapshot.volume_name, &retain)
                .await
            {
                Ok(v) => v,
                Err(ClusterError::Conflict { .. }) => return Ok(Next::Now),
                Err(e) => return Err(e.into()),
            };
            fault::after(Step::Retain);
        }

        // R3: the destination claim, pre-bound to the volume.
        let destination = match destination {
            Some(dest) => dest,
            None => {
                if self.cluster.claim(dest_ns, dest_name).await?.is_some() {
                    let outcome = Outcome::failed(
                        REASON_DESTINATION_EXISTS,
                        format!(
                            "PersistentVolumeClaim {dest_ns}/{dest_name} already exists and was not created by this transfer"
                        ),
                    );
                    return self.abort(s, Some(d), outcome).await;
                }
                self.leadership.check()?;
                let claim = destination_claim(s, dest_ns, dest_name, snapshot);
                match self.cluster.create_claim(dest_ns, &claim).await {
                    Ok(created) => {
                        fault::after(Step::CreateTarget);
                        self.events
                            .publish(
                                &claim_reference(
                                    dest_ns,
                                    dest_name,
                                    created.metadata.uid.as_deref(),
                                ),
                                Severity::Normal,
                                "Created",
                                Step::CreateTarget.action(),
                                &format!(
                                    "created to receive volume {} from {source_ns}/{}",
                                    snapshot.volume_name, snapshot.name
                                ),
                            )
                            .await;
                        created
                    }
                    Err(ClusterError::AlreadyExists { .. }) => return Ok(Next::Now),
                    Err(ClusterError::Refused { message, .. }) => {
                        let outcome = Outcome::failed(
                            REASON_DESTINATION_REFUSED,
                            format!("creating PersistentVolumeClaim {dest_ns}/{dest_name} was refused: {message}"),
                        );
                        return self.abort(s, Some(d), outcome).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };

        // A pod may have started using the source since it was checked.
        fault::before(Step::Commit).await;
        let users = self.cluster.pods_using(source_ns, &snapshot.name).await?;
        if !users.is_empty() {
            let message = format!(
                "{}; it started after the claim was checked, so the rebind waits before committing",
                in_use_message(source_ns, &snapshot.name, &users)
            );
            self.wait(s, d, REASON_SOURCE_IN_USE, &message, true)
                .await?;
            return Ok(Next::After(WAIT_POLL));
        }

        // A deletion asked for while this reconcile ran still cancels: look
        // once more, just before the point of no return.
        for t in [s, d] {
            let current = self.get(t.own_namespace(), name_of(t)).await?;
            if current.as_ref().is_none_or(is_deleting) {
                let outcome = Outcome::cancelled(format!(
                    "NamespaceTransfer {} was deleted before the volume was handed over; the source is restored",
                    object_key(t)
                ));
                return self.abort(s, Some(d), outcome).await;
            }
        }

        // R4: commit, conditional on the volume we decided on.
        self.leadership.check()?;
        let dest_uid = destination.metadata.uid.clone().unwrap_or_default();
        let commit = json!({
            "metadata": {"resourceVersion": volume.metadata.resource_version},
            "spec": {"claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": dest_ns,
                "name": dest_name,
                "uid": dest_uid,
                "resourceVersion": null,
                "fieldPath": null,
            }},
        });
        match self
            .cluster
            .patch_volume(&snapshot.volume_name, &commit)
            .await
        {
            Ok(_) => {}
            Err(ClusterError::Conflict { .. }) => return Ok(Next::Now),
            Err(e) => return Err(e.into()),
        }
        fault::after(Step::Commit);
        // The lock has done its work on the destination claim. Taking it off
        // also changes the claim, which makes the cluster's PV controller
        // bind it now rather than at its next periodic resync.
        self.unlock_destination(dest_ns, dest_name).await?;
        let rebound = format!(
            "PersistentVolume {} now names {dest_ns}/{dest_name}",
            snapshot.volume_name
        );
        self.update_pair(s, d, |st, _| {
            set(st, CONDITION_REBOUND, true, "ClaimRefMoved", &rebound);
        })
        .await?;
        self.events
            .publish(
                &reference_to(s),
                Severity::Normal,
                "Committed",
                Step::Commit.action(),
                &rebound,
            )
            .await;
        Ok(Next::Now)
    }

    /// After R4: release the source claim (R5), and once the destination is
    /// Bound, restore the reclaim policy and complete (R6).
    async fn settle(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
        snapshot: &SourceClaimSnapshot,
        volume: PersistentVolume,
        destination: PersistentVolumeClaim,
    ) -> Result<Next, Error> {
        let source_ns = s.source_namespace();
        let (dest_ns, dest_name) = destination_of(s, d);
        // R5: the source claim no longer holds the volume; delete it.
        fault::before(Step::ReleaseSource).await;
        if let Some(source) = self.cluster.claim(source_ns, &snapshot.name).await? {
            if source.metadata.uid.as_deref() == Some(&snapshot.uid)
                && source.metadata.deletion_timestamp.is_none()
            {
                let users = self.cluster.pods_using(source_ns, &snapshot.name).await?;
                if !users.is_empty() {
                    let note = format!(
                        "{}, but its volume {} was already handed to {dest_ns}/{dest_name}",
                        in_use_message(source_ns, &snapshot.name, &users),
                        snapshot.volume_name
                    );
                    for regarding in [
                        reference_to(s),
                        claim_reference(source_ns, &snapshot.name, Some(&snapshot.uid)),
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
                self.cluster
                    .delete_claim(source_ns, &snapshot.name, &snapshot.uid)
                    .await?;
                fault::after(Step::ReleaseSource);
            }
        }

        // R6: wait for the cluster's PV controller to bind the destination.
        let bound = claim_phase(&destination) == "Bound"
            && destination
                .spec
                .as_ref()
                .and_then(|sp| sp.volume_name.as_deref())
                == Some(snapshot.volume_name.as_str());
        if !bound {
            let message = format!(
                "waiting for PersistentVolumeClaim {dest_ns}/{dest_name} to be bound to {}",
                snapshot.volume_name
            );
            self.update_pair(s, d, |st, _| {
                st.phase = Some(Phase::Rebinding);
                st.message = Some(message.clone());
            })
            .await?;
            return Ok(Next::After(Duration::from_secs(1)));
        }
        match self.restore_reclaim_policy(&volume).await {
            Ok(()) => {}
            Err(Error::Cluster(ClusterError::Conflict { .. })) => return Ok(Next::Now),
            Err(e) => return Err(e),
        }
        if annotation(&destination.metadata, ANNOTATION_TRANSFER_LOCK).is_some() {
            self.unlock_destination(dest_ns, dest_name).await?;
        }
        let message = format!(
            "volume {} moved from {source_ns}/{} to {dest_ns}/{dest_name}",
            snapshot.volume_name, snapshot.name
        );
        let volume_name = snapshot.volume_name.clone();
        let now = now();
        self.update_pair(s, d, |st, _| {
            st.phase = Some(Phase::Completed);
            st.reason = Some(REASON_COMPLETED.to_owned());
            st.message = Some(message.clone());
            st.volume_name = Some(volume_name.clone());
            st.completion_time = Some(now.clone());
            set(st, CONDITION_READY, true, REASON_COMPLETED, &message);
        })
        .await?;
        fault::after(Step::Settle);
        self.events
            .publish(
                &claim_reference(dest_ns, dest_name, destination.metadata.uid.as_deref()),
                Severity::Normal,
                "TransferCompleted",
                Step::Settle.action(),
                &message,
            )
            .await;
        self.release_finalizers(s, d).await?;
        Ok(Next::Now)
    }

    // ----- finishing ----------------------------------------------------------------

    /// Records `outcome` on the pair (phase first, so that a crash cannot
    /// lose the decision), then undoes whatever was done and lets both
    /// objects go.
    async fn abort(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
        outcome: Outcome,
    ) -> Result<Next, Error> {
        self.record_outcome(s, d, &outcome).await?;
        if let Some(source) = self
            .cluster
            .claim(s.source_namespace(), &s.spec.source.name)
            .await?
        {
            self.events
                .publish(
                    &claim_reference(
                        s.source_namespace(),
                        &s.spec.source.name,
                        source.metadata.uid.as_deref(),
                    ),
                    Severity::Warning,
                    outcome.reason,
                    "Transfer",
                    &format!("NamespaceTransfer {}: {}", object_key(s), outcome.message),
                )
                .await;
        }
        Ok(Next::Now)
    }

    /// Writes a finished phase on `t` and, if given, its peer.
    async fn record_outcome(
        &self,
        t: &NamespaceTransfer,
        peer: Option<&NamespaceTransfer>,
        outcome: &Outcome,
    ) -> Result<(), Error> {
        let change = |st: &mut NamespaceTransferStatus, _: bool| {
            st.phase = Some(outcome.phase);
            st.reason = Some(outcome.reason.to_owned());
            st.message = Some(outcome.message.clone());
            set(st, CONDITION_READY, false, outcome.reason, &outcome.message);
        };
        match peer {
            Some(d) => self.update_pair(t, d, change).await.map(|_| ()),
            None => self
                .update_status(t, |st| change(st, true))
                .await
                .map(|_| ()),
        }
    }

    /// A finished Source (or Both): finishes the clean-up its phase calls for,
    /// makes sure the peer shows the same outcome, lets both objects go, and
    /// deletes it once its TTL has passed.
    async fn finish(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
    ) -> Result<Next, Error> {
        let phase = s.status.as_ref().and_then(|st| st.phase);
        if let Some(d) = d.filter(|d| !same_object(s, d)) {
            let peer_phase = d.status.as_ref().and_then(|st| st.phase);
            let ours = recorded_peer(d).is_some_and(|p| matching::is_named(s, &p));
            if peer_phase != phase && (ours || has_finalizer(d)) {
                let status = s.status.clone().unwrap_or_default();
                self.update_status(d, |st| mirror(st, &status, s)).await?;
            }
        }
        if has_finalizer(s) || d.is_some_and(has_finalizer) {
            if phase != Some(Phase::Completed) {
                self.roll_back(s, d).await?;
            }
            if let Some(d) = d {
                self.release_finalizers(s, d).await?;
            } else {
                self.set_finalizer(s, false).await?;
            }
            return Ok(Next::Now);
        }
        self.expire(s).await
    }

    /// Undoes R3, R2 and R1, each only if it was done, each idempotent. Never
    /// runs after R4: an outcome other than Completed is only ever recorded
    /// before the commit.
    async fn roll_back(
        &self,
        s: &NamespaceTransfer,
        d: Option<&NamespaceTransfer>,
    ) -> Result<(), Error> {
        let my_uid = uid_of(s);
        let source_ns = s.source_namespace();
        let snapshot = source_snapshot(s);
        let volume = match &snapshot {
            Some(snap) => self.cluster.volume(&snap.volume_name).await?,
            None => None,
        };
        // R3: a destination claim we made, and never committed to.
        if let Some(d) = d {
            let (dest_ns, dest_name) = destination_of(s, d);
            if let Some(dest) = self.cluster.claim(dest_ns, dest_name).await? {
                let dest_uid = dest.metadata.uid.clone().unwrap_or_default();
                let committed = volume
                    .as_ref()
                    .is_some_and(|v| claim_ref_is(v, dest_ns, dest_name, &dest_uid));
                if annotation(&dest.metadata, ANNOTATION_TRANSFER_LOCK) == Some(my_uid)
                    && !committed
                {
                    self.leadership.check()?;
                    self.cluster
                        .delete_claim(dest_ns, dest_name, &dest_uid)
                        .await?;
                }
            }
        }
        // R2: the reclaim policy.
        if let Some(volume) = &volume {
            self.restore_reclaim_policy(volume).await?;
        }
        // R1: the lock, if it is ours.
        let source_name = snapshot
            .as_ref()
            .map(|snap| snap.name.as_str())
            .unwrap_or(&s.spec.source.name);
        if let Some(source) = self.cluster.claim(source_ns, source_name).await? {
            if annotation(&source.metadata, ANNOTATION_TRANSFER_LOCK) == Some(my_uid) {
                self.leadership.check()?;
                let unlock = json!({"metadata": {
                    "resourceVersion": source.metadata.resource_version,
                    "annotations": {ANNOTATION_TRANSFER_LOCK: null},
                }});
                self.cluster
                    .patch_claim(source_ns, source_name, &unlock)
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

    /// Undoes R2: the reclaim policy recorded in the volume's annotation
    /// comes back and the annotation goes, conditional on the version read.
    async fn restore_reclaim_policy(&self, volume: &PersistentVolume) -> Result<(), Error> {
        let Some(policy) = annotation(&volume.metadata, ANNOTATION_ORIGINAL_RECLAIM_POLICY) else {
            return Ok(());
        };
        self.leadership.check()?;
        let restore = json!({
            "metadata": {
                "resourceVersion": volume.metadata.resource_version,
                "annotations": {ANNOTATION_ORIGINAL_RECLAIM_POLICY: null},
            },
            "spec": {"persistentVolumeReclaimPolicy": policy},
        });
        let name = volume.metadata.name.as_deref().unwrap_or_default();
        self.cluster.patch_volume(name, &restore).await?;
        Ok(())
    }

    /// Removes the protection finalizer from the destination side, then the
    /// source side (so that a Destination never waits on a vanished Source).
    async fn release_finalizers(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
    ) -> Result<(), Error> {
        if !same_object(s, d) {
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
        if has_finalizer(t) || is_deleting(t) {
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

    // ----- checks -------------------------------------------------------------------

    /// Why the volume's StorageClass forbids transfers, if it does.
    async fn class_refusal(&self, volume: &PersistentVolume) -> Result<Option<String>, Error> {
        if self.options.allow_all_storage_classes {
            return Ok(None);
        }
        let class = volume
            .spec
            .as_ref()
            .and_then(|sp| sp.storage_class_name.clone())
            .unwrap_or_default();
        let volume_name = volume.metadata.name.as_deref().unwrap_or_default();
        if class.is_empty() {
            return Ok(Some(format!(
                "PersistentVolume {volume_name} has no StorageClass, and this server does not run with --allow-all-storage-classes"
            )));
        }
        let meta = match self.classes.get(&ObjectRef::new(&class)) {
            Some(meta) => Some(meta.metadata.clone()),
            None => self.cluster.storage_class(&class).await?,
        };
        let allowed = meta
            .as_ref()
            .and_then(|m| annotation(m, ANNOTATION_ALLOW_NAMESPACE_TRANSFER))
            == Some("true");
        Ok((!allowed).then(|| {
            format!(
                "StorageClass {class:?} of PersistentVolume {volume_name} does not allow namespace transfers: it lacks the annotation {ANNOTATION_ALLOW_NAMESPACE_TRANSFER}: \"true\""
            )
        }))
    }

    /// Whether the transfer with uid `holder` exists and is active.
    async fn lock_holder_is_active(&self, holder: &str) -> Result<bool, Error> {
        Ok(self
            .all_transfers()
            .await?
            .iter()
            .any(|t| t.metadata.uid.as_deref() == Some(holder) && is_active(t)))
    }

    /// Re-runs the create-time SubjectAccessReviews for both stored
    /// requesters, never from a cache. Returns why one is refused.
    async fn recheck_rights(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
    ) -> Result<Option<String>, Error> {
        let parties = if same_object(s, d) {
            vec![s]
        } else {
            vec![s, d]
        };
        for t in parties {
            let Some(requester) = &t.spec.requester else {
                return Ok(Some(format!(
                    "NamespaceTransfer {} records no requester",
                    object_key(t)
                )));
            };
            if let Some(right) = first_missing(
                self.authorizer.as_ref(),
                requester,
                transfer_rights(t),
                true,
            )
            .await?
            {
                return Ok(Some(format!(
                    "User {:?}, who created NamespaceTransfer {}, can no longer {}, which {} requires",
                    requester.username,
                    object_key(t),
                    right.describe(),
                    right.because
                )));
            }
        }
        Ok(None)
    }

    // ----- writing our objects --------------------------------------------------------

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<NamespaceTransfer>, Error> {
        super::current(&self.store, namespace, name).await
    }

    /// Records that `s` and `d` are matched, on both.
    async fn record_match(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
    ) -> Result<(NamespaceTransfer, NamespaceTransfer), Error> {
        let already = recorded_peer(s).is_some_and(|p| matching::is_named(d, &p))
            && recorded_peer(d).is_some_and(|p| matching::is_named(s, &p));
        if already {
            return Ok((s.clone(), d.clone()));
        }
        let message = "matched with the transfer in the other namespace".to_owned();
        self.update_pair(s, d, |st, _| {
            st.phase = Some(Phase::WaitingForRelease);
            st.reason = None;
            st.message = Some(message.clone());
            set(st, CONDITION_PEER_MATCHED, true, "Matched", &message);
        })
        .await
    }

    /// A matched pair that must wait before R1 (or R4): says why on both.
    async fn wait(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
        reason: &'static str,
        message: &str,
        in_use: bool,
    ) -> Result<(), Error> {
        let was = s.status.as_ref().and_then(|st| st.reason.clone());
        self.update_pair(s, d, |st, _| {
            st.phase = Some(Phase::WaitingForRelease);
            st.reason = Some(reason.to_owned());
            st.message = Some(message.to_owned());
            if in_use {
                set(st, CONDITION_SOURCE_RELEASED, false, reason, message);
            }
        })
        .await?;
        if was.as_deref() != Some(reason) {
            let claim = claim_reference(s.source_namespace(), &s.spec.source.name, None);
            for regarding in [reference_to(s), claim] {
                self.events
                    .publish(&regarding, Severity::Warning, reason, "Wait", message)
                    .await;
            }
        }
        Ok(())
    }

    /// Applies `change` to the status of `s` and of its peer `d` (once when
    /// they are the same object), each with its own role, peer and peer phase.
    /// The Source is written first: its record is the one the pair goes by.
    async fn update_pair(
        &self,
        s: &NamespaceTransfer,
        d: &NamespaceTransfer,
        change: impl Fn(&mut NamespaceTransferStatus, bool),
    ) -> Result<(NamespaceTransfer, NamespaceTransfer), Error> {
        let d_ref = reference(d);
        let s_ref = reference(s);
        let new_s = self
            .update_status(s, |st| {
                change(st, true);
                st.peer = Some(d_ref.clone());
                st.peer_phase = st.phase;
            })
            .await?;
        if same_object(s, d) {
            return Ok((new_s.clone(), new_s));
        }
        let new_d = self
            .update_status(d, |st| {
                change(st, false);
                st.peer = Some(s_ref.clone());
                st.peer_phase = st.phase;
            })
            .await?;
        Ok((new_s, new_d))
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
                // A decision made on an active transfer never overwrites an
                // outcome someone else recorded meanwhile.
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

/// The peer's view of a finished pair: the same outcome, its own role.
fn mirror(
    st: &mut NamespaceTransferStatus,
    source: &NamespaceTransferStatus,
    s: &NamespaceTransfer,
) {
    st.phase = source.phase;
    st.reason = source.reason.clone();
    st.message = source.message.clone();
    st.volume_name = source.volume_name.clone();
    st.completion_time = source.completion_time.clone();
    st.conditions = source.conditions.clone();
    st.peer = Some(reference(s));
    st.peer_phase = source.phase;
}

fn name_of(t: &NamespaceTransfer) -> &str {
    t.metadata.name.as_deref().unwrap_or_default()
}

fn uid_of(t: &NamespaceTransfer) -> &str {
    t.metadata.uid.as_deref().unwrap_or_default()
}

fn same_object(a: &NamespaceTransfer, b: &NamespaceTransfer) -> bool {
    a.metadata.uid == b.metadata.uid
}

fn has_finalizer(t: &NamespaceTransfer) -> bool {
    t.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_TRANSFER_PROTECTION))
}

fn is_deleting(t: &NamespaceTransfer) -> bool {
    t.metadata.deletion_timestamp.is_some()
}

fn recorded_peer(t: &NamespaceTransfer) -> Option<crate::api::namespace_transfer::PeerReference> {
    t.status.as_ref().and_then(|st| st.peer.clone())
}

fn source_snapshot(t: &NamespaceTransfer) -> Option<SourceClaimSnapshot> {
    t.status.as_ref().and_then(|st| st.source_claim.clone())
}

/// The destination claim: the Destination side's name (defaulted from the
/// source name at create), in its namespace.
fn destination_of<'a>(s: &'a NamespaceTransfer, d: &'a NamespaceTransfer) -> (&'a str, &'a str) {
    if same_object(s, d) {
        (s.destination_namespace(), &s.spec.destination.name)
    } else {
        (d.own_namespace(), &d.spec.destination.name)
    }
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|st| st.phase.as_deref())
        .unwrap_or_default()
}

/// Whether the volume's claimRef names exactly this claim.
fn claim_ref_is(volume: &PersistentVolume, namespace: &str, name: &str, uid: &str) -> bool {
    volume
        .spec
        .as_ref()
        .and_then(|sp| sp.claim_ref.as_ref())
        .is_some_and(|r| {
            r.namespace.as_deref() == Some(namespace)
                && r.name.as_deref() == Some(name)
                && !uid.is_empty()
                && r.uid.as_deref() == Some(uid)
        })
}

fn in_use_message(namespace: &str, claim: &str, pods: &[String]) -> String {
    format!(
        "PersistentVolumeClaim {namespace}/{claim} is in use by running pod(s) {}",
        pods.join(", ")
    )
}

/// What R3 and R4 need of the source claim.
fn snapshot_of(claim: &PersistentVolumeClaim, volume_name: &str) -> SourceClaimSnapshot {
    let spec = claim.spec.clone().unwrap_or_default();
    SourceClaimSnapshot {
        name: claim.metadata.name.clone().unwrap_or_default(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
        volume_name: volume_name.to_owned(),
        storage_request: spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage").cloned()),
        storage_class_name: spec.storage_class_name,
        access_modes: spec.access_modes.unwrap_or_default(),
        volume_mode: spec.volume_mode,
    }
}

/// The destination claim of R3: pre-bound to the volume, shaped like the
/// source, marked as ours, with no ownerReferences.
fn destination_claim(
    s: &NamespaceTransfer,
    dest_ns: &str,
    dest_name: &str,
    snapshot: &SourceClaimSnapshot,
) -> PersistentVolumeClaim {
    let annotations = [
        (
            ANNOTATION_TRANSFERRED_FROM.to_owned(),
            format!("{}/{}", s.source_namespace(), snapshot.name),
        ),
        (ANNOTATION_TRANSFER_LOCK.to_owned(), uid_of(s).to_owned()),
    ];
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(dest_name.to_owned()),
            namespace: Some(dest_ns.to_owned()),
            annotations: Some(annotations.into_iter().collect()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: Some(snapshot.volume_name.clone()),
            storage_class_name: snapshot.storage_class_name.clone(),
            access_modes: (!snapshot.access_modes.is_empty())
                .then(|| snapshot.access_modes.clone()),
            volume_mode: snapshot.volume_mode.clone(),
            resources: snapshot
                .storage_request
                .clone()
                .map(|q| VolumeResourceRequirements {
                    requests: Some([("storage".to_owned(), q)].into_iter().collect()),
                    ..VolumeResourceRequirements::default()
                }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
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

fn deadline_passed(t: &NamespaceTransfer) -> bool {
    remaining_until_deadline(t).is_some_and(|left| left.is_zero())
}

#[cfg(test)]
mod tests;
