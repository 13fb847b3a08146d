//! The writes to the cluster's claims and volumes, typed, and which of
//! them an action makes ([`cluster_writes`]). A write that carries a
//! precondition (a resourceVersion, or a uid for a delete) ends its plan
//! when it is refused: the writes after it were decided on what it would
//! have made true.

use serde_json::{json, Value};

use crate::api::namespace_transfer::{
    ClaimReference, TransferMode, ANNOTATION_DESTINATION_LOST, ANNOTATION_ORIGINAL_RECLAIM_POLICY,
    ANNOTATION_PROVISIONER_FINALIZER, ANNOTATION_TRANSFER_LOCK, LABEL_CLONED_UNDER,
    PROVISIONER_FINALIZER,
};

use crate::controller::transfer::decide::{
    destination_of, moved_claim_name_of, peer_or_self, recorded_destination, recorded_source,
    uid_of, Action,
};
use crate::controller::transfer::facts::{
    Claim, Facts, Volume, ANNOTATION_BOUND_BY_CONTROLLER, VOLUME_MARKER,
};

/// One write to a PersistentVolume or a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller::transfer) enum ClusterWrite {
    /// A merge patch of the volume `name`, at `resource_version`; with
    /// `finalizers`, its finalizers become exactly these (see
    /// [`provisioner_finalizers`]).
    Volume {
        name: String,
        resource_version: String,
        change: VolumeChange,
        finalizers: Option<Vec<String>>,
    },
    /// A merge patch of the claim `namespace/name`, at `resource_version`
    /// when one is given.
    Claim {
        namespace: String,
        name: String,
        resource_version: Option<String>,
        change: ClaimChange,
    },
    /// Delete the claim `namespace/name`, only if its uid is `uid`.
    DeleteClaim {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// What a write changes on the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller::transfer) enum VolumeChange {
    /// R2: remember the policy, mark the volume as ours, set `Retain`; in
    /// Clone mode also label it with the offer, for good (what `maxClones`
    /// counts).
    Retain {
        original_policy: String,
        marker: String,
        cloned_under: Option<String>,
    },
    /// R4, the commit: the volume names the destination claim.
    Commit { to: ClaimReference },
    /// After R4, the destination claim is being deleted: `Retain` again,
    /// marked as ours, naming the lost claim's uid.
    Rehold {
        original_policy: String,
        marker: String,
        lost: String,
    },
    /// R6 and the rollback: take our marks off, and set the reclaim policy
    /// to `policy` when there is one.
    Unmark { policy: Option<String> },
}

/// What a write changes on a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller::transfer) enum ClaimChange {
    /// Our lock annotation, with this value.
    Lock(String),
    /// Our lock annotation, taken off.
    Unlock,
    /// The claim's finalizers, exactly these.
    Finalizers(Vec<String>),
    /// The claim's finalizers, exactly these, and `spec.volumeName`: a claim
    /// a populating request adopted, held and pinned to the volume.
    Pin {
        finalizers: Vec<String>,
        volume_name: String,
    },
    /// Right after R4, on the destination claim: the status kube-controller-
    /// manager's binder gives a claim it binds (its `updateClaimStatus`),
    /// `bound-by-controller` (our R3, or the adoption's pin, set its
    /// `spec.volumeName`), and our lock off. One write to `/status`, whose
    /// strategy keeps metadata changes. The binder's sync then has only
    /// `bind-completed` left to add. Not `bind-completed` itself: a binder
    /// whose copy of the volume still names the source claim (its PV and
    /// claim watches are separate streams) would make such a claim Lost;
    /// it refuses a claim bound by a controller instead, and tries again.
    Bind(BoundStatus),
    /// After R4, on the source claim: `Lost`, as the binder makes a claim
    /// whose volume names another, clearing what it clears. On `/status`.
    Lose,
}

/// The status the binder gives a claim it binds to a volume: the volume's
/// access modes and storage capacity, and its attributes class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller::transfer) struct BoundStatus {
    pub access_modes: Vec<String>,
    pub capacity: String,
    pub volume_attributes_class_name: Option<String>,
}

impl ClaimChange {
    /// Whether the write goes to the claim's `/status`.
    pub(in crate::controller::transfer) fn is_status(&self) -> bool {
        matches!(self, ClaimChange::Bind(_) | ClaimChange::Lose)
    }
}

