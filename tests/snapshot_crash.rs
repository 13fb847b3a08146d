//! A VolumeSnapshot move under failure (DESIGN §2.1.7): the server dies once
//! right after every write of a move on its way to completion, of a move
//! the destination's quota refuses on its way back, and of a clone of a
//! snapshot (at the writes the move has not crossed), and is restarted each
//! time. Each move still completes with the backend snapshot under the new
//! content, or leaves the source exactly as it was, and the CSI driver's call
//! log shows no `DeleteSnapshot`.
//!
//! It restarts the server, so it has a control plane of its own (beside the
//! claims' crash tests, which it would otherwise wait behind). It needs the
//! `fault-injection` feature (`make test`).

#![cfg(feature = "fault-injection")]
#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::Duration;

use sta_testenv::scenario;
use sta_testenv::scenario::crash::{crash_each_new_boundary_of, private_control_plane, restart};
use sta_testenv::scenario::snapshots::{self, SnapshotSetup, SNAP_ALLOWED};
use sta_testenv::scenario::{eventually, quota, wait_phase};

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
    // A clone of the snapshot is the claim protocol, whose writes from R2 on
    // the claims' crash tests (transfer_crash's clones) cross with the same
    // decisions; what is new here is C1, the restore, and the first write
    // after it (R1's record, once the restarted server knows the restore as
    // its own again). The later boundaries are marked crossed, which saves
    // this binary some twenty restarts.
    let claims_crash_tests_cross = [
        "RecordSource#2",
        "Retain#1 Retain#2 Retain#3 Retain#4 Retain#5",
        "CreateDestination#1 CreateDestination#2 CreateDestination#3",
        "RecordDestination#1",
        "Commit#1 Commit#2 Commit#3 Commit#4 Commit#5",
        "ReleaseSource#1 ReleaseSource#2 ReleaseSource#3",
        "Settle#1 UnlockDestination#1 Complete#1 Complete#2 UnprotectDestination#1",
    ];
    let mut seeded = std::fs::read_to_string(&crossed).unwrap_or_default();
    // One boundary per line, as the server lists them.
    for boundary in claims_crash_tests_cross.iter().flat_map(|l| l.split(' ')) {
        seeded.push_str(boundary);
        seeded.push('\n');
    }
    std::fs::write(&crossed, seeded).unwrap();
    let (clone_crashes, clones) = crash_each_new_boundary_of(
        &cp,
        &crossed,
        snapshot,
        |k, s| s.clone_consent(k),
        |s| {
            s.assert_cloned(cp.kubectl(), &cp.csi, WAIT);
        },
    );
    println!("snapshot clones: {clone_crashes} crashes over {clones} clones, each completed");
    destination_deleted_between_the_commit_and_r5_keeps_the_backend_snapshot(&cp);
    let boundaries = std::fs::read_to_string(&crossed).unwrap_or_default();
    for step in [
        "CreateClone#1",
        "RecordSource#1",
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

/// The destination's tenant deletes its snapshot right after the commit,
/// while the server pauses before R5: the move goes forward (the source
/// snapshot and its old content go, both under Retain), says
/// `DestinationLost`, and the new content keeps the backend snapshot under
/// Retain for an administrator. The driver never deletes it.
fn destination_deleted_between_the_commit_and_r5_keeps_the_backend_snapshot(
    cp: &sta_testenv::ControlPlane,
) {
    restart(cp, &[("STA_FAULT_PAUSE_BEFORE", "R5:4000")]);
    let s = SnapshotSetup::new(cp, SNAP_ALLOWED);
    let k = cp.kubectl();
    s.consent(cp.direct());
    let committed = |t: &serde_json::Value| {
        t["status"]["steps"]
            .as_array()
            .is_some_and(|steps| steps.iter().any(|x| x["name"] == "Committed"))
    };
    eventually("the commit", WAIT, || {
        scenario::transfer_json(cp.direct(), &s.src.name, "give").is_some_and(|t| committed(&t))
    });
    k.ok(&["delete", "volumesnapshot", "nightly", "-n", &s.dst.name]);
    eventually("the move to say the destination is lost", WAIT, || {
        scenario::transfer_json(cp.direct(), &s.src.name, "give")
            .is_some_and(|t| t["status"]["reason"] == "DestinationLost")
    });
    let give = scenario::transfer_json(cp.direct(), &s.src.name, "give").unwrap();
    let made = give["status"]["destinationSnapshot"]["contentName"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually("the source snapshot and its content to go", WAIT, || {
        snapshots::snapshot_json(k, &s.src.name, "nightly").is_none()
            && snapshots::content_json(k, &s.content).is_none()
    });
    let kept = snapshots::content_json(k, &made).expect("the new content is kept");
    assert_eq!(kept["spec"]["deletionPolicy"], "Retain", "{kept}");
    assert_eq!(kept["spec"]["source"]["snapshotHandle"], s.handle.as_str());
    s.assert_backend_kept(&cp.csi);
    restart(cp, &[]);
}
