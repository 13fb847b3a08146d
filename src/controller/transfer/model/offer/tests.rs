//! The standing offer's model check: two requests, `maxClones: 1`, every
//! interleaving of the offer's reconcile, both pairs' and the cluster's.
//!
//! Left alone the whole space is explored (about 15,000 states). With a
//! tenant's move, a stale watch copy or a crash, the two pairs run side by
//! side and the space grows past what a test can walk (past 400,000 states
//! for one deletion), so those runs walk the first states breadth-first,
//! within a bound: every state walked is checked, and the stale copy that
//! made a second clone did so within 44 states.
//!
//! Populate mode (the requests made for two claims the tenant wrote): left
//! alone, walked whole; two pairs with a move, bounded as above; one pair
//! with a tenant deleting its claim, a crash, or either transfer deleted,
//! walked whole.

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

// ----- Populate mode: the tenant's claims adopted (DESIGN §2.3) ---------------

#[test]
fn left_alone_one_claim_naming_a_populating_request_gets_the_one_clone_and_the_other_waits() {
    let report = check_from(
        "offer, populate, no moves",
        Offered::start_populate(0, true),
        100_000,
    );
    assert!(report.states < 100_000, "not walked to the end: {report:?}");
    assert_eq!(report.most_completed, 1, "{report:?}");
    assert_eq!(report.failed_or_cancelled, 0, "{report:?}");
}

#[test]
fn in_the_first_states_of_two_populating_pairs_a_tenant_deleting_its_claim_or_a_crash_keeps_the_count(
) {
    let mut total = 0;
    for m in [OfferMove::DeleteDestinationA, OfferMove::Crash] {
        total += check_from(
            &format!("offer, populate, {m:?}, bounded"),
            Offered::start_populate(offer_moves(&[m]), true),
            8_000,
        )
        .states;
    }
    println!("model check: {total} states of the populating offer with single moves");
}

#[test]
fn a_tenant_deleting_its_adopted_claim_or_a_crash_at_any_point_of_one_populating_pair_loses_nothing(
) {
    let mut total = 0;
    // The moves that end an adopted claim's pair, or its claim. A clone's
    // deletion and a stale copy act as they do without a tenant's claim,
    // and are walked (bounded) above.
    for m in [
        OfferMove::DeleteDestinationA,
        OfferMove::Crash,
        OfferMove::DeleteRequestA,
        OfferMove::DeleteOffer,
    ] {
        let report = check_from(
            &format!("offer, populate one claim, {m:?}"),
            Offered::start_populate(offer_moves(&[m]), false),
            200_000,
        );
        assert!(
            report.states < 200_000,
            "{m:?}: not walked to the end: {report:?}"
        );
        total += report.states;
    }
    println!("model check: {total} states of one populating pair with single moves");
}
