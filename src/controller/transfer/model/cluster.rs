//! Everyone but the controller: what kube-controller-manager and the CSI
//! provisioner do next, and the moves a tenant, a stale leader or the clock
//! may make, each at most once per run.

use super::{Cached, Move, Pv, Tx, World, MOVES};

impl World {
    /// The one thing kube-controller-manager or the provisioner would do
    /// next, if any (they act on their own, in any order with the rest).
    pub(super) fn cluster_steps(&self) -> Vec<World> {
        let mut out = Vec::new();
        // The controller's watch copies catch up.
        if self.cache.is_some() {
            let mut w = self.clone();
            w.cache = None;
            out.push(w);
        }
        // Clone mode: the provisioner makes the clone's volume, bound to it.
        if let Some(c) = self
            .source
            .as_ref()
            .filter(|c| self.clone_mode && !c.volume && c.phase == "Pending" && !c.deleting)
        {
            if self.volume.is_none() && !self.deleted {
                let mut w = self.clone();
                let rv = w.bump();
                w.volume = Some(Pv {
                    rv,
                    claim: (false, c.uid),
                    delete_policy: true,
                    original_delete: None,
                    marker: None,
                    lost: None,
                    phase: "Bound",
                });
                if let Some(c) = w.source.as_mut() {
                    c.volume = true;
                }
                out.push(w);
            }
        }
        let exists = |w: &World, dest: bool, uid: u32| {
            let c = if dest { &w.destination } else { &w.source };
            c.as_ref().is_some_and(|c| c.uid == uid)
        };
        if let Some(v) = &self.volume {
            let (dest, uid) = v.claim;
            // The binder's copy of the volume catches up.
            if self.binder_view.is_some() {
                let mut w = self.clone();
                w.binder_view = None;
                out.push(w);
            }
            // Its claim syncs, on the volume as its copy shows it
            // (`syncUnboundClaim`, `syncBoundClaim`).
            let (view_dest, view_uid) = self.binder_view.unwrap_or(v.claim);
            for (is_dest, claim) in [(false, &self.source), (true, &self.destination)] {
                let Some(c) = claim else { continue };
                let named = is_dest == view_dest && c.uid == view_uid;
                let mut next = c.clone();
                if named && !c.deleting {
                    // Bind a claim the volume names: pre-bound to it, or
                    // naming no volume (a claim its tenant wrote, which the
                    // binder binds to the volume whose claimRef names it).
                    next.phase = "Bound";
                    next.volume = true;
                    next.completed = true;
                } else if !named && c.completed {
                    // A claim whose binding was completed, and whose volume
                    // names another claim, is Lost.
                    next.phase = "Lost";
                } else if !named && c.volume && !c.by_controller {
                    // Pre-bound by a user to a volume that names another
                    // claim: Pending, until the volume names it.
                    next.phase = "Pending";
                }
                if next != *c {
                    let mut w = self.clone();
                    // A lag lasts through one claim sync: a binder that
                    // rebinds the source claim on an old claimRef, against
                    // our Lost write, would otherwise race it without end.
                    w.binder_view = None;
                    let (rv1, rv2) = (w.bump(), w.bump());
                    next.rv = rv1;
                    let target = if is_dest {
                        &mut w.destination
                    } else {
                        &mut w.source
                    };
                    *target = Some(next);
                    if named {
                        if let Some(v) = w.volume.as_mut().filter(|v| v.phase != "Bound") {
                            v.phase = "Bound";
                            v.rv = rv2;
                        }
                    }
                    out.push(w);
                }
            }
            // A volume whose claim is there and pre-bound to it is Bound
            // (the binder's volume sync), whatever the claim's own phase.
            let named = if dest {
                &self.destination
            } else {
                &self.source
            };
            if v.phase != "Bound" && named.as_ref().is_some_and(|c| c.uid == uid && c.volume) {
                out.push(self.with_volume_phase("Bound"));
            }
            // A volume whose claim is gone is Released.
            if v.phase == "Bound" && !exists(self, dest, uid) {
                out.push(self.with_volume_phase("Released"));
            }
            // The provisioner deletes a Released volume under Delete.
            if v.phase == "Released" && v.delete_policy {
                let mut w = self.clone();
                w.volume = None;
                w.deleted = true;
                out.push(w);
            }
        }
        // pvc-protection lets a deleting claim go once no pod uses it.
        if self
            .source
            .as_ref()
            .is_some_and(|c| c.deleting && !c.finalizer)
            && !self.pod
        {
            let mut w = self.clone();
            w.source = None;
            out.push(w);
        }
        if self
            .destination
            .as_ref()
            .is_some_and(|c| c.deleting && !c.finalizer)
        {
            let mut w = self.clone();
            w.destination = None;
            out.push(w);
        }
        // A deleted object without finalizers goes.
        for source_side in [true, false] {
            let tx = if source_side { &self.s } else { &self.d };
            if tx.exists && tx.deleting && !tx.finalizer {
                let mut w = self.clone();
                let tx = if source_side { &mut w.s } else { &mut w.d };
                tx.exists = false;
                out.push(w);
            }
        }
        out
    }

