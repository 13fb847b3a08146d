//! The EphemeralClaim controller's triggers: which EphemeralClaim to look at,
//! and when. Our objects come from the registry's watch (the watch cache);
//! PVCs from a metadata-only kube-rs watch, since an event only has to say
//! *which* EphemeralClaim to look at: the reconciler reads what it decides
//! on live. Pods come whole but are kept nowhere: only their volumes say
//! which claims they use.
//!
//! Owns a local copy of every EphemeralClaim, kept from the watch, to map a
//! claim, pod or NamespaceTransfer event to the EphemeralClaims it concerns
//! ([`pod_concerns`], [`transfer_concerns`]), and a resync that queues every
//! EphemeralClaim now and then, so that a lost event costs latency, never
//! correctness. A waiting EphemeralClaim is looked at again only on such an
//! event or that resync: it keeps no timer of its own. One that waits for an
//! offer is resynced far less often ([`WAITING_RESYNC`]): everything it
//! waits for reaches it as an event, or in its watch's relist, so thousands
//! of them do not keep the controller busy looking at nothing.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use tokio::task::JoinHandle;

use super::super::queue::WorkQueue;
use super::super::watch::{
    follow_objects, forward, metadata_events, name, namespace, object_events, queue_concerned,
    resync, watch_objects, Known, RESYNC,
};
use super::across::{REASON_CLONING, REASON_WAITING_FOR_CONSENT};
use super::lifecycle::references;
use crate::api::ephemeral_claim::{EphemeralClaim, EphemeralClaimPhase, CONDITION_CLAIM_CREATED};
use crate::api::meta::is_condition_true;
use crate::api::namespace_transfer::NamespaceTransfer;
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::Store;

/// How often an EphemeralClaim that waits for an offer is looked at without
/// an event.
const WAITING_RESYNC: Duration = Duration::from_secs(600);

