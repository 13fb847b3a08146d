//! A model check of moving a VolumeSnapshot (DESIGN §2.1.7): the real
//! [`decide`] and the real [`plan`] run against a model of the snapshot
//! controller, the csi-snapshotter and tenants, every interleaving explored
//! breadth-first ([`explore`](super::explore)).
//!
//! The world: the pair (`prod/give` gives `prod/nightly`, `dev/take`
//! receives it), the source snapshot and its content (dynamically made,
//! under `Delete`), the content and destination snapshot the move makes,
//! and the backend snapshot they all name. Its actors:
//! - **the controller**: the facts built from the world, `decide`, and the
//!   action's plan made write by write, each conditional as the executor's,
//!   with a crash point after every write;
//! - **a stale leader**: it gathers once, and acts on that later;
//! - **the snapshot controller**, as external-snapshotter does it: it binds
//!   a pre-provisioned snapshot to the content pre-bound to it (writing the
//!   snapshot's uid into the content's ref), and reports it ready; a deleted
//!   snapshot marks its bound content being-deleted, deletes that content
//!   too when it is under `Delete`, and goes (once that content has gone);
//!   it waits while a claim is being restored from the snapshot; it never
//!   deletes a content whose snapshot is gone;
//! - **the csi-snapshotter**: a deleted content whose deletion it should
//!   act on (pre-provisioned and unbound, or marked being-deleted) calls
//!   `DeleteSnapshot` when it is under `Delete`, and goes;
//! - **tenants**, each move at most once: delete either snapshot, delete
//!   either transfer, start and end a restore from the source, take our lock
//!   off the source, forge the destination snapshot exactly as R3 makes it,
//!   revoke a right.
//!
//! Invariants, in every state: at most one content that names the backend
//! snapshot is under `Delete`; the backend snapshot is deleted only once
//! every snapshot that named it was deleted by its tenant; the controller
//! deletes a content only under `Retain`, and the source snapshot only after
//! the commit. Once nothing moves: Completed means the destination snapshot
//! is bound to a content of the backend snapshot under the original policy,
//! unmarked, and nothing of the source is left; Failed or Cancelled means
//! the source (if its tenant kept it) is bound to its content under the
//! original policy, unlocked and unmarked, and nothing the move made is
//! left.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::Space;
use crate::api::meta::Requester;
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferSpec,
    NamespaceTransferStatus, PeerReference, SnapshotReference, SourceSnapshotRecord,
    TransferDestination, TransferSource, TransferStep, TransferStepName,
    FINALIZER_TRANSFER_PROTECTION, SOURCE_KIND_VOLUME_SNAPSHOT,
};
use crate::controller::transfer::decide::{decide, Action, Question, REASON_DESTINATION_LOST};
use crate::controller::transfer::destination::{destination_turn, Found, Turn};
use crate::controller::transfer::facts::{Facts, Peer, Refusal, Side};
use crate::controller::transfer::matching::{destination_view, peer_uid};
use crate::controller::transfer::plan::snapshot::{ContentChange, SnapshotChange, SnapshotWrite};
use crate::controller::transfer::plan::{plan, Edit, On, Write};
use crate::controller::transfer::snapshot::{content_name, Content, Snapshot, SnapshotFacts};

const S_UID: u32 = 10;
const D_UID: u32 = 20;
const SOURCE_UID: u32 = 1;
const OLD_UID: u32 = 2;
const OLD: &str = "content-old";
const HANDLE: &str = "snap-handle-1";
const DRIVER: &str = "csi.example";

/// One of our transfer objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Tx {
    exists: bool,
    deleting: bool,
    finalizer: bool,
    phase: Option<Phase>,
    peer: bool,
    /// The source object's R1 record.
    record: bool,
    /// The source object's R3 record: the destination snapshot's uid.
    destination: Option<u32>,
    /// The Committed step recorded.
    committed: bool,
    lost_reported: bool,
}

impl Tx {
    fn new() -> Self {
        Self {
            exists: true,
            deleting: false,
            finalizer: false,
            phase: None,
            peer: false,
            record: false,
            destination: None,
            committed: false,
            lost_reported: false,
        }
    }

    fn active(&self) -> bool {
        !self.phase.is_some_and(Phase::is_finished)
    }
}

