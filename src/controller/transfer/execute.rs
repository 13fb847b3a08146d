//! The executor: performs one [`Action`], conditional on the
//! resourceVersion or uid it was decided on, after checking the leadership
//! lease, and reports what to do next. Nothing is kept between two writes.

use std::time::Duration;

use serde_json::json;

use crate::api::namespace_transfer::{
    CloneCounts, NamespaceTransferPhase as Phase, TransferMode, TransferStepName as StepName,
    ANNOTATION_DESTINATION_LOST, ANNOTATION_ORIGINAL_RECLAIM_POLICY, ANNOTATION_TRANSFER_LOCK,
    CONDITION_AUTHORIZED, CONDITION_PEER_MATCHED, CONDITION_READY, CONDITION_REBOUND,
    CONDITION_SOURCE_RELEASED, LABEL_CLONED_UNDER, REASON_CLONE_FAILED,
};
use crate::controller::cluster::ClusterError;
use crate::controller::events::{claim_reference, reference_to, Severity};
use crate::controller::{fault, object_key, Error, Next};

use super::decide::{
    destination_of, moved_claim_name_of, peer_or_self, recorded_destination, recorded_source,
    uid_of, Action, Report, REASON_COMPLETED, REASON_DESTINATION_LOST, REASON_DESTINATION_REFUSED,
    REASON_SOURCE_IN_USE, REASON_SOURCE_RELEASE_REFUSED,
};
use super::facts::{Facts, Volume, VOLUME_MARKER};
use super::matching::reference;
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
            | Action::UnprotectDestination {
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

    /// Takes our lock annotation off the destination claim.
    pub(super) async fn unlock_destination(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(), Error> {
        self.leadership.check()?;
        let unlock = json!({"metadata": {"annotations": {ANNOTATION_TRANSFER_LOCK: null}}});
        match self.cluster.patch_claim(namespace, name, &unlock).await {
            Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes our marks from the volume, at the version decided on, and
    /// sets its reclaim policy to `policy` if given (else leaves it).
    pub(super) async fn restore_volume(
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
}
