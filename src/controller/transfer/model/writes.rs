//! The controller's writes on the model's world: each action's plan
//! ([`plan`], the list the executor performs), write by write, with a
//! crash point between any two writes. This file interprets each *kind* of
//! write once; which writes an action makes is the plan's alone.

use super::{Pv, Pvc, Tx, World};

use crate::api::namespace_transfer::{
    NamespaceTransferPhase as Phase, FINALIZER_TRANSFER_PROTECTION,
};
use crate::controller::transfer::decide::Action;
use crate::controller::transfer::facts::Facts;
use crate::controller::transfer::plan::{
    plan, ClaimChange, ClusterWrite, Edit, On, VolumeChange, Write,
};
use crate::controller::transfer::Step;

impl World {
    pub(super) fn uid(text: &str) -> u32 {
        text.trim_start_matches("uid-").parse().unwrap_or(0)
    }

    /// A write to the volume conditional on `resource_version`, as the
    /// executor's patches are: applies `change` and moves the volume to the
    /// next revision if it is still at that version; a refused one changes
    /// nothing, as in etcd. Whether it was applied.
    pub(super) fn patch_volume(
        &mut self,
        resource_version: &str,
        change: impl FnOnce(&mut Pv),
    ) -> bool {
        let rv = self.rv + 1;
        match self.volume.as_mut() {
            Some(v) if v.rv.to_string() == resource_version => {
                let before = v.clone();
                change(v);
                if *v != before {
                    v.rv = rv;
                    self.rv = rv;
                }
                true
            }
            _ => false,
        }
    }

    /// Writes status on `tx` as `update_status` does: to the object that
    /// exists now, never turning a finished decision on an active object.
    pub(super) fn write_status(tx: &mut Tx, decided_on_active: bool, change: impl Fn(&mut Tx)) {
        if !tx.exists || (decided_on_active && !tx.active()) {
            return;
        }
        change(tx);
    }

    /// Makes one write of a plan on this world, as kube-apiserver would:
    /// whether it was made (its object there, its precondition held).
    pub(super) fn make(&mut self, write: &ClusterWrite) -> bool {
        match write {
            ClusterWrite::Volume {
                resource_version,
                change,
                ..
            } => {
                let made = self.patch_volume(resource_version, |v| match change {
                    VolumeChange::Retain {
                        original_policy,
                        marker,
                        ..
                    } => {
                        v.original_delete = Some(original_policy == "Delete");
                        v.marker = Some(Self::uid(marker));
                        v.delete_policy = false;
                    }
                    VolumeChange::Commit { to } => {
                        v.claim = (to.namespace == "dev", Self::uid(&to.uid));
                    }
                    VolumeChange::Rehold {
                        original_policy,
                        marker,
                        lost,
                    } => {
                        v.original_delete = Some(original_policy == "Delete");
                        v.marker = Some(Self::uid(marker));
                        v.lost = (!lost.is_empty()).then(|| Self::uid(lost));
                        v.delete_policy = false;
                    }
                    VolumeChange::Unmark { policy } => {
                        if let Some(policy) = policy {
                            v.delete_policy = policy == "Delete";
                        }
                        v.marker = None;
                        v.original_delete = None;
                    }
                });
                if made && matches!(change, VolumeChange::Commit { .. }) {
                    self.committed = true;
                }
                made
            }
            ClusterWrite::Claim {
                namespace,
                name,
                resource_version,
                change,
            } => {
                let rv = self.rv + 1;
                let Some(c) = self.claim_named(namespace, name) else {
                    return false;
                };
                if resource_version
                    .as_ref()
                    .is_some_and(|want| *want != c.rv.to_string())
                {
                    return false;
                }
                let before = c.clone();
                match change {
                    ClaimChange::Lock(lock) => c.lock = Some(Self::uid(lock)),
                    ClaimChange::Unlock => c.lock = None,
                    ClaimChange::Finalizers(finalizers) => {
                        c.finalizer = finalizers
                            .iter()
                            .any(|f| f == FINALIZER_TRANSFER_PROTECTION);
                    }
                    // kube lets a claim's volumeName be set once, from empty.
                    ClaimChange::Pin { finalizers, .. } => {
                        c.finalizer = finalizers
                            .iter()
                            .any(|f| f == FINALIZER_TRANSFER_PROTECTION);
                        c.volume = true;
                    }
                    ClaimChange::Bind(_) => {
                        c.lock = None;
                        c.by_controller = true;
                        c.phase = "Bound";
                    }
                    ClaimChange::Lose => c.phase = "Lost",
                }
                // A patch that changes nothing keeps the resourceVersion,
                // as in kube-apiserver.
                if *c != before {
                    c.rv = rv;
                    self.rv = rv;
                }
                true
            }
            ClusterWrite::DeleteClaim {
                namespace,
                name,
                uid,
            } => match self.claim_named(namespace, name) {
                Some(c) if c.uid == Self::uid(uid) => {
                    c.deleting = true;
                    let uid = c.uid;
                    if self.tenants.contains(&uid) {
                        self.deleted_tenants = true;
                    }
                    true
                }
                _ => false,
            },
        }
    }

