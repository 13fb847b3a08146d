//! The harness can stop, kill, restart and replicate our server inside a
//! running control plane, for the crash-recovery and failover tests.
//!
//! These tests kill our server, so they share a private control plane (not
//! [`sta_testenv::shared`]) and take turns on it.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use sta_testenv::process::{pid_is_running, pids_of_run};
use sta_testenv::{ControlPlane, Error, Kubectl, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");

/// The control plane of this file, and a turn on it: one test at a time, since
/// a test may have our server down.
fn cp() -> (MutexGuard<'static, ()>, &'static ControlPlane) {
    static TURN: Mutex<()> = Mutex::new(());
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cp =
        CP.get_or_init(|| ControlPlane::start(Options::for_tests(BIN)).map_err(|e| e.to_string()));
    match cp {
        Ok(cp) => {
            // A test that failed half-way may have left our server down.
            if !cp.server_is_running() {
                cp.restart_server(&[], &[]).unwrap();
            }
            (turn, cp)
        }
        Err(e) => panic!("the control plane did not start: {e}"),
    }
}

/// A transfer of claim `<name>-data` (one active transfer per claim).
fn transfer_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  source:\n    name: {name}-data\n  destination:\n    namespace: dev\n"
    )
}

/// `kubectl get nst <name> -n <ns>` until it succeeds; the object's name.
fn eventually_get(k: &Kubectl, ns: &str, name: &str, timeout: Duration) -> String {
    let run = k.eventually(
        &[
            "get",
            "nst",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.metadata.name}",
        ],
        timeout,
    );
    assert!(run.success, "get nst {ns}/{name}: {}", run.stderr);
    run.stdout
}

#[test]
fn a_killed_server_restarted_on_its_port_serves_earlier_objects_through_the_aggregator() {
    let (_turn, cp) = cp();
    let ns = cp.namespace("restart").unwrap();
    cp.kubectl()
        .apply(&transfer_yaml(&ns.name, "before-kill"))
        .unwrap();
    let (port, old) = (cp.server_port, cp.server_pid().unwrap());

    eprintln!("step: SIGKILL the server");
    assert_eq!(
        cp.wait_for_server_exit(Duration::from_millis(200)),
        None,
        "a running server has no exit code"
    );
    cp.kill_server();
    assert!(!pid_is_running(old));
    assert!(!cp.server_is_running());
    assert_eq!(cp.wait_for_server_exit(Duration::ZERO), Some(137));
    assert!(
        !cp.direct()
            .run(&["get", "--raw=/readyz", "--request-timeout=2s"])
            .success
    );

    eprintln!("step: restart it");
    cp.restart_server(&[], &[]).unwrap();
    assert_eq!(cp.server_port, port);
    assert_ne!(cp.server_pid(), Some(old));
    assert!(cp.server_is_running());
    let earlier = cp.logs_dir().join("storage-transfer-apiserver.1.log");
    assert!(
        std::fs::metadata(&earlier).unwrap().len() > 0,
        "the first run's log was not kept"
    );

    eprintln!("step: the aggregator reaches it again and the object is still there");
    let all = cp.kubectl().eventually(
        &["get", "namespacetransfers", "-A"],
        Duration::from_secs(90),
    );
    assert!(all.success, "{}", all.stderr);
    assert!(all.stdout.contains("before-kill"), "{}", all.stdout);
    assert_eq!(
        eventually_get(
            cp.direct(),
            &ns.name,
            "before-kill",
            Duration::from_secs(10)
        ),
        "before-kill"
    );
}

#[test]
fn a_restart_that_fails_names_the_server_log_and_a_later_restart_works() {
    let (_turn, cp) = cp();
    let err = cp
        .restart_server(&["--no-such-flag".to_owned()], &[])
        .unwrap_err();
    assert!(matches!(err, Error::Exited { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&cp.server_log().display().to_string()),
        "{text}"
    );
    assert!(
        text.contains("--no-such-flag"),
        "the log tail is missing: {text}"
    );
    assert!(!cp.server_is_running());

    cp.restart_server(&[], &[]).unwrap();
    assert!(cp.direct().run(&["get", "--raw=/readyz"]).success);
}

#[test]
fn a_replica_serves_the_same_objects_as_the_main_server() {
    let (_turn, cp) = cp();
    let ns = cp.namespace("replica").unwrap();
    let replica = cp.start_replica("replica-b", &[], &[]).unwrap();
    assert_ne!(replica.port, cp.server_port);
    assert!(replica.is_running());
    assert!(replica.log.is_file());

    eprintln!("step: created through the main server, read through the replica");
    cp.direct()
        .apply(&transfer_yaml(&ns.name, "via-main"))
        .unwrap();
    assert_eq!(
        eventually_get(
            &replica.direct,
            &ns.name,
            "via-main",
            Duration::from_secs(30)
        ),
        "via-main"
    );

    eprintln!("step: created through the replica, read through the main server");
    replica
        .direct
        .apply(&transfer_yaml(&ns.name, "via-replica"))
        .unwrap();
    assert_eq!(
        eventually_get(
            cp.direct(),
            &ns.name,
            "via-replica",
            Duration::from_secs(30)
        ),
        "via-replica"
    );
}

#[test]
fn dropping_a_replica_leaves_no_process_behind() {
    let (_turn, cp) = cp();
    let replica = cp.start_replica("replica-c", &[], &[]).unwrap();
    let pid = replica.pid;
    assert!(pid_is_running(pid));
    assert!(
        pids_of_run(&cp.dir).contains(&pid),
        "a replica's command line names the run directory, so `make down` finds it"
    );
    drop(replica);
    assert!(!pid_is_running(pid), "replica {pid} still running");
    assert!(
        cp.server_is_running(),
        "the main server went down with the replica"
    );
}

#[test]
fn a_killed_replica_reports_sigkill_and_its_restart_keeps_the_earlier_log() {
    let (_turn, cp) = cp();
    let replica = cp.start_replica("replica-d", &[], &[]).unwrap();
    assert_eq!(replica.wait_for_exit(Duration::from_millis(200)), None);
    replica.kill();
    assert!(!replica.is_running());
    assert_eq!(replica.wait_for_exit(Duration::ZERO), Some(137));
    drop(replica);

    let again = cp.start_replica("replica-d", &[], &[]).unwrap();
    assert!(cp.logs_dir().join("replica-d.1.log").is_file());
    assert!(again.direct.run(&["get", "--raw=/readyz"]).success);
}
