//! Standing populating requests (DESIGN §2.3): a Destination-role Clone
//! request with `populate: true` serves every claim of its namespace that
//! names it in `dataSourceRef`, each with a clone of its own.
//!
//! It pairs with no offer itself. For each Pending claim that names it, it
//! makes one request of its own (a *request for the claim*): a Clone
//! request with `populate: true` in the same namespace, controlled by it,
//! annotated with the claim's uid ([`ANNOTATION_SERVES_CLAIM`]), filed for
//! its requester as a client write (admission, quotas and webhooks govern
//! it as one the tenant filed). That request pairs with the source
//! namespace's standing offer like any Clone request, counted under its
//! `maxClones`, and adopts exactly that claim at R3 (`Claim::asks`). So
//! every step, check, crash boundary and rollback of a pair is the one the
//! standing pairs already have.
//!
//! Owns the standing request's own life:
//! - which requests to make, and which finished ones to delete once their
//!   claim is gone (a claim written again under its name gets a request of
//!   its own, by its new uid);
//! - its status: the claims it serves, each with its request's phase
//!   (`status.served`), and counts in its message;
//! - its deletion: its requests are deleted (before its commit each one
//!   cancels, after it completes), and its finalizer comes off once none is
//!   left; its deadline, after which it makes no more.
//!
//! What to do is one pure function, [`serving_turn`]; the reconcile only
//! reads and carries the turn out.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::errors::ApiError;
use crate::api::meta::controller_ref;
use crate::api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, NamespaceTransferSpec,
    NamespaceTransferStatus, ServedClaim, TransferDestination, TransferMode,
    ANNOTATION_SERVES_CLAIM, CONDITION_PEER_MATCHED, MAX_SERVED_LISTED, REASON_DEADLINE_EXCEEDED,
};
use crate::api::NAMESPACE_TRANSFERS;
use crate::controller::events::{claim_reference, reference_to, Severity};
use crate::controller::{Error, Next};
use crate::registry::{Context, ListOptions};

use super::decide::{has_finalizer, name_of, remaining, uid_of, Report};
use super::facts::Claim;
use super::matching::{is_active, peer_uid};
use super::status::set;
use super::{decide, TransferController};

pub(super) use crate::api::namespace_transfer::{
    REASON_MATCHED, REASON_REQUEST_REFUSED, REASON_SERVING,
};

/// The fault-injection point right after a request for a claim is made.
pub(super) const POPULATE: &str = "Populate";

/// How many requests one turn makes at most; the next turn makes more.
pub(super) const MADE_PER_TURN: usize = 10;

/// How often an open standing request looks again without an event.
pub(super) const SERVING_RECOUNT: Duration = Duration::from_secs(30);

/// How soon a deleting standing request looks again while its requests go.
pub(super) const DELETING_POLL: Duration = Duration::from_secs(2);

/// What a standing populating request's reconcile does.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ServingTurn {
    /// Our finalizer goes on first: a request is made only under it, so
    /// that a deletion always finds every request to delete.
    pub protect: bool,
    /// The requests to make, one per claim.
    pub make: Vec<NamespaceTransfer>,
    /// The requests to delete, each only while it is the object of its uid.
    pub delete: Vec<NamespaceTransfer>,
    /// Its own status write, if any.
    pub write: Option<ServingWrite>,
    pub then: ServingNext,
}

/// A standing populating request's status write.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ServingWrite {
    /// Deleted (with no request left) or past its deadline: finished.
    Finish { phase: Phase, report: Report },
    /// Open: the claims served and the message.
    Serving {
        served: Vec<ServedClaim>,
        message: String,
    },
}

/// What a standing populating request asks of the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ServingNext {
    /// Deleted and no request of its left: let go of the finalizer.
    LetGo,
    /// Finished: mind the TTL.
    Expire,
    /// Look again after this long.
    After(Duration),
}

