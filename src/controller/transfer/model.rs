//! An exhaustive model check of the rebind protocol: the real
//! [`decide`](super::decide::decide) run against a model of the cluster,
//! every interleaving explored breadth-first.
//!
//! The model holds one transfer pair (`prod/give` offers `prod/db`, `dev/take`
//! requests it), the source claim, the destination claim, the volume and a
//! pod. Its actors:
//!
//! - **the controller**: builds [`Facts`] from the world, asks `decide`, and
//!   applies the action as the executor does, each write conditional on the
//!   resourceVersion or uid it carries; an action of two writes may crash
//!   between them;
//! - **a stale leader**: once, it gathers facts, and later (after any number
//!   of other steps) acts on them, as a leader that lost its lease without
//!   noticing would;
//! - **kube-controller-manager**: binds a claim the volume names, marks a
//!   claim Lost whose volume names another (both as its copy of the volume
//!   shows it, which may lag), marks a volume Released whose
//!   claim is gone, deletes a deleting claim nothing uses (pvc-protection),
//!   removes an object without finalizers once deleted;
//! - **the CSI provisioner**: deletes a Released volume under `Delete`;
//! - **tenants**, each move at most once per run: delete either claim,
//!   delete either transfer, delete the request and create it again (a new
//!   uid), forge the destination claim with the lock, start a pod on the
//!   source claim, revoke a right, make admission refuse. (Status writes and
//!   finalizer removal by tenants are refused by the registry, so they are
//!   not moves.)
//!
//! In populate mode ([`World::start_populate`], DESIGN §2.3) the request
//! serves the claim its tenant wrote: R3 adopts it instead of creating one,
//! and the tenant may delete it and write another of its name at any
//! point. The volume may name only a claim the tenant wrote, and the
//! controller must never delete one.
//!
//! In Clone mode ([`World::start_clone`]) the moved claim is a clone that
//! C1 makes and the provisioner gives a volume; `prod/db` is only read. A
//! clone never handed over is ours to destroy; one handed over is guarded
//! as a moved volume is.
//!
//! Invariants, in every reachable state: the volume is never deleted, never
//! Released while its policy is `Delete`, and never names a claim but the
//! source claim or a destination claim the controller made. In every state
//! where neither the controller nor the cluster would change anything more:
//! Failed or Cancelled means the source claim (if its owner kept it) is
//! Bound to the volume under its original policy, and Completed means the
//! destination claim is Bound to it under its original policy.
//!
//! This module holds the world, the facts the controller reads from it,
//! the invariants and the search; `writes` holds the controller's writes on
//! it (the claim and volume writes are the executor's own plan), `cluster`
//! everyone else's. `offer` holds a second world: a standing offer with two
//! requests and `maxClones: 1`. The search ([`explore`]) walks either
//! ([`Space`]).

mod cluster;
mod offer;
mod snapshot;
mod writes;

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::decide::{decide, Action, Question};
use super::destination::{destination_turn, Deadline, Found, Turn};
use super::facts::{
    Admission, Claim, ClaimRef, ClaimShape, ClassPolicy, Facts, Peer, Refusal, Side, Volume,
};
use super::matching::{destination_lock, destination_view, peer_uid};
use crate::api::meta::Requester;
use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferSpec,
    NamespaceTransferStatus, PeerReference, SourceClaimSnapshot, TransferDestination,
    TransferSource, FINALIZER_TRANSFER_PROTECTION,
};

/// The uid of the source claim; destination claims get fresh ones.
const SOURCE_UID: u32 = 1;
const VOLUME: &str = "pv-db";
/// The uid the offer (`uid-10`) records for the request (`uid-20`), under
/// which C1 makes the clone; neither is recreated in Clone runs.
static RECEIVER: LazyLock<String> = LazyLock::new(|| peer_uid("uid-10", "uid-20"));
/// The clone's name in Clone mode: `give-clone-` and five characters of
/// [`RECEIVER`].
static CLONE: LazyLock<String> = LazyLock::new(|| {
    let give = NamespaceTransfer {
        metadata: ObjectMeta {
            name: Some("give".to_owned()),
            ..ObjectMeta::default()
        },
        ..NamespaceTransfer::default()
    };
    give.clone_claim_name(&RECEIVER)
});

/// One of our transfer objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Tx {
    uid: u32,
    exists: bool,
    deleting: bool,
    finalizer: bool,
    phase: Option<Phase>,
    lost_reported: bool,
    /// The uid of the peer this object recorded.
    peer: Option<u32>,
    /// On the source object: the snapshot's claim uid (R1's memory).
    snapshot: Option<u32>,
    /// On the source object: the destination claim's uid (R3's memory).
    destination: Option<u32>,
}

