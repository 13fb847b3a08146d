//! The executor: performs one [`Action`], conditional on the
//! resourceVersion or uid it was decided on, after checking the leadership
//! lease, and reports what to do next. Nothing is kept between two writes.

use std::time::Duration;

use crate::api::namespace_transfer::{
    CloneCounts, NamespaceTransferPhase as Phase, TransferStepName as StepName,
    CONDITION_AUTHORIZED, CONDITION_PEER_MATCHED, CONDITION_READY, CONDITION_REBOUND,
    CONDITION_SOURCE_RELEASED, REASON_CLONE_FAILED,
};
use crate::controller::cluster::ClusterError;
use crate::controller::events::{claim_reference, reference_to, Severity};
use crate::controller::{fault, object_key, Error, Next};

use super::decide::{
    destination_of, moved_claim_name_of, peer_or_self, recorded_destination, recorded_source,
    Action, Report, REASON_COMPLETED, REASON_DESTINATION_LOST, REASON_DESTINATION_REFUSED,
    REASON_SOURCE_IN_USE, REASON_SOURCE_RELEASE_REFUSED,
};
use super::facts::Facts;
use super::matching::reference;
use super::plan::{cluster_writes, ClusterWrite};
use super::standing::{is_record_of, is_standing_pair, R1_COUNT};
use super::status::{completed_for_destination, mirror, now, received_from, set};
use super::{decide, Step, TransferController};

impl TransferController {
    /// Performs one decided action, each write conditional on what it was
    /// decided on; a lost race just decides again.
    pub(super) async fn execute(&self, f: &Facts, action: Action) -> Result<Next, Error> {
        let s = &f.source;
        let d = peer_or_self(f);
        let source_ns = s.source_namespace();
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
                if let Some(claim) = &f.moved_claim {
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
            Action::DeleteClone { ref name, .. } => {
                if self.perform(&cluster_writes(f, &action), None).await? == Performed::Stopped {
                    return Ok(Next::Now);
                }
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
            Action::Lock { .. } => {
                self.perform(&cluster_writes(f, &action), None).await?;
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
                if let Some(claim) = &f.moved_claim {
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
            Action::Retain { .. } => {
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
                let writes = cluster_writes(f, &action);
                if !writes.is_empty()
                    && self.perform(&writes, Some(Step::Retain)).await? == Performed::All
                {
                    self.mark_step(s, d, StepName::Retained).await?;
                }
                Ok(Next::Now)
            }
            Action::CreateDestination(claim) => {
                let Some(d) = d else { return Ok(Next::Now) };
                let (dest_ns, dest_name) = destination_of(s, d);
                self.leadership.check()?;
                match self.cluster.create_claim(dest_ns, &claim).await {
                    Ok(created) => {
                        fault::after(Step::CreateDestination);
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
                                Step::CreateDestination.action(),
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
                ref destination, ..
            } => {
                let Some(volume) = &f.volume else {
                    return Ok(Next::Now);
                };
                let writes = cluster_writes(f, &action);
                if self.perform(&writes, Some(Step::Commit)).await? == Performed::Stopped {
                    return Ok(Next::Now);
                }
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
            Action::ProtectDestination { .. }
            | Action::UnprotectDestination { .. }
            | Action::Rehold { .. }
            | Action::UnlockDestination
            | Action::Unmark { .. }
            | Action::DeleteDestination { .. }
            | Action::Unlock { .. } => {
                self.perform(&cluster_writes(f, &action), None).await?;
                Ok(Next::Now)
            }
            Action::ReleaseSource { ref uid } => {
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
                        claim_reference(source_ns, &name, Some(uid)),
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
                let writes = cluster_writes(f, &action);
                match self.perform(&writes, Some(Step::ReleaseSource)).await {
                    Ok(Performed::All) => {
                        self.mark_step(s, d, StepName::Released).await?;
                        Ok(Next::Now)
                    }
                    Ok(Performed::Stopped) => Ok(Next::Now),
                    Err(Error::Cluster(ClusterError::Refused { message, .. })) => {
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
                    Err(e) => Err(e),
                }
            }
            Action::Settle { .. } => {
                self.perform(&cluster_writes(f, &action), Some(Step::Settle))
                    .await?;
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
            Action::DropFinalizers if is_standing_pair(s) => {
                // The offer's finalizer is its own to let go (tend_offer).
                if let Some(d) = d {
                    self.set_finalizer(d, false).await?;
                }
                self.queue.add(&object_key(s));
                Ok(Next::Now)
            }
            Action::DropFinalizers => {
                self.drop_finalizers(s, d).await?;
                Ok(Next::Now)
            }
            Action::Expire if is_standing_pair(s) => match d {
                Some(d) => self.expire(d).await,
                None => Ok(Next::Done),
            },
            Action::Expire => self.expire(s).await,
        }
    }

    /// Makes `writes` in order ([`cluster_writes`]), each after checking
    /// the leadership lease; `after_first` names the fault point right
    /// after the first. A conditional write refused because the object
    /// changed or is gone (Conflict, NotFound) ends the list:
    /// [`Performed::Stopped`], and the next reconcile decides again. An
    /// unconditional one whose object is gone is skipped.
    pub(super) async fn perform(
        &self,
        writes: &[ClusterWrite],
        after_first: Option<Step>,
    ) -> Result<Performed, Error> {
        for (i, write) in writes.iter().enumerate() {
            self.leadership.check()?;
            let result = match write {
                ClusterWrite::Volume { name, .. } => self
                    .cluster
                    .patch_volume(name, &write.patch())
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
            };
            match result {
                Ok(()) => {}
                Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. })
                    if write.is_conditional() =>
                {
                    return Ok(Performed::Stopped)
                }
                Err(ClusterError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            if i == 0 {
                if let Some(step) = after_first {
                    fault::after(step);
                }
            }
        }
        Ok(Performed::All)
    }
}

/// How far [`TransferController::perform`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Performed {
    /// Every write was made (or its object was gone, for an unconditional one).
    All,
    /// A conditional write was refused; the writes after it were not made.
    Stopped,
}