/// What standing populating request `r` does at `now` (Unix seconds),
/// given the claims of its namespace that name it (`claims`, any phase)
/// and the requests it made (`made`: those it controls, see
/// [`made_for`]).
pub(super) fn serving_turn(
    r: &NamespaceTransfer,
    claims: &[Claim],
    made: &[&NamespaceTransfer],
    now: i64,
) -> ServingTurn {
    let mut turn = ServingTurn {
        protect: false,
        make: Vec::new(),
        delete: Vec::new(),
        write: None,
        then: ServingNext::Expire,
    };
    if r.metadata.deletion_timestamp.is_some() {
        turn.delete = made
            .iter()
            .filter(|t| t.metadata.deletion_timestamp.is_none())
            .map(|t| (*t).clone())
            .collect();
        if made.is_empty() {
            if is_active(r) {
                turn.write = Some(ServingWrite::Finish {
                    phase: Phase::Cancelled,
                    report: Report::shared(
                        decide::REASON_DELETED,
                        "the request was deleted; the claims it served keep their volumes",
                    ),
                });
            }
            turn.then = ServingNext::LetGo;
        } else {
            turn.then = ServingNext::After(DELETING_POLL);
        }
        return turn;
    }
    let by_uid: HashMap<&str, &Claim> = claims.iter().map(|c| (c.uid.as_str(), c)).collect();
    // A finished request whose claim is gone has nothing left to say (the
    // standing request finished or not).
    turn.delete = made
        .iter()
        .filter(|t| !is_active(t) && t.metadata.deletion_timestamp.is_none())
        .filter(|t| {
            t.served_claim_uid()
                .is_none_or(|uid| !by_uid.contains_key(uid))
        })
        .map(|t| (*t).clone())
        .collect();
    if !is_active(r) {
        return turn;
    }
    let left = remaining(r, now);
    if left.is_some_and(|left| left.is_zero()) {
        turn.write = Some(ServingWrite::Finish {
            phase: Phase::Failed,
            report: Report::shared(
                REASON_DEADLINE_EXCEEDED,
                "activeDeadlineSeconds passed; no more claims are served, and those under way go on until this request is deleted (by its ttlSecondsAfterFinished too), which cancels them",
            ),
        });
        return turn;
    }
    let made_for_uid: HashMap<&str, &NamespaceTransfer> = made
        .iter()
        .filter_map(|t| t.served_claim_uid().map(|uid| (uid, *t)))
        .collect();
    turn.make = claims
        .iter()
        .filter(|c| waits_for_volume(c) && !made_for_uid.contains_key(c.uid.as_str()))
        .take(MADE_PER_TURN)
        .map(|c| request_for(r, c))
        .collect();
    turn.protect = !turn.make.is_empty() && !has_finalizer(r);
    let (served, message) = served_of(r, claims, &made_for_uid);
    let current = r.status.as_ref();
    let changed = current.and_then(|st| st.phase) != Some(Phase::WaitingForPeer)
        || current.and_then(|st| st.message.as_deref()) != Some(message.as_str())
        || current.map(|st| &st.served) != Some(&served);
    if changed {
        turn.write = Some(ServingWrite::Serving { served, message });
    }
    turn.then = ServingNext::After(left.map_or(SERVING_RECOUNT, |l| l.min(SERVING_RECOUNT)));
    turn
}

/// Whether `claim` waits for a volume: Pending, naming none, not deleting.
fn waits_for_volume(claim: &Claim) -> bool {
    claim.volume_name.is_none() && !claim.deleting && matches!(claim.phase.as_str(), "" | "Pending")
}

