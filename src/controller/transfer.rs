//! The NamespaceTransfer controller (DESIGN §2.1.3–2.1.6): it gathers the
//! facts of a pair, asks [`decide::decide`] what to do, and does that one
//! thing. Matching, the preconditions, the rebind protocol R1–R6 with its
//! rollback, phases, conditions, cancellation, finalizers, TTL and deadline,
//! and Events.
//!
//! # How it is built
//! - [`facts`]: what a reconcile reads, as plain data.
//! - [`decide`]: the protocol, one pure function from facts to an
//!   [`decide::Action`]. It holds every rule about what is safe when.
//! - [`matching`]: which Destination is whose peer, and the uids a record
//!   holds instead of the other namespace's.
//! - `gather`: the gathering. Our objects live from etcd; claims and
//!   volumes from the watch copies, live where a copy may be behind this
//!   controller's own writes, and all live again before a step that no
//!   precondition fences ([`decide::needs_live_facts`]); pods, rights and admission
//!   always live.
//! - `plan`: every write an action makes, as data (claims and volumes,
//!   creates, status edits, finalizers, Events), in order, with the fault
//!   point after each: what the executor and the model check both run.
//! - `execute`: the executor, a thin interpreter of a plan: each write
//!   conditional on the resourceVersion or uid it was decided on, after
//!   checking the leadership lease. Then the next reconcile starts from
//!   scratch (level-triggered): nothing is kept in memory between two
//!   writes, so a crash between any two loses nothing.
//! - `status`: the writes to our own objects (a pair's status, finalizers,
//!   the TTL).
//! - `destination` and `standing`: a Destination-role object's own
//!   reconcile, and standing clone offers with their pairs.
//! - `serving`: standing populating requests, which make a request for
//!   every claim that names them.
//! - this module: the reconcile's entry, and the loop that asks `decide`,
//!   answers its questions ([`decide::Question`]: users, rights, admission,
//!   live reads), and hands the first action that writes to the executor;
//!   a write kube-apiserver refuses comes back as a fact, and is decided
//!   on again.
//!
//! The Source-role (or Both) object of a pair drives it; a Destination-role
//! object only reports that it waits or was taken, and wakes its Source.
//!
//! # What the facts mean
//! - `status.sourceClaim` on the source object: R1 is done.
//! - the volume's marker annotation (`storage.transfer.k8s.io/transfer`)
//!   names this transfer's uid: R2 is done (and `original-reclaim-policy`
//!   holds the policy to restore).
//! - `status.destinationClaim` on the source object: R3 is done, and this is
//!   the claim's uid.
//! - the volume's `claimRef` names that claim and uid: R4, the commit, is
//!   done. Before it, everything can be undone; after it, the transfer only
//!   goes forward.
//! - a finished phase (Failed, Cancelled) recorded before the commit: the
//!   rollback is being carried out. The phase is written *before* the
//!   rollback, so a crash mid-rollback never redoes a step.
//!
//! Only the controllers write status (the registry refuses clients), and
//! still nothing recorded there is acted on before it is checked against the
//! cluster's objects, read as `gather` reads them: from the watch copies
//! where those can be trusted, live otherwise, and all live before a step
//! that no precondition fences.

pub mod decide;
pub mod facts;
pub mod matching;
pub mod snapshot;

mod destination;
mod execute;
mod gather;
mod plan;
mod serving;
mod standing;
mod status;
mod waiting;

#[cfg(test)]
mod model;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::Store as Reflector;

use super::cluster::Cluster;
use super::events::Events;
use super::leader::Leadership;
use super::queue::WorkQueue;
use super::{fault, Error, Next};
use crate::api::namespace_transfer::{NamespaceTransfer, Role, TransferMode};
use crate::authz::Authorizer;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, ListOptions, Shared, Store};

use decide::{decide, name_of, peer_or_self, recorded_source, Action, Question};
use execute::Outcome;
use facts::Facts;
use matching::role_of;
use plan::step_of;
use standing::standing_view;

/// The steps of the rebind protocol (§2.1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// C1 (Clone mode): create the clone beside the source claim, locked.
    Clone,
    /// R1: annotate the source claim with the lock; keep a snapshot.
    Lock,
    /// R2: record the volume's reclaim policy, set it to Retain.
    Retain,
    /// R3: create the destination claim, pre-bound to the volume.
    CreateDestination,
    /// R4: point the volume's claimRef at the destination claim. The commit point.
    Commit,
    /// R5: delete the source claim.
    ReleaseSource,
    /// R6: once the destination is Bound, restore the reclaim policy; Completed.
    Settle,
}

impl Step {
    pub const ALL: [Step; 7] = [
        Step::Clone,
        Step::Lock,
        Step::Retain,
        Step::CreateDestination,
        Step::Commit,
        Step::ReleaseSource,
        Step::Settle,
    ];

