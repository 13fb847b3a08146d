//! The standing-offer world as a search space: its invariants, and every
//! step from a state (the controller's reconciles, the cluster's
//! controllers, and the tenants', clock's and crash's moves).

use super::*;

impl Space for Offered {
    fn safety(&self) -> Result<(), String> {
        if self.deleted_tenant {
            return Err("the controller deleted a claim its tenant wrote".to_owned());
        }
        if self.populate && !self.ours.is_empty() {
            return Err(format!(
                "a populating request made a claim of its own: {:?}",
                self.ours
            ));
        }
        let alive = self.alive();
        if alive > MAX_CLONES {
            return Err(format!("{alive} clones alive, over maxClones {MAX_CLONES}"));
        }
        for name in &self.deleted {
            if self.committed.contains(name) && !self.owner_released.contains(name) {
                return Err(format!("the volume {name}, handed over, was deleted"));
            }
        }
        for i in 0..2 {
            for (name, pv) in self.volumes_of(i) {
                let v = &pv.volume;
                let handed = self.committed.contains(name) && !self.owner_released.contains(name);
                if handed && v.phase == "Released" && v.reclaim_policy == "Delete" {
                    return Err(format!(
                        "the volume {name}, handed over, is Released under Delete"
                    ));
                }
                if let Some(r) = &v.claim_ref {
                    if !self.names_ours(i, name, r) {
                        return Err(format!("the volume {name} names a third claim: {r:?}"));
                    }
                }
            }
        }
        // The binder makes a claim Lost only when its binding was completed
        // to a volume that names another: never the claim a volume names.
        for (k, c) in &self.claims {
            let Some(name) = &c.volume_name else { continue };
            let named = self
                .volumes
                .get(name)
                .is_some_and(|pv| pv.volume.names(&k.0, &k.1, &c.uid));
            if named && c.phase == "Lost" {
                return Err(format!("the claim its volume names is Lost: {k:?} {c:?}"));
            }
        }
        Ok(())
    }