/// The claims standing request `r` serves, by the request made for each
/// (`made_for_uid`), and its message, which counts them all. At most
/// [`MAX_SERVED_LISTED`] are listed: those whose request failed first (a
/// claim is told why it waits from this list), then those under way, then
/// those served; oldest claim first within each.
fn served_of(
    r: &NamespaceTransfer,
    claims: &[Claim],
    made_for_uid: &HashMap<&str, &NamespaceTransfer>,
) -> (Vec<ServedClaim>, String) {
    let mut listed = Vec::new();
    let (mut done, mut failed, mut under_way) = (0usize, 0usize, 0usize);
    for claim in claims {
        let Some(t) = made_for_uid.get(claim.uid.as_str()) else {
            continue;
        };
        let status = t.status.as_ref();
        let phase = status.and_then(|st| st.phase);
        let rank = match phase {
            Some(Phase::Completed) => {
                done += 1;
                2
            }
            Some(p) if p.is_finished() => {
                failed += 1;
                0
            }
            _ => {
                under_way += 1;
                1
            }
        };
        listed.push((rank, claim, *t, phase));
    }
    // Stable: oldest first within a rank.
    listed.sort_by_key(|(rank, ..)| *rank);
    let served = listed
        .into_iter()
        .take(MAX_SERVED_LISTED)
        .map(|(_, claim, t, phase)| ServedClaim {
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            transfer: name_of(t).to_owned(),
            phase,
            reason: t.status.as_ref().and_then(|st| st.reason.clone()),
        })
        .collect();
    let message = format!(
        "serving the claims of this namespace that name NamespaceTransfer {} in dataSourceRef, each with a {} of {}/{}: {done} served, {under_way} under way, {failed} failed",
        name_of(r),
        if r.source_is_snapshot() {
            "restore of VolumeSnapshot"
        } else {
            "clone"
        },
        r.source_namespace(),
        r.spec.source.name
    );
    (served, message)
}

/// Whether `t` is a request standing request `r` made for a claim: a
/// populating Clone request of `r`'s namespace that `r` controls, for one
/// claim.
pub(super) fn made_for(t: &NamespaceTransfer, r: &NamespaceTransfer) -> bool {
    t.own_namespace() == r.own_namespace()
        && t.served_claim_uid().is_some()
        && t.populating_parent()
            .is_some_and(|p| !uid_of(r).is_empty() && p.uid == uid_of(r))
}

/// The request standing request `r` makes for `claim`: named after `r` and
/// the claim's uid (deterministic, so that every replica names it alike),
/// controlled by `r`, cloning what `r` asks for, serving that claim only.
pub(super) fn request_for(r: &NamespaceTransfer, claim: &Claim) -> NamespaceTransfer {
    NamespaceTransfer {
        metadata: ObjectMeta {
            name: Some(request_name(r, &claim.uid)),
            namespace: r.metadata.namespace.clone(),
            annotations: Some(
                [(ANNOTATION_SERVES_CLAIM.to_owned(), claim.uid.clone())]
                    .into_iter()
                    .collect(),
            ),
            owner_references: Some(vec![controller_ref(&NAMESPACE_TRANSFERS, &r.metadata)]),
            ..ObjectMeta::default()
        },
        spec: NamespaceTransferSpec {
            source: r.spec.source.clone(),
            destination: TransferDestination {
                namespace: r.spec.destination.namespace.clone(),
                name: String::new(),
                populate: Some(true),
            },
            mode: Some(TransferMode::Clone),
            ..NamespaceTransferSpec::default()
        },
        ..NamespaceTransfer::default()
    }
}

/// `<r's name>-<8 characters>`, derived from `r`'s uid and the claim's, cut
/// to a valid name.
pub(super) fn request_name(r: &NamespaceTransfer, claim_uid: &str) -> String {
    let suffix: String = peer_uid(uid_of(r), claim_uid)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let own = name_of(r);
    let keep = 253 - 1 - suffix.len();
    let base = own.get(..own.len().min(keep)).unwrap_or(own);
    let base = base.trim_end_matches(['-', '.']);
    format!("{base}-{suffix}")
}

/// Standing request `r`'s status while it serves.
pub(super) fn serving(st: &mut NamespaceTransferStatus, served: &[ServedClaim], message: &str) {
    st.phase = Some(Phase::WaitingForPeer);
    st.reason = Some(REASON_SERVING.to_owned());
    st.message = Some(message.to_owned());
    st.served = served.to_vec();
    set(st, CONDITION_PEER_MATCHED, false, REASON_SERVING, message);
}