/// The running triggers; dropping this stops them.
#[derive(Debug)]
pub struct Triggers {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Triggers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Triggers {
    /// Starts watching and queueing keys on `queue`.
    pub fn start(
        claims: Arc<Store<EphemeralClaimStrategy>>,
        transfers: Arc<Store<NamespaceTransferStrategy>>,
        client: kube::Client,
        queue: WorkQueue,
    ) -> Self {
        let known = Known::new(claim_tags);
        let wake = {
            let (known, queue) = (known.clone(), queue.clone());
            move |t: &NamespaceTransfer| {
                queue_concerned(&known, &queue, &transfer_tags(t), &transfer_concerns, t)
            }
        };
        let wake_all = wake.clone();
        let tasks = vec![
            tokio::spawn(watch_objects(
                claims,
                known.clone(),
                queue.clone(),
                |_, _| Vec::new(),
            )),
            tokio::spawn(resync(known.clone(), queue.clone(), RESYNC, |ec| {
                !waits_for_consent(ec)
            })),
            tokio::spawn(resync(
                known.clone(),
                queue.clone(),
                WAITING_RESYNC,
                waits_for_consent,
            )),
            // A transfer changed: the EphemeralClaim whose request it is, or
            // those waiting for the offer it may be. A relist may follow
            // missed events: every transfer it finds wakes its claims.
            tokio::spawn(follow_objects(
                transfers,
                move |all| all.iter().for_each(|t| wake_all(t)),
                move |t, _| wake(&t),
            )),
            // A claim changed: the EphemeralClaim that names it.
            tokio::spawn(forward(
                metadata_events::<PersistentVolumeClaim>(&client),
                known.clone(),
                queue.clone(),
                |claim| namespace_tags(namespace(claim)),
                |ec, claim| namespace_of(ec) == namespace(claim) && ec.claim_name() == name(claim),
            )),
            // A pod changed: the EphemeralClaims it owns or uses.
            tokio::spawn(forward(
                object_events::<Pod>(&client),
                known,
                queue,
                |pod| namespace_tags(namespace(pod)),
                pod_concerns,
            )),
        ];
        Self { tasks }
    }
}

/// An EphemeralClaim is filed under its namespace: every event that may
/// concern it (its claim's, its pods', its transfers') names that
/// namespace.
pub(super) fn claim_tags(ec: &EphemeralClaim) -> Vec<String> {
    namespace_tags(namespace_of(ec))
}

pub(super) fn namespace_tags(namespace: &str) -> Vec<String> {
    vec![namespace.to_owned()]
}

/// The namespaces whose EphemeralClaims a change to `t` may concern: its
/// own (a request under a claim's name) and its destination (an offer).
pub(super) fn transfer_tags(t: &NamespaceTransfer) -> Vec<String> {
    vec![
        t.own_namespace().to_owned(),
        t.destination_namespace().to_owned(),
    ]
}

/// Whether a change to `pod` concerns `ec`: pods still matter to it, and
/// the pod is its owner (by name: the uid is the reconciler's to check) or
/// names its claim in a volume. A pod of the namespace that is neither
/// changes none of its facts.
pub fn pod_concerns(ec: &EphemeralClaim, pod: &Pod) -> bool {
    let owner = ec.spec.owner.as_ref().map(|o| o.name.as_str());
    is_open(ec)
        && namespace_of(ec) == namespace(pod)
        && (owner == Some(name(pod)) || references(pod, &ec.claim_name()))
}

/// Whether a change to the NamespaceTransfer `t` concerns `ec`, which clones
/// a claim of another namespace: `t` is under `ec`'s own name (its request,
/// or a look-alike in its way), or it is a standing offer of `ec`'s source
/// to `ec`'s namespace (made, changed or gone) while `ec` may be waiting for
/// one.
pub fn transfer_concerns(ec: &EphemeralClaim, t: &NamespaceTransfer) -> bool {
    let Some(source) = ec.cross_namespace_source() else {
        return false;
    };
    let own_name =
        t.metadata.namespace == ec.metadata.namespace && t.metadata.name == ec.metadata.name;
    let offers = t.is_standing_offer()
        && source.is_source_of(t)
        && t.destination_namespace() == namespace_of(ec);
    own_name || (offers && may_wait_for_consent(ec))
}

/// Whether `ec` is known to wait for an offer: it said so, and nothing since
/// says otherwise.
pub fn waits_for_consent(ec: &EphemeralClaim) -> bool {
    let reason = ec.status.as_ref().and_then(|st| st.reason.as_deref());
    ec.cross_namespace_source().is_some()
        && reason == Some(REASON_WAITING_FOR_CONSENT)
        && may_wait_for_consent(ec)
}

/// Whether `ec` may still need an offer: Pending and not being deleted, no
/// claim recorded, and not following a request of its own (whose events
/// wake it by name).
fn may_wait_for_consent(ec: &EphemeralClaim) -> bool {
    let status = ec.status.as_ref();
    let pending = status
        .and_then(|st| st.phase)
        .is_none_or(|p| p == EphemeralClaimPhase::Pending);
    let claim_created =
        status.is_some_and(|st| is_condition_true(&st.conditions, CONDITION_CLAIM_CREATED));
    let cloning = status.and_then(|st| st.reason.as_deref()) == Some(REASON_CLONING);
    pending && ec.metadata.deletion_timestamp.is_none() && !claim_created && !cloning
}

fn namespace_of(ec: &EphemeralClaim) -> &str {
    ec.metadata.namespace.as_deref().unwrap_or_default()
}

/// Whether pods still matter to the EphemeralClaim: not finished, or being
/// deleted.
fn is_open(ec: &EphemeralClaim) -> bool {
    ec.metadata.deletion_timestamp.is_some()
        || !ec
            .status
            .as_ref()
            .and_then(|st| st.phase)
            .is_some_and(|p| p.is_finished())
}
