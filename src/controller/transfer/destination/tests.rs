//! The destination side's decisions, as table rows.

use super::*;
use crate::api::namespace_transfer::{NamespaceTransferStatus, FINALIZER_TRANSFER_PROTECTION};
use crate::controller::transfer::decide::tests::fresh;
use crate::controller::transfer::facts::Peer;

/// The request of the decide tests' pair, and its offer.
fn pair() -> (NamespaceTransfer, NamespaceTransfer) {
    let f = fresh();
    let Peer::Found(d) = f.peer else {
        panic!("the fixture has a peer")
    };
    (*d, f.source)
}

fn finished(t: &mut NamespaceTransfer, phase: Phase) {
    t.status
        .get_or_insert_with(NamespaceTransferStatus::default)
        .phase = Some(phase);
}

fn held(t: &mut NamespaceTransfer) {
    t.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
}

#[test]
fn a_matched_request_wakes_the_source_that_drives_it() {
    let (d, s) = pair();
    assert_eq!(
        destination_turn(&d, Found::Recorded(&s), 2_000),
        Turn::Wake(&s)
    );
    let view = DestinationView::Matched(&s);
    assert_eq!(
        destination_turn(&d, Found::Unrecorded(view), 2_000),
        Turn::Wake(&s)
    );
}

#[test]
fn a_request_whose_source_is_gone_before_the_end_is_cancelled() {
    let (d, _) = pair();
    match destination_turn(&d, Found::Gone, 2_000) {
        Turn::Finish { phase, report } => {
            assert_eq!(phase, Phase::Cancelled);
            assert_eq!(report.reason, decide::REASON_DELETED);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_finished_request_lets_go_of_its_finalizer_only_when_no_source_will() {
    let (mut d, mut s) = pair();
    finished(&mut d, Phase::Completed);
    held(&mut d);
    // Its Source still holds its own finalizer: the Source lets go of both.
    held(&mut s);
    assert_eq!(
        destination_turn(&d, Found::Recorded(&s), 2_000),
        Turn::Wake(&s)
    );
    // The Source let go of its own, or is gone: this side lets go.
    s.metadata.finalizers = None;
    assert_eq!(
        destination_turn(&d, Found::Recorded(&s), 2_000),
        Turn::LetGo
    );
    assert_eq!(destination_turn(&d, Found::Gone, 2_000), Turn::LetGo);
    d.metadata.finalizers = None;
    assert_eq!(destination_turn(&d, Found::Gone, 2_000), Turn::Expire);
}

#[test]
fn an_unmatched_request_waits_until_its_deadline_then_fails() {
    let (mut d, _) = pair();
    d.status = None;
    let unmatched = Found::Unrecorded(DestinationView::Unmatched);
    match destination_turn(&d, unmatched, 2_000) {
        Turn::Unmatched {
            phase, deadline, ..
        } => {
            assert_eq!(phase, Phase::WaitingForPeer);
            assert_eq!(deadline, Deadline::None);
        }
        other => panic!("{other:?}"),
    }
    // Made at 1,000 with 1,500 s: 500 s left at 2,000, none at 2,500.
    d.spec.active_deadline_seconds = Some(1_500);
    let deadline = |now| match destination_turn(&d, unmatched, now) {
        Turn::Unmatched { deadline, .. } => deadline,
        other => panic!("{other:?}"),
    };
    assert_eq!(deadline(2_000), Deadline::After(Duration::from_secs(500)));
    assert_eq!(deadline(2_500), Deadline::Passed);
}

#[test]
fn a_request_whose_offer_was_taken_says_so_and_names_no_other_request() {
    let (mut d, s) = pair();
    d.status = None;
    let mut winner = d.clone();
    winner.metadata.name = Some("early-bird".to_owned());
    let view = DestinationView::Taken {
        source: &s,
        winner: &winner,
    };
    match destination_turn(&d, Found::Unrecorded(view), 2_000) {
        Turn::Unmatched {
            phase,
            reason,
            message,
            ..
        } => {
            assert_eq!(phase, Phase::Pending);
            assert_eq!(reason, REASON_PEER_TAKEN);
            assert!(!message.contains("early-bird"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