    /// The claim `namespace/name` of this world, if it exists: the moved
    /// claim in `prod`, the destination claim `dev/db`.
    pub(super) fn claim_named(&mut self, namespace: &str, name: &str) -> Option<&mut Pvc> {
        match namespace {
            "prod" if name == self.moved_name() => self.source.as_mut(),
            "dev" if name == "db" => self.destination.as_mut(),
            _ => None,
        }
    }

    /// The worlds after the controller performs `action`, decided on
    /// `facts` gathered from `seen` (the present, or a stale leader's
    /// past; its claims and volume perhaps from stale watch copies): the plan the
    /// executor performs ([`plan`]), made write by write on this world, with
    /// a crash point after every write. A refused conditional write or a
    /// create that finds its claim ends the plan, as in the executor.
    pub(super) fn apply(&self, action: &Action, facts: &Facts, seen: &World) -> Vec<World> {
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

    /// Makes one write of a plan on this world; whether the plan goes on.
    fn write(&mut self, write: &Write, seen: &World, created: &mut Option<u32>) -> bool {
        match write {
            Write::Cluster(c) => self.make(c) || !c.is_conditional() || c.is_for_the_binder(),
            Write::Create { step, .. } => {
                let destination = *step == Step::CreateDestination;
                let slot = if destination {
                    &self.destination
                } else {
                    &self.source
                };
                if slot.is_some() {
                    return false;
                }
                let claim = self.new_claim(destination, seen.s.uid, destination, true);
                *created = Some(claim.uid);
                if destination {
                    self.ours.push(claim.uid);
                    self.destination = Some(claim);
                } else {
                    self.clones.push(claim.uid);
                    self.source = Some(claim);
                }
                true
            }
            Write::Status { on, change } => {
                let (su, du) = (seen.s.uid, seen.d.uid);
                let Some((tx, decided_on_active)) = self.ours_as_seen(*on, seen) else {
                    return true;
                };
                Self::write_status(tx, decided_on_active, |t| {
                    match &change.edit {
                        Edit::Waiting { phase, .. } | Edit::Finished { phase, .. } => {
                            t.phase = Some(*phase);
                        }
                        Edit::Matched => t.phase = Some(Phase::WaitingForRelease),
                        Edit::Locked { snapshot, .. } => {
                            t.phase = Some(Phase::Rebinding);
                            if let Some(snapshot) = snapshot {
                                t.snapshot = Some(Self::uid(&snapshot.uid));
                            }
                        }
                        Edit::Completed { .. } => t.phase = Some(Phase::Completed),
                        Edit::Lost { .. } => {
                            t.phase = Some(Phase::Rebinding);
                            t.lost_reported = true;
                        }
                        Edit::Destination(reference) => {
                            t.destination = if reference.uid.is_empty() {
                                *created
                            } else {
                                Some(Self::uid(&reference.uid))
                            };
                        }
                        Edit::Mirror(status) => t.phase = status.phase,
                        // Conditions, steps and a standing offer's records:
                        // nothing the model's invariants read.
                        Edit::Retained
                        | Edit::Committed { .. }
                        | Edit::Step(_)
                        | Edit::PairRecord(_) => {}
                        // A snapshot move's records: not a claim's pair.
                        Edit::SnapshotLocked { .. }
                        | Edit::SnapshotDestination(_)
                        | Edit::SnapshotCompleted => {}
                    }
                    match change.peer_of {
                        Some(On::Source) => t.peer = Some(su),
                        Some(On::Peer) => t.peer = Some(du),
                        None => {}
                    }
                    // The match protects, and the completion lets the peer
                    // go, in the same write, as the store makes it: never
                    // on an object being deleted.
                    if let Some(present) = change.finalizer().filter(|_| !t.deleting) {
                        t.finalizer = present;
                    }
                });
                true
            }
            Write::Finalizer { on, present } => {
                if let Some((tx, _)) = self.ours_as_seen(*on, seen) {
                    // No finalizer is added to an object being deleted.
                    if !(*present && tx.deleting) {
                        tx.finalizer = *present;
                    }
                }
                true
            }
            Write::Delete(on) => {
                if let Some((tx, _)) = self.ours_as_seen(*on, seen) {
                    tx.deleting = true;
                }
                true
            }
            Write::Event(_) | Write::Wake(_) => true,
            // A claim's pair plans no snapshot write (`model/snapshot.rs`
            // checks those).
            Write::Snapshot(_) => false,
        }
    }

    /// Our object `on` of this world, if it is the one `seen` decided on
    /// (same uid, and for the peer, one the decision found); and whether
    /// the decision saw it active.
    fn ours_as_seen(&mut self, on: On, seen: &World) -> Option<(&mut Tx, bool)> {
        match on {
            On::Source if self.s.exists && self.s.uid == seen.s.uid => {
                Some((&mut self.s, seen.s.active()))
            }
            On::Peer if seen.peer_found() && self.d.exists && self.d.uid == seen.d.uid => {
                Some((&mut self.d, seen.d.active()))
            }
            _ => None,
        }
    }
}
