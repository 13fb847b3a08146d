//! The standing-offer world's writes: a plan performed write by write, as
//! the executor and kube-apiserver make each (preconditions, finalizers,
//! resourceVersions), with a crash point after every write but the last.

use super::*;

impl Offered {
    /// The worlds after the plan of `action`, decided on `facts`, is
    /// performed write by write: one after every write (a crash point),
    /// ending where the executor would stop.
    pub(super) fn perform(&self, facts: &Facts, action: &Action) -> Vec<Offered> {
        let p = plan(facts, action);
        let mut w = self.clone();
        let mut out = Vec::new();
        let mut created = None;
        let mut written = None;
        for (n, write) in p.writes.iter().enumerate() {
            if !w.write(facts, write, &mut created, &mut written) {
                break;
            }
            if n + 1 < p.writes.len() {
                out.extend(w.crashed());
            }
        }
        out.push(w);
        out
    }

    /// This world, as a crash leaves it, if the run still allows one.
    pub(super) fn crashed(&self) -> Option<Offered> {
        self.may(OfferMove::Crash).then(|| {
            let mut w = self.clone();
            w.made |= OfferMove::Crash as u16;
            w
        })
    }

    /// One write of a plan, as the executor and kube-apiserver make it;
    /// whether the plan goes on.
    pub(super) fn write(
        &mut self,
        facts: &Facts,
        write: &Write,
        created: &mut Option<String>,
        written: &mut Option<Phase>,
    ) -> bool {
        let peer = match &facts.peer {
            Peer::Found(d) => Some(d.as_ref()),
            _ => None,
        };
        let object = |on: On| match on {
            On::Source => Some(&facts.source),
            On::Peer => peer,
        };
        match write {
            Write::Cluster(c) => self.make(c) || !c.is_conditional() || c.is_for_the_binder(),
            Write::Create {
                namespace, claim, ..
            } => {
                let name = claim.metadata.name.clone().unwrap_or_default();
                if self.claims.contains_key(&key(namespace, &name)) {
                    return false;
                }
                let mut made = Claim::from(claim.as_ref());
                made.uid = format!("uid-{}", self.next_uid);
                self.next_uid += 1;
                made.resource_version = format!("{}/1", made.uid);
                made.created = 1_000;
                made.phase = "Pending".to_owned();
                if namespace == "dev" {
                    self.ours.insert(made.uid.clone());
                }
                *created = Some(made.uid.clone());
                self.claims.insert(key(namespace, &name), made);
                true
            }
            Write::Status { on, change } => {
                let Some(t) = object(*on) else { return true };
                let mut change = change.clone();
                if let Edit::Destination(reference) = &mut change.edit {
                    if reference.uid.is_empty() {
                        reference.uid = created.clone().unwrap_or_default();
                    }
                }
                let pair = (&facts.source, peer);
                let before = *written;
                match update_status(self.slot(t), t, |st| {
                    apply_change(st, &change, t, pair, before, &at());
                }) {
                    Some(phase) => {
                        // The finalizer the status write sets, as the store
                        // makes it: an object being deleted keeps its own.
                        if let Some(present) = change.finalizer() {
                            self.status_finalizer(t, present);
                        }
                        if *on == On::Source {
                            *written = phase;
                        }
                        true
                    }
                    None => false,
                }
            }
            Write::Finalizer { on, present } => {
                if let Some(t) = object(*on) {
                    self.finalizer(t, *present);
                }
                true
            }
            Write::Delete(on) => {
                if let Some(t) = object(*on) {
                    let slot = self.slot(t);
                    if slot
                        .as_ref()
                        .is_some_and(|c| c.metadata.uid == t.metadata.uid)
                    {
                        Self::delete_transfer(slot);
                    }
                }
                true
            }
            Write::Event(_) | Write::Wake(_) => true,
            // An offer of a claim plans no snapshot write.
            Write::Snapshot(_) => false,
        }
    }

    /// Our finalizer on the object `t` names, added or taken off; none is
    /// added to an object being deleted.
    /// The finalizer a status write sets (`Part::StatusAndFinalizers`):
    /// an object being deleted keeps its finalizers as they are.
    fn status_finalizer(&mut self, t: &NamespaceTransfer, present: bool) {
        let deleting = self
            .slot(t)
            .as_ref()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        if !deleting {
            self.finalizer(t, present);
        }
    }