impl ClusterWrite {
    /// Whether the write is made on kube-controller-manager's behalf: one
    /// the binder makes itself when it is refused, for any reason, so the
    /// plan goes on without it (it still carries its precondition).
    pub(in crate::controller::transfer) fn is_for_the_binder(&self) -> bool {
        matches!(self, ClusterWrite::Claim { change, .. } if change.is_status())
    }

    /// Whether the write is made only if a precondition holds; a refused one
    /// ends the list.
    pub(in crate::controller::transfer) fn is_conditional(&self) -> bool {
        match self {
            ClusterWrite::Volume { .. } | ClusterWrite::DeleteClaim { .. } => true,
            ClusterWrite::Claim {
                resource_version, ..
            } => resource_version.is_some(),
        }
    }

    /// The merge patch a `Volume` or `Claim` write sends; `Null` for a
    /// delete.
    pub(in crate::controller::transfer) fn patch(&self) -> Value {
        match self {
            ClusterWrite::Volume {
                resource_version,
                change,
                finalizers,
                ..
            } => {
                let mut patch = volume_patch(change);
                patch["metadata"]["resourceVersion"] = json!(resource_version);
                // Only for the changes that write annotations anyway:
                // indexing inserts, and a merge patch's `"annotations":
                // null` would take every annotation off.
                let took = match (change, finalizers) {
                    (VolumeChange::Unmark { .. }, _) => Some(Value::Null),
                    (VolumeChange::Retain { .. } | VolumeChange::Rehold { .. }, Some(_)) => {
                        Some(json!("taken"))
                    }
                    _ => None,
                };
                if let Some(took) = took {
                    patch["metadata"]["annotations"][ANNOTATION_PROVISIONER_FINALIZER] = took;
                }
                if let Some(finalizers) = finalizers {
                    patch["metadata"]["finalizers"] = json!(finalizers);
                }
                patch
            }
            ClusterWrite::Claim {
                resource_version,
                change,
                ..
            } => {
                let mut patch = match change {
                    ClaimChange::Lock(lock) => {
                        json!({"metadata": {"annotations": {ANNOTATION_TRANSFER_LOCK: lock}}})
                    }
                    ClaimChange::Unlock => {
                        json!({"metadata": {"annotations": {ANNOTATION_TRANSFER_LOCK: null}}})
                    }
                    ClaimChange::Finalizers(finalizers) => {
                        json!({"metadata": {"finalizers": finalizers}})
                    }
                    ClaimChange::Pin {
                        finalizers,
                        volume_name,
                    } => json!({
                        "metadata": {"finalizers": finalizers},
                        "spec": {"volumeName": volume_name},
                    }),
                    ClaimChange::Bind(status) => json!({
                        "metadata": {"annotations": {
                            ANNOTATION_TRANSFER_LOCK: null,
                            ANNOTATION_BOUND_BY_CONTROLLER: "yes",
                        }},
                        "status": {
                            "phase": "Bound",
                            "accessModes": status.access_modes,
                            "capacity": {"storage": status.capacity},
                            "currentVolumeAttributesClassName": status.volume_attributes_class_name,
                        },
                    }),
                    ClaimChange::Lose => json!({"status": {
                        "phase": "Lost",
                        "accessModes": null,
                        "capacity": null,
                        "currentVolumeAttributesClassName": null,
                    }}),
                };
                if let Some(rv) = resource_version {
                    patch["metadata"]["resourceVersion"] = json!(rv);
                }
                patch
            }
            ClusterWrite::DeleteClaim { .. } => Value::Null,
        }
    }
}

