//! The EphemeralClaim controller (DESIGN §2.2): makes each EphemeralClaim's
//! PersistentVolumeClaim from its template, follows it through Bound, first use
//! and release, deletes it under `releasePolicy: Delete`, and holds the
//! EphemeralClaim with a finalizer until its claim is gone.
//!
//! # How it decides
//! Every reconcile reads the EphemeralClaim from etcd and the claim and the
//! namespace's pods live from kube-apiserver, reduces them to
//! [`lifecycle::Facts`], and takes the one [`lifecycle::Step`] they call for
//! (level-triggered; memory is only a hint of what to look at). The durable
//! facts are:
//!
//! - our finalizer on the EphemeralClaim: put on before anything is made;
//! - the claim's ownerReferences: the EphemeralClaim as controller (that is what
//!   "ours" means: a claim of the name without it is a `ClaimConflict` and is
//!   never touched) and the owner Pod by uid (read live when the claim is made,
//!   so the pod must exist first);
//! - `ClaimCreated=True` and `firstUsedTime` in the status: a claim once made
//!   is never made again, and a claim once used may be released;
//! - a release: `Deleting` is written *before* the claim is deleted, so a
//!   crash in between finds the decision and carries it out; `Deleted` only
//!   once the claim is gone (until then the message names the pods that
//!   hold it).
//!
//! # The garbage collector
//! The owner Pod's reference lets KCM's garbage collector know the claim's
//! pod. The collector deletes a dependent only once *all* its owners are gone,
//! and the EphemeralClaim is one, so while it exists the collector only strips
//! the pod's reference when the pod goes (the controller reads that as "the
//! owner is gone"); if our server is down it cannot even look the
//! EphemeralClaim up, and waits. The claim is then released by this controller
//! when it runs again. Neither reference sets `blockOwnerDeletion`: our store
//! does no foreground deletion, and where the OwnerReferencesPermissionEnforcement
//! admission plugin runs it would need rights on the owners' `finalizers`
//! that the controller's ClusterRole (DESIGN §3.2) does not grant.
//!
//! Writes to our objects go through the registry, conditional on what was
//! read; writes to the claim are a create or a delete with a uid precondition.
//! The leadership lease is checked before every write.

pub mod across;
pub mod lifecycle;
pub mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference};

use super::cluster::{Cluster, ClusterError};
use super::events::{claim_reference, reference_to, Events, Severity};
use super::leader::Leadership;
use super::{object_key, Error, Next};
use crate::admission::first_missing;
use crate::api::ephemeral_claim::{
    EphemeralClaim, EphemeralClaimPhase as Phase, EphemeralClaimStatus, CONDITION_CLAIM_CREATED,
    FINALIZER_CLAIM_PROTECTION, OWNER_API_VERSION_V1, OWNER_KIND_POD, REASON_CLAIM_CONFLICT,
};
use crate::api::errors::{ApiError, GroupResource};
use crate::api::meta::{self as apimeta, now, CONDITION_TRUE};
use crate::api::{EPHEMERAL_CLAIMS, GROUP_VERSION};
use crate::authz::Authorizer;
use crate::registry::ephemeral_claim::claim_rights;
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, Store};

use lifecycle::{ClaimState, Facts, Release, Step};

/// How often an EphemeralClaim whose claim is held after its deletion looks
/// again (each look lists the namespace's pods live), besides the pod and
/// claim events that wake it: a kept finished pod may hold it for good.
const CLAIM_GONE_POLL: std::time::Duration = std::time::Duration::from_secs(120);

// The reasons this module decides on, from the API's one vocabulary.
pub use crate::api::ephemeral_claim::{
    REASON_CLAIM_BOUND, REASON_CLAIM_REFUSED, REASON_CREATED, REASON_FORBIDDEN,
    REASON_OWNER_FINISHED, REASON_POD_RUNNING, REASON_UNSAFE_TEMPLATE, REASON_WAITING_FOR_BINDING,
    REASON_WAITING_FOR_OWNER,
};

/// The reconciler of EphemeralClaims.
#[derive(Debug, Clone)]
pub struct ClaimController {
    store: Arc<Store<EphemeralClaimStrategy>>,
    /// Where a cross-namespace clone's request is made (`across`).
    transfers: Arc<Store<NamespaceTransferStrategy>>,
    cluster: Cluster,
    authorizer: Arc<dyn Authorizer>,
    events: Events,
    leadership: Leadership,
    ctx: Context,
    /// Per `namespace/name`, what the last review of a waiting
    /// cross-namespace claim's requester allowed (`across`); this term's
    /// memory only: a new term reviews each claim again.
    reviewed: Arc<Mutex<HashMap<String, across::Reviewed>>>,
}

