//! The executor: a thin interpreter of a [`Plan`]. It makes the plan's
//! writes in order, each after checking the leadership lease, and stops
//! where one is refused; it decides nothing. What it may do besides the
//! writes themselves is fill in what only the API knows: the uid of a
//! claim it just created, the phase the write before it recorded, the time
//! of a write.
//!
//! The writes go through [`Hands`], which the controller implements against
//! kube-apiserver and etcd, and a unit test implements as a recording fake
//! (`execute/tests.rs`), so that what runs is exactly the plan.

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};

use crate::api::namespace_transfer::{NamespaceTransfer, NamespaceTransferPhase as Phase};
use crate::controller::cluster::ClusterError;
use crate::controller::{fault, object_key, Error, Next};
use crate::metrics;

use super::decide::{peer_or_self, Action, Refused};
use super::facts::Facts;
use super::plan::snapshot::SnapshotWrite;
use super::plan::{label, plan, ClusterWrite, Edit, EventWrite, On, Plan, StatusChange, Write};
use super::status::apply_change;
use super::{Step, TransferController};
use crate::api::meta::now;

/// What performing a plan came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The plan was made, or stopped on a lost race: what the queue is
    /// asked.
    Next(Next),
    /// kube-apiserver refused a create or R5's delete: nothing was made,
    /// and the decision is asked again with this fact.
    Refused(Refused),
}