fn volume_patch(change: &VolumeChange) -> Value {
    match change {
        VolumeChange::Retain {
            original_policy,
            marker,
            cloned_under,
        } => {
            let mut patch = json!({
                "metadata": {"annotations": {
                    ANNOTATION_ORIGINAL_RECLAIM_POLICY: original_policy,
                    VOLUME_MARKER: marker,
                }},
                "spec": {"persistentVolumeReclaimPolicy": "Retain"},
            });
            if let Some(offer) = cloned_under {
                patch["metadata"]["labels"] = json!({ LABEL_CLONED_UNDER: offer });
            }
            patch
        }
        VolumeChange::Commit { to } => json!({
            "metadata": {},
            "spec": {"claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": to.namespace,
                "name": to.name,
                "uid": to.uid,
                "resourceVersion": null,
                "fieldPath": null,
            }},
        }),
        VolumeChange::Rehold {
            original_policy,
            marker,
            lost,
        } => json!({
            "metadata": {"annotations": {
                ANNOTATION_ORIGINAL_RECLAIM_POLICY: original_policy,
                VOLUME_MARKER: marker,
                ANNOTATION_DESTINATION_LOST: lost,
            }},
            "spec": {"persistentVolumeReclaimPolicy": "Retain"},
        }),
        VolumeChange::Unmark { policy } => {
            let mut patch = json!({"metadata": {"annotations": {
                ANNOTATION_ORIGINAL_RECLAIM_POLICY: null,
                VOLUME_MARKER: null,
            }}});
            if let Some(policy) = policy {
                patch["spec"] = json!({"persistentVolumeReclaimPolicy": policy});
            }
            patch
        }
    }
}

