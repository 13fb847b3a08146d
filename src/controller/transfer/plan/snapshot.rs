//! The writes of a snapshot move's steps (DESIGN §2.1.7), as data: to the
//! snapshot controller's objects ([`SnapshotWrite`], each conditional on the
//! resourceVersion or uid it was decided on), to our own objects, and the
//! Events.

use serde_json::{json, Value};

use super::{
    mark_step, other, pair, pair_step, peer_keeps_steps, step_change, Edit, On, Plan, StatusChange,
    Step, Write,
};
use crate::api::namespace_transfer::{
    NamespaceTransfer, SnapshotReference, SourceSnapshotRecord, TransferStepName as StepName,
    ANNOTATION_ORIGINAL_DELETION_POLICY, ANNOTATION_TRANSFER_LOCK,
};
use crate::api::namespace_transfer::{REASON_AUTHORIZED, REASON_COMMITTED, REASON_LOCKED};
use crate::controller::events::{reference_to, Severity};
use crate::controller::object_key;
use crate::controller::transfer::decide::snapshot::{
    destination_text, recorded_destination, recorded_source, SnapshotAction,
};
use crate::controller::transfer::decide::{destination_of, peer_or_self, uid_of, Report};
use crate::controller::transfer::facts::Facts;
use crate::controller::transfer::snapshot::ANNOTATION_BEING_DELETED;

/// One write to a VolumeSnapshot or a VolumeSnapshotContent.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::controller::transfer) enum SnapshotWrite {
    /// A merge patch of the snapshot `namespace/name` at `resource_version`.
    Snapshot {
        namespace: String,
        name: String,
        resource_version: String,
        change: SnapshotChange,
    },
    /// A merge patch of the content `name` at `resource_version`.
    Content {
        name: String,
        resource_version: String,
        change: ContentChange,
    },
    /// Create this content.
    CreateContent(Box<Value>),
    /// Create this snapshot in `namespace`.
    CreateSnapshot {
        namespace: String,
        object: Box<Value>,
    },
    /// Delete the snapshot `namespace/name`, only if its uid is `uid`.
    DeleteSnapshot {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Delete the content `name`, only if its uid is `uid` and its
    /// resourceVersion `resource_version` (what its policy was seen at).
    DeleteContent {
        name: String,
        uid: String,
        resource_version: String,
    },
}

/// What a write changes on a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller::transfer) enum SnapshotChange {
    /// Our lock annotation, with this value.
    Lock(String),
    /// Our lock annotation, taken off.
    Unlock,
}

/// What a write changes on a content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::controller::transfer) enum ContentChange {
    /// R2: remember the policy, mark the content as ours, set `Retain`.
    Retain {
        original_policy: String,
        marker: String,
    },
    /// The rollback's fence: `Retain`, nothing else.
    Rehold,
    /// Before a delete: marked being-deleted (so that the csi-snapshotter
    /// lets it go once deleted), and `Retain`.
    BeingDeleted,
    /// R6 and the rollback: take our marks off, and set the policy to
    /// `policy` when there is one.
    Unmark { policy: Option<String> },
}

impl SnapshotWrite {
    /// Whether kube-apiserver's refusal of the write (quota, admission, a
    /// webhook) is a fact for the decision: the creates of R3, and R5's
    /// delete of the source snapshot.
    pub(in crate::controller::transfer) fn may_be_refused(&self) -> bool {
        matches!(
            self,
            SnapshotWrite::CreateContent(_)
                | SnapshotWrite::CreateSnapshot { .. }
                | SnapshotWrite::DeleteSnapshot { .. }
        )
    }

