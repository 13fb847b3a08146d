//! Moving a VolumeSnapshot (DESIGN §2.1.7), as pure decisions over
//! [`SnapshotFacts`]: the same pairing, consent, deadlines and phases as a
//! claim ([`super::paired`]), and its own steps:
//! - **R1** lock the source snapshot, and record it and its content;
//! - **R2** mark the old content as ours, record its deletion policy, set
//!   `Retain` (after both parties' rights are confirmed again);
//! - **R3** make the new content (the same backend snapshot, `Retain`,
//!   pre-bound to the destination snapshot) and the destination snapshot
//!   naming it (after the rights are confirmed once more), and record them;
//! - **R4, the commit**, is a fact the snapshot controller makes: the new
//!   content names the destination snapshot by uid and is ready, and that
//!   snapshot names the content and is ready. Once seen it is recorded (the
//!   Committed step) before anything else, because unlike a volume's
//!   `claimRef` the fact does not last: the destination's tenant may delete
//!   its snapshot right after;
//! - **R5** delete the source snapshot, then the old content (both under
//!   `Retain`: the backend snapshot is not touched);
//! - **R6** restore the recorded policy on the new content, take our lock
//!   off the destination snapshot, Completed.
//!
//! What it holds to:
//! - **Every content that names the backend snapshot is under `Retain`**
//!   from R2 until only one is left: the new content is made under `Retain`
//!   and given its policy back only once the old content is gone. So no two
//!   snapshots are ever bound to contents that would both delete it, and
//!   nothing the move does makes the csi-snapshotter call `DeleteSnapshot`.
//! - **A content is deleted only under `Retain`**, at the resourceVersion it
//!   was seen under `Retain` at.
//! - **Before the commit everything can be undone**, and a finished phase
//!   (Failed, Cancelled) rolls back whatever the facts show: the new content
//!   first (at the version seen), then the destination snapshot, then the
//!   old content's marks (its policy restored only while its own snapshot
//!   is still bound to it), then the lock.
//! - **After the commit only forward**, also when a side is deleted: a
//!   destination snapshot deleted after it, before R6, leaves the new
//!   content under `Retain`, for an administrator. R5 comes only after R4's
//!   record, so a source is never released for a commit not seen.
//! - **The destination learns** the snapshot's name, size and readiness,
//!   never the source's content or handle: its reports name only its own
//!   snapshot.

use serde_json::Value;

use super::{
    destination_of, finish_failed, has_finalizer, paired, uid_of, wait, Action, Pairing, Question,
    Refused, Report, Side, REASON_COMPLETED, REASON_DESTINATION_EXISTS, REASON_DESTINATION_LOST,
    REASON_DESTINATION_REFUSED, REASON_FORBIDDEN, REASON_SOURCE_IN_USE, REASON_SOURCE_LOCKED,
    REASON_SOURCE_NOT_FOUND, REASON_SOURCE_RELEASE_REFUSED, REASON_VOLUME_CHANGED,
    REASON_WAITING_FOR_BINDING, RELEASE_RETRY,
};
use crate::api::namespace_transfer::REASON_LOCKED;
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, SnapshotReference, SourceSnapshotRecord,
    TransferStepName as StepName,
};
use crate::controller::transfer::decide::finish::tidy;
use crate::controller::transfer::facts::Facts;
use crate::controller::transfer::snapshot::{
    content_name, is_made_content, new_content, new_snapshot, Content, Snapshot, SnapshotFacts,
    DELETION_SECRET_ANNOTATIONS,
};
use crate::controller::transfer::Step;

// The reasons this module decides on, from the one vocabulary kubectl
// transfer reads too.
pub use crate::api::namespace_transfer::{
    REASON_SNAPSHOT_CLASS_NOT_ALLOWED, REASON_SNAPSHOT_IN_GROUP, REASON_SNAPSHOT_NOT_READY,
};

/// How long (seconds) the source snapshot may be being deleted at R5 before
/// the move says what holds it.
const HELD_AFTER: i64 = 5;