impl Tx {
    fn new(uid: u32) -> Self {
        Self {
            uid,
            exists: true,
            deleting: false,
            finalizer: false,
            phase: None,
            lost_reported: false,
            peer: None,
            snapshot: None,
            destination: None,
        }
    }

    fn active(&self) -> bool {
        !self.phase.is_some_and(Phase::is_finished)
    }
}

/// A PersistentVolumeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pvc {
    uid: u32,
    rv: u32,
    /// Pending, Bound or Lost.
    phase: &'static str,
    /// Pre-bound to (or bound to) the volume.
    volume: bool,
    /// The uid of the transfer whose lock it carries.
    lock: Option<u32>,
    deleting: bool,
    /// Carries the transfer-protection finalizer.
    finalizer: bool,
    /// Made by the controller (R3), or exactly as it makes them.
    as_made: bool,
    /// Carries `bind-completed`: the binder syncs it as a bound claim, and
    /// makes it Lost once its volume names another.
    completed: bool,
    /// Carries `bound-by-controller`: the binder, finding its volume names
    /// another claim, retries later instead of writing it Pending.
    by_controller: bool,
}

/// The PersistentVolume.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pv {
    rv: u32,
    /// The namespace side and uid its `claimRef` names.
    claim: (bool, u32),
    delete_policy: bool,
    original_delete: Option<bool>,
    marker: Option<u32>,
    /// The destination claim uid the volume was held for.
    lost: Option<u32>,
    /// Bound, Released.
    phase: &'static str,
}

/// Moves a tenant or the cluster may make at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub(super) enum Move {
    DeleteSourceClaim = 1,
    DeleteDestinationClaim = 1 << 1,
    DeleteSource = 1 << 2,
    DeleteRequest = 1 << 3,
    RecreateRequest = 1 << 4,
    ForgeDestination = 1 << 5,
    StartPod = 1 << 6,
    StopPod = 1 << 7,
    RevokeRight = 1 << 8,
    RefuseAdmission = 1 << 9,
    StaleGather = 1 << 10,
    StaleAct = 1 << 11,
    /// Clone mode: `--clone-timeout` passes while the clone is unbound.
    CloneTimesOut = 1 << 12,
    /// Time: both transfers' `activeDeadlineSeconds` pass.
    DeadlinePasses = 1 << 13,
    /// The controller's watch copies of the claims and the volume stop here
    /// and fall behind, until the cluster lets them catch up.
    StaleCache = 1 << 14,
    /// kube-controller-manager's copy of the volume stops here and falls
    /// behind (its PV and claim watches are separate streams), until the
    /// cluster lets it catch up: its claim syncs decide on the old claimRef.
    StaleBinder = 1 << 15,
}

const MOVES: [Move; 16] = [
    Move::DeleteSourceClaim,
    Move::DeleteDestinationClaim,
    Move::DeleteSource,
    Move::DeleteRequest,
    Move::RecreateRequest,
    Move::ForgeDestination,
    Move::StartPod,
    Move::StopPod,
    Move::RevokeRight,
    Move::RefuseAdmission,
    Move::StaleGather,
    Move::StaleAct,
    Move::CloneTimesOut,
    Move::DeadlinePasses,
    Move::StaleCache,
    Move::StaleBinder,
];

/// Both transfers' `activeDeadlineSeconds`: made at 1,000, they pass it at
/// 2,200, between the model's two clocks.
const DEADLINE: i64 = 1_200;

/// The whole world of the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct World {
    s: Tx,
    d: Tx,
    source: Option<Pvc>,
    destination: Option<Pvc>,
    volume: Option<Pv>,
    pod: bool,
    rights: bool,
    admission: bool,
    rv: u32,
    next_uid: u32,
    /// Moves already made (a bit per [`Move`]).
    made: u16,
    /// Moves this run allows.
    allowed: u16,
    /// The uids of the destination claims the controller created.
    ours: Vec<u32>,
    /// What the stale leader saw, once it looked.
    stale: Option<Box<World>>,
    /// Whether the CSI driver deleted the volume.
    deleted: bool,
    /// Whether a tenant deleted the claim the volume named while the volume
    /// was untouched by the transfer and under Delete: its deletion is then
    /// the owner's own doing, as in any cluster.
    owner_released: bool,
    /// Clone mode: the pair moves a clone of `prod/db` that C1 makes (the
    /// `source` claim, absent at the start, and its volume, which the
    /// provisioner makes); `prod/db` itself is only read.
    clone_mode: bool,
    /// Clone mode: the uids of the clones C1 made.
    clones: Vec<u32>,
    /// Whether R4 ever pointed the volume at a destination claim.
    committed: bool,
    /// Whether the transfers' deadlines have passed (`now` is 3,000, not
    /// 2,000; both were made at 1,000 with 1,200 s).
    late: bool,
    /// The controller's watch copies of the claims and the volume, while
    /// they are behind the world.
    cache: Option<Box<Cached>>,
    /// Populate mode (DESIGN §2.3): the request serves the claim its tenant
    /// wrote (`dev/db`, naming the request in `dataSourceRef`), and the
    /// controller creates none.
    populate: bool,
    /// Populate mode: the uids of the claims the tenant wrote; the volume
    /// may name these, and the controller must never delete one.
    tenants: Vec<u32>,
    /// Whether the controller deleted a claim the tenant wrote.
    deleted_tenants: bool,
    /// The claim (side, uid) the volume names in kube-controller-manager's
    /// copy of it, while that copy lags the volume ([`Move::StaleBinder`]):
    /// its claim syncs decide on this.
    binder_view: Option<(bool, u32)>,
}