/// The writes to claims and volumes that `action`, decided on `f`, makes,
/// in the order they are made. Empty for an action that makes none, or
/// whose object the facts do not know (nothing to write to).
pub(in crate::controller::transfer) fn cluster_writes(
    f: &Facts,
    action: &Action,
) -> Vec<ClusterWrite> {
    let s = &f.source;
    let mine = uid_of(s).to_owned();
    let source_ns = s.source_namespace().to_owned();
    let volume = |change: VolumeChange, resource_version: &str| {
        f.volume.as_ref().map(|v| ClusterWrite::Volume {
            name: v.name.clone(),
            resource_version: resource_version.to_owned(),
            finalizers: provisioner_finalizers(v, &change),
            change,
        })
    };
    // The destination claim: the one R3 recorded, or before its record the
    // one it makes, named after the peer (a claim R3 made whose record was
    // never written: `finish::made_unrecorded`).
    let destination = match recorded_destination(s) {
        Some(dest) => Some((dest.namespace.as_str(), dest.name.as_str())),
        None => peer_or_self(f).map(|d| destination_of(s, d)),
    };
    let on_destination = |resource_version: Option<&String>, change: ClaimChange| {
        destination.map(|(namespace, name)| ClusterWrite::Claim {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            resource_version: resource_version.cloned(),
            change,
        })
    };
    // The claim R1 locked: the one its snapshot names, or before it the
    // claim the transfer names.
    let locked_name = || {
        recorded_source(s)
            .map(|snap| snap.name.clone())
            .unwrap_or_else(|| s.spec.source.name.clone())
    };
    // The moved claim `uid` made Lost, as the binder makes a claim whose
    // volume names another (`holder`), where the binder would: at the
    // version decided on, on `/status`.
    let lose_source = |uid: &str, holder: &str| {
        f.moved_claim
            .as_ref()
            .filter(|c| c.uid == uid)
            .zip(f.volume.as_ref())
            .filter(|(c, v)| loses_to(c, v, holder))
            .map(|(c, _)| ClusterWrite::Claim {
                namespace: s.source_namespace().to_owned(),
                name: locked_name(),
                resource_version: Some(c.resource_version.clone()),
                change: ClaimChange::Lose,
            })
    };
    let writes: Vec<Option<ClusterWrite>> = match action {
        Action::Lock { resource_version } => vec![Some(ClusterWrite::Claim {
            namespace: source_ns,
            name: moved_claim_name_of(s, &f.peer).unwrap_or_default(),
            resource_version: Some(resource_version.clone()),
            change: ClaimChange::Lock(mine),
        })],
        Action::Retain {
            resource_version,
            policy,
        } => vec![volume(
            VolumeChange::Retain {
                original_policy: policy.clone(),
                marker: mine.clone(),
                cloned_under: (s.mode() == TransferMode::Clone).then_some(mine),
            },
            resource_version,
        )],
        Action::Commit {
            resource_version,
            destination,
        } => {
            let commit = VolumeChange::Commit {
                to: destination.clone(),
            };
            match volume(commit, resource_version) {
                None => Vec::new(),
                // The lock has done its work on the destination claim. The
                // claim is bound as the binder would bind it, at the version
                // decided on; where that cannot be (a resize under way, a
                // claim not as R3 left it), taking the lock off still
                // changes the claim, which makes the binder bind it now
                // rather than at its next resync.
                commit => {
                    let claim = f
                        .destination_claim
                        .as_ref()
                        .filter(|c| c.uid == destination.uid);
                    let bind = claim.zip(f.volume.as_ref()).and_then(|(c, v)| {
                        binding(c, v).map(|status| (c.resource_version.clone(), status))
                    });
                    let (resource_version, change) = match bind {
                        Some((rv, status)) => (Some(rv), ClaimChange::Bind(status)),
                        None => (None, ClaimChange::Unlock),
                    };
                    // The source claim, which the commit has made lose its
                    // volume, made Lost as the binder would make it (R5
                    // makes it so too, if this write is refused). Here,
                    // right after the commit, it comes before the binder's
                    // own sync of the claim, which R5's reconcile, one
                    // reconcile later, often did not. A binder whose copy
                    // of the volume still names this claim (its claim and
                    // volume watches are separate streams) writes it Bound
                    // again when this write wakes it, as it would have at
                    // R5's; R5 makes it Lost again, and kubelet mounts no
                    // claim whose uid the volume does not name. That costs
                    // writes, never the volume (the fleet at 1,000 pairs
                    // showed none: 8.0 claim writes a pair, as before).
                    let lose = recorded_source(s)
                        .and_then(|snap| lose_source(&snap.uid, &destination.uid));
                    vec![
                        commit,
                        Some(ClusterWrite::Claim {
                            namespace: destination.namespace.clone(),
                            name: destination.name.clone(),
                            resource_version,
                            change,
                        }),
                        lose,
                    ]
                }
            }
        }
        Action::Rehold { resource_version } => {
            let original = f.volume.as_ref().map(|v| {
                v.original_policy
                    .clone()
                    .unwrap_or_else(|| v.reclaim_policy.clone())
            });
            let lost = recorded_destination(s)
                .map(|d| d.uid.clone())
                .unwrap_or_default();
            vec![original.and_then(|original_policy| {
                volume(
                    VolumeChange::Rehold {
                        original_policy,
                        marker: mine,
                        lost,
                    },
                    resource_version,
                )
            })]
        }
        Action::Settle {
            resource_version,
            policy,
        } => vec![volume(
            VolumeChange::Unmark {
                policy: Some(policy.clone()),
            },
            resource_version,
        )],
        Action::Unmark {
            resource_version,
            restore,
        } => vec![volume(
            VolumeChange::Unmark {
                policy: restore.clone(),
            },
            resource_version,
        )],
        Action::UnlockDestination => vec![on_destination(None, ClaimChange::Unlock)],
        Action::ProtectDestination {
            resource_version,
            finalizers,
            volume_name,
        } => vec![on_destination(
            Some(resource_version),
            match volume_name {
                Some(volume_name) => ClaimChange::Pin {
                    finalizers: finalizers.clone(),
                    volume_name: volume_name.clone(),
                },
                None => ClaimChange::Finalizers(finalizers.clone()),
            },
        )],
        Action::UnprotectDestination {
            resource_version,
            finalizers,
        } => vec![on_destination(
            Some(resource_version),
            ClaimChange::Finalizers(finalizers.clone()),
        )],
        Action::Unlock { resource_version } => vec![Some(ClusterWrite::Claim {
            namespace: source_ns,
            name: locked_name(),
            resource_version: Some(resource_version.clone()),
            change: ClaimChange::Unlock,
        })],
        // R5. The binder would make the source claim Lost when it next
        // syncs it (the delete is such a sync); made Lost first, as the
        // binder makes it, the claim gives the binder nothing to write.
        // The commit's plan made it Lost already, unless that write was
        // refused or the pair crashed before it.
        Action::ReleaseSource { uid } => {
            let lose = f
                .volume
                .as_ref()
                .and_then(|v| v.claim_ref.as_ref())
                .and_then(|holder| lose_source(uid, &holder.uid));
            vec![
                lose,
                Some(ClusterWrite::DeleteClaim {
                    namespace: source_ns,
                    name: locked_name(),
                    uid: uid.clone(),
                }),
            ]
        }
        Action::DeleteClone { name, uid } => vec![Some(ClusterWrite::DeleteClaim {
            namespace: source_ns,
            name: name.clone(),
            uid: uid.clone(),
        })],
        Action::DeleteDestination { uid } => {
            vec![
                destination.map(|(namespace, name)| ClusterWrite::DeleteClaim {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    uid: uid.clone(),
                }),
            ]
        }
        Action::Nothing { .. }
        | Action::Wait { .. }
        | Action::RecordMatch
        | Action::Finish { .. }
        | Action::Ask(_)
        | Action::Protect
        | Action::CreateClone(_)
        | Action::RecordSource(_)
        | Action::CreateDestination(_)
        | Action::RecordDestination(_)
        | Action::Adopt(_)
        | Action::Complete
        | Action::DestinationLost { .. }
        | Action::Mirror
        | Action::DropFinalizers
        | Action::Expire
        | Action::Snapshot(_) => Vec::new(),
    };
    writes.into_iter().flatten().collect()
}

