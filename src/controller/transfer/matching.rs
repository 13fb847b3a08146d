//! Matching (DESIGN §2.1.3): which Destination-role transfer is the peer of
//! which Source-role transfer, with the oldest-wins rule. Pure functions over
//! a snapshot of all transfers; the reconciler decides what to do about it.
//!
//! Once a Source has recorded its peer in `status.peer`, that record wins over
//! a fresh computation: a match is never moved to another Destination.
//!
//! A record names the other object by namespace and name, and by a uid
//! derived from its uid ([`peer_uid`]), never by the uid itself: a namespace
//! may learn that its peer exists, not the identity of an object it cannot
//! read (DESIGN §2.1.3). The same goes for a standing offer's records of its
//! requests, and for a clone's name and `clone-for` annotation
//! ([`receiver_uid`]), and for the lock on the claim the destination
//! receives ([`destination_lock`]).

use std::cmp::Ordering;

use uuid::Uuid;

use crate::api::namespace_transfer::{NamespaceTransfer, PeerReference, Role};

/// The role an object speaks for, from its spec alone (its namespaces):
/// `status.role` only reports it, and status is never input.
pub fn role_of(t: &NamespaceTransfer) -> Option<Role> {
    t.role().ok()
}

/// Not Completed, Failed or Cancelled.
pub fn is_active(t: &NamespaceTransfer) -> bool {
    !t.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(|p| p.is_finished())
}

/// The uid `holder` records for its peer whose uid is `peer`: the UUIDv5 of
/// the peer's uid in the holder's uid as namespace. The controller, which
/// reads both objects, can check it; the holder's namespace, which cannot
/// read the peer, cannot invert it (the peer's uid is a random UUIDv4, 122
/// bits behind SHA-1), so it learns the peer's namespace and name only, as
/// DESIGN §2.1.3 allows. Deterministic, so every replica records the same.
pub fn peer_uid(holder: &str, peer: &str) -> String {
    // Our uids are UUIDs; anything else (an object made before the server
    // set one, a test's) still gets a namespace of its own.
    let namespace = Uuid::parse_str(holder)
        .unwrap_or_else(|_| Uuid::new_v5(&Uuid::NAMESPACE_OID, holder.as_bytes()));
    Uuid::new_v5(&namespace, peer.as_bytes()).to_string()
}

/// A reference to `t`, as `holder` records it: `t`'s namespace and name, and
/// [`peer_uid`] rather than `t`'s own uid.
pub fn reference(t: &NamespaceTransfer, holder: &NamespaceTransfer) -> PeerReference {
    PeerReference {
        namespace: t.own_namespace().to_owned(),
        name: t.metadata.name.clone().unwrap_or_default(),
        uid: t
            .metadata
            .uid
            .as_deref()
            .map(|uid| peer_uid(uid_of(holder), uid)),
    }
}

/// The reference `holder` is to record for `t`, given the one it holds now:
/// a fresh [`reference`], except that a record an older server wrote, with
/// `t`'s own uid, is kept while it names `t`. A clone is named after the
/// recorded uid (see [`receiver_uid`]), so the record keeps its form until
/// the pair ends.
pub fn rerecord(
    current: Option<&PeerReference>,
    t: &NamespaceTransfer,
    holder: &NamespaceTransfer,
) -> PeerReference {
    match current {
        Some(p) if is_raw_record(p, t) => p.clone(),
        _ => reference(t, holder),
    }
}

/// Whether `peer` names `t` by `t`'s own uid: a record made before records
/// held [`peer_uid`].
fn is_raw_record(peer: &PeerReference, t: &NamespaceTransfer) -> bool {
    peer.namespace == t.own_namespace()
        && t.metadata.name.as_deref() == Some(peer.name.as_str())
        && t.metadata.uid.is_some()
        && peer.uid == t.metadata.uid
}

