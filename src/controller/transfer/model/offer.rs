//! A standing clone offer and two of its requests, model-checked: the real
//! decisions of both pairs ([`standing_view`], [`decide`], [`plan`]), the
//! offer's own reconcile ([`offer_turn`], [`count_alive`], [`recount`]) and
//! each request's ([`destination_turn`]), interleaved in every order, with
//! a crash point after every write.
//!
//! `prod/give` offers clones of `prod/db` to namespace `dev` with
//! `maxClones: 1`; `dev/take-a` and `dev/take-b` each ask for one, as
//! `dev/a` and `dev/b`. Unlike the pair model ([`super::World`]) this world
//! holds the objects as the controller reads them: the three transfers
//! whole (their status is written by the real [`apply_change`]), and the
//! claims and volumes as [`Claim`] and [`Volume`] facts, created from the
//! claims the plans carry. Its other actors:
//!
//! - **kube-controller-manager and the provisioner**: provision and bind a
//!   clone, bind a destination claim, mark a claim Lost and a volume
//!   Released, delete a Released volume under `Delete`, let a deleted object
//!   without finalizers go;
//! - **tenants, the clock and a stale leader**, each move at most once per
//!   run ([`OfferMove`]).
//!
//! What the runs walk (see `offer/tests.rs`): left alone, the whole space;
//! with a move, the first states breadth-first within a bound, since two
//! pairs side by side outgrow what a test can walk. The stale leader's
//! moves are not in the runs: every claim and volume write is fenced by a
//! resourceVersion or uid, but the count under `maxClones` spans two
//! claims, and only the lease fences it. A leader whose C1 is in flight
//! past its lease could make one clone more; no precondition of a create
//! can say "while the other clone is absent".
//!
//! Invariants, in every state: never more clones alive than `maxClones` (a
//! clone is alive while its claim is not being deleted, or while its volume
//! is Bound to a claim that is not); a clone handed over is never deleted
//! unless its owner deleted the claim that holds it, and its volume never
//! names a claim but its clone or a destination claim the controller made.
//! Once nothing moves: a Completed request's claim holds its volume under
//! `Delete`; a request that ended before its commit left no clone alive; a
//! request whose offer is gone is finished and holds no finalizer; a
//! deleted offer is gone.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::{Space, DEADLINE};
use crate::api::meta::{set_finalizer, Requester};
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferSpec,
    NamespaceTransferStatus, TransferDestination, TransferMode, TransferSource,
    FINALIZER_TRANSFER_PROTECTION,
};
use crate::controller::transfer::decide::{decide, has_finalizer, Action, Question};
use crate::controller::transfer::destination::{
    destination_turn, unmatched, unmatched_past_deadline, Deadline, Found, Turn,
};
use crate::controller::transfer::facts::{
    Admission, Claim, ClaimRef, ClaimShape, ClassPolicy, Facts, Peer, Volume,
};
use crate::controller::transfer::matching::{
    destination_view, is_active, is_named, receiver_uid, role_of, standing_pairs,
};
use crate::controller::transfer::plan::{
    finished_alone, plan, ClaimChange, ClusterWrite, Edit, On, VolumeChange, Write,
};
use crate::controller::transfer::standing::{
    count_alive, offer_turn, recount, standing_view, OfferNext, OfferWrite,
};
use crate::controller::transfer::status::apply_change;

/// The offer's `maxClones`.
const MAX_CLONES: usize = 1;
/// The requests: name, uid, and the destination claim each asks for.
const REQUESTS: [(&str, &str, &str); 2] = [("take-a", "uid-20", "a"), ("take-b", "uid-30", "b")];