/// How often a move looks while the snapshot controller binds (it is not
/// woken by the snapshot controller's writes).
pub const BIND_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// A step of a snapshot move; each write conditional on what it was decided
/// on (a resourceVersion or a uid).
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotAction {
    /// R1: our lock on the source snapshot.
    Lock { resource_version: String },
    /// R1's memory: the snapshot and its content, on the source object.
    RecordSource(SourceSnapshotRecord),
    /// R2: the old content marked as ours, its policy recorded, `Retain`.
    Retain {
        resource_version: String,
        policy: String,
    },
    /// R3: make the new content.
    CreateContent(Box<Value>),
    /// R3: make the destination snapshot, and record it.
    CreateDestination(Box<Value>),
    /// R3's memory, for a destination snapshot a crash kept from it.
    RecordDestination(SnapshotReference),
    /// R4 happened (the snapshot controller's bind): say so.
    Committed,
    /// R5: delete the source snapshot, if it is still the one locked.
    ReleaseSource { uid: String },
    /// R5: delete the old content, under `Retain` at this version.
    DeleteOldContent {
        uid: String,
        resource_version: String,
    },
    /// R6: restore `policy` on the new content, and take our marks off it.
    Settle {
        resource_version: String,
        policy: String,
    },
    /// R6: take our lock off the destination snapshot.
    UnlockDestination { resource_version: String },
    /// R6: Completed on both.
    Complete,
    /// Rollback: the new content back under `Retain` before anything else
    /// (it never leaves it before the commit; this is the fence).
    Rehold { resource_version: String },
    /// Before a content is deleted (the old one at R5, the new one in a
    /// rollback): mark it being-deleted, under `Retain`, at this version.
    MarkDeleting { old: bool, resource_version: String },
    /// Rollback: delete the new content, under `Retain` at this version.
    DeleteContent {
        uid: String,
        resource_version: String,
    },
    /// Rollback: delete the destination snapshot we made.
    DeleteDestination { uid: String },
    /// Rollback: take our marks off the old content, restoring its policy
    /// only when its snapshot is still bound to it (`restore`).
    Unmark {
        resource_version: String,
        restore: Option<String>,
    },
    /// Rollback: take our lock off the source snapshot.
    Unlock { resource_version: String },
}

/// The step a snapshot action carries out, for its fault points.
pub fn step_of(action: &SnapshotAction) -> Option<Step> {
    match action {
        SnapshotAction::Lock { .. } | SnapshotAction::RecordSource(_) => Some(Step::Lock),
        SnapshotAction::Retain { .. } => Some(Step::Retain),
        SnapshotAction::CreateContent(_)
        | SnapshotAction::CreateDestination(_)
        | SnapshotAction::RecordDestination(_) => Some(Step::CreateDestination),
        SnapshotAction::Committed => Some(Step::Commit),
        SnapshotAction::ReleaseSource { .. }
        | SnapshotAction::DeleteOldContent { .. }
        | SnapshotAction::MarkDeleting { old: true, .. } => Some(Step::ReleaseSource),
        SnapshotAction::Settle { .. }
        | SnapshotAction::UnlockDestination { .. }
        | SnapshotAction::Complete => Some(Step::Settle),
        SnapshotAction::Rehold { .. }
        | SnapshotAction::MarkDeleting { old: false, .. }
        | SnapshotAction::DeleteContent { .. }
        | SnapshotAction::DeleteDestination { .. }
        | SnapshotAction::Unmark { .. }
        | SnapshotAction::Unlock { .. } => None,
    }
}

/// The action's name in a fault point.
pub fn label(action: &SnapshotAction) -> &'static str {
    match action {
        SnapshotAction::Lock { .. } => "SnapshotLock",
        SnapshotAction::RecordSource(_) => "SnapshotRecordSource",
        SnapshotAction::Retain { .. } => "SnapshotRetain",
        SnapshotAction::CreateContent(_) => "SnapshotCreateContent",
        SnapshotAction::CreateDestination(_) => "SnapshotCreateDestination",
        SnapshotAction::RecordDestination(_) => "SnapshotRecordDestination",
        SnapshotAction::Committed => "SnapshotCommitted",
        SnapshotAction::ReleaseSource { .. } => "SnapshotReleaseSource",
        SnapshotAction::DeleteOldContent { .. } => "SnapshotDeleteOldContent",
        SnapshotAction::Settle { .. } => "SnapshotSettle",
        SnapshotAction::UnlockDestination { .. } => "SnapshotUnlockDestination",
        SnapshotAction::Complete => "SnapshotComplete",
        SnapshotAction::Rehold { .. } => "SnapshotRehold",
        SnapshotAction::MarkDeleting { .. } => "SnapshotMarkDeleting",
        SnapshotAction::DeleteContent { .. } => "SnapshotDeleteContent",
        SnapshotAction::DeleteDestination { .. } => "SnapshotDeleteDestination",
        SnapshotAction::Unmark { .. } => "SnapshotUnmark",
        SnapshotAction::Unlock { .. } => "SnapshotUnlock",
    }
}