    /// This world after the binder writes the volume's phase.
    fn with_volume_phase(&self, phase: &'static str) -> World {
        let mut w = self.clone();
        let rv = w.bump();
        if let Some(v) = w.volume.as_mut() {
            v.phase = phase;
            v.rv = rv;
        }
        w
    }

    /// The tenants' and the stale leader's moves still allowed.
    pub(super) fn moves(&self) -> Vec<World> {
        let mut out = Vec::new();
        for m in MOVES {
            if !self.may(m) {
                continue;
            }
            let mut w = self.clone();
            w.made |= m as u16;
            let ok = match m {
                Move::DeleteSourceClaim | Move::DeleteDestinationClaim => {
                    let dest = m == Move::DeleteDestinationClaim;
                    // The owner's deletion counts as the owner's when no
                    // transfer holds the volume: before R2, or once the
                    // transfer has finished and is only putting things back.
                    let unheld =
                        w.volume.as_ref().is_some_and(|v| v.marker.is_none()) || !w.s.active();
                    let untouched_and_named = |uid: u32| {
                        unheld
                            && w.volume.as_ref().is_some_and(|v| {
                                v.claim == (dest, uid)
                                    && (v.delete_policy || v.original_delete == Some(true))
                            })
                    };
                    let claim = if dest { &w.destination } else { &w.source };
                    match claim.as_ref().map(|c| (c.uid, c.deleting)) {
                        Some((uid, false)) => {
                            if untouched_and_named(uid) {
                                w.owner_released = true;
                            }
                            let claim = if dest {
                                &mut w.destination
                            } else {
                                &mut w.source
                            };
                            if let Some(c) = claim.as_mut() {
                                c.deleting = true;
                            }
                            true
                        }
                        _ => false,
                    }
                }
                Move::DeleteSource => {
                    let ok = w.s.exists && !w.s.deleting;
                    w.s.deleting = true;
                    ok
                }
                Move::DeleteRequest => {
                    let ok = w.d.exists && !w.d.deleting;
                    w.d.deleting = true;
                    ok
                }
                Move::RecreateRequest => {
                    if w.d.exists {
                        false
                    } else {
                        let uid = w.next_uid;
                        w.next_uid += 1;
                        w.d = Tx::new(uid);
                        true
                    }
                }
                // Populate mode: the tenant writes another claim of that
                // name, naming the request, once the first is gone.
                Move::ForgeDestination if w.populate => {
                    if w.destination.is_some() {
                        false
                    } else {
                        let claim = w.tenant_claim();
                        w.destination = Some(claim);
                        true
                    }
                }
                Move::ForgeDestination => {
                    if w.destination.is_some() {
                        false
                    } else {
                        let lock = w.s.uid;
                        w.destination = Some(w.new_claim(true, lock, false, false));
                        true
                    }
                }
                Move::StartPod => {
                    let ok = !w.pod && w.source.is_some();
                    w.pod = true;
                    ok
                }
                Move::StopPod => {
                    let ok = w.pod;
                    w.pod = false;
                    ok
                }
                Move::CloneTimesOut => w.clone_mode,
                Move::RevokeRight => {
                    w.rights = false;
                    true
                }
                Move::RefuseAdmission => {
                    w.admission = false;
                    true
                }
                Move::StaleGather => {
                    let mut seen = self.clone();
                    seen.stale = None;
                    w.stale = Some(Box::new(seen));
                    true
                }
                Move::StaleAct => match w.stale.take() {
                    Some(seen) => {
                        let (action, facts) = seen.decision();
                        out.extend(w.apply(&action, &facts, &seen));
                        continue;
                    }
                    None => false,
                },
                Move::DeadlinePasses => {
                    w.late = true;
                    true
                }
                Move::StaleBinder => {
                    w.binder_view = w.volume.as_ref().map(|v| v.claim);
                    w.binder_view.is_some()
                }
                Move::StaleCache => {
                    w.cache = Some(Box::new(Cached {
                        source: w.source.clone(),
                        destination: w.destination.clone(),
                        volume: w.volume.clone(),
                    }));
                    true
                }
            };
            if ok {
                out.push(w);
            }
        }
        out
    }
}
