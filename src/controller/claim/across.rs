//! Ephemeral clones across namespaces (DESIGN §2.2): an EphemeralClaim whose
//! template's `dataSourceRef` names a PersistentVolumeClaim or a
//! VolumeSnapshot in another namespace gets a clone of it through the other namespace's standing
//! clone offer (§2.1.5b), never through kube-apiserver (no
//! `CrossNamespaceVolumeDataSource` gate is needed).
//!
//! Owns the EphemeralClaim's side of that exchange:
//! - without an open standing offer for this namespace the claim waits, with
//!   condition `SourceConsented=False` and an Event naming what the other
//!   namespace must create; it keeps no timer: the offer's events wake it
//!   (`watch::transfer_concerns`), as its request's do later;
//! - with one, it makes a Clone request, a NamespaceTransfer of the
//!   EphemeralClaim's own name in its namespace, controlled by it, made for
//!   its requester (whose right to create claims here the request re-checks);
//!   the offer's pair moves the clone here as `<owner>-<name>`;
//! - the requester's right to create claims here is reviewed uncached just
//!   before the request is made, and while the claim waits only when the
//!   object or its spec is new to this controller ([`rights_review_due`]):
//!   a waiting claim's looks (a resync, an unrelated event) cost no review,
//!   and a right revoked while it waits fails it once an offer comes, before
//!   anything is made for it;
//! - once the request has Completed, it adopts the claim the request
//!   recorded (uid and all) by putting the EphemeralClaim's and the owner
//!   pod's ownerReferences on it; from then on the claim lives exactly as any
//!   EphemeralClaim's: never unbound before use, deleted once released;
//! - a request that fails fails the EphemeralClaim with its reason; deleting
//!   the EphemeralClaim deletes the request first (which cancels the clone
//!   before its commit, or completes it after).

use serde_json::json;

use super::*;
use crate::api::ephemeral_claim::CrossSource;
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase, NamespaceTransferSpec, TransferDestination,
    TransferMode, TransferSource, SOURCE_KIND_VOLUME_SNAPSHOT,
};
use crate::controller::transfer::matching::is_active;
use crate::registry::{DeleteOptions, ListOptions};

/// Condition: the source namespace consents (a standing clone offer there).
pub const CONDITION_SOURCE_CONSENTED: &str = "SourceConsented";
// The reasons this module decides on, from the API's one vocabulary.
pub use crate::api::ephemeral_claim::{
    REASON_CLAIM_LOST, REASON_CLONING, REASON_OFFERED, REASON_WAITING_FOR_CONSENT,
};

/// The object and spec whose requester's rights a review last allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewed {
    uid: String,
    generation: Option<i64>,
}

impl Reviewed {
    /// `ec` as it is now: its uid, and its spec's generation (which the
    /// requester is part of).
    pub fn of(ec: &EphemeralClaim) -> Self {
        Self {
            uid: uid_of(ec).to_owned(),
            generation: ec.metadata.generation,
        }
    }
}

/// Whether a look at a claim without a request reviews its requester's
/// rights, uncached: always just before the request is made (`offered`),
/// since the server then acts for the tenant; otherwise only when the
/// object or its spec is not the one `last` allowed (the first look in this
/// term, a changed spec), so that a waiting claim fails early for a tenant
/// who never had the right, and costs no review while nothing the review
/// depends on changes.
pub fn rights_review_due(last: Option<&Reviewed>, ec: &EphemeralClaim, offered: bool) -> bool {
    offered || last != Some(&Reviewed::of(ec))
}