fn act(action: SnapshotAction) -> Action {
    Action::Snapshot(action)
}

/// R1's record, if made.
pub fn recorded_source(s: &NamespaceTransfer) -> Option<&SourceSnapshotRecord> {
    s.status.as_ref().and_then(|st| st.source_snapshot.as_ref())
}

/// R3's record, if made.
pub fn recorded_destination(s: &NamespaceTransfer) -> Option<&SnapshotReference> {
    s.status
        .as_ref()
        .and_then(|st| st.destination_snapshot.as_ref())
}

fn has_step(s: &NamespaceTransfer, step: StepName) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| st.steps.iter().any(|x| x.name == step))
}

/// The next step of the snapshot move that `f.source` drives.
pub(super) fn protocol(f: &Facts, sf: &SnapshotFacts) -> Action {
    let s = &f.source;
    let phase = s.status.as_ref().and_then(|st| st.phase);
    if phase == Some(Phase::Completed) {
        return tidy(f);
    }
    if phase.is_some_and(Phase::is_finished) {
        return roll_back(f, sf);
    }
    if let Some(dest) = recorded_destination(s) {
        // The commit, seen now or recorded when it was seen: the
        // destination's tenant may delete its snapshot and content after
        // it, and the move still only goes forward (the model check found
        // a move that had released its source and then rolled back).
        if has_step(s, StepName::Committed) || committed(sf, dest) {
            return forward(f, sf, dest);
        }
    }
    let d = match paired(f) {
        Pairing::Ready(d) => d,
        Pairing::Act(action) => return action,
    };
    match recorded_source(s) {
        None => before_lock(f, sf, d),
        Some(record) => after_lock(f, sf, d, record),
    }
}

/// Whether the commit happened: the new content names the destination
/// snapshot by its uid and is ready, and that snapshot is bound to it and
/// ready (both ways). A fact of the snapshot controller's; R4's record
/// (the Committed step) only remembers that it was seen.
fn committed(sf: &SnapshotFacts, dest: &SnapshotReference) -> bool {
    let Some(content) = sf.new_content.as_ref().filter(|c| {
        c.name == dest.content_name && c.names(&dest.namespace, &dest.name, &dest.uid) && c.ready
    }) else {
        return false;
    };
    sf.destination.as_ref().is_some_and(|x| {
        x.uid == dest.uid
            && !x.deleting
            && x.bound_content.as_deref() == Some(content.name.as_str())
            && x.ready
    })
}

fn source_words(s: &NamespaceTransfer) -> String {
    format!(
        "VolumeSnapshot {}/{}",
        s.source_namespace(),
        s.spec.source.name
    )
}