    /// `R1` … `R6`.
    pub fn name(self) -> &'static str {
        match self {
            Step::Clone => "C1",
            Step::Lock => "R1",
            Step::Retain => "R2",
            Step::CreateDestination => "R3",
            Step::Commit => "R4",
            Step::ReleaseSource => "R5",
            Step::Settle => "R6",
        }
    }

    /// The Event `action` of the step.
    fn action(self) -> &'static str {
        match self {
            Step::Clone => "Clone",
            Step::Lock => "Lock",
            Step::Retain => "Retain",
            // The Event's action keeps the name users have seen.
            Step::CreateDestination => "CreateTarget",
            Step::Commit => "Commit",
            Step::ReleaseSource => "ReleaseSource",
            Step::Settle => "Settle",
        }
    }
}

/// How many times one reconcile may gather the facts: the first time, once
/// more with live reads, and once after a fault-injection pause.
const GATHERINGS: usize = 3;

/// What the transfer controller may be told.
#[derive(Debug, Clone, Default)]
pub struct TransferOptions {
    /// `--allow-all-storage-classes`: every class, and volumes without one,
    /// may be transferred.
    pub allow_all_storage_classes: bool,
    /// `--clone-timeout`.
    pub clone_timeout: Duration,
}

/// The reconciler of NamespaceTransfers.
#[derive(Debug, Clone)]
pub struct TransferController {
    store: Arc<Store<NamespaceTransferStrategy>>,
    cluster: Cluster,
    classes: Reflector<StorageClass>,
    authorizer: Arc<dyn Authorizer>,
    events: Events,
    leadership: Leadership,
    queue: WorkQueue,
    options: TransferOptions,
    ctx: Context,
    /// One lock per standing offer (by uid), held while one of its pairs
    /// decides, so that two pairs never both see room under `maxClones` for
    /// one clone; pairs of different offers go on side by side.
    standing: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// When each claim that waits on a transfer in vain was last told why.
    told: Arc<std::sync::Mutex<waiting::Told>>,
    /// The keys claims have named in `dataSourceRef` (from the triggers).
    named: super::watch::NamedKeys,
}