impl ClaimController {
    /// Steps of a cross-namespace clone that come before the claim's own
    /// life: adopting the handed-over claim, and cancelling the request of a
    /// deleted EphemeralClaim. `None` when the lifecycle decides.
    pub(super) async fn across_before_lifecycle(
        &self,
        ec: &EphemeralClaim,
    ) -> Result<Option<Next>, Error> {
        let namespace = namespace_of(ec);
        let request = self.own_request(ec).await?;
        let Some(request) = request else {
            return Ok(None);
        };
        let claim_name = ec.claim_name();
        let claim = self.cluster.claim(namespace, &claim_name).await?;
        let handed_over = request_phase(&request) == Some(NamespaceTransferPhase::Completed);
        let recorded = request
            .status
            .as_ref()
            .and_then(|st| st.destination_claim.as_ref());
        if let (true, Some(claim), Some(recorded)) = (handed_over, &claim, recorded) {
            let unowned = claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .all(|r| r.controller != Some(true));
            if unowned && claim.metadata.uid.as_deref() == Some(recorded.uid.as_str()) {
                self.adopt(ec, claim).await?;
                return Ok(Some(Next::Now));
            }
        }
        if ec.metadata.deletion_timestamp.is_some() && is_active(&request) {
            // Before R3 a deletion cancels the request; from R3 on the clone
            // may already be the destination's, so it is let arrive, adopted
            // and deleted as this claim's.
            if request.metadata.deletion_timestamp.is_none() && recorded.is_none() {
                self.leadership.check()?;
                let opts = DeleteOptions {
                    precondition_uid: request.metadata.uid.clone(),
                    ..DeleteOptions::default()
                };
                match self
                    .transfers
                    .delete(&self.ctx, namespace, name_of(ec), &opts)
                    .await
                {
                    Ok(_) | Err(ApiError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // The request's going, or its arrival, wakes this claim.
            return Ok(Some(Next::Done));
        }
        if is_active(&request) && ec.metadata.deletion_timestamp.is_none() {
            // The claim of our name is the request's until it is handed
            // over: not a conflict, and not ours to judge yet.
            return Ok(Some(self.follow(ec, &request).await?));
        }
        if !is_active(&request) && !handed_over && !phase_of(ec).is_finished() {
            // Failed or Cancelled: its reason is this claim's, whatever its
            // rollback still has to undo.
            return Ok(Some(self.follow(ec, &request).await?));
        }
        Ok(None)
    }

    /// The lifecycle's "make the claim" for a cross-namespace clone: wait for
    /// consent, make the request, follow it.
    pub(super) async fn request_clone(
        &self,
        ec: &EphemeralClaim,
        source: CrossSource<'_>,
    ) -> Result<Next, Error> {
        let (source_namespace, source_name) = (source.namespace, source.name);
        let namespace = namespace_of(ec);
        if let Some(request) = self.own_request(ec).await? {
            return self.follow(ec, &request).await;
        }
        let offers = self
            .transfers
            .list(Some(source_namespace), &ListOptions::default())
            .await?;
        let offer = offers.items.iter().find(|t| {
            t.is_standing_offer()
                && is_active(t)
                && t.metadata.deletion_timestamp.is_none()
                && source.is_source_of(t)
                && t.destination_namespace() == namespace
        });
        let key = object_key(ec);
        if rights_review_due(self.last_review(&key).as_ref(), ec, offer.is_some()) {
            if let Some(refusal) = self.recheck_rights(ec).await? {
                self.record(ec, None, Phase::Failed, REASON_FORBIDDEN, &refusal, |_| {})
                    .await?;
                return Ok(Next::Now);
            }
            self.remember_review(key, Reviewed::of(ec));
        }
        let Some(offer) = offer else {
            let message = format!(
                "waiting for namespace {source_namespace:?} to offer clones of {} {source_name:?} to this namespace: a NamespaceTransfer there with mode: Clone, {}source.name: {source_name}, destination.namespace: {namespace} and no destination.name",
                source.kind,
                if source.kind == SOURCE_KIND_VOLUME_SNAPSHOT { "source.kind: VolumeSnapshot, " } else { "" },
            );
            let was = ec.status.as_ref().and_then(|st| st.reason.clone());
            self.record(
                ec,
                None,
                Phase::Pending,
                REASON_WAITING_FOR_CONSENT,
                &message,
                |st| consented(st, false, REASON_WAITING_FOR_CONSENT, &message),
            )
            .await?;
            if was.as_deref() != Some(REASON_WAITING_FOR_CONSENT) {
                self.events
                    .publish(
                        &reference_to(ec),
                        Severity::Warning,
                        REASON_WAITING_FOR_CONSENT,
                        "RequestClone",
                        &message,
                    )
                    .await;
            }
            // An offer's event wakes it.
            return Ok(Next::Done);
        };
        let request = clone_request(ec, source);
        let Some(requester) = ec.spec.requester.clone() else {
            return Ok(Next::Done);
        };
        // The request is the tenant's, filed on its behalf.
        let ctx = Context::on_behalf_of(requester, self.leadership.fence().clone());
        self.leadership.check()?;
        match self.transfers.create(&ctx, namespace, request).await {
            Ok(_) => {
                let note = format!(
                    "requested a clone of {source_namespace}/{source_name} through NamespaceTransfer {}/{}",
                    offer.own_namespace(),
                    offer.metadata.name.as_deref().unwrap_or_default()
                );
                self.events
                    .publish(
                        &reference_to(ec),
                        Severity::Normal,
                        REASON_CLONING,
                        "RequestClone",
                        &note,
                    )
                    .await;
                Ok(Next::Now)
            }
            // Ours from an earlier attempt, or someone else's: looked at next.
            Err(ApiError::AlreadyExists { .. }) => self.refuse_foreign_request(ec).await,
            Err(err @ (ApiError::Forbidden { .. } | ApiError::Invalid { .. })) => {
                let message = format!("the clone request was refused: {err}");
                self.record(
                    ec,
                    None,
                    Phase::Failed,
                    REASON_CLAIM_REFUSED,
                    &message,
                    |_| {},
                )
                .await?;
                Ok(Next::Now)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Says how this claim's request stands, or how it ended.
    async fn follow(
        &self,
        ec: &EphemeralClaim,
        request: &NamespaceTransfer,
    ) -> Result<Next, Error> {
        let namespace = namespace_of(ec);
        let status = request.status.clone().unwrap_or_default();
        match status.phase {
            Some(NamespaceTransferPhase::Failed | NamespaceTransferPhase::Cancelled) => {
                let reason = status.reason.unwrap_or_else(|| "CloneFailed".to_owned());
                let message = format!(
                    "the clone request {namespace}/{} ended: {}",
                    name_of(ec),
                    status.message.unwrap_or_default()
                );
                self.record(ec, None, Phase::Failed, &reason, &message, |_| {})
                    .await?;
                Ok(Next::Now)
            }
            // Adopted on the next look, unless the claim went meanwhile.
            Some(NamespaceTransferPhase::Completed) => {
                let recorded = status.destination_claim.clone();
                let claim = self.cluster.claim(namespace, &ec.claim_name()).await?;
                let arrived = recorded.is_some_and(|r| {
                    claim
                        .as_ref()
                        .is_some_and(|c| c.metadata.uid.as_deref() == Some(r.uid.as_str()))
                });
                if arrived {
                    return Ok(Next::Now);
                }
                let message = format!(
                    "the clone was handed over as PersistentVolumeClaim {namespace}/{}, which was deleted or replaced before it could be adopted",
                    ec.claim_name()
                );
                self.record(ec, None, Phase::Failed, REASON_CLAIM_LOST, &message, |_| {})
                    .await?;
                Ok(Next::Now)
            }
            _ => {
                let message = format!(
                    "the standing offer consents; the clone is being made and moved here ({})",
                    status.message.unwrap_or_default()
                );
                self.record(ec, None, Phase::Pending, REASON_CLONING, &message, |st| {
                    consented(st, true, REASON_OFFERED, "a standing clone offer consents")
                })
                .await?;
                // Each change of the request's wakes it.
                Ok(Next::Done)
            }
        }
    }

    /// The request of this claim, if it exists and is this claim's: made
    /// for its requester (which the server stamps; a tenant cannot), asking
    /// for exactly this claim's clone, and controlled by it. A look-alike a
    /// tenant made under this name is never followed or adopted from.
    async fn own_request(&self, ec: &EphemeralClaim) -> Result<Option<NamespaceTransfer>, Error> {
        let request = super::super::current(&self.transfers, namespace_of(ec), name_of(ec)).await?;
        Ok(request.filter(|t| is_request_of(t, ec)))
    }

    async fn refuse_foreign_request(&self, ec: &EphemeralClaim) -> Result<Next, Error> {
        if self.own_request(ec).await?.is_some() {
            return Ok(Next::Now);
        }
        let message = format!(
            "NamespaceTransfer {}/{} already exists and is not this EphemeralClaim's; the clone is requested under that name",
            namespace_of(ec),
            name_of(ec)
        );
        self.record(
            ec,
            None,
            Phase::Failed,
            REASON_CLAIM_CONFLICT,
            &message,
            |_| {},
        )
        .await?;
        Ok(Next::Now)
    }

    /// Puts the EphemeralClaim (controller) and the owner pod on the claim
    /// the request handed over, at the version read.
    async fn adopt(&self, ec: &EphemeralClaim, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let namespace = namespace_of(ec);
        let owner = ec.spec.owner.as_ref().map_or("", |o| o.name.as_str());
        let pod_uid = self
            .cluster
            .pods(namespace)
            .await?
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(owner))
            .and_then(|p| p.metadata.uid);
        let mut owners = vec![json!({
            "apiVersion": GROUP_VERSION,
            "kind": EPHEMERAL_CLAIMS.kind,
            "name": name_of(ec),
            "uid": uid_of(ec),
            "controller": true,
        })];
        if let Some(uid) = pod_uid {
            owners.push(json!({
                "apiVersion": OWNER_API_VERSION_V1,
                "kind": OWNER_KIND_POD,
                "name": owner,
                "uid": uid,
            }));
        }
        let patch = json!({"metadata": {
            "resourceVersion": claim.metadata.resource_version,
            "ownerReferences": owners,
        }});
        self.leadership.check()?;
        match self
            .cluster
            .patch_claim(namespace, &ec.claim_name(), &patch)
            .await
        {
            Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.events
            .publish(
                &reference_to(ec),
                Severity::Normal,
                REASON_CREATED,
                "AdoptClone",
                &format!(
                    "the clone arrived as PersistentVolumeClaim {namespace}/{}",
                    ec.claim_name()
                ),
            )
            .await;
        Ok(())
    }
}

/// The Clone request an EphemeralClaim makes: its own name, in its
/// namespace, for its claim's name, controlled by it.
pub fn clone_request(ec: &EphemeralClaim, source: CrossSource<'_>) -> NamespaceTransfer {
    NamespaceTransfer {
        metadata: ObjectMeta {
            name: ec.metadata.name.clone(),
            namespace: ec.metadata.namespace.clone(),
            owner_references: Some(vec![apimeta::controller_ref(
                &EPHEMERAL_CLAIMS,
                &ec.metadata,
            )]),
            ..ObjectMeta::default()
        },
        spec: NamespaceTransferSpec {
            source: TransferSource {
                kind: source.kind.to_owned(),
                namespace: source.namespace.to_owned(),
                name: source.name.to_owned(),
            },
            destination: TransferDestination {
                namespace: String::new(),
                name: ec.claim_name(),
                ..TransferDestination::default()
            },
            mode: Some(TransferMode::Clone),
            ..NamespaceTransferSpec::default()
        },
        ..NamespaceTransfer::default()
    }
}

/// Whether `t` is the request [`clone_request`] makes for `ec`, for `ec`'s
/// requester.
fn is_request_of(t: &NamespaceTransfer, ec: &EphemeralClaim) -> bool {
    let controlled =
        t.metadata.owner_references.iter().flatten().any(|r| {
            r.controller == Some(true) && Some(r.uid.as_str()) == ec.metadata.uid.as_deref()
        });
    let Some(source) = ec.cross_namespace_source() else {
        return false;
    };
    controlled
        && t.spec.requester.is_some()
        && t.spec.requester == ec.spec.requester
        && t.mode() == TransferMode::Clone
        && source.is_source_of(t)
        && t.spec.destination.name == ec.claim_name()
}

fn request_phase(t: &NamespaceTransfer) -> Option<NamespaceTransferPhase> {
    t.status.as_ref().and_then(|st| st.phase)
}

fn consented(st: &mut EphemeralClaimStatus, ok: bool, reason: &str, message: &str) {
    apimeta::set_condition(
        &mut st.conditions,
        Condition {
            type_: CONDITION_SOURCE_CONSENTED.to_owned(),
            status: if ok {
                CONDITION_TRUE
            } else {
                apimeta::CONDITION_FALSE
            }
            .to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now(),
            observed_generation: st.observed_generation,
        },
    );
}
