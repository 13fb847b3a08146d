//! The EphemeralClaim controller's triggers: which EphemeralClaim to look at,
//! and when. Our objects come from the registry's watch (the watch cache);
//! PVCs and pods from metadata-only kube-rs watches, since an event only has to
//! say *which* EphemeralClaim to look at: the reconciler reads what it decides
//! on live.
//!
//! Owns a local copy of every EphemeralClaim, kept from the watch, to map a
//! claim or pod event to the EphemeralClaims it concerns, and a resync that
//! queues every EphemeralClaim now and then, so that a lost event costs
//! latency, never correctness.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use tokio::task::JoinHandle;

use super::super::queue::WorkQueue;
use super::super::watch::{
    forward, metadata_events, name, namespace, resync, watch_objects, Known,
};
use crate::api::ephemeral_claim::EphemeralClaim;
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::Store;

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
        client: kube::Client,
        queue: WorkQueue,
    ) -> Self {
        let known: Known<EphemeralClaim> = Arc::default();
        let tasks = vec![
            tokio::spawn(watch_objects(
                claims,
                known.clone(),
                queue.clone(),
                |_, _| Vec::new(),
            )),
            tokio::spawn(resync(known.clone(), queue.clone(), |_| true)),
            // A claim changed: the EphemeralClaim that names it.
            tokio::spawn(forward(
                metadata_events::<PersistentVolumeClaim>(&client),
                known.clone(),
                queue.clone(),
                |ec, claim| namespace_of(ec) == namespace(claim) && ec.claim_name() == name(claim),
            )),
            // A pod changed: any open EphemeralClaim of its namespace, since
            // the pod may be the owner or a user (metadata does not say).
            tokio::spawn(forward(
                metadata_events::<Pod>(&client),
                known,
                queue,
                |ec, pod| namespace_of(ec) == namespace(pod) && is_open(ec),
            )),
        ];
        Self { tasks }
    }
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