/// The writes a plan can make, one call each. The controller's own are the
/// real API; a test's records them.
pub(super) trait Hands {
    /// Whether this replica still leads (checked before every write).
    fn lead(&self) -> Result<(), Error>;
    /// A patch or delete of a claim or volume.
    async fn cluster(&self, write: &ClusterWrite) -> Result<(), ClusterError>;
    /// Creates `claim` in `namespace`; the created claim's uid.
    async fn create(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<String, ClusterError>;
    /// A read-modify-write of `t`'s status: `change`, on the pair `pair`,
    /// after a write that gave the source object the phase `written`; the
    /// phase written.
    async fn status(
        &self,
        t: &NamespaceTransfer,
        change: &StatusChange,
        pair: (&NamespaceTransfer, Option<&NamespaceTransfer>),
        written: Option<Phase>,
    ) -> Result<Option<Phase>, Error>;
    /// Our finalizer on `t`, added or taken off.
    async fn finalizer(&self, t: &NamespaceTransfer, present: bool) -> Result<(), Error>;
    /// Deletes `t`, if it is still the object of its uid.
    async fn delete(&self, t: &NamespaceTransfer) -> Result<(), Error>;
    /// Publishes an Event about `regarding`.
    async fn publish(&self, regarding: &ObjectReference, event: &EventWrite);
    /// Reconciles `t` again.
    fn wake(&self, t: &NamespaceTransfer);
    /// A write to a VolumeSnapshot or its content; a create's uid.
    async fn snapshot(&self, write: &SnapshotWrite) -> Result<Option<String>, ClusterError>;
}

impl TransferController {
    /// Performs one decided action: the writes of its plan.
    /// Each action's writes are timed in
    /// `storage_transfer_step_duration_seconds`, by the action's name.
    pub(super) async fn execute(&self, f: &Facts, action: &Action) -> Result<Outcome, Error> {
        let name = label(action);
        let p = plan(f, action);
        let started = std::time::Instant::now();
        let outcome = perform(self, f, name, &p).await;
        if !p.writes.is_empty() {
            metrics::global().transfers.step(name, started.elapsed());
        }
        outcome
    }
}

/// Makes the writes of `p` in order, calling the fault hooks at the
/// boundary after each but an Event (`<label>#<n>`, and the names the plan
/// gives it).
/// A write made on the binder's behalf that is refused for good, or
/// refused because its object changed, is skipped: the binder makes it.
/// A conditional claim or volume write refused because its object changed
/// or is gone (Conflict, NotFound), or a create that finds its claim
/// already there, ends the plan: the next reconcile decides again. An
/// unconditional one whose object is gone is skipped. A create, or R5's
/// delete, refused by kube-apiserver (quota, admission) ends it with
/// [`Outcome::Refused`].
pub(super) async fn perform(
    hands: &impl Hands,
    f: &Facts,
    label: &'static str,
    p: &Plan,
) -> Result<Outcome, Error> {
    let s = &f.source;
    let peer = peer_or_self(f);
    let object = |on: On| match on {
        On::Source => Some(s),
        On::Peer => peer,
    };
    let stop = Ok(Outcome::Next(Next::Now));
    // What only the writes themselves tell: the uid a create gave its
    // claim, and the phase the source object was written with.
    let mut created: Option<String> = None;
    let mut written: Option<Phase> = None;
    for (i, write) in p.writes.iter().enumerate() {
        if !matches!(write, Write::Event(_)) {
            hands.lead()?;
        }
        match write {
            Write::Cluster(c) => match hands.cluster(c).await {
                Ok(()) => {}
                // The binder makes it itself; only a failure that may
                // pass is tried again.
                Err(e) if c.is_for_the_binder() && !matches!(e, ClusterError::Unavailable(_)) => {}
                Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. })
                    if c.is_conditional() =>
                {
                    return stop
                }
                Err(ClusterError::NotFound { .. }) => {}
                Err(ClusterError::Refused { message, .. })
                    if matches!(c, ClusterWrite::DeleteClaim { .. })
                        && p.step == Some(Step::ReleaseSource) =>
                {
                    return Ok(Outcome::Refused(Refused {
                        step: Step::ReleaseSource,
                        message,
                    }))
                }
                Err(e) => return Err(e.into()),
            },
            Write::Create {
                step,
                namespace,
                claim,
            } => match hands.create(namespace, claim).await {
                Ok(uid) => created = Some(uid),
                Err(ClusterError::AlreadyExists { .. }) => return stop,
                Err(ClusterError::Refused { message, .. }) => {
                    return Ok(Outcome::Refused(Refused {
                        step: *step,
                        message,
                    }))
                }
                Err(e) => return Err(e.into()),
            },
            Write::Status { on, change } => {
                let Some(t) = object(*on) else { continue };
                let mut change = change.clone();
                if let Edit::Destination(reference) = &mut change.edit {
                    if reference.uid.is_empty() {
                        reference.uid = created.clone().unwrap_or_default();
                    }
                }
                if let Edit::SnapshotDestination(reference) = &mut change.edit {
                    if reference.uid.is_empty() {
                        reference.uid = created.clone().unwrap_or_default();
                    }
                }
                let phase = hands.status(t, &change, (s, peer), written).await?;
                if *on == On::Source {
                    written = phase;
                }
            }
            Write::Finalizer { on, present } => {
                if let Some(t) = object(*on) {
                    hands.finalizer(t, *present).await?;
                }
            }
            Write::Delete(on) => {
                if let Some(t) = object(*on) {
                    hands.delete(t).await?;
                }
            }
            Write::Event(event) => {
                let mut regarding = event.regarding.clone();
                if event.of_created {
                    regarding.uid = created.clone();
                }
                hands.publish(&regarding, event).await;
            }
            Write::Wake(on) => {
                if let Some(t) = object(*on) {
                    hands.wake(t);
                }
            }
            Write::Snapshot(w) => match hands.snapshot(w).await {
                Ok(uid) => created = uid.or(created),
                // Every snapshot write is conditional (a resourceVersion or
                // uid), and a create that finds its object made stops too.
                Err(
                    ClusterError::Conflict { .. }
                    | ClusterError::NotFound { .. }
                    | ClusterError::AlreadyExists { .. },
                ) => return stop,
                // Only a step's create or R5's delete is a fact to decide
                // on; a rollback's refused delete is an error, tried again.
                Err(ClusterError::Refused { message, .. })
                    if w.may_be_refused() && p.step.is_some() =>
                {
                    return Ok(Outcome::Refused(Refused {
                        step: p.step.unwrap_or(Step::CreateDestination),
                        message,
                    }))
                }
                Err(e) => return Err(e.into()),
            },
        }
        // A crash right after an Event leaves the cluster as a crash right
        // before it did: no decision reads an Event. Not a boundary.
        if !matches!(write, Write::Event(_)) {
            fault::at_boundary(label, i + 1, p.points_after(i)).await;
        }
    }
    Ok(Outcome::Next(p.then))
}