/// What one reconcile read, and the facts the decision is made on.
#[derive(Debug)]
struct Observed {
    facts: Facts,
    claim: Option<PersistentVolumeClaim>,
    /// The uid of the pod named `spec.owner.name`, when it exists.
    owner_uid: Option<String>,
    /// The Running pods that reference the claim.
    running: Vec<String>,
    /// The scheduled pods that name the claim, in any phase: what keeps it
    /// once it is deleted (kube's pvc-protection).
    holders: Vec<String>,
}

impl ClaimController {
    pub fn new(
        store: Arc<Store<EphemeralClaimStrategy>>,
        transfers: Arc<Store<NamespaceTransferStrategy>>,
        cluster: Cluster,
        authorizer: Arc<dyn Authorizer>,
        events: Events,
        leadership: Leadership,
        ctx: Context,
    ) -> Self {
        Self {
            store,
            transfers,
            cluster,
            authorizer,
            events,
            leadership,
            ctx,
            reviewed: Arc::default(),
        }
    }

    /// Takes the next step for the EphemeralClaim `namespace/name`.
    pub async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        let Some(ec) = super::keyed(&self.leadership, &self.store, key).await? else {
            self.reviews().remove(key);
            return Ok(Next::Done);
        };
        if ec.cross_namespace_source().is_some() {
            if let Some(next) = self.across_before_lifecycle(&ec).await? {
                return Ok(next);
            }
        }
        let observed = self.observe(&ec).await?;
        let step = lifecycle::next_step(&observed.facts);
        tracing::debug!(%key, ?step, facts = ?observed.facts, "reconciling an EphemeralClaim");
        self.take(step, &ec, &observed).await
    }

    /// Reads the claim and, where the step reads them
    /// ([`lifecycle::reads_pods`]), the namespace's pods, live.
    async fn observe(&self, ec: &EphemeralClaim) -> Result<Observed, Error> {
        let namespace = namespace_of(ec);
        let claim_name = ec.claim_name();
        let owner_name = ec.spec.owner.as_ref().map_or("", |o| o.name.as_str());
        let claim = self.cluster.claim(namespace, &claim_name).await?;
        let claim_state = lifecycle::claim_state(claim.as_ref(), uid_of(ec));
        let phase = phase_of(ec);
        let deleting = ec.metadata.deletion_timestamp.is_some();
        let pods = if lifecycle::reads_pods(phase, claim_state, deleting) {
            self.cluster.pods(namespace).await?
        } else {
            Vec::new()
        };
        let recorded = match (&claim, claim_state) {
            (Some(c), ClaimState::Ours { .. }) => {
                Some(lifecycle::recorded_owner_uid(c, owner_name))
            }
            _ => None,
        };
        let owner = lifecycle::owner_state(&pods, owner_name, recorded);
        let owner_uid = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(owner_name))
            .and_then(|p| p.metadata.uid.clone());
        let (users, running) = lifecycle::users(&pods, &claim_name);
        let holders = lifecycle::holders(&pods, &claim_name);
        let status = ec.status.as_ref();
        let facts = Facts {
            phase,
            release_policy: ec.release_policy(),
            deleting,
            has_finalizer: has_finalizer(ec),
            claim_created: status.is_some_and(|st| {
                apimeta::is_condition_true(&st.conditions, CONDITION_CLAIM_CREATED)
            }),
            first_used: status.is_some_and(|st| st.first_used_time.is_some()),
            claim: claim_state,
            owner,
            users,
        };
        Ok(Observed {
            facts,
            claim,
            owner_uid,
            running,
            holders,
        })
    }

    /// Carries out one step.
    async fn take(
        &self,
        step: Step,
        ec: &EphemeralClaim,
        observed: &Observed,
    ) -> Result<Next, Error> {
        let namespace = namespace_of(ec);
        let claim_name = ec.claim_name();
        let claim = observed.claim.as_ref();
        let volume = claim.and_then(volume_of);
        match step {
            Step::AddFinalizer => {
                self.set_finalizer(ec, true).await?;
                Ok(Next::Now)
            }
            Step::WaitForOwner => {
                let owner = ec.spec.owner.as_ref().map_or("", |o| o.name.as_str());
                let message = format!(
                    "waiting for pod {namespace}/{owner} to exist: the claim names its owner pod by uid"
                );
                self.record(
                    ec,
                    claim,
                    Phase::Pending,
                    REASON_WAITING_FOR_OWNER,
                    &message,
                    |_| {},
                )
                .await?;
                Ok(Next::Done)
            }
            Step::FailOwnerFinished => {
                let message = "the owner pod finished before the claim was made; nothing was made";
                self.record(
                    ec,
                    claim,
                    Phase::Failed,
                    REASON_OWNER_FINISHED,
                    message,
                    |_| {},
                )
                .await?;
                Ok(Next::Now)
            }
            Step::FailConflict => {
                let message = format!(
                    "PersistentVolumeClaim {namespace}/{claim_name} already exists and is not controlled by this EphemeralClaim; it is left untouched"
                );
                self.record(
                    ec,
                    claim,
                    Phase::Failed,
                    REASON_CLAIM_CONFLICT,
                    &message,
                    |_| {},
                )
                .await?;
                Ok(Next::Now)
            }
            Step::CreateClaim => match ec.cross_namespace_source() {
                Some(source) => self.request_clone(ec, source).await,
                None => self.create_claim(ec, observed).await,
            },
            Step::RecordCreated => {
                self.record_created(ec, claim).await?;
                Ok(Next::Now)
            }
            Step::WaitForBinding => {
                let message = format!(
                    "waiting for PersistentVolumeClaim {namespace}/{claim_name} to be bound"
                );
                self.record(
                    ec,
                    claim,
                    Phase::Pending,
                    REASON_WAITING_FOR_BINDING,
                    &message,
                    |_| {},
                )
                .await?;
                Ok(Next::Done)
            }
            Step::RecordBound => {
                let message = format!(
                    "PersistentVolumeClaim {namespace}/{claim_name} is bound to volume {}; it is kept until its pod has used it",
                    volume.unwrap_or_default()
                );
                self.record(
                    ec,
                    claim,
                    Phase::Bound,
                    REASON_CLAIM_BOUND,
                    &message,
                    |_| {},
                )
                .await?;
                Ok(Next::Now)
            }
            Step::RecordFirstUse => {
                let message = format!(
                    "PersistentVolumeClaim {namespace}/{claim_name} is used by running pod(s) {}",
                    observed.running.join(", ")
                );
                let now = now();
                self.record(
                    ec,
                    claim,
                    Phase::InUse,
                    REASON_POD_RUNNING,
                    &message,
                    |st| {
                        st.first_used_time.get_or_insert_with(|| now.clone());
                    },
                )
                .await?;
                Ok(Next::Now)
            }
            Step::Retain(why) => {
                let message = format!(
                    "released: {}; releasePolicy Retain keeps PersistentVolumeClaim {namespace}/{claim_name}",
                    why.explain()
                );
                self.record_release(ec, claim, Phase::Released, why, &message)
                    .await?;
                Ok(Next::Now)
            }
            Step::RecordDeleting(why) => {
                let message = match why {
                    Release::ClaimDeleted => format!(
                        "PersistentVolumeClaim {namespace}/{claim_name} was deleted by someone else; it is never made again"
                    ),
                    _ => format!(
                        "released: {}; PersistentVolumeClaim {namespace}/{claim_name} is being deleted",
                        why.explain()
                    ),
                };
                self.record_release(ec, claim, Phase::Deleting, why, &message)
                    .await?;
                Ok(Next::Now)
            }
            Step::WaitForClaimGone => {
                let held = if observed.holders.is_empty() {
                    "waiting for kube-controller-manager to remove it".to_owned()
                } else {
                    format!(
                        "kube's pvc-protection keeps it while pod(s) {} name it, finished or not; delete them to let it go",
                        observed.holders.join(", ")
                    )
                };
                let message = format!(
                    "PersistentVolumeClaim {namespace}/{claim_name} is being deleted; {held}"
                );
                let said = ec.status.as_ref().and_then(|st| st.message.as_deref());
                if said != Some(message.as_str()) {
                    self.update_status(ec, claim, |st| st.message = Some(message.clone()))
                        .await?;
                }
                // A pod's or the claim's change wakes it; look again anyway.
                Ok(Next::After(CLAIM_GONE_POLL))
            }
            Step::RecordDeleted => {
                let message = format!(
                    "PersistentVolumeClaim {namespace}/{claim_name} is gone, and its volume followed its reclaim policy"
                );
                self.update_status(ec, claim, |st| {
                    st.phase = Some(Phase::Deleted);
                    st.message = Some(message.clone());
                })
                .await?;
                Ok(Next::Now)
            }
            Step::DeleteClaim => {
                let uid = claim
                    .and_then(|c| c.metadata.uid.clone())
                    .unwrap_or_default();
                self.leadership.check()?;
                match self
                    .cluster
                    .delete_claim(namespace, &claim_name, &uid)
                    .await
                {
                    // Someone else replaced it meanwhile: not ours to delete.
                    Ok(()) | Err(ClusterError::Conflict { .. }) => Ok(Next::Now),
                    Err(e) => Err(e.into()),
                }
            }
            Step::RemoveFinalizer => {
                self.set_finalizer(ec, false).await?;
                Ok(Next::Done)
            }
            Step::Idle => Ok(Next::Done),
        }
    }

    /// Re-checks the template's safety and the requester's rights, makes the
    /// claim from the template, and records that it exists.
    async fn create_claim(&self, ec: &EphemeralClaim, observed: &Observed) -> Result<Next, Error> {
        let namespace = namespace_of(ec);
        let claim_name = ec.claim_name();
        if let Some(refusal) = unsafe_template(ec) {
            self.record(
                ec,
                None,
                Phase::Failed,
                REASON_UNSAFE_TEMPLATE,
                &refusal,
                |_| {},
            )
            .await?;
            return Ok(Next::Now);
        }
        if let Some(refusal) = self.recheck_rights(ec).await? {
            self.record(ec, None, Phase::Failed, REASON_FORBIDDEN, &refusal, |_| {})
                .await?;
            return Ok(Next::Now);
        }
        // The decision saw the owner Active, so it exists; if it has just
        // gone, look again.
        let Some(owner_uid) = &observed.owner_uid else {
            return Ok(Next::Now);
        };
        let claim = claim_from_template(ec, owner_uid);
        self.leadership.check()?;
        match self.cluster.create_claim(namespace, &claim).await {
            Ok(created) => {
                let uid = created.metadata.uid.as_deref();
                let notes = [
                    (
                        claim_reference(namespace, &claim_name, uid),
                        format!(
                            "made from the template of EphemeralClaim {namespace}/{}",
                            name_of(ec)
                        ),
                    ),
                    (
                        reference_to(ec),
                        format!("made PersistentVolumeClaim {namespace}/{claim_name}"),
                    ),
                ];
                for (regarding, note) in notes {
                    self.events
                        .publish(
                            &regarding,
                            Severity::Normal,
                            REASON_CREATED,
                            "CreateClaim",
                            &note,
                        )
                        .await;
                }
                self.record_created(ec, Some(&created)).await?;
                Ok(Next::Now)
            }
            // Made by an earlier attempt whose answer was lost, or by someone
            // else: the next reconcile tells which.
            Err(ClusterError::AlreadyExists { .. }) => Ok(Next::Now),
            Err(ClusterError::Refused { message, .. }) => {
                let message = format!(
                    "creating PersistentVolumeClaim {namespace}/{claim_name} was refused: {message}"
                );
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

    /// Runs the create-time SubjectAccessReviews again for the stored
    /// requester, uncached: the server's own rights make the claim only for a
    /// tenant who may make it. Returns why it is refused.
    async fn recheck_rights(&self, ec: &EphemeralClaim) -> Result<Option<String>, Error> {
        let Some(requester) = &ec.spec.requester else {
            return Ok(Some(format!(
                "EphemeralClaim {}/{} records no requester",
                namespace_of(ec),
                name_of(ec)
            )));
        };
        let missing =
            first_missing(self.authorizer.as_ref(), requester, claim_rights(ec), true).await?;
        Ok(missing.map(|right| {
            format!(
                "User {:?}, who created EphemeralClaim {}/{}, can no longer {}, which {} requires",
                requester.username,
                namespace_of(ec),
                name_of(ec),
                right.describe(),
                right.because
            )
        }))
    }

    fn reviews(&self) -> std::sync::MutexGuard<'_, HashMap<String, across::Reviewed>> {
        self.reviewed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the last review of the claim `key`'s requester allowed.
    fn last_review(&self, key: &str) -> Option<across::Reviewed> {
        self.reviews().get(key).cloned()
    }

    fn remember_review(&self, key: String, reviewed: across::Reviewed) {
        self.reviews().insert(key, reviewed);
    }

    // ----- writing our objects --------------------------------------------------------

    /// Records that the claim exists; a Pending claim now waits to be bound.
    async fn record_created(
        &self,
        ec: &EphemeralClaim,
        claim: Option<&PersistentVolumeClaim>,
    ) -> Result<(), Error> {
        let namespace = namespace_of(ec);
        let claim_name = ec.claim_name();
        let made = format!("made PersistentVolumeClaim {namespace}/{claim_name} from the template");
        let waiting =
            format!("waiting for PersistentVolumeClaim {namespace}/{claim_name} to be bound");
        let pending = phase_of(ec) == Phase::Pending;
        self.update_status(ec, claim, |st| {
            set_condition(st, CONDITION_CLAIM_CREATED, REASON_CREATED, &made);
            if pending {
                st.phase = Some(Phase::Pending);
                st.reason = Some(REASON_WAITING_FOR_BINDING.to_owned());
                st.message = Some(waiting.clone());
            }
        })
        .await
        .map(|_| ())
    }

    /// Records a release: `phase` (Released or Deleted), why, and when.
    async fn record_release(
        &self,
        ec: &EphemeralClaim,
        claim: Option<&PersistentVolumeClaim>,
        phase: Phase,
        why: Release,
        message: &str,
    ) -> Result<(), Error> {
        let now = now();
        self.record(ec, claim, phase, why.reason(), message, |st| {
            st.released_time.get_or_insert_with(|| now.clone());
        })
        .await
    }

    /// Writes `phase`, `reason` and `message`, plus whatever `extra` adds.
    async fn record(
        &self,
        ec: &EphemeralClaim,
        claim: Option<&PersistentVolumeClaim>,
        phase: Phase,
        reason: &str,
        message: &str,
        extra: impl Fn(&mut EphemeralClaimStatus),
    ) -> Result<(), Error> {
        self.update_status(ec, claim, |st| {
            st.phase = Some(phase);
            st.reason = Some(reason.to_owned());
            st.message = Some(message.to_owned());
            extra(st);
        })
        .await
        .map(|_| ())
    }

    /// A read-modify-write of the status; emits an Event on the
    /// EphemeralClaim and on its claim when the phase changes.
    async fn update_status(
        &self,
        ec: &EphemeralClaim,
        claim: Option<&PersistentVolumeClaim>,
        change: impl Fn(&mut EphemeralClaimStatus),
    ) -> Result<EphemeralClaim, Error> {
        self.leadership.check()?;
        let before = phase_of(ec);
        let claim_name = ec.claim_name();
        let volume = claim.and_then(volume_of);
        let updated = self
            .store
            .guaranteed_update(&self.ctx, namespace_of(ec), name_of(ec), true, |current| {
                // A decision made on what was read never overwrites an outcome
                // someone else recorded meanwhile, nor lands on a new object
                // of the same name.
                // (`Deleting` is a decision too: the deletion follows it.)
                let now = phase_of(current);
                let decided = now.is_finished() || now == Phase::Deleting;
                if current.metadata.uid != ec.metadata.uid || (now != before && decided) {
                    return Err(ApiError::Conflict {
                        resource: GroupResource::new(crate::api::GROUP, EPHEMERAL_CLAIMS.plural),
                        name: name_of(ec).to_owned(),
                        message: "the EphemeralClaim changed while it was being reconciled"
                            .to_owned(),
                    });
                }
                let mut next = current.clone();
                next.metadata.resource_version = None;
                let status = next
                    .status
                    .get_or_insert_with(EphemeralClaimStatus::default);
                status.observed_generation = current.metadata.generation;
                status.claim_name = Some(claim_name.clone());
                if let Some(volume) = &volume {
                    status.volume_name = Some(volume.clone());
                }
                change(status);
                Ok(next)
            })
            .await?;
        let after = phase_of(&updated);
        if before != after {
            self.announce(&updated, claim).await;
        }
        Ok(updated)
    }

    /// The Events of a phase change, on the EphemeralClaim and on its claim.
    async fn announce(&self, ec: &EphemeralClaim, claim: Option<&PersistentVolumeClaim>) {
        let status = ec.status.clone().unwrap_or_default();
        let phase = phase_of(ec);
        let severity = match phase {
            Phase::Failed => Severity::Warning,
            _ => Severity::Normal,
        };
        // Deleted keeps Deleting's reason (why it was released); its Event
        // says Deleted, so that it is no repeat of Deleting's.
        let reason = match (phase, status.reason.clone()) {
            (Phase::Deleted, _) | (_, None) => phase.as_str().to_owned(),
            (_, Some(reason)) => reason,
        };
        let message = status.message.clone().unwrap_or_default();
        let note = format!("{}: {message}", phase.as_str());
        self.events
            .publish(&reference_to(ec), severity, &reason, "Reconcile", &note)
            .await;
        // Only a claim that exists hears of it (a foreign one too: its owner
        // learns why this EphemeralClaim failed).
        let Some(claim) = claim else {
            return;
        };
        let namespace = namespace_of(ec);
        let regarding = claim_reference(namespace, &ec.claim_name(), claim.metadata.uid.as_deref());
        let note = format!(
            "EphemeralClaim {namespace}/{} is {}: {message}",
            name_of(ec),
            phase.as_str()
        );
        self.events
            .publish(&regarding, severity, &reason, "Reconcile", &note)
            .await;
    }

    /// Adds (`true`) or removes our finalizer.
    async fn set_finalizer(&self, ec: &EphemeralClaim, present: bool) -> Result<(), Error> {
        if has_finalizer(ec) == present {
            return Ok(());
        }
        self.leadership.check()?;
        let result = self
            .store
            .guaranteed_update(&self.ctx, namespace_of(ec), name_of(ec), false, |current| {
                if current.metadata.uid != ec.metadata.uid {
                    return Err(ApiError::Conflict {
                        resource: GroupResource::new(crate::api::GROUP, EPHEMERAL_CLAIMS.plural),
                        name: name_of(ec).to_owned(),
                        message: "the EphemeralClaim was replaced while it was being reconciled"
                            .to_owned(),
                    });
                }
                let mut next = current.clone();
                next.metadata.resource_version = None;
                crate::api::meta::set_finalizer(
                    &mut next.metadata,
                    FINALIZER_CLAIM_PROTECTION,
                    present,
                );
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

/// The claim an EphemeralClaim makes: named `<owner>-<name>`, with the
/// template's labels, annotations and spec, owned by the EphemeralClaim (as
/// its controller) and by the owner pod `owner_uid`.
pub fn claim_from_template(ec: &EphemeralClaim, owner_uid: &str) -> PersistentVolumeClaim {
    let template = ec.spec.claim_template.clone().unwrap_or_default();
    let owner = ec.spec.owner.as_ref().map_or("", |o| o.name.as_str());
    let labels = template.metadata.labels;
    let annotations = template.metadata.annotations;
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(ec.claim_name()),
            namespace: ec.metadata.namespace.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![
                apimeta::controller_ref(&EPHEMERAL_CLAIMS, &ec.metadata),
                OwnerReference {
                    api_version: OWNER_API_VERSION_V1.to_owned(),
                    kind: OWNER_KIND_POD.to_owned(),
                    name: owner.to_owned(),
                    uid: owner_uid.to_owned(),
                    controller: None,
                    block_owner_deletion: None,
                },
            ]),
            ..ObjectMeta::default()
        },
        spec: Some(template.spec),
        status: None,
    }
}

/// Why no claim may be made from `ec`'s template, if it is unsafe.
pub fn unsafe_template(ec: &EphemeralClaim) -> Option<String> {
    let causes = ec.template_safety_causes();
    if causes.is_empty() {
        return None;
    }
    let why: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    Some(format!(
        "no claim is made from this template: {}",
        why.join("; ")
    ))
}

fn set_condition(st: &mut EphemeralClaimStatus, type_: &str, reason: &str, message: &str) {
    apimeta::set_condition(
        &mut st.conditions,
        Condition {
            type_: type_.to_owned(),
            status: CONDITION_TRUE.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now(),
            observed_generation: st.observed_generation,
        },
    );
}

fn phase_of(ec: &EphemeralClaim) -> Phase {
    ec.status
        .as_ref()
        .and_then(|st| st.phase)
        .unwrap_or(Phase::Pending)
}

fn namespace_of(ec: &EphemeralClaim) -> &str {
    ec.metadata.namespace.as_deref().unwrap_or_default()
}

fn name_of(ec: &EphemeralClaim) -> &str {
    ec.metadata.name.as_deref().unwrap_or_default()
}

fn uid_of(ec: &EphemeralClaim) -> &str {
    ec.metadata.uid.as_deref().unwrap_or_default()
}

fn has_finalizer(ec: &EphemeralClaim) -> bool {
    ec.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_CLAIM_PROTECTION))
}

/// The volume a bound claim is bound to.
fn volume_of(claim: &PersistentVolumeClaim) -> Option<String> {
    let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    bound
        .then(|| claim.spec.as_ref().and_then(|s| s.volume_name.clone()))
        .flatten()
}

#[cfg(test)]
mod tests;
