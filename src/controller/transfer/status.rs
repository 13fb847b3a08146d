//! Writes to our own objects: a status edit of a plan applied to a status
//! ([`apply_change`]), the read-modify-write that makes it, finalizers, the
//! TTL ([`expiry`]), and the helpers that edit conditions and mirror a
//! finished pair.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::errors::{ApiError, GroupResource};
use crate::api::meta::{self as apimeta, now, CONDITION_FALSE, CONDITION_TRUE};
use crate::api::namespace_transfer::{
    CloneCounts, NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus,
    TransferMode, TransferStepName as StepName, CONDITION_AUTHORIZED, CONDITION_PEER_MATCHED,
    CONDITION_READY, CONDITION_REBOUND, CONDITION_SOURCE_RELEASED, FINALIZER_TRANSFER_PROTECTION,
    REASON_MATCHED, REASON_NOT_IN_USE, REASON_RIGHTS_CONFIRMED,
};
use crate::controller::events::{reference_to, Severity};
use crate::controller::{Error, Next};
use crate::metrics;
use crate::registry::{DeleteOptions, Part};

use super::decide::{destination_text, has_finalizer, name_of, Report, REASON_COMPLETED};
use super::matching::{is_active, rerecord, role_of};
use super::plan::{finished_alone, Edit, On, PeerPhase, StatusChange};
use super::standing::is_record_of;
use super::TransferController;

impl TransferController {
    /// Writes a finished phase on `t` alone (a Destination-role object
    /// without its Source, or a standing offer), in the words its side may
    /// read.
    pub(super) async fn finish_alone(
        &self,
        t: &NamespaceTransfer,
        phase: Phase,
        report: &Report,
    ) -> Result<(), Error> {
        let change = finished_alone(t, phase, report);
        let at = now();
        self.update_status(t, |st| {
            apply_change(st, &change, t, (t, None), None, &at);
        })
        .await?;
        Ok(())
    }

    /// Deletes a finished object whose `ttlSecondsAfterFinished` has passed,
    /// or asks to be woken when it will.
    pub(super) async fn expire(&self, t: &NamespaceTransfer) -> Result<Next, Error> {
        match expiry(t, Timestamp::now().as_second()) {
            Expiry::Keep => Ok(Next::Done),
            Expiry::After(left) => Ok(Next::After(left)),
            Expiry::Due => {
                self.delete_transfer(t).await?;
                Ok(Next::Done)
            }
        }
    }