/// Moves a tenant, the clock or a stale leader may make at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(super) enum OfferMove {
    DeleteRequestA = 1,
    DeleteRequestB = 1 << 1,
    DeleteOffer = 1 << 2,
    /// The owner of `dev/a` deletes it (once delivered: the clone is let go).
    DeleteDestinationA = 1 << 3,
    DeleteDestinationB = 1 << 4,
    /// A tenant of `prod` deletes the clone made for `take-a`.
    DeleteCloneA = 1 << 5,
    DeleteCloneB = 1 << 6,
    /// The controller's watch copies of the claims and volumes stop here,
    /// until the cluster lets them catch up.
    StaleCache = 1 << 7,
    /// A leader that lost its lease without noticing gathers facts now...
    StaleGather = 1 << 8,
    /// ...and acts on them for either pair, later.
    StaleAct = 1 << 9,
    /// The offer's `activeDeadlineSeconds` passes.
    DeadlinePasses = 1 << 10,
    /// The server crashes once, after any write of a reconcile but its
    /// last (between reconciles, a crash changes nothing: a reconcile's
    /// writes are each made or not).
    Crash = 1 << 11,
}

pub(super) const OFFER_MOVES: [OfferMove; 12] = [
    OfferMove::DeleteRequestA,
    OfferMove::DeleteRequestB,
    OfferMove::DeleteOffer,
    OfferMove::DeleteDestinationA,
    OfferMove::DeleteDestinationB,
    OfferMove::DeleteCloneA,
    OfferMove::DeleteCloneB,
    OfferMove::StaleCache,
    OfferMove::StaleGather,
    OfferMove::StaleAct,
    OfferMove::DeadlinePasses,
    OfferMove::Crash,
];

/// A volume, and whether it carries the offer's `cloned-under` label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pv {
    volume: Volume,
    labelled: bool,
}

type Claims = BTreeMap<(String, String), Claim>;
type Volumes = BTreeMap<String, Pv>;

/// The controller's watch copies, while they are behind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Copies {
    claims: Claims,
    volumes: Volumes,
}

/// The world of a standing offer and two requests.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Offered {
    offer: Option<NamespaceTransfer>,
    requests: [Option<NamespaceTransfer>; 2],
    /// Claims by namespace and name: the clones in `prod`, the destination
    /// claims in `dev`.
    claims: Claims,
    volumes: Volumes,
    next_uid: u32,
    /// Moves made (a bit per [`OfferMove`]) and allowed.
    made: u16,
    allowed: u16,
    cache: Option<Box<Copies>>,
    /// What the stale leader saw, once it looked.
    stale: Option<Box<Offered>>,
    /// Whether the offer's deadline has passed.
    late: bool,
    /// The volumes R4 handed over.
    committed: BTreeSet<String>,
    /// The volumes whose destination claim its owner deleted.
    owner_released: BTreeSet<String>,
    /// The volumes the provisioner deleted.
    deleted: BTreeSet<String>,
    /// The uids of the destination claims the controller made.
    ours: BTreeSet<String>,
}

impl Eq for Offered {}

impl Hash for Offered {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for t in std::iter::once(&self.offer).chain(&self.requests) {
            serde_json::to_string(t).unwrap_or_default().hash(h);
        }
        self.claims.hash(h);
        self.volumes.hash(h);
        self.next_uid.hash(h);
        self.made.hash(h);
        self.allowed.hash(h);
        self.cache.hash(h);
        self.stale.hash(h);
        self.late.hash(h);
        self.committed.hash(h);
        self.owner_released.hash(h);
        self.deleted.hash(h);
        self.ours.hash(h);
    }
}

fn transfer(
    namespace: &str,
    name: &str,
    uid: &str,
    spec: NamespaceTransferSpec,
) -> NamespaceTransfer {
    NamespaceTransfer {
        metadata: ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            uid: Some(uid.to_owned()),
            generation: Some(1),
            creation_timestamp: Some(Time(Timestamp::from_second(1_000).unwrap_or_default())),
            ..ObjectMeta::default()
        },
        spec: NamespaceTransferSpec {
            mode: Some(TransferMode::Clone),
            requester: Some(Requester {
                username: format!("{name}-user"),
                ..Requester::default()
            }),
            active_deadline_seconds: Some(DEADLINE),
            ..spec
        },
        ..NamespaceTransfer::default()
    }
}

/// The time the model's status writes carry.
fn at() -> Time {
    Time(Timestamp::from_second(2_000).unwrap_or_default())
}