/// Before R1: every precondition, then the lock.
fn before_lock(f: &Facts, sf: &SnapshotFacts, d: &NamespaceTransfer) -> Action {
    let s = &f.source;
    let mine = uid_of(s);
    let named = source_words(s);
    let Some(source) = sf.source.as_ref().filter(|x| !x.deleting) else {
        return finish_failed(Report::shared(
            REASON_SOURCE_NOT_FOUND,
            format!("{named} does not exist"),
        ));
    };
    let old = sf
        .old_content
        .as_ref()
        .filter(|c| source.bound_content.as_deref() == Some(c.name.as_str()));
    if let Some(group) = &source.group {
        return finish_failed(report(
            REASON_SNAPSHOT_IN_GROUP,
            format!("{named} is a member of VolumeGroupSnapshot {group:?}, which owns it; move the group's snapshots only with the group"),
        ));
    }
    if old.is_some_and(|c| c.in_group) {
        return finish_failed(report(
            REASON_SNAPSHOT_IN_GROUP,
            format!("{named} was taken as a member of a group snapshot, whose content owns it"),
        ));
    }
    let Some(old) = old.filter(|c| source.ready && c.ready && c.handle.is_some()) else {
        return wait(
            Phase::WaitingForRelease,
            report(
                REASON_SNAPSHOT_NOT_READY,
                format!("{named} is not bound to a ready VolumeSnapshotContent yet"),
            ),
            false,
        );
    };
    if !old.names(s.source_namespace(), &source.name, &source.uid) {
        return finish_failed(report(
            REASON_VOLUME_CHANGED,
            format!(
                "VolumeSnapshotContent {} does not name {named}; refusing to act on it",
                old.name
            ),
        ));
    }
    if let Some(why) = &sf.refused_by_class {
        return finish_failed(report(REASON_SNAPSHOT_CLASS_NOT_ALLOWED, why.clone()));
    }
    if old
        .secrets
        .get(DELETION_SECRET_ANNOTATIONS[1])
        .map(String::as_str)
        == Some(s.source_namespace())
    {
        return finish_failed(report(
            REASON_SNAPSHOT_CLASS_NOT_ALLOWED,
            format!(
                "VolumeSnapshotContent {}'s deletion secret is in the source namespace {:?}; the destination's snapshot cannot depend on it",
                old.name,
                s.source_namespace()
            ),
        ));
    }
    if source.lock.as_deref().is_some_and(|l| l != mine) && sf.lock_holder_active {
        return wait(
            Phase::WaitingForRelease,
            report(
                REASON_SOURCE_LOCKED,
                format!(
                    "{named} is locked by another transfer ({})",
                    source.lock.as_deref().unwrap_or_default()
                ),
            ),
            false,
        );
    }
    if old.marker.as_deref().is_some_and(|m| m != mine) {
        return wait(
            Phase::WaitingForRelease,
            report(
                REASON_SOURCE_LOCKED,
                format!(
                    "VolumeSnapshotContent {} is marked by another transfer ({})",
                    old.name,
                    old.marker.as_deref().unwrap_or_default()
                ),
            ),
            false,
        );
    }
    let (dest_ns, dest_name) = destination_of(s, d);
    if sf.destination.is_some() {
        return finish_failed(Report::shared(
            REASON_DESTINATION_EXISTS,
            format!(
                "VolumeSnapshot {dest_ns}/{dest_name} already exists and was not created by this transfer"
            ),
        ));
    }
    if source.lock.as_deref() != Some(mine) {
        if let Some(action) = while_restoring(f, source) {
            return action;
        }
        if !has_finalizer(s) || !has_finalizer(d) {
            return Action::Protect;
        }
        return act(SnapshotAction::Lock {
            resource_version: source.resource_version.clone(),
        });
    }
    if !has_finalizer(s) || !has_finalizer(d) {
        return Action::Protect;
    }
    act(SnapshotAction::RecordSource(SourceSnapshotRecord {
        name: source.name.clone(),
        uid: source.uid.clone(),
        content_name: old.name.clone(),
        restore_size: source
            .restore_size
            .clone()
            .map(k8s_openapi::apimachinery::pkg::api::resource::Quantity),
    }))
}

/// Waits while a claim of the source namespace is being restored from the
/// snapshot (what the snapshot controller itself holds its deletion for);
/// asks who first. `None` once nobody restores from it.
fn while_restoring(f: &Facts, source: &Snapshot) -> Option<Action> {
    match f.users.as_deref() {
        None => Some(Action::Ask(Question::Users)),
        Some([]) => None,
        Some(claims) => Some(wait(
            Phase::WaitingForRelease,
            report(
                REASON_SOURCE_IN_USE,
                format!(
                    "VolumeSnapshot {}/{} is being restored into PersistentVolumeClaim(s) {}",
                    source.namespace,
                    source.name,
                    claims.join(", ")
                ),
            ),
            true,
        )),
    }
}

/// Asks for, or acts on, both parties' rights re-checked; `None` once they
/// hold.
fn rights(f: &Facts) -> Option<Action> {
    match &f.rights {
        None => Some(Action::Ask(Question::Rights)),
        Some(Err(refusal)) => Some(finish_failed(match refusal.side {
            Side::Source => report(REASON_FORBIDDEN, refusal.message.clone()),
            Side::Destination => Report::shared(REASON_FORBIDDEN, refusal.message.clone()),
        })),
        Some(Ok(())) => None,
    }
}