impl Hands for TransferController {
    fn lead(&self) -> Result<(), Error> {
        Ok(self.leadership.check()?)
    }

    async fn cluster(&self, write: &ClusterWrite) -> Result<(), ClusterError> {
        match write {
            ClusterWrite::Volume { name, .. } => self
                .cluster
                .patch_volume(name, &write.patch())
                .await
                .map(drop),
            ClusterWrite::Claim {
                namespace,
                name,
                change,
                ..
            } if change.is_status() => self
                .cluster
                .patch_claim_status(namespace, name, &write.patch())
                .await
                .map(drop),
            ClusterWrite::Claim {
                namespace, name, ..
            } => self
                .cluster
                .patch_claim(namespace, name, &write.patch())
                .await
                .map(drop),
            ClusterWrite::DeleteClaim {
                namespace,
                name,
                uid,
            } => self.cluster.delete_claim(namespace, name, uid).await,
        }
    }

    async fn create(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<String, ClusterError> {
        let created = self.cluster.create_claim(namespace, claim).await?;
        Ok(created.metadata.uid.unwrap_or_default())
    }

    async fn status(
        &self,
        t: &NamespaceTransfer,
        change: &StatusChange,
        pair: (&NamespaceTransfer, Option<&NamespaceTransfer>),
        written: Option<Phase>,
    ) -> Result<Option<Phase>, Error> {
        let at = now();
        let updated = self
            .write_status(t, change.finalizer(), |st| {
                apply_change(st, change, t, pair, written, &at)
            })
            .await?;
        Ok(updated.status.and_then(|st| st.phase))
    }

    async fn finalizer(&self, t: &NamespaceTransfer, present: bool) -> Result<(), Error> {
        self.write_finalizer(t, present).await
    }

    async fn delete(&self, t: &NamespaceTransfer) -> Result<(), Error> {
        self.delete_transfer(t).await
    }

    async fn publish(&self, regarding: &ObjectReference, event: &EventWrite) {
        self.events
            .publish(
                regarding,
                event.severity,
                event.reason,
                event.action,
                &event.note,
            )
            .await;
    }

    fn wake(&self, t: &NamespaceTransfer) {
        self.queue.add(&object_key(t));
    }

    async fn snapshot(&self, write: &SnapshotWrite) -> Result<Option<String>, ClusterError> {
        let c = &self.cluster;
        match write {
            SnapshotWrite::Snapshot {
                namespace, name, ..
            } => c
                .patch_volume_snapshot(namespace, name, &write.patch())
                .await
                .map(|()| None),
            SnapshotWrite::Content { name, .. } => c
                .patch_snapshot_content(name, &write.patch())
                .await
                .map(|()| None),
            SnapshotWrite::CreateContent(object) => {
                c.create_snapshot_content(object).await.map(Some)
            }
            SnapshotWrite::CreateSnapshot { namespace, object } => {
                c.create_volume_snapshot(namespace, object).await.map(Some)
            }
            SnapshotWrite::DeleteSnapshot {
                namespace,
                name,
                uid,
            } => c
                .delete_volume_snapshot(namespace, name, uid)
                .await
                .map(|()| None),
            SnapshotWrite::DeleteContent {
                name,
                uid,
                resource_version,
            } => c
                .delete_snapshot_content(name, uid, Some(resource_version))
                .await
                .map(|()| None),
        }
    }
}

#[cfg(test)]
mod tests;