/// Whether `d` is the object that `holder`'s reference `peer` names:
/// namespace, name and, when the reference records one, uid (a peer
/// recreated under the same name is another object). The uid is
/// [`peer_uid`] of `d`'s; `d`'s own uid is accepted too, as records made
/// before that hold it.
pub fn is_named(d: &NamespaceTransfer, peer: &PeerReference, holder: &NamespaceTransfer) -> bool {
    d.own_namespace() == peer.namespace
        && d.metadata.name.as_deref() == Some(&peer.name)
        && peer.uid.as_deref().is_none_or(|recorded| {
            d.metadata
                .uid
                .as_deref()
                .is_some_and(|uid| recorded == peer_uid(uid_of(holder), uid) || recorded == uid)
        })
}

/// The uid Clone-mode transfer `s` makes its clone for receiver `d` under
/// (its name's suffix and its `clone-for` annotation, both in the source
/// namespace): the uid `s` records for `d` ([`peer_uid`]), so that the clone
/// names nothing of the destination's and is found again from `s`'s record
/// once `d` is gone. A pair whose record an older server wrote keeps `d`'s
/// own uid, under which that server made its clone.
pub fn receiver_uid(s: &NamespaceTransfer, d: &NamespaceTransfer) -> String {
    if records_raw(s, d) || records_raw(d, s) {
        uid_of(d).to_owned()
    } else {
        peer_uid(uid_of(s), uid_of(d))
    }
}

/// The lock that transfer `s` puts on the claim `namespace/name` it makes in
/// the destination namespace (R3): derived from `s`'s uid and that claim, as
/// [`peer_uid`] derives a record, so that the destination, which reads the
/// claim, learns nothing of the source side's objects. Claim names hold no
/// `/`, so no derived lock is another's.
pub fn destination_lock(s: &NamespaceTransfer, namespace: &str, name: &str) -> String {
    peer_uid(uid_of(s), &format!("{namespace}/{name}"))
}

/// Whether `lock`, read on claim `namespace/name`, is held by `t`: as the
/// source's lock (`t`'s uid), or as the lock `t` put on a claim it made in
/// the destination namespace ([`destination_lock`], or `t`'s uid where an
/// older server made it).
pub fn holds_claim(t: &NamespaceTransfer, lock: &str, namespace: &str, name: &str) -> bool {
    !uid_of(t).is_empty() && (lock == uid_of(t) || lock == destination_lock(t, namespace, name))
}

/// Whether `holder`'s recorded peer is `t`, by `t`'s own uid: a record an
/// older server wrote.
pub fn records_raw(holder: &NamespaceTransfer, t: &NamespaceTransfer) -> bool {
    holder
        .status
        .as_ref()
        .and_then(|st| st.peer.as_ref())
        .is_some_and(|p| is_raw_record(p, t))
}

fn uid_of(t: &NamespaceTransfer) -> &str {
    t.metadata.uid.as_deref().unwrap_or_default()
}

/// Whether Source-role `s` and Destination-role `d` are peers: the same
/// source claim and mode, `d` in `s`'s destination namespace, and `s`'s
/// destination name empty or equal to `d`'s. A standing populating request
/// is nobody's peer: the requests it makes for its claims are.
pub fn are_peers(s: &NamespaceTransfer, d: &NamespaceTransfer) -> bool {
    role_of(s) == Some(Role::Source)
        && role_of(d) == Some(Role::Destination)
        && !d.is_standing_request()
        && s.source_namespace() == d.source_namespace()
        && s.spec.source.name == d.spec.source.name
        && s.source_kind() == d.source_kind()
        && s.destination_namespace() == d.own_namespace()
        && (s.spec.destination.name.is_empty()
            || s.spec.destination.name == d.spec.destination.name)
        && s.mode() == d.mode()
}