/// After R1: R2 and R3, then the wait for the commit.
fn after_lock(
    f: &Facts,
    sf: &SnapshotFacts,
    d: &NamespaceTransfer,
    record: &SourceSnapshotRecord,
) -> Action {
    let s = &f.source;
    let mine = uid_of(s);
    let source_ns = s.source_namespace();
    let named = format!("VolumeSnapshot {source_ns}/{}", record.name);
    let Some(source) = sf
        .source
        .as_ref()
        .filter(|x| x.uid == record.uid && !x.deleting)
    else {
        return finish_failed(report(
            REASON_SOURCE_NOT_FOUND,
            format!("{named} was deleted during the transfer"),
        ));
    };
    if source.lock.as_deref() != Some(mine) {
        // Someone took our lock off; put it back before going on.
        return act(SnapshotAction::Lock {
            resource_version: source.resource_version.clone(),
        });
    }
    let Some(old) = sf
        .old_content
        .as_ref()
        .filter(|c| c.name == record.content_name && !c.deleting)
    else {
        return finish_failed(report(
            REASON_VOLUME_CHANGED,
            format!(
                "VolumeSnapshotContent {} was deleted during the transfer",
                record.content_name
            ),
        ));
    };
    if !old.names(source_ns, &record.name, &record.uid) {
        return finish_failed(report(
            REASON_VOLUME_CHANGED,
            format!(
                "VolumeSnapshotContent {} no longer names {named}; someone else changed it",
                old.name
            ),
        ));
    }

    // R2: only once nobody restores from it and both parties' rights hold.
    if old.marker.as_deref() != Some(mine) {
        if old.marker.is_some() {
            return finish_failed(report(
                REASON_VOLUME_CHANGED,
                format!(
                    "VolumeSnapshotContent {} is marked by another transfer ({})",
                    old.name,
                    old.marker.as_deref().unwrap_or_default()
                ),
            ));
        }
        if let Some(action) = while_restoring(f, source) {
            return action;
        }
        if let Some(action) = rights(f) {
            return action;
        }
        return act(SnapshotAction::Retain {
            resource_version: old.resource_version.clone(),
            policy: old.deletion_policy.clone(),
        });
    }
    if let Some(action) = held_again(old) {
        return action;
    }

    // R3: the new content and the destination snapshot, made by us.
    let (dest_ns, dest_name) = destination_of(s, d);
    let Some(dest) = recorded_destination(s) else {
        let Some(content) = &sf.new_content else {
            // What the commit follows from: the rights are confirmed again.
            if let Some(action) = rights(f) {
                return action;
            }
            return act(SnapshotAction::CreateContent(Box::new(new_content(
                s, old, dest_ns, dest_name,
            ))));
        };
        if content.deleting || !is_made_content(s, content, old, dest_ns, dest_name) {
            return finish_failed(report(
                REASON_VOLUME_CHANGED,
                format!(
                    "VolumeSnapshotContent {} exists and is not the one this transfer makes",
                    content.name
                ),
            ));
        }
        return match &sf.destination {
            None => act(SnapshotAction::CreateDestination(Box::new(new_snapshot(
                s, old, dest_ns, dest_name,
            )))),
            Some(x) if made_destination(s, x) => {
                act(SnapshotAction::RecordDestination(SnapshotReference {
                    namespace: dest_ns.to_owned(),
                    name: dest_name.to_owned(),
                    uid: x.uid.clone(),
                    content_name: content_name(s),
                }))
            }
            Some(_) => finish_failed(Report::shared(
                REASON_DESTINATION_EXISTS,
                format!(
                    "VolumeSnapshot {dest_ns}/{dest_name} already exists and was not created by this transfer"
                ),
            )),
        };
    };
    let dest_named = format!("VolumeSnapshot {}/{}", dest.namespace, dest.name);
    let Some(x) = sf
        .destination
        .as_ref()
        .filter(|x| x.uid == dest.uid && !x.deleting)
    else {
        return finish_failed(Report::shared(
            REASON_VOLUME_CHANGED,
            format!("{dest_named} was deleted before the snapshot was handed over"),
        ));
    };
    if !sf
        .new_content
        .as_ref()
        .is_some_and(|c| !c.deleting && is_made_content(s, c, old, &dest.namespace, &dest.name))
    {
        return finish_failed(report(
            REASON_VOLUME_CHANGED,
            format!(
                "VolumeSnapshotContent {} was deleted or changed before the snapshot was handed over",
                dest.content_name
            ),
        ));
    }
    // R4 is the snapshot controller's: wait for its bind, saying what it
    // reports on the destination's own snapshot.
    let message = match &x.error {
        Some(error) => format!(
            "waiting for the snapshot controller to bind {dest_named} and report it ready; it reports: {error}"
        ),
        None => format!("waiting for the snapshot controller to bind {dest_named} and report it ready"),
    };
    Action::Wait {
        phase: Phase::Rebinding,
        // What the snapshot controller reports may quote the backend's
        // handle: the source side's to read.
        report: report(REASON_WAITING_FOR_BINDING, message),
        in_use: false,
        after: Some(BIND_POLL),
    }
}

