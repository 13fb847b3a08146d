//! The standing offer's model check: two requests, `maxClones: 1`, every
//! interleaving of the offer's reconcile, both pairs' and the cluster's.
//!
//! Left alone the whole space is explored (about 15,000 states). With a
//! tenant's move, a stale watch copy or a crash, the two pairs run side by
//! side and the space grows past what a test can walk (past 400,000 states
//! for one deletion), so those runs walk the first states breadth-first,
//! within a bound: every state walked is checked, and the stale copy that
//! made a second clone did so within 44 states.

use super::super::tests::check_from;
use super::*;

#[test]
fn left_alone_one_request_gets_the_one_clone_and_the_other_waits() {
    let report = check_from("offer, no moves", Offered::start(0), 100_000);
    assert!(report.states < 100_000, "not walked to the end: {report:?}");
    assert_eq!(report.most_completed, 1, "{report:?}");
    assert_eq!(report.failed_or_cancelled, 0, "{report:?}");
}

#[test]
fn in_the_first_states_no_move_puts_more_clones_alive_than_max_clones() {
    let mut total = 0;
    for m in [
        OfferMove::StaleCache,
        OfferMove::DeleteCloneA,
        OfferMove::DeleteRequestA,
        OfferMove::DeleteOffer,
        OfferMove::Crash,
    ] {
        total += check_from(
            &format!("offer, {m:?}, bounded"),
            Offered::start(offer_moves(&[m])),
            8_000,
        )
        .states;
    }
    println!("model check: {total} states of the offer with single moves");
}