/// A VolumeSnapshot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Snap {
    uid: u32,
    rv: u32,
    /// Our lock annotation (the source object's uid).
    lock: bool,
    deleting: bool,
    /// `status.boundVolumeSnapshotContentName` names its content, and ready.
    bound: bool,
    /// The destination: `spec.source.volumeSnapshotContentName` names the
    /// content the move makes.
    names_ours: bool,
}

/// A VolumeSnapshotContent of the backend snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Cont {
    uid: u32,
    rv: u32,
    delete: bool,
    marker: bool,
    original_delete: Option<bool>,
    /// `volumeSnapshotRef.uid`: bound to that snapshot.
    bound_to: Option<u32>,
    ready: bool,
    deleting: bool,
    being_deleted: bool,
}

/// Moves a tenant or a stale leader may make at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub(super) enum SnapMove {
    DeleteSourceSnapshot = 1,
    DeleteDestinationSnapshot = 1 << 1,
    DeleteSource = 1 << 2,
    DeleteRequest = 1 << 3,
    StartRestore = 1 << 4,
    EndRestore = 1 << 5,
    Unlock = 1 << 6,
    ForgeDestination = 1 << 7,
    RevokeRight = 1 << 8,
    StaleGather = 1 << 9,
    StaleAct = 1 << 10,
    /// The source snapshot's tenant strips its finalizers and deletes it:
    /// it goes without the snapshot controller marking its content.
    VanishSourceSnapshot = 1 << 11,
    /// The same, of the destination snapshot.
    VanishDestinationSnapshot = 1 << 12,
}

pub(super) const SNAP_MOVES: [SnapMove; 13] = [
    SnapMove::DeleteSourceSnapshot,
    SnapMove::DeleteDestinationSnapshot,
    SnapMove::DeleteSource,
    SnapMove::DeleteRequest,
    SnapMove::StartRestore,
    SnapMove::EndRestore,
    SnapMove::Unlock,
    SnapMove::ForgeDestination,
    SnapMove::RevokeRight,
    SnapMove::StaleGather,
    SnapMove::StaleAct,
    SnapMove::VanishSourceSnapshot,
    SnapMove::VanishDestinationSnapshot,
];

/// The world of the snapshot model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SnapWorld {
    s: Tx,
    d: Tx,
    source: Option<Snap>,
    old: Option<Cont>,
    new: Option<Cont>,
    dest: Option<Snap>,
    /// A claim of the source namespace is being restored from the source.
    restoring: bool,
    rights: bool,
    rv: u32,
    next_uid: u32,
    made: u16,
    allowed: u16,
    stale: Option<Box<SnapWorld>>,
    /// `DeleteSnapshot` calls the driver answered.
    deletions: u8,
    /// Whether a tenant asked to delete each snapshot.
    source_deleted_by_tenant: bool,
    dest_deleted_by_tenant: bool,
    /// The destination snapshot the controller made, if it made one.
    made_dest: Option<u32>,
    /// Whether the destination was ever bound both ways and ready: the
    /// commit happened (the controller may release the source only after).
    committed: bool,
    /// A write of the controller that must never happen did.
    wrong: Option<&'static str>,
}

impl SnapWorld {
    /// A matched-to-be pair, nothing touched, with the moves `allowed`.
    pub(super) fn start(allowed: u16) -> Self {
        Self {
            s: Tx::new(),
            d: Tx::new(),
            source: Some(Snap {
                uid: SOURCE_UID,
                rv: 1,
                lock: false,
                deleting: false,
                bound: true,
                names_ours: false,
            }),
            old: Some(Cont {
                uid: OLD_UID,
                rv: 2,
                delete: true,
                marker: false,
                original_delete: None,
                bound_to: Some(SOURCE_UID),
                ready: true,
                deleting: false,
                being_deleted: false,
            }),
            new: None,
            dest: None,
            restoring: false,
            rights: true,
            rv: 10,
            next_uid: 100,
            made: 0,
            allowed,
            stale: None,
            deletions: 0,
            source_deleted_by_tenant: false,
            dest_deleted_by_tenant: false,
            made_dest: None,
            committed: false,
            wrong: None,
        }
    }

    fn may(&self, m: SnapMove) -> bool {
        self.allowed & m as u16 != 0 && self.made & m as u16 == 0
    }

    // ----- facts -----------------------------------------------------------------