/// R2 again, for an old content of ours that someone gave its policy back
/// since: under `Retain` before anything else, its recorded policy kept.
fn held_again(old: &Content) -> Option<Action> {
    (old.deletion_policy != "Retain").then(|| {
        act(SnapshotAction::Retain {
            resource_version: old.resource_version.clone(),
            policy: old
                .original_policy
                .clone()
                .unwrap_or_else(|| old.deletion_policy.clone()),
        })
    })
}

/// Whether `x` is the destination snapshot R3 makes: locked by us, and
/// naming our content.
fn made_destination(s: &NamespaceTransfer, x: &Snapshot) -> bool {
    !x.deleting
        && x.lock.as_deref() == Some(uid_of(s))
        && x.content_source.as_deref() == Some(content_name(s).as_str())
}

/// After the commit: say so, R5, R6.
fn forward(f: &Facts, sf: &SnapshotFacts, dest: &SnapshotReference) -> Action {
    let s = &f.source;
    let mine = uid_of(s);
    if !has_step(s, StepName::Committed) {
        return act(SnapshotAction::Committed);
    }
    if let Some(record) = recorded_source(s) {
        let old = sf
            .old_content
            .as_ref()
            .filter(|c| c.name == record.content_name);
        // Nothing of the source is let go unless its content is ours under
        // Retain: someone may have given it its policy back since R2.
        if let Some(old) = old {
            if old.marker.as_deref() != Some(mine) {
                return Action::Wait {
                    phase: Phase::Rebinding,
                    report: report(
                        REASON_VOLUME_CHANGED,
                        format!(
                            "VolumeSnapshotContent {} was changed by someone else after the hand-over; it is left for an administrator, and the new content keeps deletionPolicy Retain until it is gone",
                            old.name
                        ),
                    ),
                    in_use: false,
                    after: Some(RELEASE_RETRY),
                };
            }
            if let Some(action) = held_again(old) {
                return action;
            }
        }
        // R5: the source snapshot, then, once it is gone, its content (the
        // snapshot controller keeps a snapshot a claim is being restored
        // from, and the restore reads its content).
        if let Some(source) = sf.source.as_ref().filter(|x| x.uid == record.uid) {
            if source.deleting {
                // Gone within a second or so; but a claim still being
                // restored from it holds it (the snapshot controller's
                // source protection) for as long as the restore lasts:
                // that is said, not waited out in silence.
                if f.now.saturating_sub(source.deleted_at) < HELD_AFTER {
                    return Action::Nothing {
                        after: Some(BIND_POLL),
                    };
                }
                return Action::Wait {
                    phase: Phase::Rebinding,
                    report: report(
                        REASON_SOURCE_IN_USE,
                        format!(
                            "the snapshot was handed over, but VolumeSnapshot {}/{} is still being deleted, most likely kept by a claim being restored from it; it goes, and the transfer completes, once that restore is provisioned or its claim deleted (or whatever else holds it lets go)",
                            source.namespace, source.name
                        ),
                    ),
                    in_use: false,
                    after: Some(super::WAIT_POLL),
                };
            }
            return act(SnapshotAction::ReleaseSource {
                uid: source.uid.clone(),
            });
        }
        if let Some(old) = old {
            // Marked first: a snapshot that vanished without the snapshot
            // controller's processing never marked it, and the
            // csi-snapshotter would keep it for ever.
            if !old.being_deleted {
                return act(SnapshotAction::MarkDeleting {
                    old: true,
                    resource_version: old.resource_version.clone(),
                });
            }
            if old.deleting {
                return Action::Nothing {
                    after: Some(BIND_POLL),
                };
            }
            return act(SnapshotAction::DeleteOldContent {
                uid: old.uid.clone(),
                resource_version: old.resource_version.clone(),
            });
        }
    }
    let Some(content) = sf.new_content.as_ref() else {
        return lost(f, dest, false);
    };
    let live = sf
        .destination
        .as_ref()
        .filter(|x| x.uid == dest.uid && !x.deleting);
    let Some(x) = live else {
        return lost(f, dest, content.deletion_policy == "Retain");
    };
    // R6.
    if content.marker.as_deref() == Some(mine) {
        return act(SnapshotAction::Settle {
            resource_version: content.resource_version.clone(),
            // Without a record, never Delete: an administrator's Retain
            // stays.
            policy: content
                .original_policy
                .clone()
                .unwrap_or_else(|| "Retain".to_owned()),
        });
    }
    if x.lock.as_deref() == Some(mine) {
        return act(SnapshotAction::UnlockDestination {
            resource_version: x.resource_version.clone(),
        });
    }
    act(SnapshotAction::Complete)
}