/// The status the binder would give `claim` when it binds it to `volume`,
/// if the controller may write it in the binder's place: the claim is
/// Pending and pre-bound to the volume (the binder's sync of it would
/// bind it, and nothing else), and the volume has a storage capacity and
/// no resize under way (whose capacity the binder takes from an
/// annotation). The volume naming the claim is the caller's to ensure:
/// only the commit's own plan makes this write, after the commit.
pub(in crate::controller::transfer) fn binding(
    claim: &Claim,
    volume: &Volume,
) -> Option<BoundStatus> {
    if claim.phase != "Pending" || claim.deleting || !pre_bound(claim, volume) || volume.resizing {
        return None;
    }
    Some(BoundStatus {
        access_modes: volume.access_modes.clone(),
        capacity: volume.capacity.clone()?,
        volume_attributes_class_name: volume.volume_attributes_class_name.clone(),
    })
}

/// The volume's finalizers after `change`, when it changes them: the CSI
/// external-provisioner's finalizer taken off with `Retain` (R2, and the
/// rehold) and put back with `Delete` (R6, the rollback), each in the
/// same write as the policy. The provisioner makes exactly these changes
/// the moment it sees the policy change (sig-storage-lib-external-
/// provisioner's `handleProtectionFinalizer`), each a write of its own:
/// made here, its sync finds nothing to do, two writes fewer per pair.
/// Put back only where R2 took it (the volume's annotation says so), on a
/// volume still Bound and not being deleted, as the provisioner adds it;
/// anywhere else the provisioner, if it keeps the finalizer, adds it
/// itself. Either way the writes race the provisioner's own only as its
/// writes race each other: ours are conditional on the volume's version.
pub(in crate::controller::transfer) fn provisioner_finalizers(
    v: &Volume,
    change: &VolumeChange,
) -> Option<Vec<String>> {
    let has = v.finalizers.iter().any(|f| f == PROVISIONER_FINALIZER);
    match change {
        VolumeChange::Retain { .. } | VolumeChange::Rehold { .. } if has => Some(
            v.finalizers
                .iter()
                .filter(|f| *f != PROVISIONER_FINALIZER)
                .cloned()
                .collect(),
        ),
        VolumeChange::Unmark {
            policy: Some(policy),
        } if policy == "Delete"
            && v.took_provisioner_finalizer
            && !has
            && !v.deleting
            && v.phase == "Bound" =>
        {
            let mut finalizers = v.finalizers.clone();
            finalizers.push(PROVISIONER_FINALIZER.to_owned());
            Some(finalizers)
        }
        _ => None,
    }
}

/// Whether `claim` names `volume` in its `spec.volumeName`.
fn pre_bound(claim: &Claim, volume: &Volume) -> bool {
    claim.volume_name.as_deref() == Some(volume.name.as_str())
}

/// Whether the binder would make `claim` Lost once `volume` names the
/// claim whose uid is `holder`: it completed a binding to the volume, the
/// holder is another claim, and it is not Lost yet.
fn loses_to(claim: &Claim, volume: &Volume, holder: &str) -> bool {
    claim.bind_completed && claim.phase != "Lost" && pre_bound(claim, volume) && holder != claim.uid
}