/// `prod/db`, Bound to its own volume, which nothing here writes.
fn origin() -> Claim {
    Claim {
        name: "db".to_owned(),
        uid: "uid-1".to_owned(),
        resource_version: "1".to_owned(),
        created: 1_000,
        phase: "Bound".to_owned(),
        volume_name: Some("pv-origin".to_owned()),
        lock: None,
        clone_for: None,
        deleting: false,
        finalizers: Vec::new(),
        shape: ClaimShape {
            storage_class_name: Some("fast".to_owned()),
            access_modes: vec!["ReadWriteOnce".to_owned()],
            volume_mode: Some("Filesystem".to_owned()),
            request: Some("1Gi".to_owned()),
            volume_attributes_class_name: None,
            volume_name: Some("pv-origin".to_owned()),
            data_source_claim: None,
            extras: false,
        },
    }
}

/// The resourceVersion after `rv`. Each object counts its own versions
/// (`<name or uid>/<n>`): the protocol only ever compares an object's
/// version with one it read of the same object, and a count per object
/// lets interleavings that wrote the same objects the same way meet.
fn next(rv: &str) -> String {
    let (base, n) = rv.rsplit_once('/').unwrap_or((rv, "0"));
    format!("{base}/{}", n.parse::<u64>().unwrap_or(0) + 1)
}

fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_owned(), name.to_owned())
}

/// A status write as `update_status` makes it: a read-modify-write of the
/// object `t` names, refused if it was replaced or finished meanwhile
/// (`None`); else the phase written.
fn update_status(
    slot: &mut Option<NamespaceTransfer>,
    t: &NamespaceTransfer,
    change: impl FnOnce(&mut NamespaceTransferStatus),
) -> Option<Option<Phase>> {
    let current = slot.as_mut()?;
    if current.metadata.uid != t.metadata.uid || (is_active(t) && !is_active(current)) {
        return None;
    }
    let role = role_of(current);
    let generation = current.metadata.generation;
    let status = current
        .status
        .get_or_insert_with(NamespaceTransferStatus::default);
    status.observed_generation = generation;
    change(status);
    status.role = role;
    Some(status.phase)
}

impl Offered {
    /// The offer and its two requests, none reconciled yet, with `allowed`
    /// moves.
    pub(super) fn start(allowed: u16) -> Self {
        let offer = transfer(
            "prod",
            "give",
            "uid-10",
            NamespaceTransferSpec {
                source: TransferSource {
                    name: "db".to_owned(),
                    ..TransferSource::default()
                },
                destination: TransferDestination {
                    namespace: "dev".to_owned(),
                    name: String::new(),
                },
                max_clones: Some(i32::try_from(MAX_CLONES).unwrap_or(1)),
                ..NamespaceTransferSpec::default()
            },
        );
        let request = |(name, uid, destination): (&str, &str, &str)| {
            Some(transfer(
                "dev",
                name,
                uid,
                NamespaceTransferSpec {
                    source: TransferSource {
                        namespace: "prod".to_owned(),
                        name: "db".to_owned(),
                        ..TransferSource::default()
                    },
                    destination: TransferDestination {
                        namespace: "dev".to_owned(),
                        name: destination.to_owned(),
                    },
                    ..NamespaceTransferSpec::default()
                },
            ))
        };
        let world = Self {
            offer: Some(offer),
            requests: REQUESTS.map(request),
            claims: Claims::new(),
            volumes: Volumes::new(),
            next_uid: 100,
            made: 0,
            allowed,
            cache: None,
            stale: None,
            late: false,
            committed: BTreeSet::new(),
            owner_released: BTreeSet::new(),
            deleted: BTreeSet::new(),
            ours: BTreeSet::new(),
        };
        assert_ne!(
            world.clone_name(0),
            world.clone_name(1),
            "the two requests' clones must have their own names"
        );
        world.opened()
    }

    /// This world once the offer has said it is open and each request has
    /// recorded the match and protected the pair, in that order: the
    /// reconciles before the first clone, whose order matters to nothing
    /// the invariants read.
    fn opened(self) -> Self {
        let mut w = self;
        w = w.offer_steps().pop().unwrap_or(w);
        for i in 0..2 {
            for _ in 0..2 {
                w = w.request_steps(i).pop().unwrap_or(w);
            }
        }
        w
    }