    /// The merge patch a `Snapshot` or `Content` write sends; `Null`
    /// otherwise.
    pub(in crate::controller::transfer) fn patch(&self) -> Value {
        match self {
            SnapshotWrite::Snapshot {
                resource_version,
                change,
                ..
            } => {
                let lock = match change {
                    SnapshotChange::Lock(uid) => json!(uid),
                    SnapshotChange::Unlock => Value::Null,
                };
                json!({"metadata": {
                    "resourceVersion": resource_version,
                    "annotations": {ANNOTATION_TRANSFER_LOCK: lock},
                }})
            }
            SnapshotWrite::Content {
                resource_version,
                change,
                ..
            } => {
                let mut patch = match change {
                    ContentChange::Retain {
                        original_policy,
                        marker,
                    } => json!({
                        "metadata": {"annotations": {
                            ANNOTATION_TRANSFER_LOCK: marker,
                            ANNOTATION_ORIGINAL_DELETION_POLICY: original_policy,
                        }},
                        "spec": {"deletionPolicy": "Retain"},
                    }),
                    ContentChange::Rehold => json!({"spec": {"deletionPolicy": "Retain"}}),
                    ContentChange::BeingDeleted => json!({
                        "metadata": {"annotations": {ANNOTATION_BEING_DELETED: "yes"}},
                        "spec": {"deletionPolicy": "Retain"},
                    }),
                    ContentChange::Unmark { policy } => {
                        let mut patch = json!({"metadata": {"annotations": {
                            ANNOTATION_TRANSFER_LOCK: null,
                            ANNOTATION_ORIGINAL_DELETION_POLICY: null,
                        }}});
                        if let Some(policy) = policy {
                            patch["spec"] = json!({"deletionPolicy": policy});
                        }
                        patch
                    }
                };
                patch["metadata"]["resourceVersion"] = json!(resource_version);
                patch
            }
            _ => Value::Null,
        }
    }
}

fn source_snapshot(s: &NamespaceTransfer) -> (String, String) {
    let name = recorded_source(s).map_or(s.spec.source.name.as_str(), |r| r.name.as_str());
    (s.source_namespace().to_owned(), name.to_owned())
}

fn write(p: &mut Plan, w: SnapshotWrite) {
    p.writes.push(Write::Snapshot(w));
}