    fn finalizer(&mut self, t: &NamespaceTransfer, present: bool) {
        if let Some(current) = self.slot(t).as_mut() {
            if !(present && current.metadata.deletion_timestamp.is_some()) {
                set_finalizer(
                    &mut current.metadata,
                    FINALIZER_TRANSFER_PROTECTION,
                    present,
                );
            }
        }
    }

    pub(super) fn delete_transfer(slot: &mut Option<NamespaceTransfer>) -> bool {
        match slot.as_mut() {
            Some(t) if t.metadata.deletion_timestamp.is_none() => {
                t.metadata.deletion_timestamp =
                    Some(Time(Timestamp::from_second(1_500).unwrap_or_default()));
                true
            }
            _ => false,
        }
    }

    /// A claim or volume write of a plan, as kube-apiserver makes it:
    /// whether it was made (its object there, its precondition held). A
    /// write that changes nothing keeps the resourceVersion.
    pub(super) fn make(&mut self, write: &ClusterWrite) -> bool {
        match write {
            // The provisioner's finalizer: nothing the model's invariants
            // read (its volumes carry none).
            ClusterWrite::Volume {
                name,
                resource_version,
                change,
                ..
            } => {
                let Some(pv) = self
                    .volumes
                    .get_mut(name)
                    .filter(|pv| pv.volume.resource_version == *resource_version)
                else {
                    return false;
                };
                let before = pv.clone();
                let v = &mut pv.volume;
                match change {
                    VolumeChange::Retain {
                        original_policy,
                        marker,
                        cloned_under,
                    } => {
                        v.original_policy = Some(original_policy.clone());
                        v.marker = Some(marker.clone());
                        v.reclaim_policy = "Retain".to_owned();
                        pv.labelled |= cloned_under.is_some();
                    }
                    VolumeChange::Commit { to } => {
                        v.claim_ref = Some(ClaimRef {
                            namespace: to.namespace.clone(),
                            name: to.name.clone(),
                            uid: to.uid.clone(),
                        });
                        self.committed.insert(name.clone());
                    }
                    VolumeChange::Rehold {
                        original_policy,
                        marker,
                        lost,
                    } => {
                        v.original_policy = Some(original_policy.clone());
                        v.marker = Some(marker.clone());
                        v.destination_lost = Some(lost.clone());
                        v.reclaim_policy = "Retain".to_owned();
                    }
                    VolumeChange::Unmark { policy } => {
                        v.original_policy = None;
                        v.marker = None;
                        if let Some(policy) = policy {
                            v.reclaim_policy = policy.clone();
                        }
                    }
                }
                if *pv != before {
                    pv.volume.resource_version = next(&pv.volume.resource_version);
                }
                true
            }
            ClusterWrite::Claim {
                namespace,
                name,
                resource_version,
                change,
            } => {
                let Some(c) = self.claims.get_mut(&key(namespace, name)).filter(|c| {
                    resource_version
                        .as_ref()
                        .is_none_or(|want| *want == c.resource_version)
                }) else {
                    return false;
                };
                let before = c.clone();
                match change {
                    ClaimChange::Lock(lock) => c.lock = Some(lock.clone()),
                    ClaimChange::Unlock => c.lock = None,
                    ClaimChange::Finalizers(finalizers) => c.finalizers = finalizers.clone(),
                    ClaimChange::Pin {
                        finalizers,
                        volume_name,
                    } => {
                        c.finalizers = finalizers.clone();
                        c.volume_name = Some(volume_name.clone());
                    }
                    ClaimChange::Bind(_) => {
                        c.lock = None;
                        c.phase = "Bound".to_owned();
                    }
                    ClaimChange::Lose => c.phase = "Lost".to_owned(),
                }
                if *c != before {
                    c.resource_version = next(&c.resource_version);
                }
                true
            }
            ClusterWrite::DeleteClaim {
                namespace,
                name,
                uid,
            } => {
                match self
                    .claims
                    .get_mut(&key(namespace, name))
                    .filter(|c| c.uid == *uid)
                {
                    Some(c) => {
                        self.deleted_tenant |= self.tenants.contains(uid);
                        if !c.deleting {
                            c.deleting = true;
                            c.resource_version = next(&c.resource_version);
                        }
                        true
                    }
                    None => false,
                }
            }
        }
    }
}
