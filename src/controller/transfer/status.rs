//! Writes to our own objects: status (a pair's two sides together, each
//! in the words its namespace may read), finalizers, the TTL, and the
//! helpers that edit conditions and mirror a finished pair.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::errors::{ApiError, GroupResource};
use crate::api::meta::{self as apimeta, CONDITION_FALSE, CONDITION_TRUE};
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferStatus, Role,
    TransferMode, TransferStepName as StepName, CONDITION_READY, FINALIZER_TRANSFER_PROTECTION,
};
use crate::controller::events::{reference_to, Severity};
use crate::controller::{Error, Next};
use crate::registry::DeleteOptions;

use super::decide::{destination_text, has_finalizer, name_of, Report};
use super::matching::{is_active, rerecord, role_of};
use super::standing::is_standing_pair;
use super::TransferController;

impl TransferController {
    /// Records R3's claim, uid and all, on the object that holds the pair's
    /// record (the source object, or a standing offer's request): from now
    /// on only that claim is the destination.
    pub(super) async fn record_destination(
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
    pub(super) async fn write_finish(
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

    /// Removes the protection finalizer from the destination side, then the
    /// source side (so that a Destination never waits on a vanished Source).
    pub(super) async fn drop_finalizers(
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
    pub(super) async fn expire(&self, t: &NamespaceTransfer) -> Result<Next, Error> {
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
    pub(super) async fn update_pair(
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
    pub(super) async fn mark_step(
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
    pub(super) async fn update_status(
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
    pub(super) async fn set_finalizer(
        &self,
        t: &NamespaceTransfer,
        present: bool,
    ) -> Result<(), Error> {
        if has_finalizer(t) == present {
            return Ok(());
        }
        self.leadership.check()?;
        let result = self
            .store
            .guaranteed_update(&self.ctx, t.own_namespace(), name_of(t), false, |current| {
                let mut next = current.clone();
                next.metadata.resource_version = None;
                crate::api::meta::set_finalizer(
                    &mut next.metadata,
                    FINALIZER_TRANSFER_PROTECTION,
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

pub(super) fn now() -> Time {
    Time(Timestamp::now())
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

/// The time left before `activeDeadlineSeconds` runs out; `None` without one.
pub(super) fn remaining_until_deadline(t: &NamespaceTransfer) -> Option<Duration> {
    let deadline = t.spec.active_deadline_seconds?;
    let created = t.metadata.creation_timestamp.as_ref()?.0.as_second();
    let left = created.saturating_add(deadline) - Timestamp::now().as_second();
    Some(Duration::from_secs(left.max(0).unsigned_abs()))
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