    /// The name of the clone the offer makes for request `i`.
    fn clone_name(&self, i: usize) -> String {
        let offer = transfer("prod", "give", "uid-10", NamespaceTransferSpec::default());
        let request = transfer(
            "dev",
            REQUESTS[i].0,
            REQUESTS[i].1,
            NamespaceTransferSpec::default(),
        );
        offer.clone_claim_name(&receiver_uid(&offer, &request))
    }

    /// The volume the provisioner makes for request `i`'s clone of uid
    /// `uid` (a clone deleted before it was handed over may be made again).
    fn volume_name(i: usize, uid: &str) -> String {
        format!("pv-{i}-{uid}")
    }

    /// The volumes of request `i`'s clones.
    fn volumes_of(&self, i: usize) -> impl Iterator<Item = (&String, &Pv)> {
        let prefix = format!("pv-{i}-");
        self.volumes
            .iter()
            .filter(move |(name, _)| name.starts_with(&prefix))
    }

    fn now(&self) -> i64 {
        if self.late {
            3_000
        } else {
            2_000
        }
    }

    fn may(&self, m: OfferMove) -> bool {
        self.allowed & m as u16 != 0 && self.made & m as u16 == 0
    }

    /// The claims and volumes as the controller reads them: its watch
    /// copies, or (`live`) the world's.
    fn copies(&self, live: bool) -> (&Claims, &Volumes) {
        match (&self.cache, live) {
            (Some(c), false) => (&c.claims, &c.volumes),
            _ => (&self.claims, &self.volumes),
        }
    }

    fn requests(&self) -> Vec<NamespaceTransfer> {
        self.requests.iter().flatten().cloned().collect()
    }

    /// The clones of offer `s` alive as `clones_alive` counts them: the
    /// labelled volumes from a live LIST, the pairs' clone claims from the
    /// watch copies (or live).
    fn counted_alive(
        &self,
        s: &NamespaceTransfer,
        pairs: &[&NamespaceTransfer],
        except: Option<&str>,
        live: bool,
    ) -> usize {
        let (claims, _) = self.copies(live);
        let labelled: HashSet<String> = self
            .volumes
            .iter()
            .filter(|(_, pv)| pv.labelled)
            .map(|(name, _)| name.clone())
            .collect();
        let names: HashSet<String> = pairs
            .iter()
            .map(|d| s.clone_claim_name(&receiver_uid(s, d)))
            .filter(|name| claims.contains_key(&key("prod", name)))
            .collect();
        count_alive(s, pairs, &labelled, &names, except)
    }

    /// The facts of request `i`'s pair, as `gather` reads them for the
    /// view `drive_standing` drives.
    fn pair_facts(&self, i: usize, live: bool) -> Option<Facts> {
        let s = self.offer.as_ref()?;
        let d = self.requests[i].as_ref()?;
        let view = standing_view(s, d);
        let (claims, volumes) = self.copies(live);
        let moved = claims
            .get(&key("prod", &s.clone_claim_name(&receiver_uid(s, d))))
            .cloned();
        let destination = claims.get(&key("dev", &d.spec.destination.name)).cloned();
        let recorded = view
            .status
            .as_ref()
            .and_then(|st| st.source_claim.as_ref())
            .map(|snap| snap.volume_name.clone());
        let volume = recorded
            .clone()
            .or_else(|| moved.as_ref().and_then(|c| c.volume_name.clone()))
            .and_then(|name| volumes.get(&name))
            .map(|pv| pv.volume.clone());
        let at_capacity = recorded.is_none() && moved.is_none() && {
            let requests = self.requests();
            let pairs: Vec<&NamespaceTransfer> = standing_pairs(s, &requests).collect();
            self.counted_alive(s, &pairs, d.metadata.uid.as_deref(), live) >= MAX_CLONES
        };
        Some(Facts {
            now: self.now(),
            allow_all_storage_classes: false,
            source: view,
            peer: Peer::Found(Box::new(d.clone())),
            moved_claim: moved,
            clone_source: Some(origin()),
            clone_failure: None,
            clone_timeout: 3_000,
            clone_waits_for_consumer: None,
            at_capacity,
            destination_claim: destination,
            volume,
            class: ClassPolicy::Allowed,
            users: None,
            lock_holder_active: false,
            rights: None,
            admission: None,
            live: live || self.cache.is_none(),
            refused: None,
        })
    }