    fn transfer(&self, source_side: bool) -> NamespaceTransfer {
        let tx = if source_side { &self.s } else { &self.d };
        let (ns, name, uid, other) = if source_side {
            ("prod", "give", S_UID, ("dev", "take", D_UID))
        } else {
            ("dev", "take", D_UID, ("prod", "give", S_UID))
        };
        let spec = if source_side {
            NamespaceTransferSpec {
                source: TransferSource {
                    kind: SOURCE_KIND_VOLUME_SNAPSHOT.to_owned(),
                    name: "nightly".to_owned(),
                    ..TransferSource::default()
                },
                destination: TransferDestination {
                    namespace: "dev".to_owned(),
                    ..TransferDestination::default()
                },
                ..NamespaceTransferSpec::default()
            }
        } else {
            NamespaceTransferSpec {
                source: TransferSource {
                    kind: SOURCE_KIND_VOLUME_SNAPSHOT.to_owned(),
                    namespace: "prod".to_owned(),
                    name: "nightly".to_owned(),
                },
                destination: TransferDestination {
                    namespace: "dev".to_owned(),
                    name: "nightly".to_owned(),
                    ..TransferDestination::default()
                },
                ..NamespaceTransferSpec::default()
            }
        };
        let time = |s: i64| Time(Timestamp::from_second(s).unwrap_or_default());
        let mut t = NamespaceTransfer {
            metadata: ObjectMeta {
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                uid: Some(format!("uid-{uid}")),
                creation_timestamp: Some(time(1_000)),
                deletion_timestamp: tx.deleting.then(|| time(1_500)),
                finalizers: tx
                    .finalizer
                    .then(|| vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]),
                ..ObjectMeta::default()
            },
            spec: NamespaceTransferSpec {
                requester: Some(Requester {
                    username: format!("{name}-user"),
                    ..Requester::default()
                }),
                ..spec
            },
            ..NamespaceTransfer::default()
        };
        let any = tx.phase.is_some() || tx.peer || tx.record;
        let mut status = NamespaceTransferStatus {
            phase: tx.phase,
            reason: tx.lost_reported.then(|| REASON_DESTINATION_LOST.to_owned()),
            peer: tx.peer.then(|| PeerReference {
                namespace: other.0.to_owned(),
                name: other.1.to_owned(),
                uid: Some(peer_uid(&format!("uid-{uid}"), &format!("uid-{}", other.2))),
            }),
            source_snapshot: tx.record.then(|| SourceSnapshotRecord {
                name: "nightly".to_owned(),
                uid: format!("uid-{SOURCE_UID}"),
                content_name: OLD.to_owned(),
                restore_size: None,
            }),
            ..NamespaceTransferStatus::default()
        };
        status.destination_snapshot = tx.destination.map(|u| SnapshotReference {
            namespace: "dev".to_owned(),
            name: "nightly".to_owned(),
            uid: format!("uid-{u}"),
            content_name: content_name(&t),
        });
        if tx.committed {
            status.steps.push(TransferStep {
                name: TransferStepName::Committed,
                time: time(1_500),
            });
        }
        t.status = any.then_some(status);
        t
    }

    fn snapshot_fact(x: &Snap, namespace: &str, ours: &str) -> Snapshot {
        Snapshot {
            namespace: namespace.to_owned(),
            name: "nightly".to_owned(),
            uid: format!("uid-{}", x.uid),
            resource_version: x.rv.to_string(),
            lock: x.lock.then(|| format!("uid-{S_UID}")),
            deleting: x.deleting,
            deleted_at: 0,
            class: Some("fast".to_owned()),
            volume_source: None,
            content_source: (namespace == "dev").then(|| {
                if x.names_ours {
                    ours.to_owned()
                } else {
                    "someone-elses".to_owned()
                }
            }),
            bound_content: x.bound.then(|| {
                if namespace == "prod" {
                    OLD.to_owned()
                } else {
                    ours.to_owned()
                }
            }),
            ready: x.bound,
            restore_size: None,
            group: None,
            error: None,
        }
    }

    fn content_fact(c: &Cont, name: &str, namespace: &str) -> Content {
        Content {
            name: name.to_owned(),
            uid: format!("uid-{}", c.uid),
            resource_version: c.rv.to_string(),
            deletion_policy: if c.delete { "Delete" } else { "Retain" }.to_owned(),
            handle: Some(HANDLE.to_owned()),
            driver: DRIVER.to_owned(),
            class: Some("fast".to_owned()),
            source_volume_mode: None,
            ref_namespace: namespace.to_owned(),
            ref_name: "nightly".to_owned(),
            ref_uid: c.bound_to.map(|u| format!("uid-{u}")).unwrap_or_default(),
            ready: c.ready,
            marker: c.marker.then(|| format!("uid-{S_UID}")),
            original_policy: c
                .original_delete
                .map(|d| if d { "Delete" } else { "Retain" }.to_owned()),
            secrets: Default::default(),
            deleting: c.deleting,
            being_deleted: c.being_deleted,
            in_group: false,
        }
    }

    fn peer_found(&self) -> bool {
        self.d.exists && (self.s.peer || self.d.active())
    }

    fn facts(&self) -> Facts {
        let s = self.transfer(true);
        let peer = if self.peer_found() {
            Peer::Found(Box::new(self.transfer(false)))
        } else if self.s.peer {
            Peer::Gone
        } else {
            Peer::Unmatched
        };
        let ours = content_name(&s);
        let snapshots = SnapshotFacts {
            source: self
                .source
                .as_ref()
                .map(|x| Self::snapshot_fact(x, "prod", &ours)),
            old_content: self
                .old
                .as_ref()
                .map(|c| Self::content_fact(c, OLD, "prod")),
            new_content: self
                .new
                .as_ref()
                .map(|c| Self::content_fact(c, &ours, "dev")),
            destination: self
                .dest
                .as_ref()
                .filter(|_| self.s.destination.is_some() || self.peer_found())
                .map(|x| Self::snapshot_fact(x, "dev", &ours)),
            refused_by_class: None,
            lock_holder_active: false,
        };
        Facts::of_snapshot_move(2_000, s, peer, snapshots)
    }

    /// The decision on what this world shows, its questions answered.
    fn decision(&self) -> (Action, Facts) {
        let mut facts = self.facts();
        loop {
            match decide(&facts) {
                Action::Ask(Question::Users | Question::ReportedUsers) => {
                    facts.users = Some(if self.restoring {
                        vec!["restoring".to_owned()]
                    } else {
                        Vec::new()
                    });
                }
                Action::Ask(Question::Rights) => {
                    facts.rights = Some(if self.rights {
                        Ok(())
                    } else {
                        Err(Refusal {
                            side: Side::Destination,
                            message: "revoked".to_owned(),
                        })
                    });
                }
                Action::Ask(q) => panic!("a snapshot move asked {q:?}"),
                action => return (action, facts),
            }
        }
    }

    // ----- the controller's writes ------------------------------------------------

    /// The worlds after the controller performs `action`, decided on `facts`
    /// gathered from `seen`, write by write, a crash point after each.
    fn apply(&self, action: &Action, facts: &Facts, seen: &SnapWorld) -> Vec<SnapWorld> {
        let p = plan(facts, action);
        let mut w = self.clone();
        let mut out = Vec::new();
        let mut created = None;
        for write in &p.writes {
            let go_on = w.write(write, seen, &mut created);
            out.push(w.clone());
            if !go_on {
                break;
            }
        }
        if out.is_empty() {
            out.push(w);
        }
        out
    }

    fn content_named(&mut self, name: &str, ours: &str) -> Option<&mut Cont> {
        if name == OLD {
            self.old.as_mut()
        } else if name == ours {
            self.new.as_mut()
        } else {
            None
        }
    }

    fn write(&mut self, write: &Write, seen: &SnapWorld, created: &mut Option<u32>) -> bool {
        let ours = content_name(&self.transfer(true));
        match write {
            Write::Snapshot(w) => self.snapshot_write(w, &ours, created),
            Write::Status { on, change } => {
                let tx = match on {
                    On::Source => &mut self.s,
                    On::Peer => &mut self.d,
                };
                let was_active = match on {
                    On::Source => seen.s.active(),
                    On::Peer => seen.d.active(),
                };
                if !tx.exists || (was_active && !tx.active()) {
                    return true;
                }
                match &change.edit {
                    Edit::Waiting { phase, .. } | Edit::Finished { phase, .. } => {
                        tx.phase = Some(*phase);
                    }
                    Edit::Matched => tx.phase = Some(Phase::WaitingForRelease),
                    Edit::SnapshotLocked { record, .. } => {
                        tx.phase = Some(Phase::Rebinding);
                        tx.record |= record.is_some();
                    }
                    Edit::SnapshotDestination(reference) => {
                        tx.destination = if reference.uid.is_empty() {
                            *created
                        } else {
                            reference.uid.trim_start_matches("uid-").parse().ok()
                        };
                    }
                    Edit::Committed { .. } => tx.committed = true,
                    Edit::SnapshotCompleted => tx.phase = Some(Phase::Completed),
                    Edit::Lost { .. } => {
                        tx.phase = Some(Phase::Rebinding);
                        tx.lost_reported = true;
                    }
                    Edit::Mirror(status) => tx.phase = status.phase,
                    Edit::Retained | Edit::Step(_) => {}
                    other => panic!("a snapshot move wrote a claim's record: {other:?}"),
                }
                if change.peer_of.is_some() {
                    tx.peer = true;
                }
                // The finalizer a status write sets, as the store makes it:
                // never on an object being deleted.
                if let Some(present) = change.finalizer().filter(|_| !tx.deleting) {
                    tx.finalizer = present;
                }
                true
            }
            Write::Finalizer { on, present } => {
                let tx = match on {
                    On::Source => &mut self.s,
                    On::Peer => &mut self.d,
                };
                if tx.exists && !(*present && tx.deleting) {
                    tx.finalizer = *present;
                }
                true
            }
            Write::Delete(on) => {
                let tx = match on {
                    On::Source => &mut self.s,
                    On::Peer => &mut self.d,
                };
                tx.deleting = tx.exists;
                true
            }
            Write::Event(_) | Write::Wake(_) => true,
            Write::Cluster(_) | Write::Create { .. } => {
                panic!("a snapshot move wrote a claim or a volume: {write:?}")
            }
        }
    }

    fn snapshot_write(&mut self, w: &SnapshotWrite, ours: &str, created: &mut Option<u32>) -> bool {
        let rv = self.rv + 1;
        match w {
            SnapshotWrite::Snapshot {
                namespace,
                resource_version,
                change,
                ..
            } => {
                let x = if namespace == "prod" {
                    self.source.as_mut()
                } else {
                    self.dest.as_mut()
                };
                let Some(x) = x.filter(|x| x.rv.to_string() == *resource_version) else {
                    return false;
                };
                x.lock = matches!(change, SnapshotChange::Lock(_));
                x.rv = rv;
                self.rv = rv;
                true
            }
            SnapshotWrite::Content {
                name,
                resource_version,
                change,
            } => {
                let Some(c) = self
                    .content_named(name, ours)
                    .filter(|c| c.rv.to_string() == *resource_version)
                else {
                    return false;
                };
                match change {
                    ContentChange::Retain {
                        original_policy, ..
                    } => {
                        c.original_delete = Some(original_policy == "Delete");
                        c.marker = true;
                        c.delete = false;
                    }
                    ContentChange::Rehold => c.delete = false,
                    ContentChange::BeingDeleted => {
                        c.being_deleted = true;
                        c.delete = false;
                    }
                    ContentChange::Unmark { policy } => {
                        c.marker = false;
                        c.original_delete = None;
                        if let Some(p) = policy {
                            c.delete = p == "Delete";
                        }
                    }
                }
                c.rv = rv;
                self.rv = rv;
                true
            }
            SnapshotWrite::CreateContent(object) => {
                if self.new.is_some() {
                    return false;
                }
                let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
                if text("/spec/source/snapshotHandle") != Some(HANDLE)
                    || text("/spec/deletionPolicy") != Some("Retain")
                {
                    self.wrong = Some("the new content names another handle or is not Retain");
                }
                let uid = self.next_uid;
                self.next_uid += 1;
                self.new = Some(Cont {
                    uid,
                    rv,
                    delete: false,
                    marker: true,
                    original_delete: Some(true),
                    bound_to: None,
                    ready: false,
                    deleting: false,
                    being_deleted: false,
                });
                self.rv = rv;
                *created = Some(uid);
                true
            }
            SnapshotWrite::CreateSnapshot { object, .. } => {
                if self.dest.is_some() {
                    return false;
                }
                let uid = self.next_uid;
                self.next_uid += 1;
                let names = object
                    .pointer("/spec/source/volumeSnapshotContentName")
                    .and_then(Value::as_str);
                self.dest = Some(Snap {
                    uid,
                    rv,
                    lock: true,
                    deleting: false,
                    bound: false,
                    names_ours: names == Some(ours),
                });
                self.made_dest = Some(uid);
                self.rv = rv;
                *created = Some(uid);
                true
            }
            SnapshotWrite::DeleteSnapshot { namespace, uid, .. } => {
                let committed = self.committed;
                let x = if namespace == "prod" {
                    self.source.as_mut()
                } else {
                    self.dest.as_mut()
                };
                let Some(x) = x.filter(|x| format!("uid-{}", x.uid) == *uid) else {
                    return false;
                };
                if namespace == "prod" && !committed {
                    self.wrong = Some("the source snapshot was deleted before the commit");
                }
                x.deleting = true;
                true
            }
            SnapshotWrite::DeleteContent {
                name,
                uid,
                resource_version,
            } => {
                let Some(c) = self.content_named(name, ours).filter(|c| {
                    format!("uid-{}", c.uid) == *uid && c.rv.to_string() == *resource_version
                }) else {
                    return false;
                };
                let under_delete = c.delete;
                c.deleting = true;
                if under_delete {
                    self.wrong = Some("the controller deleted a content under Delete");
                }
                true
            }
        }
    }

    /// Whether the destination snapshot is bound both ways to the new
    /// content and ready.
    fn committed_both_ways(&self) -> bool {
        match (&self.dest, &self.new) {
            (Some(x), Some(c)) => x.bound && c.bound_to == Some(x.uid) && c.ready,
            _ => false,
        }
    }

    fn controller_steps(&self) -> Vec<SnapWorld> {
        let mut out = self.destination_steps();
        if self.s.exists {
            let (action, facts) = self.decision();
            out.extend(self.apply(&action, &facts, self));
        }
        out
    }

    /// The request's own reconcile.
    fn destination_steps(&self) -> Vec<SnapWorld> {
        if !self.d.exists {
            return Vec::new();
        }
        let d = self.transfer(false);
        let s = self.s.exists.then(|| self.transfer(true));
        let all: Vec<NamespaceTransfer> = s.iter().cloned().chain([d.clone()]).collect();
        let found = match (self.d.peer, &s) {
            (true, Some(s)) => Found::Recorded(s),
            (true, None) => Found::Gone,
            (false, _) => Found::Unrecorded(destination_view(&d, &all)),
        };
        let mut w = self.clone();
        match destination_turn(&d, found, 2_000) {
            Turn::LetGo => w.d.finalizer = false,
            Turn::Finish { phase, .. } => {
                if w.d.active() {
                    w.d.phase = Some(phase);
                }
            }
            Turn::Unmatched { phase, .. } => w.d.phase = Some(phase),
            Turn::DriveStanding(_) | Turn::Wake(_) | Turn::Expire => {}
        }
        vec![w]
    }

    // ----- the snapshot controller, the csi-snapshotter, the GC ---------------------

    fn cluster_steps(&self) -> Vec<SnapWorld> {
        let mut out = Vec::new();
        // Bind: the content pre-bound to the destination gets its uid, and
        // is ready (the csi-snapshotter's ListSnapshots).
        if let (Some(x), Some(c)) = (&self.dest, &self.new) {
            if x.names_ours && !x.deleting && !c.deleting && c.bound_to.is_none() {
                let mut w = self.clone();
                let uid = x.uid;
                let c = w.new.as_mut().unwrap_or_else(|| unreachable!());
                c.bound_to = Some(uid);
                c.ready = true;
                out.push(w);
            }
            if !x.bound && c.bound_to == Some(x.uid) && !x.deleting {
                let mut w = self.clone();
                if let Some(x) = w.dest.as_mut() {
                    x.bound = true;
                }
                w.committed = w.committed_both_ways();
                out.push(w);
            }
        }
        // A deleted snapshot: its bound content is marked being-deleted, and
        // deleted too under Delete; the snapshot goes once nothing holds it.
        for source_side in [true, false] {
            let (x, c) = if source_side {
                (&self.source, &self.old)
            } else {
                (&self.dest, &self.new)
            };
            let Some(x) = x.as_ref().filter(|x| x.deleting) else {
                continue;
            };
            if source_side && self.restoring {
                continue;
            }
            let bound = c.as_ref().filter(|c| c.bound_to == Some(x.uid));
            let mut w = self.clone();
            let (wx, wc) = if source_side {
                (&mut w.source, &mut w.old)
            } else {
                (&mut w.dest, &mut w.new)
            };
            match bound {
                Some(c) if !c.being_deleted || (c.delete && !c.deleting) => {
                    let wc = wc.as_mut().unwrap_or_else(|| unreachable!());
                    wc.being_deleted = true;
                    if wc.delete {
                        wc.deleting = true;
                    }
                    out.push(w);
                }
                Some(c) if c.delete => {} // waits for its content to go
                _ => {
                    *wx = None;
                    out.push(w);
                }
            }
        }
        // The csi-snapshotter on a deleted content.
        for old_side in [true, false] {
            let c = if old_side { &self.old } else { &self.new };
            let Some(c) = c.as_ref().filter(|c| c.deleting) else {
                continue;
            };
            let pre_provisioned_unbound = !old_side && c.bound_to.is_none();
            if !(pre_provisioned_unbound || c.being_deleted) {
                continue;
            }
            let mut w = self.clone();
            if c.delete {
                w.deletions = w.deletions.saturating_add(1);
            }
            if old_side {
                w.old = None;
            } else {
                w.new = None;
            }
            out.push(w);
        }
        // Our objects, deleted, go once no finalizer holds them.
        for source_side in [true, false] {
            let tx = if source_side { &self.s } else { &self.d };
            if tx.exists && tx.deleting && !tx.finalizer {
                let mut w = self.clone();
                let tx = if source_side { &mut w.s } else { &mut w.d };
                *tx = Tx {
                    exists: false,
                    ..Tx::new()
                };
                out.push(w);
            }
        }
        out
    }

    // ----- tenants and a stale leader ---------------------------------------------

    fn moves(&self) -> Vec<SnapWorld> {
        let mut out = Vec::new();
        for m in SNAP_MOVES {
            if !self.may(m) {
                continue;
            }
            let mut w = self.clone();
            w.made |= m as u16;
            let ok = match m {
                SnapMove::DeleteSourceSnapshot => match w.source.as_mut() {
                    Some(x) if !x.deleting => {
                        x.deleting = true;
                        w.source_deleted_by_tenant = true;
                        true
                    }
                    _ => false,
                },
                SnapMove::DeleteDestinationSnapshot => match w.dest.as_mut() {
                    Some(x) if !x.deleting => {
                        x.deleting = true;
                        w.dest_deleted_by_tenant = true;
                        true
                    }
                    _ => false,
                },
                SnapMove::DeleteSource => {
                    let ok = w.s.exists && !w.s.deleting;
                    w.s.deleting = true;
                    ok
                }
                SnapMove::VanishSourceSnapshot => {
                    let ok = w.source.is_some();
                    w.source = None;
                    w.source_deleted_by_tenant = true;
                    ok
                }
                SnapMove::VanishDestinationSnapshot => {
                    let ok = w.dest.is_some();
                    w.dest = None;
                    w.dest_deleted_by_tenant = true;
                    ok
                }
                SnapMove::DeleteRequest => {
                    let ok = w.d.exists && !w.d.deleting;
                    w.d.deleting = true;
                    ok
                }
                SnapMove::StartRestore => {
                    w.restoring = true;
                    w.source.is_some()
                }
                SnapMove::EndRestore => {
                    let ok = w.restoring;
                    w.restoring = false;
                    ok
                }
                SnapMove::Unlock => match w.source.as_mut() {
                    Some(x) if x.lock => {
                        x.lock = false;
                        let rv = w.rv + 1;
                        x.rv = rv;
                        w.rv = rv;
                        true
                    }
                    _ => false,
                },
                SnapMove::ForgeDestination => {
                    if w.dest.is_some() {
                        false
                    } else {
                        let uid = w.next_uid;
                        w.next_uid += 1;
                        w.rv += 1;
                        w.dest = Some(Snap {
                            uid,
                            rv: w.rv,
                            lock: true,
                            deleting: false,
                            bound: false,
                            names_ours: true,
                        });
                        true
                    }
                }
                SnapMove::RevokeRight => {
                    w.rights = false;
                    true
                }
                SnapMove::StaleGather => {
                    w.stale = Some(Box::new(self.clone()));
                    w.s.exists
                }
                SnapMove::StaleAct => match self.stale.as_deref() {
                    Some(seen) if seen.s.exists => {
                        let (action, facts) = seen.decision();
                        let mut base = self.clone();
                        base.made |= m as u16;
                        base.stale = None;
                        out.extend(base.apply(&action, &facts, seen));
                        continue;
                    }
                    _ => false,
                },
            };
            if ok {
                out.push(w);
            }
        }
        out
    }

    // ----- invariants ---------------------------------------------------------------

    fn safety(&self) -> Result<(), String> {
        if let Some(why) = self.wrong {
            return Err(why.to_owned());
        }
        let deleting_policies = [&self.old, &self.new]
            .into_iter()
            .flatten()
            .filter(|c| c.delete)
            .count();
        if deleting_policies > 1 {
            return Err("two contents of the backend snapshot are under Delete".to_owned());
        }
        if self.deletions > 0 {
            // A snapshot bound to a content of the backend snapshot, and not
            // deleted by its tenant.
            let live = |x: &Option<Snap>| x.as_ref().is_some_and(|x| x.bound && !x.deleting);
            if live(&self.source) || live(&self.dest) {
                return Err("the backend snapshot was deleted under a live snapshot".to_owned());
            }
            if !self.source_deleted_by_tenant && !self.dest_deleted_by_tenant {
                return Err(
                    "the backend snapshot was deleted though no tenant deleted a snapshot"
                        .to_owned(),
                );
            }
        }
        if self.deletions > 1 {
            return Err("the backend snapshot was deleted twice".to_owned());
        }
        Ok(())
    }

    fn outcome(&self) -> Result<(), String> {
        let phase = if self.s.exists {
            self.s.phase
        } else {
            // The source object went: only after a finish; judge by what
            // is left.
            None
        };
        match phase {
            Some(Phase::Completed) => {
                if self.source.is_some() || self.old.is_some() {
                    return Err("Completed, and the source snapshot or its content is left".into());
                }
                if !self.dest_deleted_by_tenant {
                    let ok = self.committed_both_ways()
                        && self.new.as_ref().is_some_and(|c| c.delete && !c.marker)
                        && self.dest.as_ref().is_some_and(|x| !x.lock);
                    if !ok {
                        return Err("Completed, and the destination is not settled".into());
                    }
                }
            }
            Some(Phase::Failed | Phase::Cancelled) => {
                if !self.source_deleted_by_tenant {
                    let source_ok = self.source.as_ref().is_some_and(|x| x.bound && !x.lock)
                        && self.old.as_ref().is_some_and(|c| {
                            c.delete && !c.marker && c.bound_to == Some(SOURCE_UID)
                        });
                    if !source_ok {
                        return Err("rolled back, and the source is not as it was".into());
                    }
                }
                if self.new.is_some() {
                    return Err("rolled back, and the content the move made is left".into());
                }
                let ours =
                    |x: &Snap| self.made_dest == Some(x.uid) || self.s.destination == Some(x.uid);
                if self.dest.as_ref().is_some_and(|x| ours(x) && !x.deleting) {
                    return Err("rolled back, and the destination snapshot is left".into());
                }
            }
            _ => {}
        }
        if self.deletions > 0 && !(self.source_deleted_by_tenant || self.dest_deleted_by_tenant) {
            return Err("the backend snapshot was deleted".into());
        }
        // Nothing waits for ever on a content being deleted: the
        // csi-snapshotter lets a deleted content go only once it is marked.
        let going = |c: &Option<Cont>| c.as_ref().is_some_and(|c| c.deleting);
        if self.s.exists && (going(&self.old) || going(&self.new)) {
            return Err("settled with a content being deleted that never goes".into());
        }
        Ok(())
    }
}

impl Space for SnapWorld {
    fn safety(&self) -> Result<(), String> {
        SnapWorld::safety(self)
    }

    fn outcome(&self) -> Result<(), String> {
        SnapWorld::outcome(self)
    }

    fn controller_steps(&self) -> Vec<Self> {
        SnapWorld::controller_steps(self)
    }

    fn cluster_steps(&self) -> Vec<Self> {
        SnapWorld::cluster_steps(self)
    }

    fn moves(&self) -> Vec<Self> {
        SnapWorld::moves(self)
    }

    fn tally(&self) -> (usize, usize) {
        match self.s.phase {
            Some(Phase::Completed) => (1, 0),
            Some(Phase::Failed | Phase::Cancelled) => (0, 1),
            _ => (0, 0),
        }
    }
}

/// The bits of a set of moves.
pub(super) fn snap_moves(list: &[SnapMove]) -> u16 {
    list.iter().fold(0, |bits, m| bits | *m as u16)
}

#[cfg(test)]
mod tests;
