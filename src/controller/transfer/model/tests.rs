//! The model check runs in `make test`: every interleaving of the
//! controller, a stale leader, the cluster and the tenants' moves, each run
//! with the moves it allows.

use super::*;

/// Explores from the start with `allowed` moves; panics with the path to
/// the first violation.
fn check(name: &str, allowed: u16, limit: usize) -> Report {
    check_from(name, World::start(allowed), limit)
}

/// Explores from `start`; panics with the path to the first violation.
pub(super) fn check_from<W: Space>(name: &str, start: W, limit: usize) -> Report<W> {
    let report = explore(start, limit);
    if let Some((why, path)) = &report.violation {
        let steps: Vec<String> = path.iter().map(|w| format!("{w:?}")).collect();
        panic!(
            "{name}: {why}\nafter {} states; the path:\n{}",
            report.states,
            steps.join("\n")
        );
    }
    println!(
        "model check {name}: {} states, {} settled ({} Completed, {} Failed or Cancelled)",
        report.states, report.quiescent, report.completed, report.failed_or_cancelled
    );
    report
}

#[test]
fn left_alone_the_pair_completes_and_the_volume_moves() {
    let report = check("no moves", 0, 100_000);
    assert!(report.completed > 0, "{report:?}");
    assert_eq!(report.failed_or_cancelled, 0, "{report:?}");
}

/// The moves a Move run allows: all but the clone's timeout (there is no
/// clone).
fn move_moves() -> Vec<Move> {
    MOVES
        .into_iter()
        .filter(|m| *m != Move::CloneTimesOut)
        .collect()
}

#[test]
fn no_single_move_of_a_tenant_a_stale_leader_or_the_cluster_loses_the_volume() {
    for m in move_moves() {
        check(&format!("{m:?}"), moves(&[m]), 400_000);
    }
}

#[test]
fn no_pair_of_moves_loses_the_volume() {
    // A lagging binder is paired with the moves that race the writes made
    // in its place, below.
    let list: Vec<Move> = move_moves()
        .into_iter()
        .filter(|m| *m != Move::StaleBinder)
        .collect();
    let mut total = 0;
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            total += check(&format!("{a:?} + {b:?}"), moves(&[*a, *b]), 400_000).states;
        }
    }
    println!("model check: {total} states over every pair of moves");
}

#[test]
fn a_stale_leader_with_tenants_deleting_everything_loses_nothing() {
    check(
        "stale leader and deletions",
        moves(&[
            TenantMove::StaleGather,
            TenantMove::StaleAct,
            TenantMove::DeleteSource,
            TenantMove::DeleteRequest,
            TenantMove::DeleteDestinationClaim,
            TenantMove::DeleteSourceClaim,
        ]),
        600_000,
    );
}

#[test]
fn every_move_at_once_loses_nothing() {
    let report = check("every move", ALL_MOVES, 600_000);
    assert!(report.states > 10_000, "{report:?}");
}

// ----- Clone mode: C1 and C2 before R1–R6 -------------------------------------------

/// The moves a Clone run allows: all but recreating the request (the clone's
/// name is the request's, and the model keeps one name).
fn clone_moves() -> Vec<Move> {
    MOVES
        .into_iter()
        .filter(|m| *m != Move::RecreateRequest)
        .collect()
}

#[test]
fn left_alone_a_clone_pair_completes_and_the_clone_moves() {
    let report = check_from("clone, no moves", World::start_clone(0), 100_000);
    assert!(report.completed > 0, "{report:?}");
    assert_eq!(report.failed_or_cancelled, 0, "{report:?}");
}

#[test]
fn a_clone_left_unbound_past_the_timeout_fails_and_leaks_nothing() {
    let report = check_from(
        "clone, timeout",
        World::start_clone(moves(&[Move::CloneTimesOut])),
        100_000,
    );
    assert!(report.completed > 0, "{report:?}");
    assert!(report.failed_or_cancelled > 0, "{report:?}");
}