impl TransferController {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<Store<NamespaceTransferStrategy>>,
        cluster: Cluster,
        classes: Reflector<StorageClass>,
        authorizer: Arc<dyn Authorizer>,
        events: Events,
        leadership: Leadership,
        queue: WorkQueue,
        options: TransferOptions,
        ctx: Context,
    ) -> Self {
        Self {
            store,
            cluster,
            classes,
            authorizer,
            events,
            leadership,
            queue,
            options,
            ctx,
            standing: Arc::default(),
            told: Arc::default(),
            named: super::watch::NamedKeys::default(),
        }
    }

    /// Looks at the claims only of the keys `named` says claims named (the
    /// triggers' [`super::watch::Triggers::named_keys`]).
    pub fn with_named_keys(mut self, named: super::watch::NamedKeys) -> Self {
        self.named = named;
        self
    }

    /// Brings the transfer `namespace/name` one step closer to where it
    /// should be.
    ///
    /// The key may name no object: a claim that names it in
    /// `dataSourceRef` queues it, and is told why it waits in vain
    /// ([`waiting`]).
    pub async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        let t = super::keyed(&self.leadership, &self.store, key).await?;
        let told = match key.split_once('/') {
            Some((namespace, name)) => {
                self.tell_waiting_claims(namespace, name, t.as_ref())
                    .await?
            }
            None => Next::Done,
        };
        let Some(t) = t else {
            return Ok(told);
        };
        let next = match role_of(&t) {
            Some(Role::Destination) if t.is_standing_request() => self.tend_request(t).await?,
            Some(Role::Destination) => self.reconcile_destination(t).await?,
            Some(Role::Source) if t.is_standing_offer() => self.tend_offer(t).await?,
            Some(Role::Source | Role::Both) => self.drive(t).await?,
            // Validation refuses a transfer without a role; nothing to do.
            None => Next::Done,
        };
        Ok(next.sooner(told))
    }

    async fn all_transfers(&self) -> Result<Vec<NamespaceTransfer>, Error> {
        let list = self.store.list(None, &ListOptions::default()).await?;
        Ok(list.items.into_iter().map(Shared::into_owned).collect())
    }

    /// The transfers that matching can weigh for a pair: those of the two
    /// namespaces it spans (a Source's candidate peers live in its
    /// destination namespace, the Sources competing for a Destination in its
    /// source namespace) that name the same source claim (peers always do,
    /// and spec is immutable). Reading these, not every transfer in the
    /// cluster, keeps one reconcile's cost independent of how many other
    /// pairs are under way.
    async fn pair_transfers(&self, t: &NamespaceTransfer) -> Result<Vec<NamespaceTransfer>, Error> {
        let (source_ns, claim) = (t.source_namespace(), t.spec.source.name.as_str());
        let opts = ListOptions::default();
        let mut namespaces = vec![t.own_namespace(), source_ns, t.destination_namespace()];
        namespaces.sort_unstable();
        namespaces.dedup();
        let mut found = Vec::new();
        for ns in namespaces {
            let list = self.store.list(Some(ns), &opts).await?;
            found.extend(
                list.items
                    .iter()
                    .filter(|o| o.source_namespace() == source_ns && o.spec.source.name == claim)
                    .map(|o| NamespaceTransfer::clone(o)),
            );
        }
        Ok(found)
    }

    // ----- the destination side ---------------------------------------------------

    // ----- the source side: gather, decide, do ---------------------------------------

    /// A Source-role or Both object: decides the pair's next step from the
    /// facts, and takes it, acting for the pair's tenants: every request to
    /// kube-apiserver in it names the transfer (crate::audit::client).
    async fn drive(&self, s: NamespaceTransfer) -> Result<Next, Error> {
        let facts = self.gather(s).await?;
        let acting = crate::audit::ActingFor::pair(&facts.source, peer_or_self(&facts));
        acting.scope(self.decide_and_act(facts)).await
    }

    /// Asks [`decide`] what to do, answers its questions, and performs the
    /// first action that writes.
    ///
    /// The loop is bounded by what can happen in one reconcile: a
    /// gathering of the facts answers each [`Question`] at most once
    /// (users, rights and admission are `None` until asked, and live reads
    /// are asked only of watch copies); there are at most [`GATHERINGS`]
    /// gatherings (the first, the live reads, and a fault-injection pause);
    /// and a refused write is decided on once, to an action that creates or
    /// deletes nothing.
    async fn decide_and_act(&self, mut facts: Facts) -> Result<Next, Error> {
        const ROUNDS: usize = GATHERINGS * (Question::ALL.len() + 1) + 2;
        let mut paused = false;
        let mut asked: HashSet<Question> = HashSet::new();
        for _ in 0..ROUNDS {
            let action = decide(&facts);
            match action {
                Action::Ask(question) => {
                    if !asked.insert(question) {
                        // Asked twice of one gathering: a bug in `decide`;
                        // never loop on it.
                        tracing::error!(?question, "the decision asked again what it was told");
                        return Ok(Next::After(decide::WAIT_POLL));
                    }
                    match question {
                        Question::Users => facts.users = Some(self.users_of(&facts, true).await?),
                        Question::ReportedUsers => {
                            facts.users = Some(self.users_of(&facts, false).await?);
                        }
                        Question::Rights => facts.rights = Some(self.check_rights(&facts).await?),
                        Question::Admission => {
                            facts.admission = Some(self.check_admission(&facts).await?);
                        }
                        Question::LiveReads => {
                            let Some(fresh) = self.refresh(&facts).await? else {
                                return Ok(Next::Now);
                            };
                            facts = self.gather_live(fresh).await?;
                            asked.clear();
                        }
                    }
                }
                Action::Commit { .. } | Action::ReleaseSource { .. }
                    if !paused && step_of(&action).is_some_and(fault::pauses_before) =>
                {
                    // The tests change the world here; decide again on what
                    // is then true, as a slow reconcile would.
                    if let Some(step) = step_of(&action) {
                        fault::before(step).await;
                    }
                    paused = true;
                    let Some(fresh) = self.refresh(&facts).await? else {
                        return Ok(Next::Now);
                    };
                    facts = self.gather(fresh).await?;
                    asked.clear();
                }
                action => {
                    if matches!(action, Action::Lock { .. } | Action::RecordSource(_))
                        && facts.source.mode() == TransferMode::Clone
                        && recorded_source(&facts.source).is_none()
                    {
                        // C2 writes nothing: it is done once R1 is next.
                        fault::after_named("C2");
                    }
                    match self.execute(&facts, &action).await? {
                        Outcome::Next(next) => return Ok(next),
                        Outcome::Refused(refused) => facts.refused = Some(refused),
                    }
                }
            }
        }
        Ok(Next::Now)
    }

    /// The object that drives the pair, read again: the source, or for a
    /// standing offer's pair its view built from both objects read again.
    async fn refresh(&self, f: &Facts) -> Result<Option<NamespaceTransfer>, Error> {
        let s = &f.source;
        let Some(fresh) = self.get(s.own_namespace(), name_of(s)).await? else {
            return Ok(None);
        };
        if !fresh.is_standing_offer() {
            return Ok(Some(fresh));
        }
        let Some(d) = peer_or_self(f) else {
            return Ok(None);
        };
        Ok(self
            .get(d.own_namespace(), name_of(d))
            .await?
            .filter(|current| current.metadata.uid == d.metadata.uid)
            .map(|d| standing_view(&fresh, &d)))
    }

    // ----- standing clone offers (DESIGN §2.1.5b) ------------------------------------

    // ----- reads ------------------------------------------------------------------------

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<NamespaceTransfer>, Error> {
        super::current(&self.store, namespace, name).await
    }

    // ----- writes -----------------------------------------------------------------------
}

#[cfg(test)]
mod tests;
