//! Claims that wait on a request (DESIGN §2.3): a claim whose
//! `dataSourceRef` names a NamespaceTransfer is left alone by the
//! provisioner, so nothing but us can tell its owner that it waits in
//! vain. A claim's event queues the key it names (even one that names no
//! object) and marks it ([`super::super::watch::NamedKeys`]); every
//! reconcile of a marked key looks at the claims that name it, and warns
//! each one the transfer cannot serve, again every [`CLAIM_POLL`] while it
//! waits. A key no Pending claim names any more is forgotten, so that the
//! other transfers' reconciles never look.
//!
//! What a claim is told is one pure function, [`unserved`], of the object
//! its reference finds; a claim a populating request may still adopt is
//! told nothing here (the pair's own wait says what is wrong with it).

use std::collections::HashMap;
use std::time::Instant;

use crate::api::namespace_transfer::{NamespaceTransfer, NamespaceTransferPhase as Phase, Role};
use crate::controller::events::{claim_reference, Severity};
use crate::controller::{Error, Next};

use super::decide::CLAIM_POLL;
use super::facts::Claim;
use super::matching::role_of;
use super::TransferController;

pub(super) use crate::api::namespace_transfer::{
    REASON_CLAIM_NOT_SERVED, REASON_NOT_ADOPTED, REASON_TRANSFER_NOT_FOUND,
    REASON_TRANSFER_NOT_POPULATING,
};

/// Why a claim `claim_uid` that names `namespace/name` in `dataSourceRef`
/// cannot receive a volume from the object found there (`t`), as an
/// Event's reason and note; `None` while the object may still serve it.
pub(super) fn unserved(
    t: Option<&NamespaceTransfer>,
    namespace: &str,
    name: &str,
    claim_uid: &str,
) -> Option<(&'static str, String)> {
    let Some(t) = t else {
        return Some((
            REASON_TRANSFER_NOT_FOUND,
            format!(
                "NamespaceTransfer {namespace}/{name} does not exist: create it in this namespace with spec.source naming the claim to receive and spec.destination.populate: true"
            ),
        ));
    };
    let not_populating = |why: String| {
        Some((
            REASON_TRANSFER_NOT_POPULATING,
            format!("NamespaceTransfer {namespace}/{name} {why}, so it fills no claim"),
        ))
    };
    if role_of(t) != Some(Role::Destination) {
        return not_populating(
            "is not a request of this namespace (it gives a volume away)".to_owned(),
        );
    }
    if !t.populates() {
        return not_populating(format!(
            "creates its own claim {:?} (spec.destination.populate is not true)",
            t.spec.destination.name
        ));
    }
    if t.metadata.deletion_timestamp.is_some() {
        return not_populating("is being deleted".to_owned());
    }
    if t.served_claim_uid().is_some_and(|uid| uid != claim_uid) {
        return not_populating(format!(
            "was made for another claim by NamespaceTransfer {namespace}/{}; name that one",
            t.populated_name()
        ));
    }
    let status = t.status.as_ref();
    if t.is_standing_request() {
        let phase = status.and_then(|st| st.phase);
        if let Some(phase) = phase.filter(|p| p.is_finished()) {
            return not_populating(format!("is {phase}"));
        }
        // The request made for this claim says what went wrong with it.
        let made = status
            .into_iter()
            .flat_map(|st| &st.served)
            .find(|c| c.uid == claim_uid)?;
        let phase = made.phase.filter(|p| p.is_finished())?;
        return Some((
            REASON_CLAIM_NOT_SERVED,
            format!(
                "NamespaceTransfer {namespace}/{}, made for this claim, is {phase} ({}); delete the claim and create it again to ask again",
                made.transfer,
                made.reason.as_deref().unwrap_or("no reason given")
            ),
        ));
    }
    let adopted = status.and_then(|st| st.destination_claim.as_ref());
    if adopted.is_some_and(|c| c.uid == claim_uid) {
        return None;
    }
    let phase = status.and_then(|st| st.phase);
    if let Some(phase) = phase.filter(|p| p.is_finished() && *p != Phase::Completed) {
        return not_populating(format!("is {phase}"));
    }
    if let Some(adopted) = adopted {
        return Some((
            REASON_NOT_ADOPTED,
            format!(
                "NamespaceTransfer {namespace}/{name} moves one volume, and adopted PersistentVolumeClaim {}",
                adopted.name
            ),
        ));
    }
    if let Some(phase) = phase.filter(|p| p.is_finished()) {
        return not_populating(format!("is {phase}"));
    }
    None
}

/// When each waiting claim was last told each reason (by uid and reason),
/// so that one is told a thing at most once per [`CLAIM_POLL`] however
/// often its transfer is reconciled, and at once when the reason changes.
#[derive(Debug, Default)]
pub(super) struct Told(HashMap<String, Instant>);

impl Told {
    /// Whether `key` (a claim's uid and a reason) is due to be told now; if
    /// so, it counts as told. Entries no longer told are forgotten.
    fn due(&mut self, key: &str, now: Instant) -> bool {
        self.0
            .retain(|_, at| now.duration_since(*at) < CLAIM_POLL * 2);
        match self.0.get(key) {
            Some(at) if now.duration_since(*at) < CLAIM_POLL => false,
            _ => {
                self.0.insert(key.to_owned(), now);
                true
            }
        }
    }
}

impl TransferController {
    /// Warns the claims that name `namespace/name` and wait on it in vain
    /// (`t` is what is there); `Next::After(CLAIM_POLL)` while any waits.
    pub(super) async fn tell_waiting_claims(
        &self,
        namespace: &str,
        name: &str,
        t: Option<&NamespaceTransfer>,
    ) -> Result<Next, Error> {
        // Only a key a claim has named is worth a look through the claims.
        let key = format!("{namespace}/{name}");
        let Some(seen) = self.named.marked(&key) else {
            return Ok(Next::Done);
        };
        let claims = self.cluster.claims_naming_transfers(namespace).await?;
        let mut waiting = false;
        let mut named = false;
        for claim in claims.iter().map(Claim::from) {
            let pending = claim.volume_name.is_none() && !claim.deleting;
            if !pending || !claim.names_request(namespace, name) {
                continue;
            }
            named = true;
            let Some((reason, note)) = unserved(t, namespace, name, &claim.uid) else {
                continue;
            };
            waiting = true;
            let due = self
                .told
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .due(&format!("{}/{reason}", claim.uid), Instant::now());
            if due {
                let regarding = claim_reference(namespace, &claim.name, Some(&claim.uid));
                self.events
                    .publish(&regarding, Severity::Warning, reason, "Populate", &note)
                    .await;
            }
        }
        if !named {
            self.named.forget(&key, seen);
        }
        Ok(if waiting {
            Next::After(CLAIM_POLL)
        } else {
            Next::Done
        })
    }
}

#[cfg(test)]
mod tests;