/// Watch copies of the claims and the volume, as they were when they fell
/// behind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Cached {
    source: Option<Pvc>,
    destination: Option<Pvc>,
    volume: Option<Pv>,
}

impl World {
    /// A bound source claim, a matched pair not yet recorded, nothing else.
    pub(super) fn start(allowed: u16) -> Self {
        Self {
            s: Tx::new(10),
            d: Tx::new(20),
            source: Some(Pvc {
                uid: SOURCE_UID,
                rv: 1,
                phase: "Bound",
                volume: true,
                lock: None,
                deleting: false,
                finalizer: false,
                as_made: false,
                completed: true,
                by_controller: false,
            }),
            destination: None,
            volume: Some(Pv {
                rv: 2,
                claim: (false, SOURCE_UID),
                delete_policy: true,
                original_delete: None,
                marker: None,
                lost: None,
                phase: "Bound",
            }),
            pod: false,
            rights: true,
            admission: true,
            rv: 3,
            next_uid: 100,
            made: 0,
            allowed,
            ours: Vec::new(),
            stale: None,
            deleted: false,
            owner_released: false,
            clone_mode: false,
            clones: Vec::new(),
            committed: false,
            late: false,
            cache: None,
            populate: false,
            tenants: Vec::new(),
            deleted_tenants: false,
            binder_view: None,
        }
    }

    /// A matched Move pair whose request populates: the tenant's claim
    /// `dev/db` waits, Pending, naming the request; nothing else is made.
    pub(super) fn start_populate(allowed: u16) -> Self {
        let mut w = Self::start(allowed);
        w.populate = true;
        let claim = w.tenant_claim();
        w.destination = Some(claim);
        w
    }

    /// A claim the tenant writes now: Pending, not pre-bound, unlocked,
    /// naming the request; a fresh uid.
    fn tenant_claim(&mut self) -> Pvc {
        let uid = self.next_uid;
        self.next_uid += 1;
        self.tenants.push(uid);
        Pvc {
            uid,
            rv: self.bump(),
            phase: "Pending",
            volume: false,
            lock: None,
            deleting: false,
            finalizer: false,
            as_made: false,
            completed: false,
            by_controller: false,
        }
    }

    /// A matched Clone pair, nothing made yet: the source claim `prod/db`
    /// is Bound to its own volume, which the model leaves out (nothing of
    /// the protocol writes it); the clone and its volume are to be made.
    pub(super) fn start_clone(allowed: u16) -> Self {
        Self {
            source: None,
            volume: None,
            clone_mode: true,
            ..Self::start(allowed)
        }
    }