    /// Request `i`'s pair's decision, its questions answered (no pod uses
    /// a clone; rights and admission hold), and the facts it was made on.
    fn decision(&self, i: usize) -> Option<(Action, Facts)> {
        let mut facts = self.pair_facts(i, false)?;
        loop {
            match decide(&facts) {
                Action::Ask(Question::Users) => facts.users = Some(Vec::new()),
                Action::Ask(Question::Rights) => facts.rights = Some(Ok(())),
                Action::Ask(Question::Admission) => facts.admission = Some(Admission::Admitted),
                Action::Ask(Question::LiveReads) => facts = self.pair_facts(i, true)?,
                action => return Some((action, facts)),
            }
        }
    }

    /// The slot of our object `t` (by namespace and name, as the API finds
    /// it).
    fn slot(&mut self, t: &NamespaceTransfer) -> &mut Option<NamespaceTransfer> {
        if t.own_namespace() == "prod" {
            return &mut self.offer;
        }
        let i = usize::from(t.metadata.name.as_deref() == Some(REQUESTS[1].0));
        &mut self.requests[i]
    }

    /// The worlds after the plan of `action`, decided on `facts`, is
    /// performed write by write: one after every write (a crash point),
    /// ending where the executor would stop.
    fn perform(&self, facts: &Facts, action: &Action) -> Vec<Offered> {
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
    fn crashed(&self) -> Option<Offered> {
        self.may(OfferMove::Crash).then(|| {
            let mut w = self.clone();
            w.made |= OfferMove::Crash as u16;
            w
        })
    }

    /// One write of a plan, as the executor and kube-apiserver make it;
    /// whether the plan goes on.
    fn write(
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
            Write::Cluster(c) => self.make(c) || !c.is_conditional(),
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
                    if let Some(current) = self.slot(t).as_mut() {
                        // No finalizer is added to an object being deleted.
                        if !(*present && current.metadata.deletion_timestamp.is_some()) {
                            set_finalizer(
                                &mut current.metadata,
                                FINALIZER_TRANSFER_PROTECTION,
                                *present,
                            );
                        }
                    }
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
        }
    }

