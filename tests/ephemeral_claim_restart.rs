//! EphemeralClaims across server restarts (DESIGN §2.2, issue "restart
//! safety"): whatever happens while our server is down, it leaves no orphaned
//! claim once it is back, and never deletes a claim before use.
//!
//! These tests kill and restart the server, so they share one private control
//! plane and take turns.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use sta_testenv::ephemeral::*;
use sta_testenv::scenario::{claim_json, consistently, delete_pod, eventually, set_pod_phase};
use sta_testenv::{ControlPlane, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const WAIT: Duration = Duration::from_secs(90);
/// A short lease, so that a restarted server leads again within seconds.
const LEASE: &str = "--leader-elect-lease-duration=2s";

static CP: OnceLock<ControlPlane> = OnceLock::new();
static TURN: Mutex<()> = Mutex::new(());

/// The control plane, and the right to restart its server.
fn turn() -> (&'static ControlPlane, MutexGuard<'static, ()>) {
    let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let cp = CP.get_or_init(|| {
        let mut opts = Options::for_tests(BIN);
        opts.server_args.push(LEASE.to_owned());
        let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
        ensure_class(cp.kubectl());
        cp
    });
    (cp, guard)
}

fn restart(cp: &ControlPlane) {
    cp.restart_server(&[], &[])
        .unwrap_or_else(|e| panic!("restarting the server: {e}"));
}

#[test]
fn an_owner_pod_deleted_while_the_server_is_down_leaves_no_claim_and_shows_deleted() {
    let (cp, _turn) = turn();
    let k = cp.kubectl();
    let ns = cp.namespace("ec-down").unwrap();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Scheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");
    set_pod_phase(k, &ns.name, "runner", "Running");
    wait_phase(k, &ns.name, "scratch", "InUse");

    cp.kill_server();
    delete_pod(k, &ns.name, "runner");
    // The garbage collector deletes a dependent only once all its owners are
    // gone, and it cannot look up the claim's other owner, the
    // EphemeralClaim, while our server is down: it waits, and so does the
    // claim (src/controller/claim.rs, "The garbage collector").
    consistently(
        "the claim waits for the server",
        Duration::from_secs(5),
        || claim_json(k, &ns.name, "runner-scratch").is_some(),
    );
    restart(cp);

    let ec = wait_phase(k, &ns.name, "scratch", "Deleted");
    assert_eq!(ec["status"]["reason"], "OwnerGone", "{ec}");
    assert!(ec["status"]["firstUsedTime"].is_string(), "{ec}");
    eventually("no claim to be left", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch").is_none()
    });
    cp.csi.assert_deleted_once(&handle, WAIT);
    eventually("the finalizer to be released", WAIT, || {
        ec_json(k, &ns.name, "scratch").is_some_and(|ec| ec["metadata"]["finalizers"].is_null())
    });
}

#[test]
fn a_pod_that_finished_while_the_server_was_down_has_its_claim_deleted_on_restart() {
    let (cp, _turn) = turn();
    let k = cp.kubectl();
    let ns = cp.namespace("ec-finished").unwrap();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Scheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");

    cp.kill_server();
    // It ran and finished without the server ever seeing it run.
    set_pod_phase(k, &ns.name, "runner", "Running");
    set_pod_phase(k, &ns.name, "runner", "Succeeded");
    restart(cp);

    // The finished pod still names the claim: Deleting until it goes.
    let ec = wait_phase(k, &ns.name, "scratch", "Deleting");
    assert_eq!(ec["status"]["reason"], "OwnerFinished", "{ec}");
    eventually("the claim to be deleted", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch")
            .is_none_or(|c| c["metadata"]["deletionTimestamp"].is_string())
    });
    delete_pod(k, &ns.name, "runner");
    eventually("no claim to be left", WAIT, || {
        claim_json(k, &ns.name, "runner-scratch").is_none()
    });
    cp.csi.assert_deleted_once(&handle, WAIT);
}

#[test]
fn restarts_while_a_bound_claim_waits_for_its_pod_never_delete_it() {
    let (cp, _turn) = turn();
    let k = cp.kubectl();
    let ns = cp.namespace("ec-wait").unwrap();
    create_pod(
        k,
        &ns.name,
        "runner",
        "runner-scratch",
        Scheduling::Unscheduled,
    );
    apply_ephemeral_claim(k, &ns.name, "scratch", "runner", Policy::Delete);
    wait_phase(k, &ns.name, "scratch", "Bound");
    let (_, handle) = bound_volume_of(k, &ns.name, "runner-scratch");
    let uid = claim_json(k, &ns.name, "runner-scratch").unwrap()["metadata"]["uid"].clone();
    let unchanged = || {
        claim_json(k, &ns.name, "runner-scratch").is_some_and(|c| {
            c["metadata"]["uid"] == uid
                && c["metadata"]["deletionTimestamp"].is_null()
                && c["status"]["phase"] == "Bound"
        }) && ec_phase(k, &ns.name, "scratch") == "Bound"
    };
    for _ in 0..2 {
        cp.kill_server();
        restart(cp);
        consistently(
            "the waiting claim is kept",
            Duration::from_secs(5),
            unchanged,
        );
    }
    cp.csi.assert_never_deleted(&handle);
    // And it still goes on as usual once the pod runs.
    set_pod_phase(k, &ns.name, "runner", "Running");
    wait_phase(k, &ns.name, "scratch", "InUse");
}