    fn outcome(&self) -> Result<(), String> {
        if self
            .offer
            .as_ref()
            .is_some_and(|s| s.metadata.deletion_timestamp.is_some())
        {
            return Err("the offer was deleted, and it is still there".to_owned());
        }
        for i in 0..2 {
            let Some(d) = &self.requests[i] else { continue };
            let recorded = d.status.as_ref().is_some_and(|st| st.peer.is_some());
            if recorded && self.offer.is_none() && (has_finalizer(d) || is_active(d)) {
                return Err(format!(
                    "request {i}'s offer is gone, and it still holds on"
                ));
            }
            // A request made for a claim that went keeps no clone for it.
            let claim_gone = !self.claims.contains_key(&key("dev", REQUESTS[i].2));
            let clone = self.claims.get(&key("prod", &self.clone_name(i)));
            if self.populate && claim_gone && is_active(d) && clone.is_some_and(|c| !c.deleting) {
                return Err(format!(
                    "request {i}'s claim went, and it keeps its clone: {clone:?}"
                ));
            }
            let dest_deleted = self.made
                & [OfferMove::DeleteDestinationA, OfferMove::DeleteDestinationB][i] as u16
                != 0;
            match self.phase_of(i) {
                Some(Phase::Completed) if !dest_deleted => {
                    let claim = self.claims.get(&key("dev", REQUESTS[i].2));
                    let held = claim.is_some_and(|c| {
                        c.phase == "Bound"
                            && self.volumes_of(i).any(|(_, pv)| {
                                pv.volume.names("dev", REQUESTS[i].2, &c.uid)
                                    && pv.volume.reclaim_policy == "Delete"
                                    && pv.volume.marker.is_none()
                            })
                    });
                    if !held {
                        return Err(format!(
                            "request {i} Completed, but its claim does not hold the clone: {claim:?}"
                        ));
                    }
                }
                Some(Phase::Failed | Phase::Cancelled)
                    if !self
                        .volumes_of(i)
                        .any(|(name, _)| self.committed.contains(name)) =>
                {
                    let clone = self.claims.get(&key("prod", &self.clone_name(i)));
                    if clone.is_some_and(|c| !c.deleting) {
                        return Err(format!(
                            "request {i} ended, but its clone is left: {clone:?}"
                        ));
                    }
                    if self.volumes_of(i).any(|(_, pv)| pv.volume.phase == "Bound") {
                        return Err(format!(
                            "request {i} ended, but its clone's volume is still bound"
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn controller_steps(&self) -> Vec<Self> {
        let mut out = self.offer_steps();
        for i in 0..2 {
            out.extend(self.request_steps(i));
        }
        out
    }

    fn cluster_steps(&self) -> Vec<Self> {
        let mut out = Vec::new();
        if self.cache.is_some() {
            let mut w = self.clone();
            w.cache = None;
            out.push(w);
        }
        for i in 0..2 {
            let clone = key("prod", &self.clone_name(i));
            // The provisioner makes the clone's volume, and it is bound.
            if let Some(c) = self
                .claims
                .get(&clone)
                .filter(|c| c.volume_name.is_none() && !c.deleting)
            {
                let volume = Self::volume_name(i, &c.uid);
                if !self.volumes.contains_key(&volume) && !self.deleted.contains(&volume) {
                    let mut w = self.clone();
                    let pv = Volume {
                        name: volume.clone(),
                        uid: format!("uid-{volume}"),
                        resource_version: format!("{volume}/1"),
                        claim_ref: Some(ClaimRef {
                            namespace: "prod".to_owned(),
                            name: clone.1.clone(),
                            uid: c.uid.clone(),
                        }),
                        reclaim_policy: "Delete".to_owned(),
                        original_policy: None,
                        marker: None,
                        destination_lost: None,
                        phase: "Bound".to_owned(),
                        storage_class_name: Some("fast".to_owned()),
                        capacity: Some("1Gi".to_owned()),
                        access_modes: vec!["ReadWriteOnce".to_owned()],
                        volume_mode: None,
                        volume_attributes_class_name: None,
                        resizing: false,
                        finalizers: Vec::new(),
                        deleting: false,
                        took_provisioner_finalizer: false,
                    };
                    w.volumes.insert(
                        volume.clone(),
                        Pv {
                            volume: pv,
                            labelled: false,
                        },
                    );
                    if let Some(c) = w.claims.get_mut(&clone) {
                        c.volume_name = Some(volume.clone());
                        c.shape.volume_name = Some(volume.clone());
                        c.phase = "Bound".to_owned();
                        c.bind_completed = true;
                        c.resource_version = next(&c.resource_version);
                    }
                    out.push(w);
                }
            }
        }
        for (k, c) in &self.claims {
            let Some(name) = &c.volume_name else { continue };
            let pv = self.volumes.get(name);
            let names_it = pv.is_some_and(|pv| pv.volume.names(&k.0, &k.1, &c.uid));
            // Bind a claim its volume names (adding `bind-completed` to one
            // the controller wrote Bound).
            if names_it && (c.phase != "Bound" || !c.bind_completed) && !c.deleting {
                let mut w = self.clone();
                if let Some(c) = w.claims.get_mut(k) {
                    c.phase = "Bound".to_owned();
                    c.bind_completed = true;
                    c.resource_version = next(&c.resource_version);
                }
                if let Some(pv) = w
                    .volumes
                    .get_mut(name)
                    .filter(|pv| pv.volume.phase != "Bound")
                {
                    pv.volume.phase = "Bound".to_owned();
                    pv.volume.resource_version = next(&pv.volume.resource_version);
                }
                out.push(w);
            }
            // A claim whose binding was completed, and whose volume names
            // another claim, is Lost.
            if c.bind_completed && c.phase != "Lost" && !names_it {
                let mut w = self.clone();
                if let Some(c) = w.claims.get_mut(k) {
                    c.phase = "Lost".to_owned();
                    c.resource_version = next(&c.resource_version);
                }
                out.push(w);
            }
            // A deleted claim without finalizers goes (no pod uses one here).
            if c.deleting && c.finalizers.is_empty() {
                let mut w = self.clone();
                w.claims.remove(k);
                out.push(w);
            }
        }
        for (name, pv) in &self.volumes {
            let v = &pv.volume;
            let claim_there = v.claim_ref.as_ref().is_some_and(|r| {
                self.claims
                    .get(&key(&r.namespace, &r.name))
                    .is_some_and(|c| c.uid == r.uid)
            });
            // A volume whose claim is there and names it is Bound (the
            // binder's volume sync), whatever the claim's own phase.
            let claim_names_it = v.claim_ref.as_ref().is_some_and(|r| {
                self.claims
                    .get(&key(&r.namespace, &r.name))
                    .is_some_and(|c| c.uid == r.uid && c.volume_name.as_ref() == Some(name))
            });
            if v.phase != "Bound" && claim_names_it {
                let mut w = self.clone();
                if let Some(pv) = w.volumes.get_mut(name) {
                    pv.volume.phase = "Bound".to_owned();
                    pv.volume.resource_version = next(&pv.volume.resource_version);
                }
                out.push(w);
            }
            if v.phase == "Bound" && !claim_there {
                let mut w = self.clone();
                if let Some(pv) = w.volumes.get_mut(name) {
                    pv.volume.phase = "Released".to_owned();
                    pv.volume.resource_version = next(&pv.volume.resource_version);
                }
                out.push(w);
            }
            if v.phase == "Released" && v.reclaim_policy == "Delete" {
                let mut w = self.clone();
                w.volumes.remove(name);
                w.deleted.insert(name.clone());
                out.push(w);
            }
        }
        // A deleted transfer without finalizers goes.
        let gone = |t: &Option<NamespaceTransfer>| {
            t.as_ref()
                .is_some_and(|t| t.metadata.deletion_timestamp.is_some() && !has_finalizer(t))
        };
        if gone(&self.offer) {
            let mut w = self.clone();
            w.offer = None;
            out.push(w);
        }
        for i in 0..2 {
            if gone(&self.requests[i]) {
                let mut w = self.clone();
                w.requests[i] = None;
                out.push(w);
            }
        }
        out
    }

    fn moves(&self) -> Vec<Self> {
        let mut out = Vec::new();
        for m in OFFER_MOVES {
            if !self.may(m) {
                continue;
            }
            let mut w = self.clone();
            w.made |= m as u16;
            let ok = match m {
                OfferMove::DeleteRequestA => Self::delete_transfer(&mut w.requests[0]),
                OfferMove::DeleteRequestB => Self::delete_transfer(&mut w.requests[1]),
                OfferMove::DeleteOffer => Self::delete_transfer(&mut w.offer),
                OfferMove::DeleteDestinationA | OfferMove::DeleteDestinationB => {
                    let i = usize::from(m == OfferMove::DeleteDestinationB);
                    let k = key("dev", REQUESTS[i].2);
                    match w.claims.get_mut(&k).filter(|c| !c.deleting) {
                        Some(c) => {
                            c.deleting = true;
                            let uid = c.uid.clone();
                            let held: Vec<String> = w
                                .volumes_of(i)
                                .filter(|(_, pv)| pv.volume.names("dev", REQUESTS[i].2, &uid))
                                .map(|(name, _)| name.clone())
                                .collect();
                            w.owner_released.extend(held);
                            true
                        }
                        None => false,
                    }
                }
                OfferMove::DeleteCloneA | OfferMove::DeleteCloneB => {
                    let i = usize::from(m == OfferMove::DeleteCloneB);
                    let k = key("prod", &w.clone_name(i));
                    match w.claims.get_mut(&k).filter(|c| !c.deleting) {
                        Some(c) => {
                            c.deleting = true;
                            true
                        }
                        None => false,
                    }
                }
                OfferMove::StaleCache => {
                    w.cache = Some(Box::new(Copies {
                        claims: w.claims.clone(),
                        volumes: w.volumes.clone(),
                    }));
                    true
                }
                OfferMove::StaleGather => {
                    let mut seen = self.clone();
                    seen.stale = None;
                    w.stale = Some(Box::new(seen));
                    true
                }
                OfferMove::StaleAct => {
                    if let Some(seen) = w.stale.take() {
                        for i in 0..2 {
                            if let Some((action, facts)) = seen.decision(i) {
                                out.extend(w.perform(&facts, &action));
                            }
                        }
                    }
                    continue;
                }
                OfferMove::DeadlinePasses => {
                    w.late = true;
                    true
                }
                // Made inside a reconcile (see `crashed`).
                OfferMove::Crash => false,
            };
            if ok {
                out.push(w);
            }
        }
        out
    }

    fn tally(&self) -> (usize, usize) {
        let count = |want: &[Phase]| {
            (0..2)
                .filter(|i| self.phase_of(*i).is_some_and(|p| want.contains(&p)))
                .count()
        };
        (
            count(&[Phase::Completed]),
            count(&[Phase::Failed, Phase::Cancelled]),
        )
    }
}