#[test]
fn no_pair_of_moves_leaks_a_clone_or_loses_a_handed_over_one() {
    // A lagging binder has its own clone run (with the source deleted),
    // below.
    let list: Vec<Move> = clone_moves()
        .into_iter()
        .filter(|m| *m != Move::StaleBinder)
        .collect();
    let mut total = 0;
    for m in &list {
        total += check_from(
            &format!("clone, {m:?}"),
            World::start_clone(moves(&[*m])),
            400_000,
        )
        .states;
    }
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            total += check_from(
                &format!("clone, {a:?} + {b:?}"),
                World::start_clone(moves(&[*a, *b])),
                400_000,
            )
            .states;
        }
    }
    println!("model check: {total} states over every single move and pair of moves, Clone mode");
}

#[test]
fn watch_copies_that_fall_behind_at_any_moment_lose_nothing_and_leak_no_clone() {
    let stale = moves(&[Move::StaleCache]);
    let report = check("stale watch copies", stale, 400_000);
    assert!(report.completed > 0, "{report:?}");
    assert!(
        report.states < 400_000,
        "the search ended at its cap: {report:?}"
    );
    let report = check_from(
        "clone, stale watch copies and a deletion",
        World::start_clone(moves(&[Move::StaleCache, Move::DeleteSource])),
        400_000,
    );
    assert!(report.failed_or_cancelled > 0, "{report:?}");
}

#[test]
fn a_deadline_passing_at_any_moment_fails_the_pair_before_the_commit_and_never_after() {
    let report = check("deadline", moves(&[Move::DeadlinePasses]), 400_000);
    assert!(report.completed > 0, "{report:?}");
    assert!(report.failed_or_cancelled > 0, "{report:?}");
}

// ----- Populate mode: the tenant's claim adopted at R3 (DESIGN §2.3) -----------------

#[test]
fn left_alone_a_populating_pair_moves_the_volume_into_the_tenants_claim() {
    let report = check_from("populate, no moves", World::start_populate(0), 100_000);
    assert!(report.completed > 0, "{report:?}");
    assert_eq!(report.failed_or_cancelled, 0, "{report:?}");
}

#[test]
fn a_tenant_deleting_or_replacing_the_adopted_claim_at_any_point_loses_nothing_and_is_never_undone_by_us(
) {
    let mut total = 0;
    for m in move_moves() {
        total += check_from(
            &format!("populate, {m:?}"),
            World::start_populate(moves(&[m])),
            400_000,
        )
        .states;
    }
    // The claim deleted and another of its name written, against each of
    // the moves that race it: a stale leader, stale copies, the request
    // deleted, a right revoked.
    let swap = [Move::DeleteDestinationClaim, Move::ForgeDestination];
    for m in [
        Move::StaleGather,
        Move::StaleAct,
        Move::StaleCache,
        Move::DeleteRequest,
        Move::RevokeRight,
    ] {
        let mut these = swap.to_vec();
        these.push(m);
        total += check_from(
            &format!("populate, swap + {m:?}"),
            World::start_populate(moves(&these)),
            400_000,
        )
        .states;
    }
    println!("model check: {total} states, populate mode");
}

#[test]
fn a_binder_whose_copy_of_the_volume_lags_never_makes_the_claim_the_volume_names_lost() {
    // The writes made in the binder's place (the destination's status at
    // R4, the source Lost at R5) against a binder that reads an old
    // claimRef, with whatever else races them: the claims deleted, stale
    // copies of our own, a stale leader, the pod.
    let mut total = 0;
    for m in [
        Move::DeleteSourceClaim,
        Move::DeleteDestinationClaim,
        Move::StaleCache,
        Move::StaleGather,
        Move::StaleAct,
        Move::StartPod,
    ] {
        total += check(
            &format!("StaleBinder + {m:?}"),
            moves(&[Move::StaleBinder, m]),
            400_000,
        )
        .states;
    }
    total += check_from(
        "populate, StaleBinder",
        World::start_populate(moves(&[Move::StaleBinder, Move::DeleteDestinationClaim])),
        400_000,
    )
    .states;
    total += check_from(
        "clone, StaleBinder",
        World::start_clone(moves(&[Move::StaleBinder, Move::DeleteSource])),
        400_000,
    )
    .states;
    println!("model check: {total} states with a lagging binder");
}
