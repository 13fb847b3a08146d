//! The controller's writes on the model's world: the plan's writes to
//! claims and volumes ([`cluster_writes`], the executor's own list), and
//! the status and finalizer effects of each action, with a crash point
//! between any two writes.

use super::{Pv, Pvc, Tx, World};

use crate::api::namespace_transfer::{
    NamespaceTransferPhase as Phase, FINALIZER_TRANSFER_PROTECTION,
};
use crate::controller::transfer::decide::Action;
use crate::controller::transfer::plan::{cluster_writes, ClaimChange, ClusterWrite, VolumeChange};

impl World {
    pub(super) fn uid(text: &str) -> u32 {
        text.trim_start_matches("uid-").parse().unwrap_or(0)
    }

    /// A write to the volume conditional on `resource_version`, as the
    /// executor's patches are: applies `change` and moves the volume to the
    /// next revision if it is still at that version. The world's revision
    /// moves either way. Whether it was applied.
    pub(super) fn patch_volume(
        &mut self,
        resource_version: &str,
        change: impl FnOnce(&mut Pv),
    ) -> bool {
        let rv = self.rv + 1;
        self.rv = rv;
        match self.volume.as_mut() {
            Some(v) if v.rv.to_string() == resource_version => {
                change(v);
                v.rv = rv;
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

    /// The worlds after each of `writes` (the plan the executor performs,
    /// [`cluster_writes`]): a crash may come after any of them. A refused
    /// conditional write ends the list, as in the executor.
    pub(super) fn perform(&self, writes: &[ClusterWrite]) -> Vec<World> {
        let mut w = self.clone();
        let mut out = Vec::new();
        for write in writes {
            let made = w.make(write);
            out.push(w.clone());
            if !made && write.is_conditional() {
                break;
            }
        }
        if out.is_empty() {
            out.push(w);
        }
        out
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
                match change {
                    ClaimChange::Lock(lock) => c.lock = Some(Self::uid(lock)),
                    ClaimChange::Unlock => c.lock = None,
                    ClaimChange::Finalizers(finalizers) => {
                        c.finalizer = finalizers
                            .iter()
                            .any(|f| f == FINALIZER_TRANSFER_PROTECTION);
                    }
                }
                c.rv = rv;
                self.rv = rv;
                true
            }
            ClusterWrite::DeleteClaim {
                namespace,
                name,
                uid,
            } => match self.claim_named(namespace, name) {
                Some(c) if c.uid == Self::uid(uid) => {
                    c.deleting = true;
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

    /// The worlds after the controller applies `action`, decided on
    /// `seen` (the present, or a stale leader's past): every crash point of
    /// a multi-write action included.
    pub(super) fn apply(&self, action: &Action, seen: &World) -> Vec<World> {
        let s_active = seen.s.active();
        let d_uid = seen.d.uid;
        let mut w = self.clone();
        let s_matches = w.s.exists && w.s.uid == seen.s.uid;
        let d_matches = w.d.exists && w.d.uid == d_uid;
        let peer_found = seen.peer_found();
        // update_pair: the source first, then the peer (if the decision saw
        // one); a crash may fall between the two.
        let pair = |w: &World, change: &dyn Fn(&mut Tx, bool)| -> Vec<World> {
            let mut first = w.clone();
            if s_matches {
                Self::write_status(&mut first.s, s_active, |t| change(t, true));
            }
            let mut both = first.clone();
            if d_matches && peer_found {
                let d_active = seen.d.active();
                Self::write_status(&mut both.d, d_active, |t| change(t, false));
            }
            vec![first, both]
        };
        match action {
            Action::Nothing { .. }
            | Action::Expire
            | Action::CheckUsers
            | Action::CheckRights
            | Action::CheckAdmission => {
                vec![w]
            }
            // The writes to claims and volumes: the executor's own list.
            Action::Lock { .. }
            | Action::Retain { .. }
            | Action::Commit { .. }
            | Action::Rehold { .. }
            | Action::Settle { .. }
            | Action::Unmark { .. }
            | Action::UnlockDestination
            | Action::ProtectDestination { .. }
            | Action::UnprotectDestination { .. }
            | Action::Unlock { .. }
            | Action::ReleaseSource { .. }
            | Action::DeleteClone { .. }
            | Action::DeleteDestination { .. } => w.perform(&cluster_writes(&seen.facts(), action)),
            Action::Wait { phase, .. } => {
                let phase = *phase;
                pair(&w, &|t, _| t.phase = Some(phase))
            }
            Action::CreateClone(_) => {
                if w.source.is_some() {
                    return vec![w];
                }
                let clone = w.new_claim(false, seen.s.uid, false, true);
                w.clones.push(clone.uid);
                w.source = Some(clone);
                vec![w]
            }
            Action::RecordMatch => {
                let (su, du) = (seen.s.uid, d_uid);
                pair(&w, &|t, is_s| {
                    t.peer = Some(if is_s { du } else { su });
                    t.phase = Some(Phase::WaitingForRelease);
                })
            }
            Action::Finish { phase, .. } => {
                let phase = *phase;
                pair(&w, &|t, _| t.phase = Some(phase))
            }
            Action::Protect => {
                let mut first = w.clone();
                if s_matches && !first.s.deleting {
                    first.s.finalizer = true;
                }
                let mut both = first.clone();
                if d_matches && peer_found && !both.d.deleting {
                    both.d.finalizer = true;
                }
                vec![first, both]
            }
            Action::RecordSource(snap) => {
                let uid = Self::uid(&snap.uid);
                pair(&w, &|t, is_s| {
                    if is_s {
                        t.snapshot = Some(uid);
                    }
                    t.phase = Some(Phase::Rebinding);
                })
            }
            Action::CreateDestination(_) => {
                if w.destination.is_some() {
                    return vec![w];
                }
                let claim = w.new_claim(true, seen.s.uid, true, true);
                let uid = claim.uid;
                w.destination = Some(claim);
                w.ours.push(uid);
                // Crash right after the create, or record its uid too.
                let crashed = w.clone();
                if s_matches {
                    Self::write_status(&mut w.s, s_active, |t| t.destination = Some(uid));
                }
                vec![crashed, w]
            }
            Action::RecordDestination(r) => {
                let uid = Self::uid(&r.uid);
                if s_matches {
                    Self::write_status(&mut w.s, s_active, |t| t.destination = Some(uid));
                }
                vec![w]
            }
            Action::Complete => pair(&w, &|t, _| t.phase = Some(Phase::Completed)),
            Action::DestinationLost { .. } => pair(&w, &|t, _| {
                t.phase = Some(Phase::Rebinding);
                t.lost_reported = true;
            }),
            Action::Mirror => {
                let phase = w.s.phase;
                if d_matches && peer_found {
                    w.d.phase = phase;
                }
                vec![w]
            }
            Action::DropFinalizers => {
                let mut first = w.clone();
                if d_matches && peer_found {
                    first.d.finalizer = false;
                }
                let mut both = first.clone();
                if s_matches {
                    both.s.finalizer = false;
                }
                vec![first, both]
            }
        }
    }
}