/// After the commit the destination snapshot is gone: say so once, and let
/// the pair go. Before R6 its content stays under `Retain` (`kept`), for an
/// administrator; after R6 it was the destination's to delete.
fn lost(f: &Facts, dest: &SnapshotReference, kept: bool) -> Action {
    let s = &f.source;
    let reason = s.status.as_ref().and_then(|st| st.reason.as_deref());
    if reason != Some(REASON_DESTINATION_LOST) {
        let what = if kept {
            format!(
                "; VolumeSnapshotContent {} keeps the backend snapshot (deletionPolicy Retain) for an administrator",
                dest.content_name
            )
        } else {
            String::new()
        };
        return Action::DestinationLost {
            report: report(
                REASON_DESTINATION_LOST,
                format!(
                    "VolumeSnapshot {}/{} was deleted after the snapshot was handed to it{what}",
                    dest.namespace, dest.name
                ),
            ),
        };
    }
    if super::finish::finalizers_held(f) {
        return Action::DropFinalizers;
    }
    Action::Nothing { after: None }
}

/// Failed or Cancelled before the commit: the new content first (fenced at
/// the version seen), then the destination snapshot, then the old
/// content's marks, then the lock.
fn roll_back(f: &Facts, sf: &SnapshotFacts) -> Action {
    let s = &f.source;
    let mine = uid_of(s);
    if let Some(content) = sf
        .new_content
        .as_ref()
        .filter(|c| c.marker.as_deref() == Some(mine))
    {
        if content.deletion_policy != "Retain" {
            return act(SnapshotAction::Rehold {
                resource_version: content.resource_version.clone(),
            });
        }
        if !content.being_deleted {
            return act(SnapshotAction::MarkDeleting {
                old: false,
                resource_version: content.resource_version.clone(),
            });
        }
        if !content.deleting {
            return act(SnapshotAction::DeleteContent {
                uid: content.uid.clone(),
                resource_version: content.resource_version.clone(),
            });
        }
    }
    // The destination snapshot: the one recorded, or any that names the
    // content we made (a tenant's copy of R3's would be bound to it, and
    // hold the source's backend snapshot after a move that never happened;
    // the model check found this). Its content is under Retain: deleting it
    // leaves the backend alone.
    let recorded = recorded_destination(s);
    let ours = content_name(s);
    if let Some(x) = sf.destination.as_ref().filter(|x| {
        !x.deleting
            && (recorded.is_some_and(|dest| x.uid == dest.uid)
                || x.content_source.as_deref() == Some(ours.as_str()))
    }) {
        return act(SnapshotAction::DeleteDestination { uid: x.uid.clone() });
    }
    if sf
        .new_content
        .as_ref()
        .is_some_and(|c| c.marker.as_deref() == Some(mine))
    {
        // Going: the old content gets its policy back only once the new
        // one is gone.
        return Action::Nothing {
            after: Some(BIND_POLL),
        };
    }
    let record = recorded_source(s);
    if let Some(old) = sf
        .old_content
        .as_ref()
        .filter(|c| c.marker.as_deref() == Some(mine))
    {
        let bound = sf.source.as_ref().is_some_and(|x| {
            !x.deleting
                && record.is_none_or(|r| r.uid == x.uid)
                && x.bound_content.as_deref() == Some(old.name.as_str())
                && old.ref_uid == x.uid
        });
        let restore = bound.then(|| old.original_policy.clone()).flatten();
        return act(SnapshotAction::Unmark {
            resource_version: old.resource_version.clone(),
            restore,
        });
    }
    if let Some(source) = sf
        .source
        .as_ref()
        .filter(|x| x.lock.as_deref() == Some(mine) && record.is_none_or(|r| r.uid == x.uid))
    {
        return act(SnapshotAction::Unlock {
            resource_version: source.resource_version.clone(),
        });
    }
    tidy(f)
}

