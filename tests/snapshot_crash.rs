//! A VolumeSnapshot move under failure (DESIGN §2.1.7): the server dies once
//! right after every write of a move on its way to completion, and of a move
//! the destination's quota refuses on its way back, and is restarted each
//! time. Each move still completes with the backend snapshot under the new
//! content, or leaves the source exactly as it was, and the CSI driver's call
//! log shows no `DeleteSnapshot`.
//!
//! It restarts the server, so it has a control plane of its own (beside the
//! claims' crash tests, which it would otherwise wait behind). It needs the
//! `fault-injection` feature (`make test`).

#![cfg(feature = "fault-injection")]
#![allow(clippy::unwrap_used)] // Tests fail by panicking.

mod scenario;

use std::time::Duration;

use scenario::crash::{crash_each_new_boundary_of, private_control_plane};
use scenario::snapshots::{self, SnapshotSetup, SNAP_ALLOWED};
use scenario::{eventually, quota, wait_phase};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const WAIT: Duration = Duration::from_secs(90);

#[test]
fn a_snapshot_move_crashed_once_after_every_write_completes_or_restores_the_source() {
    let cp = private_control_plane(BIN);
    snapshots::ensure_snapshot_classes(cp.kubectl());
    let crossed = cp.logs_dir().join("snapshot-crossed.txt");
    let snapshot = || SnapshotSetup::new(&cp, SNAP_ALLOWED);
    let (crashes, moves) = crash_each_new_boundary_of(
        &cp,
        &crossed,
        snapshot,
        |k, s| s.consent(k),
        |s| {
            s.assert_moved(cp.kubectl(), &cp.csi, WAIT);
        },
    );
    println!("snapshot moves: {crashes} crashes over {moves} moves, each completed");
    let (refused_crashes, refused) = crash_each_new_boundary_of(
        &cp,
        &crossed,
        snapshot,
        |k, s| {
            quota(
                cp.kubectl(),
                &s.dst.name,
                "{count/volumesnapshots.snapshot.storage.k8s.io: \"0\", persistentvolumeclaims: \"10\"}",
                WAIT,
            );
            s.consent(k);
        },
        |s| {
            let give = wait_phase(cp.kubectl(), &s.src.name, "give", "Failed", WAIT);
            assert_eq!(give["status"]["reason"], "DestinationRefused", "{give}");
            s.assert_source_untouched(cp.kubectl(), &cp.csi, WAIT);
            let made = format!(
                "snapcontent-transfer-{}",
                give["metadata"]["uid"].as_str().unwrap()
            );
            eventually("the content made for it to go", WAIT, || {
                snapshots::content_json(cp.kubectl(), &made).is_none()
            });
        },
    );
    println!(
        "refused snapshot moves: {refused_crashes} crashes over {refused} moves, each rolled back"
    );
    let boundaries = std::fs::read_to_string(&crossed).unwrap_or_default();
    for step in [
        "R1",
        "R2",
        "R3",
        "R4",
        "R5",
        "R6",
        "SnapshotMarkDeleting#1",
        "SnapshotDeleteContent#1",
        "SnapshotUnmark#1",
    ] {
        assert!(
            boundaries
                .lines()
                .any(|l| l.split(' ').any(|token| token == step)),
            "no crash after {step}: {boundaries}"
        );
    }
}