impl TransferController {
    /// A standing populating request: reads its claims and the requests
    /// it made, asks [`serving_turn`], and carries the turn out.
    pub(super) async fn tend_request(&self, r: NamespaceTransfer) -> Result<Next, Error> {
        let namespace = r.own_namespace().to_owned();
        let mut claims: Vec<Claim> = self
            .cluster
            .claims_naming_transfers(&namespace)
            .await?
            .iter()
            .map(Claim::from)
            .filter(|c| c.names_request(&namespace, name_of(&r)))
            .collect();
        claims.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        let all = self
            .store
            .list(Some(&namespace), &ListOptions::default())
            .await?;
        let made: Vec<&NamespaceTransfer> = all
            .items
            .iter()
            .map(|t| &**t)
            .filter(|t| made_for(t, &r))
            .collect();
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let turn = serving_turn(&r, &claims, &made, now);
        if turn.protect {
            self.set_finalizer(&r, true).await?;
        }
        for request in &turn.make {
            self.make_request(&r, request, &claims).await?;
        }
        for request in &turn.delete {
            self.delete_transfer(request).await?;
        }
        match &turn.write {
            Some(ServingWrite::Finish { phase, report }) => {
                self.finish_alone(&r, *phase, report).await?;
            }
            Some(ServingWrite::Serving { served, message }) => {
                self.update_status(&r, |st| serving(st, served, message))
                    .await?;
            }
            None => {}
        }
        match turn.then {
            ServingNext::LetGo => {
                self.set_finalizer(&r, false).await?;
                self.expire(&r).await
            }
            ServingNext::Expire => self.expire(&r).await,
            ServingNext::After(after) => Ok(Next::After(after)),
        }
    }

    /// Files `request` for standing request `r`'s requester, as a client
    /// write: what the tenant could file itself, governed as that. A
    /// refusal is told to the claim, and the claim is tried again later.
    async fn make_request(
        &self,
        r: &NamespaceTransfer,
        request: &NamespaceTransfer,
        claims: &[Claim],
    ) -> Result<(), Error> {
        let Some(requester) = r.spec.requester.clone() else {
            return Ok(());
        };
        let ctx = Context::on_behalf_of(requester, self.leadership.fence().clone());
        self.leadership.check()?;
        let claim = request
            .served_claim_uid()
            .and_then(|uid| claims.iter().find(|c| c.uid == uid));
        let namespace = r.own_namespace();
        match self.store.create(&ctx, namespace, request.clone()).await {
            Ok(made) => {
                crate::controller::fault::after_named(POPULATE);
                if let Some(claim) = claim {
                    let note = format!(
                        "NamespaceTransfer {namespace}/{} clones {}/{} for this claim",
                        name_of(&made),
                        r.source_namespace(),
                        r.spec.source.name
                    );
                    let regarding = claim_reference(namespace, &claim.name, Some(&claim.uid));
                    self.events
                        .publish(
                            &regarding,
                            Severity::Normal,
                            REASON_MATCHED,
                            "Populate",
                            &note,
                        )
                        .await;
                }
                Ok(())
            }
            // Made by another turn, or a name taken: the next turn lists it.
            Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(
                e @ (ApiError::Forbidden { .. }
                | ApiError::Invalid { .. }
                | ApiError::Denied { .. }),
            ) => {
                let note = format!(
                    "the NamespaceTransfer that would clone {}/{} for this claim was refused: {e}",
                    r.source_namespace(),
                    r.spec.source.name
                );
                if let Some(claim) = claim {
                    let regarding = claim_reference(namespace, &claim.name, Some(&claim.uid));
                    self.events
                        .publish(
                            &regarding,
                            Severity::Warning,
                            REASON_REQUEST_REFUSED,
                            "Populate",
                            &note,
                        )
                        .await;
                }
                self.events
                    .publish(
                        &reference_to(r),
                        Severity::Warning,
                        REASON_REQUEST_REFUSED,
                        "Populate",
                        &note,
                    )
                    .await;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