    /// Deletes `t`, only if it is still the object of that uid.
    pub(super) async fn delete_transfer(&self, t: &NamespaceTransfer) -> Result<(), Error> {
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
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A read-modify-write of `t`'s status, tried first on `t` itself (the
    /// facts read our objects from etcd, so it is most often current);
    /// emits an Event when the phase changes.
    pub(super) async fn update_status(
        &self,
        t: &NamespaceTransfer,
        change: impl Fn(&mut NamespaceTransferStatus),
    ) -> Result<NamespaceTransfer, Error> {
        self.write_status(t, None, change).await
    }

    /// [`Self::update_status`], which also puts our finalizer on `t`
    /// (`Some(true)`) or takes it off (`Some(false)`) in the same write
    /// (see [`StatusChange::finalizer`]); an object being deleted keeps its
    /// finalizers as they are.
    pub(super) async fn write_status(
        &self,
        t: &NamespaceTransfer,
        finalizer: Option<bool>,
        change: impl Fn(&mut NamespaceTransferStatus),
    ) -> Result<NamespaceTransfer, Error> {
        self.leadership.check()?;
        let part = if finalizer.is_some() {
            Part::StatusAndFinalizers
        } else {
            Part::Status
        };
        let before = t.status.as_ref().and_then(|st| st.phase);
        let updated = self
            .store
            .guaranteed_update_from(
                &self.ctx,
                t.own_namespace(),
                name_of(t),
                part,
                copy_of(t),
                |current| {
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
                            message: "the transfer finished while it was being reconciled"
                                .to_owned(),
                        });
                    }
                    let mut next = current.clone();
                    next.metadata.resource_version = None;
                    if let Some(present) = finalizer {
                        apimeta::set_finalizer(
                            &mut next.metadata,
                            FINALIZER_TRANSFER_PROTECTION,
                            present,
                        );
                    }
                    let role = role_of(current);
                    let status = next
                        .status
                        .get_or_insert_with(NamespaceTransferStatus::default);
                    // Before `change`, so that its conditions carry it too.
                    status.observed_generation = current.metadata.generation;
                    change(status);
                    status.role = role;
                    Ok(next)
                },
            )
            .await?;
        let after = updated.status.as_ref().and_then(|st| st.phase);
        if let Some(ended) = after.filter(|p| p.is_finished()) {
            if !before.is_some_and(Phase::is_finished) {
                count_ended(&updated, ended, &now());
            }
        }
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
    pub(super) async fn set_finalizer(
        &self,
        t: &NamespaceTransfer,
        present: bool,
    ) -> Result<(), Error> {
        if has_finalizer(t) == present {
            return Ok(());
        }
        self.write_finalizer(t, present).await
    }

    /// Adds or removes our finalizer on the object as it is now, whatever
    /// the copy `t` shows (a write that changes nothing writes nothing):
    /// tried first on `t`, then on the object as read.
    pub(super) async fn write_finalizer(
        &self,
        t: &NamespaceTransfer,
        present: bool,
    ) -> Result<(), Error> {
        self.leadership.check()?;
        let result = self
            .store
            .guaranteed_update_from(
                &self.ctx,
                t.own_namespace(),
                name_of(t),
                Part::Main,
                copy_of(t),
                |current| {
                    let mut next = current.clone();
                    next.metadata.resource_version = None;
                    crate::api::meta::set_finalizer(
                        &mut next.metadata,
                        FINALIZER_TRANSFER_PROTECTION,
                        present,
                    );
                    Ok(next)
                },
            )
            .await;
        match result {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// On the peer `t` of `source`, which heard only of the pair's phase
/// changes (`plan::peer_keeps_steps`): the steps the source object recorded
/// and it lacks, with their times, and the source's `Authorized` and
/// `Rebound` conditions, whose words are the pair's shared ones. Nothing on
/// the source object itself.
fn learn_steps(
    st: &mut NamespaceTransferStatus,
    t: &NamespaceTransfer,
    source: &NamespaceTransfer,
) {
    if t.metadata.uid == source.metadata.uid {
        return;
    }
    let Some(from) = source.status.as_ref() else {
        return;
    };
    for step in &from.steps {
        if !st.steps.iter().any(|s| s.name == step.name) {
            st.steps.push(step.clone());
        }
    }
    st.steps
        .sort_by_key(|s| StepName::ALL.iter().position(|n| *n == s.name));
    for kind in [CONDITION_AUTHORIZED, CONDITION_REBOUND] {
        let missing = apimeta::find_condition(&st.conditions, kind).is_none();
        if let Some(c) = apimeta::find_condition(&from.conditions, kind).filter(|_| missing) {
            let mut c = c.clone();
            c.observed_generation = st.observed_generation;
            st.conditions.push(c);
        }
    }
}

/// `t` as a copy the store may write on: any object read from it, but never
/// a standing offer, which the decision sees as a view of one of its pairs
/// (`standing_view`: the offer's metadata with its request's status), and
/// whose writes must start from the offer as stored.
fn copy_of(t: &NamespaceTransfer) -> Option<&NamespaceTransfer> {
    (!t.is_standing_offer()).then_some(t)
}

/// What `ttlSecondsAfterFinished` asks of a transfer at `now` (Unix
/// seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// No TTL, not finished, or still held by a finalizer or deleting.
    Keep,
    /// Its TTL passes after this long.
    After(Duration),
    /// Its TTL has passed: delete it.
    Due,
}

pub(super) fn expiry(t: &NamespaceTransfer, now: i64) -> Expiry {
    let Some(ttl) = t.spec.ttl_seconds_after_finished else {
        return Expiry::Keep;
    };
    if has_finalizer(t) || t.metadata.deletion_timestamp.is_some() || is_active(t) {
        return Expiry::Keep;
    }
    let Some(finished) = finish_time(t) else {
        return Expiry::Keep;
    };
    let due = finished.as_second().saturating_add(i64::from(ttl.max(0)));
    match due - now {
        left if left > 0 => Expiry::After(Duration::from_secs(left.unsigned_abs())),
        _ => Expiry::Due,
    }
}

/// Applies a plan's status edit to `st`, the status of `t`, one object of
/// the pair of `source` (the object that drives it) and `peer`; `written`
/// is the phase the write before this one gave the source object, and
/// `now` the time of the write.
pub(super) fn apply_change(
    st: &mut NamespaceTransferStatus,
    change: &StatusChange,
    t: &NamespaceTransfer,
    (source, peer): (&NamespaceTransfer, Option<&NamespaceTransfer>),
    written: Option<Phase>,
    now: &Time,
) {
    if let Some((reason, message)) = &change.say {
        st.reason = Some((*reason).to_owned());
        st.message = Some(message.clone());
    }
    let said = || st.message.clone().unwrap_or_default();
    match &change.edit {
        Edit::Waiting { phase, in_use } => {
            st.phase = Some(*phase);
            if let Some(reason) = in_use {
                let message = said();
                set(st, CONDITION_SOURCE_RELEASED, false, reason, &message);
            }
        }
        Edit::Matched => {
            st.phase = Some(Phase::WaitingForRelease);
            let matched = "matched with the transfer in the other namespace";
            set(st, CONDITION_PEER_MATCHED, true, REASON_MATCHED, matched);
        }
        Edit::Finished { phase, reason } => {
            st.phase = Some(*phase);
            let message = said();
            set(st, CONDITION_READY, false, reason, &message);
        }
        Edit::Locked { snapshot, released } => {
            if let Some(snapshot) = snapshot {
                st.source_claim = Some(snapshot.clone());
            }
            locked(st, released, now);
        }
        Edit::Retained => {
            st.record_step(StepName::Retained, now);
            authorized(st);
        }
        Edit::Committed { rebound } => {
            let how = if t.moves_snapshot() {
                "SnapshotBound"
            } else {
                "ClaimRefMoved"
            };
            set(st, CONDITION_REBOUND, true, how, rebound);
            st.reason = None;
            st.record_step(StepName::Committed, now);
        }
        Edit::Completed { volume, served, .. } => {
            st.phase = Some(Phase::Completed);
            if let Some(claim) = served {
                st.destination_claim = Some(claim.clone());
            }
            st.volume_name = Some(volume.clone());
            st.completion_time = Some(now.clone());
            let message = said();
            set(st, CONDITION_READY, true, REASON_COMPLETED, &message);
            learn_steps(st, t, source);
            st.record_step(StepName::Settled, now);
        }
        Edit::Lost { reason } => {
            st.phase = Some(Phase::Rebinding);
            let message = said();
            set(st, CONDITION_READY, false, reason, &message);
        }
        Edit::Step(step) => st.record_step(*step, now),
        Edit::Destination(reference) => {
            // R2 is done before R3, and its rights were confirmed before
            // it: a claim's R2 is recorded here (`record_step` fills in
            // `Retained`).
            st.destination_claim = Some(reference.clone());
            st.record_step(StepName::Created, now);
            authorized(st);
        }
        Edit::PairRecord(record) => {
            // Once: a retried write finds its record and counts nothing.
            let recorded =
                peer.is_some_and(|d| st.pairs.iter().any(|p| is_record_of(p, d, source)));
            if !recorded {
                st.pairs.push((**record).clone());
                let counts = st.clones.get_or_insert_with(CloneCounts::default);
                counts.made = counts.made.saturating_add(1);
            }
        }
        Edit::Mirror(status) => mirror(st, status, source, t),
        Edit::SnapshotLocked { record, released } => {
            if let Some(record) = record {
                st.source_snapshot = Some(record.clone());
            }
            locked(st, released, now);
        }
        Edit::SnapshotDestination(reference) => {
            st.destination_snapshot = Some(reference.clone());
            st.record_step(StepName::Created, now);
        }
        Edit::SnapshotCompleted => {
            st.phase = Some(Phase::Completed);
            st.completion_time = Some(now.clone());
            let message = said();
            set(st, CONDITION_READY, true, REASON_COMPLETED, &message);
            learn_steps(st, t, source);
            st.record_step(StepName::Settled, now);
        }
    }
    let recorded_peer = match change.peer_of {
        Some(On::Source) => Some(source),
        Some(On::Peer) => peer,
        None => None,
    };
    if let Some(recorded) = recorded_peer {
        st.peer = Some(rerecord(st.peer.as_ref(), recorded, t));
    }
    match change.peer_phase {
        Some(PeerPhase::Own) => st.peer_phase = st.phase,
        Some(PeerPhase::Written) => st.peer_phase = written,
        Some(PeerPhase::Known(phase)) => st.peer_phase = phase,
        None => {}
    }
}

/// `Authorized=True`: both parties' rights were confirmed before R2.
fn authorized(st: &mut NamespaceTransferStatus) {
    let message = "both parties still hold the rights the transfer needs";
    set(
        st,
        CONDITION_AUTHORIZED,
        true,
        REASON_RIGHTS_CONFIRMED,
        message,
    );
    st.reason = None;
}

/// R1 done, for a claim or a snapshot alike: the transfer is Rebinding, the
/// source is released (`released` says how it was found free), and the
/// Locked step is recorded at `now`.
fn locked(st: &mut NamespaceTransferStatus, released: &str, now: &Time) {
    st.phase = Some(Phase::Rebinding);
    st.reason = None;
    set(
        st,
        CONDITION_SOURCE_RELEASED,
        true,
        REASON_NOT_IN_USE,
        released,
    );
    st.record_step(StepName::Locked, now);
}

pub(super) fn set(
    st: &mut NamespaceTransferStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
) {
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
pub(super) fn mirror(
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
        // A populating request's own claim, which it served: in its own
        // namespace (a crash between R3's two records leaves it only here).
        if d.populates() {
            if let Some(claim) = source
                .destination_claim
                .as_ref()
                .filter(|c| c.namespace == d.own_namespace())
            {
                st.destination_claim = Some(claim.clone());
            }
        }
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
pub(super) fn finish_time(t: &NamespaceTransfer) -> Option<Timestamp> {
    let st = t.status.as_ref()?;
    st.completion_time.as_ref().map(|c| c.0).or_else(|| {
        apimeta::find_condition(&st.conditions, CONDITION_READY).map(|c| c.last_transition_time.0)
    })
}

/// The destination's words for a completed transfer `s`: the volume is its
/// own now; the claim it came from (in Clone mode, the clone) is not.
pub(super) fn completed_for_destination(s: &NamespaceTransfer, volume: &str, to: &str) -> String {
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
pub(super) fn received_from(s: &NamespaceTransfer) -> String {
    let origin = format!("{}/{}", s.source_namespace(), s.spec.source.name);
    match s.mode() {
        TransferMode::Clone => format!("a clone of {origin}"),
        TransferMode::Move => format!("the volume of {origin}"),
    }
}

/// Counts a transfer object that has just ended in
/// `storage_transfer_transfer_duration_seconds`: from its creation to `at`.
/// Called by [`TransferController::write_status`] when its write takes a
/// phase that had not ended to one that has: each object once, whichever
/// path ended it (a pair's plan, an object finished alone).
fn count_ended(t: &NamespaceTransfer, ended: Phase, at: &Time) {
    let outcome = match ended {
        Phase::Completed => metrics::Outcome::Completed,
        Phase::Failed => metrics::Outcome::Failed,
        _ => metrics::Outcome::Cancelled,
    };
    let Some(created) = &t.metadata.creation_timestamp else {
        return;
    };
    let took = at.0.duration_since(created.0).as_secs_f64().max(0.0);
    metrics::global()
        .transfers
        .duration
        .get_or_create(&metrics::TransferLabels {
            mode: match t.mode() {
                TransferMode::Clone => metrics::Mode::Clone,
                TransferMode::Move => metrics::Mode::Move,
            },
            kind: if t.source_is_snapshot() {
                metrics::SourceKind::VolumeSnapshot
            } else {
                metrics::SourceKind::PersistentVolumeClaim
            },
            outcome,
        })
        .observe(took);
}

#[cfg(test)]
mod tests;