    fn delete_transfer(slot: &mut Option<NamespaceTransfer>) -> bool {
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
    fn make(&mut self, write: &ClusterWrite) -> bool {
        match write {
            ClusterWrite::Volume {
                name,
                resource_version,
                change,
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

    /// The offer's own reconcile (`tend_offer`): its turn on the pairs it
    /// finds and the clones it counts, then its finalizer let go once it
    /// ends.
    fn offer_steps(&self) -> Vec<Offered> {
        let Some(s) = &self.offer else {
            return Vec::new();
        };
        let requests = self.requests();
        let pairs: Vec<&NamespaceTransfer> = standing_pairs(s, &requests).collect();
        let alive = self.counted_alive(s, &pairs, None, false);
        let turn = offer_turn(s, &pairs, alive, self.now());
        let mut w = self.clone();
        let mut out = Vec::new();
        let written = match &turn.write {
            Some(OfferWrite::Finish { phase, report }) => {
                let change = finished_alone(s, *phase, report);
                update_status(&mut w.offer, s, |st| {
                    apply_change(st, &change, s, (s, None), None, &at());
                })
            }
            Some(OfferWrite::Recount {
                counts,
                message,
                needed,
            }) => update_status(&mut w.offer, s, |st| {
                recount(st, s, counts, message, needed)
            }),
            None => Some(None),
        };
        let end = written.is_some() && turn.then == OfferNext::End;
        if turn.write.is_some() && !end {
            out.push(w.clone());
        } else if turn.write.is_some() {
            out.extend(w.crashed());
        }
        if end {
            if let Some(o) = w.offer.as_mut() {
                set_finalizer(&mut o.metadata, FINALIZER_TRANSFER_PROTECTION, false);
            }
            out.push(w);
        }
        out
    }

    /// Request `i`'s own reconcile (`reconcile_destination`): it drives its
    /// pair while its offer is there, and otherwise finishes alone.
    fn request_steps(&self, i: usize) -> Vec<Offered> {
        let Some(d) = &self.requests[i] else {
            return Vec::new();
        };
        let recorded = d.status.as_ref().and_then(|st| st.peer.clone());
        let all: Vec<NamespaceTransfer> =
            self.offer.iter().cloned().chain(self.requests()).collect();
        let found = match (&recorded, &self.offer) {
            (Some(p), Some(s)) if is_named(s, p, d) => Found::Recorded(s),
            (Some(_), _) => Found::Gone,
            (None, _) => Found::Unrecorded(destination_view(d, &all)),
        };
        let mut w = self.clone();
        match destination_turn(d, found, self.now()) {
            Turn::DriveStanding(_) => match self.decision(i) {
                Some((action, facts)) => self.perform(&facts, &action),
                None => Vec::new(),
            },
            Turn::Wake(_) | Turn::Expire => Vec::new(),
            Turn::LetGo => {
                if let Some(d) = w.requests[i].as_mut() {
                    set_finalizer(&mut d.metadata, FINALIZER_TRANSFER_PROTECTION, false);
                }
                vec![w]
            }
            Turn::Finish { phase, report } => {
                let change = finished_alone(d, phase, &report);
                update_status(&mut w.requests[i], d, |st| {
                    apply_change(st, &change, d, (d, None), None, &at());
                });
                vec![w]
            }
            Turn::Unmatched {
                phase,
                reason,
                message,
                deadline,
            } => {
                update_status(&mut w.requests[i], d, |st| {
                    unmatched(st, phase, reason, &message);
                });
                let mut out = Vec::new();
                if deadline != Deadline::Passed {
                    out.push(w.clone());
                } else {
                    out.extend(w.crashed());
                }
                if deadline == Deadline::Passed {
                    if let Some(now) = w.requests[i].clone() {
                        let change =
                            finished_alone(&now, Phase::Failed, &unmatched_past_deadline());
                        update_status(&mut w.requests[i], &now, |st| {
                            apply_change(st, &change, &now, (&now, None), None, &at());
                        });
                        out.push(w);
                    }
                }
                out
            }
        }
    }

    /// How many clones are alive in truth: a clone's claim not being
    /// deleted, or its volume Bound to a claim that is not.
    fn alive(&self) -> usize {
        let live_claim = |r: &ClaimRef| {
            self.claims
                .get(&key(&r.namespace, &r.name))
                .is_some_and(|c| c.uid == r.uid && !c.deleting)
        };
        (0..2)
            .filter(|i| {
                let claim = self
                    .claims
                    .get(&key("prod", &self.clone_name(*i)))
                    .is_some_and(|c| !c.deleting);
                let volume = self.volumes_of(*i).any(|(_, pv)| {
                    pv.volume.phase == "Bound"
                        && pv.volume.claim_ref.as_ref().is_some_and(live_claim)
                });
                claim || volume
            })
            .count()
    }

    /// Whether the `claimRef` of volume `name`, made for request `i`'s
    /// clone, names that clone or a destination claim the controller made.
    fn names_ours(&self, i: usize, name: &str, r: &ClaimRef) -> bool {
        (r.namespace == "prod"
            && r.name == self.clone_name(i)
            && name == Self::volume_name(i, &r.uid))
            || (r.namespace == "dev" && self.ours.contains(&r.uid))
    }

    fn phase_of(&self, i: usize) -> Option<Phase> {
        self.requests[i]
            .as_ref()
            .and_then(|d| d.status.as_ref())
            .and_then(|st| st.phase)
    }
}

impl Space for Offered {
    fn safety(&self) -> Result<(), String> {
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
            // Bind a claim its volume names.
            if names_it && c.phase != "Bound" && !c.deleting {
                let mut w = self.clone();
                if let Some(c) = w.claims.get_mut(k) {
                    c.phase = "Bound".to_owned();
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
            // A bound claim its volume no longer names is Lost.
            if c.phase == "Bound" && !names_it {
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

/// The bits of a set of moves.
pub(super) fn offer_moves(list: &[OfferMove]) -> u16 {
    list.iter().fold(0, |bits, m| bits | *m as u16)
}

#[cfg(test)]
mod tests;
