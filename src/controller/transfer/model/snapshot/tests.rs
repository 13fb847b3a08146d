//! The snapshot move's model check: left alone, and with every tenant's,
//! stale leader's and cluster's move, one at a time and two at a time.

use super::super::tests::check_from;
use super::*;

fn check(name: &str, allowed: u16) -> super::super::Report<SnapWorld> {
    check_from(name, SnapWorld::start(allowed), 2_000_000)
}

#[test]
fn left_alone_the_snapshot_moves_and_nothing_deletes_the_backend_snapshot() {
    let report = check("snapshot, no moves", 0);
    assert!(report.completed > 0, "{report:?}");
    assert_eq!(report.failed_or_cancelled, 0, "{report:?}");
}

#[test]
fn no_single_move_of_a_tenant_or_a_stale_leader_loses_the_backend_snapshot() {
    for m in SNAP_MOVES {
        let report = check(&format!("snapshot, {m:?}"), snap_moves(&[m]));
        assert!(report.completed > 0, "{m:?}: {report:?}");
    }
}

#[test]
fn no_pair_of_moves_loses_the_backend_snapshot() {
    let mut total = 0;
    for (i, a) in SNAP_MOVES.iter().enumerate() {
        for b in &SNAP_MOVES[i + 1..] {
            total += check(&format!("snapshot, {a:?} + {b:?}"), snap_moves(&[*a, *b])).states;
        }
    }
    println!("snapshot pairs of moves: {total} states");
}