/// What a refused create or delete means: a refused R3 fails the pair
/// (nothing was made, the rollback undoes the rest); a refused R5 comes
/// after the commit, so the pair waits and tries again.
pub(super) fn after_refusal(f: &Facts, refused: &Refused) -> Action {
    let s = &f.source;
    let message = &refused.message;
    match refused.step {
        Step::ReleaseSource => Action::Wait {
            phase: Phase::Rebinding,
            report: report(
                REASON_SOURCE_RELEASE_REFUSED,
                format!(
                    "the snapshot was handed over, but deleting {} is refused: {message}",
                    source_words(s)
                ),
            ),
            in_use: false,
            after: Some(RELEASE_RETRY),
        },
        _ => {
            let (dest_ns, dest_name) =
                super::peer_or_self(f).map_or(("", ""), |d| destination_of(s, d));
            // The content's refusal may quote its handle or secret: the
            // source side's to read.
            finish_failed(report(
                REASON_DESTINATION_REFUSED,
                format!(
                    "creating VolumeSnapshot {dest_ns}/{dest_name} (or its content) was refused: {message}"
                ),
            ))
        }
    }
}

/// The whole story for the source side; for the destination, the reason's
/// fixed sentence about a snapshot (never the source's content or handle).
fn report(reason: &'static str, source: String) -> Report {
    Report {
        reason,
        source,
        destination: destination_text(reason).to_owned(),
    }
}

/// The sentence the receiving side gets for `reason` in a snapshot move.
pub fn destination_text(reason: &str) -> &'static str {
    match reason {
        REASON_SNAPSHOT_NOT_READY => "waiting for the source snapshot to be ready to use",
        REASON_SNAPSHOT_IN_GROUP => "refused: the source snapshot belongs to a group snapshot",
        REASON_SNAPSHOT_CLASS_NOT_ALLOWED => {
            "refused: the snapshot's VolumeSnapshotClass does not allow transfers"
        }
        REASON_SOURCE_IN_USE => {
            "waiting until no claim in the source namespace is being restored from the snapshot"
        }
        REASON_SOURCE_LOCKED => "waiting: another transfer holds the source snapshot",
        REASON_SOURCE_NOT_FOUND => "refused: the source snapshot does not exist",
        REASON_VOLUME_CHANGED => "refused: the source snapshot changed during the transfer",
        REASON_SOURCE_RELEASE_REFUSED => {
            "refused: the source namespace would not let the snapshot go"
        }
        REASON_DESTINATION_LOST => {
            "the new snapshot was deleted after the snapshot was handed to it"
        }
        REASON_FORBIDDEN => "refused: the source side no longer holds a right the transfer needs",
        REASON_LOCKED => "the source snapshot is locked for the transfer; it is being handed over",
        REASON_COMPLETED => "the snapshot was handed over",
        REASON_WAITING_FOR_BINDING => {
            "waiting for the snapshot controller to bind the new snapshot and report it ready"
        }
        REASON_DESTINATION_REFUSED => {
            "refused: creating the new snapshot or its content was refused (quota, admission); the source side's transfer says why"
        }
        other => super::destination_text(other),
    }
}

#[cfg(test)]
mod tests;