/// The writes of one snapshot step, in order.
pub(super) fn plan(f: &Facts, p: &mut Plan, action: &SnapshotAction) {
    let s = &f.source;
    let mine = uid_of(s).to_owned();
    let (source_ns, source_name) = source_snapshot(s);
    let destination = peer_or_self(f).map(|d| {
        let (ns, name) = destination_of(s, d);
        (ns.to_owned(), name.to_owned())
    });
    let (dest_ns, dest_name) = destination.unwrap_or_default();
    let old_content = || recorded_source(s).map(|r| r.content_name.clone());
    match action {
        SnapshotAction::Lock { resource_version } => write(
            p,
            SnapshotWrite::Snapshot {
                namespace: source_ns,
                name: source_name,
                resource_version: resource_version.clone(),
                change: SnapshotChange::Lock(mine),
            },
        ),
        SnapshotAction::RecordSource(record) => record_source(f, p, record),
        SnapshotAction::Retain {
            resource_version,
            policy,
        } => {
            let Some(name) = old_content() else { return };
            let first = p.writes.len();
            write(
                p,
                SnapshotWrite::Content {
                    name,
                    resource_version: resource_version.clone(),
                    change: ContentChange::Retain {
                        original_policy: policy.clone(),
                        marker: mine,
                    },
                },
            );
            p.points.push((first, Step::Retain.name()));
            let authorized = "both parties still hold the rights the transfer needs";
            pair_step(f, p, &Report::shared(REASON_AUTHORIZED, authorized), |_| {
                Edit::Retained
            });
        }
        SnapshotAction::CreateContent(object) => {
            write(p, SnapshotWrite::CreateContent(object.clone()));
        }
        SnapshotAction::CreateDestination(object) => {
            write(
                p,
                SnapshotWrite::CreateSnapshot {
                    namespace: dest_ns.clone(),
                    object: object.clone(),
                },
            );
            p.point(Step::CreateDestination.name());
            record_destination(
                p,
                SnapshotReference {
                    namespace: dest_ns.clone(),
                    name: dest_name.clone(),
                    uid: String::new(),
                    content_name: crate::controller::transfer::snapshot::content_name(s),
                },
            );
            if other(f).is_some() && peer_keeps_steps(f) {
                p.writes.push(Write::Status {
                    on: On::Peer,
                    change: step_change(StepName::Created),
                });
            }
            p.event(
                reference_to(s),
                Severity::Normal,
                "Created",
                Step::CreateDestination.action(),
                format!("created VolumeSnapshot {dest_ns}/{dest_name} to receive the snapshot"),
            );
        }
        SnapshotAction::RecordDestination(reference) => {
            record_destination(p, reference.clone());
        }
        SnapshotAction::Committed => {
            let Some(dest) = recorded_destination(s) else {
                return;
            };
            let rebound = format!(
                "VolumeSnapshot {}/{} is bound to the snapshot and ready to use",
                dest.namespace, dest.name
            );
            pair_step(
                f,
                p,
                &Report::shared(REASON_COMMITTED, rebound.clone()),
                |_| Edit::Committed {
                    rebound: rebound.clone(),
                },
            );
            p.point(Step::Commit.name());
            p.event(
                reference_to(s),
                Severity::Normal,
                REASON_COMMITTED,
                Step::Commit.action(),
                rebound,
            );
        }
        SnapshotAction::ReleaseSource { uid } => {
            let first = p.writes.len();
            write(
                p,
                SnapshotWrite::DeleteSnapshot {
                    namespace: source_ns,
                    name: source_name,
                    uid: uid.clone(),
                },
            );
            p.points.push((first, Step::ReleaseSource.name()));
            mark_step(f, p, StepName::Released);
        }
        SnapshotAction::DeleteOldContent {
            uid,
            resource_version,
        } => {
            let Some(name) = old_content() else { return };
            write(
                p,
                SnapshotWrite::DeleteContent {
                    name,
                    uid: uid.clone(),
                    resource_version: resource_version.clone(),
                },
            );
        }
        SnapshotAction::Settle {
            resource_version,
            policy,
        } => {
            let Some(dest) = recorded_destination(s) else {
                return;
            };
            let first = p.writes.len();
            write(
                p,
                SnapshotWrite::Content {
                    name: dest.content_name.clone(),
                    resource_version: resource_version.clone(),
                    change: ContentChange::Unmark {
                        policy: Some(policy.clone()),
                    },
                },
            );
            p.points.push((first, Step::Settle.name()));
        }
        SnapshotAction::UnlockDestination { resource_version } => {
            let Some(dest) = recorded_destination(s) else {
                return;
            };
            write(
                p,
                SnapshotWrite::Snapshot {
                    namespace: dest.namespace.clone(),
                    name: dest.name.clone(),
                    resource_version: resource_version.clone(),
                    change: SnapshotChange::Unlock,
                },
            );
        }
        SnapshotAction::Complete => {
            let Some(dest) = recorded_destination(s) else {
                return;
            };
            let to = format!("{}/{}", dest.namespace, dest.name);
            let report = Report {
                reason: crate::controller::transfer::decide::REASON_COMPLETED,
                source: format!("VolumeSnapshot {source_ns}/{source_name} moved to {to}"),
                destination: format!(
                    "{}: VolumeSnapshot {to} is ready to use",
                    destination_text(crate::controller::transfer::decide::REASON_COMPLETED)
                ),
            };
            pair(f, p, &report, |_| Edit::SnapshotCompleted);
            p.event(
                reference_to(s),
                Severity::Normal,
                "TransferCompleted",
                Step::Settle.action(),
                report.source.clone(),
            );
            if let Some(d) = other(f) {
                p.event(
                    reference_to(d),
                    Severity::Normal,
                    "TransferCompleted",
                    Step::Settle.action(),
                    report.destination,
                );
            }
        }
        SnapshotAction::Rehold { resource_version } => {
            let Some(dest_content) = f.snapshot.as_ref().and_then(|sf| sf.new_content.as_ref())
            else {
                return;
            };
            write(
                p,
                SnapshotWrite::Content {
                    name: dest_content.name.clone(),
                    resource_version: resource_version.clone(),
                    change: ContentChange::Rehold,
                },
            );
        }
        SnapshotAction::MarkDeleting {
            old,
            resource_version,
        } => {
            let name = if *old {
                old_content()
            } else {
                Some(crate::controller::transfer::snapshot::content_name(s))
            };
            let Some(name) = name else { return };
            write(
                p,
                SnapshotWrite::Content {
                    name,
                    resource_version: resource_version.clone(),
                    change: ContentChange::BeingDeleted,
                },
            );
        }
        SnapshotAction::DeleteContent {
            uid,
            resource_version,
        } => {
            let name = crate::controller::transfer::snapshot::content_name(s);
            write(
                p,
                SnapshotWrite::DeleteContent {
                    name,
                    uid: uid.clone(),
                    resource_version: resource_version.clone(),
                },
            );
        }
        SnapshotAction::DeleteDestination { uid } => {
            let (namespace, name) = match recorded_destination(s) {
                Some(dest) => (dest.namespace.clone(), dest.name.clone()),
                None => (dest_ns, dest_name),
            };
            write(
                p,
                SnapshotWrite::DeleteSnapshot {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: uid.clone(),
                },
            );
            p.event(
                reference_to(s),
                Severity::Normal,
                "SnapshotDeleted",
                "RollBack",
                format!("deleted VolumeSnapshot {namespace}/{name}, which was never handed over"),
            );
        }
        SnapshotAction::Unmark {
            resource_version,
            restore,
        } => {
            let Some(name) = old_content() else { return };
            write(
                p,
                SnapshotWrite::Content {
                    name,
                    resource_version: resource_version.clone(),
                    change: ContentChange::Unmark {
                        policy: restore.clone(),
                    },
                },
            );
        }
        SnapshotAction::Unlock { resource_version } => write(
            p,
            SnapshotWrite::Snapshot {
                namespace: source_ns,
                name: source_name,
                resource_version: resource_version.clone(),
                change: SnapshotChange::Unlock,
            },
        ),
    }
}

