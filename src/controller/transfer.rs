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
//!   precondition fences ([`needs_live_facts`]); pods, rights and admission
//!   always live.
//! - `execute`: the executor, which performs one action, conditional on
//!   the resourceVersion or uid it was decided on, after checking the
//!   leadership lease. Then the next reconcile starts from scratch
//!   (level-triggered): nothing is kept in memory between two writes, so a
//!   crash between any two loses nothing.
//! - `status`: the writes to our own objects (a pair's status, finalizers,
//!   the TTL).
//! - `destination` and `standing`: a Destination-role object's own
//!   reconcile, and standing clone offers with their pairs.
//! - this module: the reconcile's entry, and the loop that asks `decide`,
//!   answers its questions (users, rights, admission, live reads) and hands
//!   the first action that writes to the executor.
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
//! live objects.

pub mod decide;
pub mod facts;
pub mod matching;

mod destination;
mod execute;
mod gather;
mod plan;
mod standing;
mod status;

#[cfg(test)]
mod model;

use std::collections::HashMap;
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

use decide::{decide, name_of, peer_or_self, recorded_source, Action};
use facts::Facts;
use matching::role_of;
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
        }
    }

    /// Brings the transfer `namespace/name` one step closer to where it
    /// should be.
    pub async fn reconcile(&self, key: &str) -> Result<Next, Error> {
        let Some(t) = super::keyed(&self.leadership, &self.store, key).await? else {
            return Ok(Next::Done);
        };
        match role_of(&t) {
            Some(Role::Destination) => self.reconcile_destination(t).await,
            Some(Role::Source) if t.is_standing_offer() => self.tend_offer(t).await,
            Some(Role::Source | Role::Both) => self.drive(t).await,
            // Validation refuses a transfer without a role; nothing to do.
            None => Ok(Next::Done),
        }
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

    async fn decide_and_act(&self, mut facts: Facts) -> Result<Next, Error> {
        let mut paused = false;
        let mut live = false;
        // At most: users, rights, admission, one pause and its fresh facts,
        // one live confirmation and its fresh facts (whose users, rights and
        // admission are asked for again each time).
        for _ in 0..14 {
            let action = decide(&facts);
            match action {
                Action::CheckUsers => {
                    facts.users = Some(self.users_of(&facts).await?);
                }
                Action::CheckRights => {
                    facts.rights = Some(self.check_rights(&facts).await?);
                }
                Action::CheckAdmission => {
                    facts.admission = Some(self.check_admission(&facts).await?);
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
                }
                action if !live && needs_live_facts(&action) => {
                    // Decided on the watch copies of claims and volumes, and
                    // not fenced by a precondition on what it rests on: decide
                    // again on live reads, and do what that says.
                    live = true;
                    let Some(fresh) = self.refresh(&facts).await? else {
                        return Ok(Next::Now);
                    };
                    facts = self.gather_live(fresh).await?;
                }
                action @ (Action::Lock { .. } | Action::RecordSource(_))
                    if facts.source.mode() == TransferMode::Clone
                        && recorded_source(&facts.source).is_none() =>
                {
                    // C2 writes nothing: it is done once R1 is next.
                    fault::after_named("C2");
                    return self.execute(&facts, action).await;
                }
                action => return self.execute(&facts, action).await,
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

// ----- pure helpers ---------------------------------------------------------------------

/// Whether `action` must be decided on live reads of the claims and the
/// volume rather than the watch copies: the steps that end a transfer or
/// give the volume back its policy rest on a claim's presence, absence or
/// state, which no precondition of theirs fences (the others are writes
/// conditional on the resourceVersion or uid they were decided on, so a
/// stale copy costs a refused write, never a wrong step).
fn needs_live_facts(action: &Action) -> bool {
    matches!(
        action,
        Action::Finish { .. }
            | Action::Settle { .. }
            | Action::Complete
            | Action::DestinationLost { .. }
            | Action::Unmark { .. }
    )
}

/// The protocol step an action carries out, for the fault hooks; `None`
/// for an action that is no step of R1–R6 (or C1). Every action is named,
/// so a new one must be placed here.
fn step_of(action: &Action) -> Option<Step> {
    match action {
        Action::CreateClone(_) => Some(Step::Clone),
        Action::Lock { .. } | Action::RecordSource(_) => Some(Step::Lock),
        Action::Retain { .. } => Some(Step::Retain),
        Action::CreateDestination(_)
        | Action::RecordDestination(_)
        | Action::ProtectDestination { .. } => Some(Step::CreateDestination),
        Action::Commit { .. } => Some(Step::Commit),
        Action::ReleaseSource { .. } => Some(Step::ReleaseSource),
        Action::UnlockDestination | Action::Settle { .. } | Action::Complete => Some(Step::Settle),
        Action::Nothing { .. }
        | Action::Wait { .. }
        | Action::RecordMatch
        | Action::Finish { .. }
        | Action::CheckUsers
        | Action::CheckRights
        | Action::CheckAdmission
        | Action::Protect
        | Action::DeleteClone { .. }
        | Action::UnprotectDestination { .. }
        | Action::Rehold { .. }
        | Action::DestinationLost { .. }
        | Action::Unmark { .. }
        | Action::DeleteDestination { .. }
        | Action::Unlock { .. }
        | Action::Mirror
        | Action::DropFinalizers
        | Action::Expire => None,
    }
}

#[cfg(test)]
mod tests;