/// Oldest first: by creationTimestamp, then by name.
pub fn by_age(a: &NamespaceTransfer, b: &NamespaceTransfer) -> Ordering {
    let created = |t: &NamespaceTransfer| t.metadata.creation_timestamp.as_ref().map(|c| c.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The Destination that `s` matches among `all`: the one `s` recorded, or
/// else the oldest active peer. (A standing offer has no one peer: see
/// [`standing_pairs`].) `all` must hold at least the transfers of `s`'s
/// destination namespace.
pub fn peer_of<'a>(
    s: &NamespaceTransfer,
    all: &'a [NamespaceTransfer],
) -> Option<&'a NamespaceTransfer> {
    if let Some(recorded) = s.status.as_ref().and_then(|st| st.peer.as_ref()) {
        return all.iter().find(|d| is_named(d, recorded, s));
    }
    all.iter()
        .filter(|d| is_active(d) && are_peers(s, d))
        .min_by(|a, b| by_age(a, b))
}

/// The requests a standing offer `s` has matched: every Destination whose
/// recorded peer is `s`, uid and all (`s` may read its requests' records).
pub fn standing_pairs<'a>(
    s: &'a NamespaceTransfer,
    all: &'a [NamespaceTransfer],
) -> impl Iterator<Item = &'a NamespaceTransfer> {
    all.iter().filter(move |d| {
        role_of(d) == Some(Role::Destination)
            && d.status
                .as_ref()
                .and_then(|st| st.peer.as_ref())
                .is_some_and(|p| p.uid.is_some() && is_named(s, p, d))
    })
}

/// What a Destination-role transfer sees of the Source side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DestinationView<'a> {
    /// This Source has taken (or takes) `d` as its peer; it drives the pair.
    Matched(&'a NamespaceTransfer),
    /// The only Source(s) that offer the claim took another Destination.
    Taken {
        source: &'a NamespaceTransfer,
        winner: &'a NamespaceTransfer,
    },
    /// No active Source offers the claim to this namespace.
    Unmatched,
}

/// How `d` stands among `all`. A Source that has finished still counts
/// against a Destination created before it finished: the offer was taken,
/// and the Destination stays `PeerTaken` rather than waiting for it again.
/// `all` must hold at least the transfers of `d`'s own and source namespaces.
pub fn destination_view<'a>(
    d: &NamespaceTransfer,
    all: &'a [NamespaceTransfer],
) -> DestinationView<'a> {
    let mut taken = None;
    for s in all.iter().filter(|s| are_peers(s, d)) {
        if s.is_standing_offer() {
            // A standing offer takes every request; it is never taken.
            if is_active(s) {
                return DestinationView::Matched(s);
            }
            continue;
        }
        let winner = if is_active(s) {
            peer_of(s, all)
        } else if created_before_finish(d, s) {
            s.status
                .as_ref()
                .and_then(|st| st.peer.as_ref())
                .and_then(|p| all.iter().find(|o| is_named(o, p, s)))
        } else {
            None
        };
        match winner {
            Some(w) if is_itself(w, d) => return DestinationView::Matched(s),
            Some(w) => {
                taken = Some(DestinationView::Taken {
                    source: s,
                    winner: w,
                })
            }
            None => {}
        }
    }
    taken.unwrap_or(DestinationView::Unmatched)
}

/// Whether `a` and `b` are the same object.
fn is_itself(a: &NamespaceTransfer, b: &NamespaceTransfer) -> bool {
    a.own_namespace() == b.own_namespace()
        && a.metadata.name == b.metadata.name
        && b.metadata
            .uid
            .as_ref()
            .is_none_or(|_| a.metadata.uid == b.metadata.uid)
}

/// Whether `d` was created no later than finished `s` finished (when its
/// `Ready` condition last changed).
fn created_before_finish(d: &NamespaceTransfer, s: &NamespaceTransfer) -> bool {
    let finished = s.status.as_ref().and_then(|st| {
        crate::api::meta::find_condition(
            &st.conditions,
            crate::api::namespace_transfer::CONDITION_READY,
        )
        .map(|c| c.last_transition_time.0)
    });
    match (d.metadata.creation_timestamp.as_ref(), finished) {
        (Some(created), Some(finished)) => created.0 <= finished,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