    /// The name of the claim the protocol moves.
    fn moved_name(&self) -> &'static str {
        if self.clone_mode {
            CLONE.as_str()
        } else {
            "db"
        }
    }

    /// A claim created now, Pending: a fresh uid and the next revision;
    /// `volume` when it is pre-bound to the volume, `lock` the transfer
    /// whose lock it is born with.
    fn new_claim(&mut self, volume: bool, lock: u32, finalizer: bool, as_made: bool) -> Pvc {
        let uid = self.next_uid;
        self.next_uid += 1;
        Pvc {
            uid,
            rv: self.bump(),
            phase: "Pending",
            volume,
            lock: Some(lock),
            deleting: false,
            finalizer,
            as_made,
            completed: false,
            by_controller: false,
        }
    }

    fn bump(&mut self) -> u32 {
        self.rv += 1;
        self.rv
    }

    fn may(&self, m: Move) -> bool {
        self.allowed & m as u16 != 0 && self.made & m as u16 == 0
    }

    // ----- facts -----------------------------------------------------------------

    fn transfer(&self, tx: &Tx, source_side: bool) -> NamespaceTransfer {
        let (ns, name, spec) = if source_side {
            (
                "prod",
                "give",
                NamespaceTransferSpec {
                    source: TransferSource {
                        name: "db".to_owned(),
                        ..TransferSource::default()
                    },
                    // In Clone mode a name, so that the pair is a one-off
                    // clone, not a standing offer (which has none).
                    destination: TransferDestination {
                        namespace: "dev".to_owned(),
                        name: if self.clone_mode { "db" } else { "" }.to_owned(),
                        ..TransferDestination::default()
                    },
                    ..NamespaceTransferSpec::default()
                },
            )
        } else {
            (
                "dev",
                "take",
                NamespaceTransferSpec {
                    source: TransferSource {
                        namespace: "prod".to_owned(),
                        name: "db".to_owned(),
                        ..TransferSource::default()
                    },
                    destination: TransferDestination {
                        namespace: "dev".to_owned(),
                        name: if self.populate { "" } else { "db" }.to_owned(),
                        populate: self.populate.then_some(true),
                    },
                    ..NamespaceTransferSpec::default()
                },
            )
        };
        let other = if source_side {
            ("dev", "take")
        } else {
            ("prod", "give")
        };
        let mode = self
            .clone_mode
            .then_some(crate::api::namespace_transfer::TransferMode::Clone);
        let any_status = tx.phase.is_some() || tx.peer.is_some() || tx.snapshot.is_some();
        NamespaceTransfer {
            metadata: ObjectMeta {
                namespace: Some(ns.to_owned()),
                name: Some(name.to_owned()),
                uid: Some(format!("uid-{}", tx.uid)),
                creation_timestamp: Some(Time(Timestamp::from_second(1_000).unwrap_or_default())),
                deletion_timestamp: tx
                    .deleting
                    .then(|| Time(Timestamp::from_second(1_500).unwrap_or_default())),
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
                mode,
                active_deadline_seconds: Some(DEADLINE),
                ..spec
            },
            status: any_status.then(|| NamespaceTransferStatus {
                phase: tx.phase,
                reason: tx
                    .lost_reported
                    .then(|| super::decide::REASON_DESTINATION_LOST.to_owned()),
                // As the controller records it: see `matching::reference`.
                peer: tx.peer.map(|uid| PeerReference {
                    namespace: other.0.to_owned(),
                    name: other.1.to_owned(),
                    uid: Some(peer_uid(&format!("uid-{}", tx.uid), &format!("uid-{uid}"))),
                }),
                source_claim: tx.snapshot.map(|uid| SourceClaimSnapshot {
                    name: self.moved_name().to_owned(),
                    uid: format!("uid-{uid}"),
                    volume_name: VOLUME.to_owned(),
                    storage_request: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                        "1Gi".to_owned(),
                    )),
                    storage_class_name: Some("fast".to_owned()),
                    access_modes: vec!["ReadWriteOnce".to_owned()],
                    volume_mode: Some("Filesystem".to_owned()),
                    volume_attributes_class_name: None,
                }),
                destination_claim: tx.destination.map(|uid| ClaimReference {
                    namespace: "dev".to_owned(),
                    name: "db".to_owned(),
                    uid: format!("uid-{uid}"),
                }),
                ..NamespaceTransferStatus::default()
            }),
            ..NamespaceTransfer::default()
        }
    }

    fn claim(pvc: &Pvc, name: &str, cloned: bool) -> Claim {
        let volume = pvc.volume.then(|| VOLUME.to_owned());
        Claim {
            name: name.to_owned(),
            uid: format!("uid-{}", pvc.uid),
            resource_version: pvc.rv.to_string(),
            created: 1_000,
            phase: pvc.phase.to_owned(),
            volume_name: if pvc.phase == "Bound" {
                volume.clone()
            } else {
                volume.clone().filter(|_| pvc.as_made)
            },
            lock: pvc.lock.map(|u| format!("uid-{u}")),
            clone_for: cloned.then(|| RECEIVER.clone()),
            populator: None,
            deleting: pvc.deleting,
            bind_completed: pvc.completed,
            finalizers: if pvc.finalizer {
                vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]
            } else {
                Vec::new()
            },
            shape: ClaimShape {
                storage_class_name: Some("fast".to_owned()),
                access_modes: vec!["ReadWriteOnce".to_owned()],
                volume_mode: Some("Filesystem".to_owned()),
                request: Some(
                    if pvc.as_made || pvc.uid == SOURCE_UID {
                        "1Gi"
                    } else {
                        "1Mi"
                    }
                    .to_owned(),
                ),
                volume_attributes_class_name: None,
                volume_name: volume,
                data_source_claim: cloned.then(|| "db".to_owned()),
                data_source_snapshot: None,
                extras: false,
                selector_or_limits: false,
            },
        }
    }

    /// A claim the tenant wrote, as the controller reads it: naming the
    /// request, requesting what the source claim requests.
    fn tenant_view(&self, c: &Pvc) -> Claim {
        let mut claim = Self::claim(c, "db", false);
        // Pinned to the volume by the hold before R4 (or bound).
        claim.volume_name = c.volume.then(|| VOLUME.to_owned());
        claim.populator = Some(super::facts::PopulatorRef {
            name: "take".to_owned(),
            namespace: None,
        });
        claim.shape.extras = true;
        // What the source claim requests, as the quota must be charged.
        claim.shape.request = Some("1Gi".to_owned());
        claim
    }

    /// Whether the controller, looking at this world, finds the request as
    /// the pair's peer (by the recorded uid, or by matching).
    fn peer_found(&self) -> bool {
        match self.s.peer {
            Some(uid) => self.d.exists && self.d.uid == uid,
            None => self.d.exists && self.d.active(),
        }
    }

    fn facts(&self) -> Facts {
        let s = self.transfer(&self.s, true);
        let peer = if self.peer_found() {
            Peer::Found(Box::new(self.transfer(&self.d, false)))
        } else if self.s.peer.is_some() {
            Peer::Gone
        } else {
            Peer::Unmatched
        };
        let peer_known = matches!(peer, Peer::Found(_));
        // The destination claim is read by the peer's name, or without the
        // peer by R3's record (`gather`).
        let dest_known = peer_known || self.s.destination.is_some();
        // The destination claim's lock, as R3 writes it.
        let dest_lock = destination_lock(&s, "dev", "db");
        Facts {
            now: self.now(),
            allow_all_storage_classes: false,
            source: s,
            peer,
            moved_claim: self
                .source
                .as_ref()
                .map(|c| Self::claim(c, self.moved_name(), self.clone_mode)),
            origin_not_ready: None,
            clone_source: self.clone_mode.then(|| {
                let mut origin = Self::claim(
                    &Pvc {
                        uid: SOURCE_UID,
                        rv: 1,
                        phase: "Bound",
                        volume: true,
                        lock: None,
                        deleting: false,
                        finalizer: false,
                        as_made: false,
                        completed: true,
                        by_controller: false,
                    },
                    "db",
                    false,
                );
                origin.volume_name = Some("pv-origin".to_owned());
                origin.shape.volume_name = origin.volume_name.clone();
                origin
            }),
            clone_failure: None,
            // Every claim was made at 1,000 and it is now 2,000: the
            // clone's age passes the timeout only once that move is made.
            clone_timeout: if self.made & Move::CloneTimesOut as u16 != 0 {
                300
            } else {
                3_000
            },
            clone_waits_for_consumer: None,
            at_capacity: false,
            // Populate mode: the tenant's claim is a candidate until R3
            // records it, and the destination from then on.
            claimants: match &self.destination {
                Some(c) if self.populate && peer_known && self.s.destination.is_none() => {
                    vec![self.tenant_view(c)]
                }
                _ => Vec::new(),
            },
            destination_claim: if self.populate {
                self.destination
                    .as_ref()
                    .filter(|_| dest_known && self.s.destination.is_some())
                    .map(|c| self.tenant_view(c))
            } else if dest_known {
                self.destination.as_ref().map(|c| Claim {
                    lock: c.lock.map(|u| {
                        assert_eq!(u, self.s.uid, "only S locks the destination claim");
                        dest_lock.clone()
                    }),
                    ..Self::claim(c, "db", false)
                })
            } else {
                None
            },
            volume: self.volume.as_ref().map(|v| Volume {
                name: VOLUME.to_owned(),
                uid: "uid-pv".to_owned(),
                resource_version: v.rv.to_string(),
                claim_ref: Some(ClaimRef {
                    namespace: if v.claim.0 { "dev" } else { "prod" }.to_owned(),
                    name: if v.claim.0 { "db" } else { self.moved_name() }.to_owned(),
                    uid: format!("uid-{}", v.claim.1),
                }),
                reclaim_policy: if v.delete_policy { "Delete" } else { "Retain" }.to_owned(),
                original_policy: v
                    .original_delete
                    .map(|d| if d { "Delete" } else { "Retain" }.to_owned()),
                marker: v.marker.map(|u| format!("uid-{u}")),
                destination_lost: v.lost.map(|u| format!("uid-{u}")),
                phase: v.phase.to_owned(),
                storage_class_name: Some("fast".to_owned()),
                capacity: Some("1Gi".to_owned()),
                access_modes: vec!["ReadWriteOnce".to_owned()],
                volume_mode: None,
                volume_attributes_class_name: None,
                resizing: false,
                finalizers: Vec::new(),
                deleting: false,
                took_provisioner_finalizer: false,
            }),
            class: ClassPolicy::Allowed,
            // A live LIST, asked for when a step needs it.
            users: None,
            lock_holder_active: false,
            rights: None,
            admission: None,
            live: self.cache.is_none(),
            refused: None,
            snapshot: None,
        }
    }

    /// The facts as the controller gathers them: its watch copies of the
    /// claims and the volume (behind the world while `cache` holds them),
    /// or with `live` every claim and volume read live.
    fn gathered(&self, live: bool) -> Facts {
        match (&self.cache, live) {
            (Some(cached), false) => {
                let mut view = self.clone();
                view.source = cached.source.clone();
                view.destination = cached.destination.clone();
                view.volume = cached.volume.clone();
                let mut facts = view.facts();
                facts.live = false;
                facts
            }
            _ => {
                let mut facts = self.facts();
                facts.live = live || self.cache.is_none();
                facts
            }
        }
    }

    /// The controller's decision on what this world shows it, and the
    /// facts it was made on: its questions answered as the executor's loop
    /// answers them (the users, rights and admission of the present; live
    /// reads, after which those are asked again).
    fn decision(&self) -> (Action, Facts) {
        let mut facts = self.gathered(false);
        loop {
            match decide(&facts) {
                Action::Ask(Question::Users | Question::ReportedUsers) => {
                    facts.users = Some(if self.pod {
                        vec!["app".to_owned()]
                    } else {
                        Vec::new()
                    });
                }
                Action::Ask(Question::Rights) => {
                    facts.rights = Some(if self.rights {
                        Ok(())
                    } else {
                        Err(Refusal {
                            side: Side::Source,
                            message: "revoked".to_owned(),
                        })
                    });
                }
                Action::Ask(Question::Admission) => {
                    facts.admission = Some(if self.admission {
                        Admission::Admitted
                    } else {
                        Admission::SourceReleaseRefused("refused".to_owned())
                    });
                }
                Action::Ask(Question::LiveReads) => facts = self.gathered(true),
                action => return (action, facts),
            }
        }
    }

    // ----- invariants ----------------------------------------------------------------

    /// What must hold in every state.
    fn safety(&self) -> Result<(), String> {
        // A clone never handed over is ours to destroy; one handed over is
        // the destination's, as a moved volume is.
        let ours_to_destroy = self.clone_mode && !self.committed;
        if self.deleted && !self.owner_released && !ours_to_destroy {
            return Err("the volume was deleted".to_owned());
        }
        if self.deleted_tenants {
            return Err("the controller deleted a claim its tenant wrote".to_owned());
        }
        if let Some(v) = &self.volume {
            if v.phase == "Released" && v.delete_policy && !self.owner_released && !ours_to_destroy
            {
                return Err("the volume is Released under Delete".to_owned());
            }
            let (dest, uid) = v.claim;
            let source_side = if self.clone_mode {
                self.clones.contains(&uid)
            } else {
                uid == SOURCE_UID
            };
            let ours = if self.populate {
                &self.tenants
            } else {
                &self.ours
            };
            let allowed = (!dest && source_side) || (dest && ours.contains(&uid));
            if !allowed {
                return Err(format!("the volume names a third claim (uid {uid})"));
            }
            // The claim the volume names is never Lost (the binder makes a
            // claim Lost only when its binding was completed to a volume
            // that names another), and a destination claim is Bound only to
            // a volume that names it.
            for (is_dest, c) in [(false, &self.source), (true, &self.destination)] {
                let Some(c) = c else { continue };
                let named = v.claim == (is_dest, c.uid);
                if named && c.phase == "Lost" {
                    return Err(format!("the claim the volume names is Lost: {c:?}"));
                }
                if is_dest && !named && c.phase == "Bound" {
                    return Err(format!(
                        "a destination claim is Bound to a volume that names another: {c:?} {v:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// What must hold once nothing moves any more.
    fn outcome(&self) -> Result<(), String> {
        // A request matched to a source object that is gone is done, and
        // holds nothing that would keep it from being deleted.
        let orphaned = self.d.exists && self.d.peer.is_some() && !self.s.exists;
        if orphaned && (self.d.finalizer || self.d.active()) {
            return Err(format!(
                "the source object is gone, and the request still holds on: {:?}",
                self.d
            ));
        }
        // A pair that is over leaves no claim under our finalizer: its
        // tenant could never delete it. (The source object keeps its own
        // finalizer, and the pair's record, until the destination claim is
        // let go: the completion lets only the peer go.) Checked while the
        // source object is there to drive the pair and can name the claim
        // (by R3's record, or by its peer), or in any state when no stale
        // leader acted: a claim a stale leader makes after the pair was
        // tidied and one of its objects went is a known leak
        // (docs/operations.md, "A destination claim left Pending").
        let named = self.s.destination.is_some() || self.d.exists;
        let stale = Move::StaleGather as u16 | Move::StaleAct as u16;
        let driven = self.s.exists && !self.s.active() && named;
        if driven || (!self.s.exists && self.made & stale == 0) {
            let held = [&self.source, &self.destination]
                .into_iter()
                .flatten()
                .find(|c| c.finalizer);
            if let Some(c) = held {
                return Err(format!(
                    "the pair is over ({:?}), and a claim still carries our finalizer: {c:?}",
                    self.s.phase
                ));
            }
        }
        if self.clone_mode {
            if let Some(why) = self.clone_outcome() {
                return Err(why);
            }
        }
        let Some(v) = &self.volume else {
            if self.clone_mode && !self.committed {
                return Ok(());
            }
            if self.owner_released {
                return Ok(());
            }
            return Err("the volume is gone".to_owned());
        };
        if self.s.lost_reported && self.s.phase == Some(Phase::Rebinding) && v.delete_policy {
            return Err(format!(
                "DestinationLost, but the volume is back under Delete: {v:?}"
            ));
        }
        match self.s.phase {
            Some(Phase::Failed | Phase::Cancelled) if self.s.exists && !self.clone_mode => {
                let kept = self.made & Move::DeleteSourceClaim as u16 == 0;
                if kept {
                    let bound = self
                        .source
                        .as_ref()
                        .is_some_and(|c| c.phase == "Bound" && !c.deleting && c.lock.is_none())
                        && v.claim == (false, SOURCE_UID);
                    if !bound || !v.delete_policy || v.marker.is_some() {
                        return Err(format!(
                            "{:?}, but the source is not as it was: {:?} {:?}",
                            self.s.phase, self.source, v
                        ));
                    }
                }
            }
            Some(Phase::Completed) if self.made & Move::DeleteDestinationClaim as u16 == 0 => {
                let bound = self
                    .destination
                    .as_ref()
                    .is_some_and(|c| c.phase == "Bound" && v.claim == (true, c.uid));
                if !bound || !v.delete_policy || v.marker.is_some() {
                    return Err(format!(
                        "Completed, but the destination does not hold the volume: {:?} {:?}",
                        self.destination, v
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Clone mode, once nothing moves: a pair that ended before its commit
    /// left no clone claim alive and no volume bound to one; one that
    /// completed is checked as any Completed pair.
    fn clone_outcome(&self) -> Option<String> {
        if !matches!(self.s.phase, Some(Phase::Failed | Phase::Cancelled)) || self.committed {
            return None;
        }
        if let Some(c) = self.source.as_ref().filter(|c| !c.deleting) {
            return Some(format!(
                "{:?}, but the clone claim is left: {c:?}",
                self.s.phase
            ));
        }
        // A volume still Bound to a clone claim on its way out (a tenant's
        // pod holds it under pvc-protection) goes with that claim.
        let going = |uid: u32| {
            self.source
                .as_ref()
                .is_some_and(|c| c.uid == uid && c.deleting)
        };
        match &self.volume {
            Some(v) if v.phase == "Bound" && !going(v.claim.1) => Some(format!(
                "{:?}, but the clone's volume is still bound: {v:?}",
                self.s.phase
            )),
            _ => None,
        }
    }

    /// The controller's next worlds: the pair's reconcile (driven from the
    /// source object), and the request's own.
    fn controller_steps(&self) -> Vec<World> {
        let mut out = self.destination_steps();
        if self.s.exists {
            let (action, facts) = self.decision();
            out.extend(self.apply(&action, &facts, self));
        }
        out
    }

    /// The request's own reconcile ([`destination_turn`]), on what it
    /// finds of its source object: it lets go of its finalizer, or says
    /// that it was cancelled or waits, when no source drives the pair.
    fn destination_steps(&self) -> Vec<World> {
        if !self.d.exists {
            return Vec::new();
        }
        let d = self.transfer(&self.d, false);
        let s = self.s.exists.then(|| self.transfer(&self.s, true));
        let all: Vec<NamespaceTransfer> = s.iter().cloned().chain([d.clone()]).collect();
        let found = match (self.d.peer, &s) {
            (Some(peer), Some(s)) if peer == self.s.uid => Found::Recorded(s),
            (Some(_), _) => Found::Gone,
            (None, _) => Found::Unrecorded(destination_view(&d, &all)),
        };
        let mut w = self.clone();
        match destination_turn(&d, found, self.now()) {
            Turn::LetGo => w.d.finalizer = false,
            Turn::Finish { phase, .. } => {
                Self::write_status(&mut w.d, true, |t| t.phase = Some(phase));
            }
            Turn::Unmatched {
                phase, deadline, ..
            } => {
                w.d.phase = Some(if deadline == Deadline::Passed {
                    Phase::Failed
                } else {
                    phase
                });
            }
            Turn::DriveStanding(_) | Turn::Wake(_) | Turn::Expire => {}
        }
        vec![w]
    }

    /// The model's clock, Unix seconds.
    fn now(&self) -> i64 {
        if self.late {
            3_000
        } else {
            2_000
        }
    }
}

/// A model's world, as the search walks it: what must hold in every
/// state and once nothing moves, and who moves next.
pub(super) trait Space: Clone + Eq + std::hash::Hash + std::fmt::Debug {
    /// What must hold in every state.
    fn safety(&self) -> Result<(), String>;
    /// What must hold once nothing moves any more.
    fn outcome(&self) -> Result<(), String>;
    /// The controller's next worlds (a world equal to this one is a
    /// reconcile that changes nothing).
    fn controller_steps(&self) -> Vec<Self>;
    /// What kube-controller-manager and the provisioner would do next.
    fn cluster_steps(&self) -> Vec<Self>;
    /// The tenants', a stale leader's and the clock's moves still allowed.
    fn moves(&self) -> Vec<Self>;
    /// How many pairs this settled world counts Completed, and Failed or
    /// Cancelled.
    fn tally(&self) -> (usize, usize);
}

/// What an exploration found.
#[derive(Debug)]
pub(super) struct Report<W = World> {
    pub(super) states: usize,
    pub(super) quiescent: usize,
    /// Settled worlds with a pair Completed.
    pub(super) completed: usize,
    /// Settled worlds with a pair Failed or Cancelled.
    pub(super) failed_or_cancelled: usize,
    /// The most pairs Completed in one settled world.
    pub(super) most_completed: usize,
    /// The first violation, with the path that led to it.
    pub(super) violation: Option<(String, Vec<W>)>,
}

/// Explores every world reachable from `start`, breadth-first, up to
/// `limit` states. Each world is held once (the search's order is the
/// list of worlds, each with the index of the one it came from).
pub(super) fn explore<W: Space>(start: W, limit: usize) -> Report<W> {
    let mut worlds: Vec<Rc<W>> = Vec::new();
    let mut parent: Vec<usize> = Vec::new();
    let mut seen: HashSet<Rc<W>> = HashSet::new();
    let mut report = Report {
        states: 0,
        quiescent: 0,
        completed: 0,
        failed_or_cancelled: 0,
        most_completed: 0,
        violation: None,
    };
    let path_to = |mut at: usize, worlds: &[Rc<W>], parent: &[usize]| {
        let mut path = vec![W::clone(&worlds[at])];
        while let Some(&p) = parent.get(at).filter(|p| **p != usize::MAX) {
            path.push(W::clone(&worlds[p]));
            at = p;
        }
        path.reverse();
        path
    };
    let start = Rc::new(start);
    seen.insert(Rc::clone(&start));
    worlds.push(start);
    parent.push(usize::MAX);
    let mut at = 0;
    while let Some(w) = worlds.get(at).map(Rc::clone) {
        report.states += 1;
        if let Err(why) = w.safety() {
            report.violation = Some((why, path_to(at, &worlds, &parent)));
            return report;
        }
        let controller = w.controller_steps();
        let cluster = w.cluster_steps();
        let settled = controller.iter().all(|n| *n == *w) && cluster.is_empty();
        if settled {
            report.quiescent += 1;
            let (completed, failed) = w.tally();
            report.completed += usize::from(completed > 0);
            report.failed_or_cancelled += usize::from(failed > 0);
            report.most_completed = report.most_completed.max(completed);
            if let Err(why) = w.outcome() {
                report.violation = Some((why, path_to(at, &worlds, &parent)));
                return report;
            }
        }
        for next in controller.into_iter().chain(cluster).chain(w.moves()) {
            if seen.len() >= limit {
                break;
            }
            let next = Rc::new(next);
            if seen.insert(Rc::clone(&next)) {
                worlds.push(next);
                parent.push(at);
            }
        }
        at += 1;
    }
    report
}

impl Space for World {
    fn safety(&self) -> Result<(), String> {
        World::safety(self)
    }

    fn outcome(&self) -> Result<(), String> {
        World::outcome(self)
    }

    fn controller_steps(&self) -> Vec<Self> {
        World::controller_steps(self)
    }

    fn cluster_steps(&self) -> Vec<Self> {
        World::cluster_steps(self)
    }

    fn moves(&self) -> Vec<Self> {
        World::moves(self)
    }

    fn tally(&self) -> (usize, usize) {
        match self.s.phase {
            Some(Phase::Completed) => (1, 0),
            Some(Phase::Failed | Phase::Cancelled) => (0, 1),
            _ => (0, 0),
        }
    }
}

/// Every move allowed.
pub(super) const ALL_MOVES: u16 = (1 << 15) - 1;

/// The bits of a set of moves.
pub(super) fn moves(list: &[Move]) -> u16 {
    list.iter().fold(0, |bits, m| bits | *m as u16)
}

pub(super) use Move as TenantMove;

#[cfg(test)]
mod tests;