/// R1's memory on the source object, and Rebinding on both.
fn record_source(f: &Facts, p: &mut Plan, record: &SourceSnapshotRecord) {
    let s = &f.source;
    let source_ns = s.source_namespace();
    let report = Report {
        reason: REASON_LOCKED,
        source: format!(
            "locked VolumeSnapshot {source_ns}/{}; moving it with VolumeSnapshotContent {}",
            record.name, record.content_name
        ),
        destination: destination_text(REASON_LOCKED).to_owned(),
    };
    let released = format!(
        "no claim is being restored from VolumeSnapshot {source_ns}/{}",
        record.name
    );
    pair(f, p, &report, |is_source| Edit::SnapshotLocked {
        record: is_source.then(|| record.clone()),
        released: released.clone(),
    });
    p.point(Step::Lock.name());
    p.event(
        reference_to(s),
        Severity::Normal,
        REASON_LOCKED,
        Step::Lock.action(),
        format!(
            "locked VolumeSnapshot {source_ns}/{} for NamespaceTransfer {}",
            record.name,
            object_key(s)
        ),
    );
}

/// R3's memory, on the source object: from now on only that snapshot (and
/// the content made for it) is the destination. An empty uid is the uid of
/// the snapshot the write before created.
fn record_destination(p: &mut Plan, reference: SnapshotReference) {
    p.writes.push(Write::Status {
        on: On::Source,
        change: StatusChange {
            say: None,
            edit: Edit::SnapshotDestination(reference),
            peer_of: None,
            peer_phase: None,
        },
    });
}
