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
//!
//! In populate mode ([`Offered::start_populate`], DESIGN §2.3) the two
//! requests are the ones a standing populating request made for the
//! claims `dev/a` and `dev/b` its tenant wrote: each adopts its claim (the
//! real candidates, misfit checks and adoption writes) instead of making
//! one, and two more invariants hold: the controller never deletes a
//! tenant's claim, and makes no claim of its own in `dev`.
//!
//! This file holds the world and the controller's turns; `offer/writes.rs`
//! performs a plan's writes on it, and `offer/space.rs` holds the
//! invariants above and every step from a state.

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
use crate::controller::transfer::decide::{
    decide, destination_of, has_finalizer, recorded_destination, Action, Question,
};
use crate::controller::transfer::destination::{
    destination_turn, unmatched, unmatched_past_deadline, Deadline, Found, Turn,
};
use crate::controller::transfer::facts::{
    claimants_of, Admission, Claim, ClaimRef, ClaimShape, ClassPolicy, Facts, Peer, PopulatorRef,
    Volume,
};
use crate::controller::transfer::matching::{
    destination_view, is_active, is_named, receiver_uid, role_of, standing_pairs,
};
use crate::controller::transfer::plan::{
    finished_alone, plan, ClaimChange, ClusterWrite, Edit, On, VolumeChange, Write,
};
use crate::controller::transfer::serving::request_for;
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
    /// Populate mode (DESIGN §2.3): the requests are the ones a standing
    /// populating request made for the claims its tenant wrote (`dev/a`,
    /// `dev/b`), and each adopts its claim instead of creating one.
    populate: bool,
    /// Populate mode: the uids of the claims the tenant wrote.
    tenants: BTreeSet<String>,
    /// Whether the controller deleted a claim the tenant wrote.
    deleted_tenant: bool,
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
        self.populate.hash(h);
        self.tenants.hash(h);
        self.deleted_tenant.hash(h);
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
        populator: None,
        deleting: false,
        bind_completed: true,
        finalizers: Vec::new(),
        shape: ClaimShape {
            storage_class_name: Some("fast".to_owned()),
            access_modes: vec!["ReadWriteOnce".to_owned()],
            volume_mode: Some("Filesystem".to_owned()),
            request: Some("1Gi".to_owned()),
            volume_attributes_class_name: None,
            volume_name: Some("pv-origin".to_owned()),
            data_source_claim: None,
            data_source_snapshot: None,
            extras: false,
            selector_or_limits: false,
        },
    }
}

/// The claim `dev/<name>` its tenant wrote: Pending, shaped as `prod/db`
/// and requesting as much, naming the standing request `clones` in
/// `dataSourceRef`.
fn tenant_claim(name: &str, uid: &str) -> Claim {
    let db = origin();
    Claim {
        name: name.to_owned(),
        uid: uid.to_owned(),
        resource_version: format!("{uid}/1"),
        phase: "Pending".to_owned(),
        volume_name: None,
        bind_completed: false,
        populator: Some(PopulatorRef {
            name: "clones".to_owned(),
            namespace: None,
        }),
        shape: ClaimShape {
            volume_name: None,
            extras: true,
            ..db.shape
        },
        ..db
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
    /// The offer and its two requests, opened ([`Self::opened`]), with
    /// `allowed` moves.
    pub(super) fn start(allowed: u16) -> Self {
        Self::unopened(allowed).opened()
    }

    /// The offer and its two requests, none reconciled yet.
    fn unopened(allowed: u16) -> Self {
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
                    ..TransferDestination::default()
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
                        ..TransferDestination::default()
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
            populate: false,
            tenants: BTreeSet::new(),
            deleted_tenant: false,
        };
        assert_ne!(
            world.clone_name(0),
            world.clone_name(1),
            "the two requests' clones must have their own names"
        );
        world
    }

    /// Populate mode: the tenant wrote `dev/a` and `dev/b`, Pending, each
    /// naming the standing request `dev/clones` in `dataSourceRef`, and
    /// `clones` made one request for each ([`request_for`]: its name here
    /// is the model's). `clones`' own turn is not modelled: what it makes
    /// is these two requests. With `both` false, only `dev/a` and its
    /// request: a space small enough to walk whole under a tenant's move or
    /// a crash.
    pub(super) fn start_populate(allowed: u16, both: bool) -> Self {
        let mut w = Self::unopened(allowed);
        w.populate = true;
        // The plain request's spec, populating.
        let mut spec = w.requests[0]
            .as_ref()
            .map(|d| d.spec.clone())
            .unwrap_or_default();
        spec.destination.name = String::new();
        spec.destination.populate = Some(true);
        let parent = transfer("dev", "clones", "uid-40", spec);
        if !both {
            w.requests[1] = None;
        }
        for (i, (name, uid, claim)) in REQUESTS.into_iter().enumerate().take(1 + usize::from(both))
        {
            let written = tenant_claim(claim, &format!("uid-t{i}"));
            let made = request_for(&parent, &written);
            let mut d = transfer("dev", name, uid, made.spec);
            d.metadata.annotations = made.metadata.annotations;
            d.metadata.owner_references = made.metadata.owner_references;
            w.requests[i] = Some(d);
            w.tenants.insert(written.uid.clone());
            w.claims.insert(key("dev", claim), written);
        }
        w.opened()
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
        // A populating request's claim is the one R3 recorded; before that
        // it has candidates (as `gather` reads them).
        let destination = claims.get(&key("dev", destination_of(&view, d).1)).cloned();
        let claimants = if d.populates() && recorded_destination(&view).is_none() {
            claimants_of(d, claims.values().cloned())
        } else {
            Vec::new()
        };
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
            origin_not_ready: None,
            clone_source: Some(origin()),
            clone_failure: None,
            clone_timeout: 3_000,
            clone_waits_for_consumer: None,
            at_capacity,
            claimants,
            destination_claim: destination,
            volume,
            class: ClassPolicy::Allowed,
            users: None,
            lock_holder_active: false,
            rights: None,
            admission: None,
            live: live || self.cache.is_none(),
            refused: None,
            snapshot: None,
        })
    }

    /// Request `i`'s pair's decision, its questions answered (no pod uses
    /// a clone; rights and admission hold), and the facts it was made on.
    fn decision(&self, i: usize) -> Option<(Action, Facts)> {
        let mut facts = self.pair_facts(i, false)?;
        loop {
            match decide(&facts) {
                Action::Ask(Question::Users | Question::ReportedUsers) => {
                    facts.users = Some(Vec::new());
                }
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
    /// clone, names that clone or a destination claim the controller made
    /// (in populate mode: the one claim request `i` was made for).
    fn names_ours(&self, i: usize, name: &str, r: &ClaimRef) -> bool {
        let destination = if self.populate {
            r.name == REQUESTS[i].2 && self.tenants.contains(&r.uid)
        } else {
            self.ours.contains(&r.uid)
        };
        (r.namespace == "prod"
            && r.name == self.clone_name(i)
            && name == Self::volume_name(i, &r.uid))
            || (r.namespace == "dev" && destination)
    }

    fn phase_of(&self, i: usize) -> Option<Phase> {
        self.requests[i]
            .as_ref()
            .and_then(|d| d.status.as_ref())
            .and_then(|st| st.phase)
    }
}

/// The bits of a set of moves.
pub(super) fn offer_moves(list: &[OfferMove]) -> u16 {
    list.iter().fold(0, |bits, m| bits | *m as u16)
}

mod space;
#[cfg(test)]
mod tests;
mod writes;
