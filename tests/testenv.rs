//! The harness itself: per-test namespaces and per-user credentials behave as a
//! test author relies on.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sta_testenv::{process::pids_of_run, shared, ControlPlane, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const PROBE_DIR_ENV: &str = "STA_TESTENV_WATCHDOG_PROBE_DIR";

fn cp() -> &'static ControlPlane {
    shared(BIN)
}

#[test]
fn each_test_gets_its_own_namespace_which_is_deleted_afterwards() {
    let (a, b) = (
        cp().namespace("iso").unwrap(),
        cp().namespace("iso").unwrap(),
    );
    assert_ne!(a.name, b.name);
    let name = a.name.clone();
    assert_eq!(
        cp().kubectl()
            .ok(&["get", "ns", &name, "-o", "jsonpath={.status.phase}"]),
        "Active"
    );
    drop(a);
    let phase = cp()
        .kubectl()
        .run(&["get", "ns", &name, "-o", "jsonpath={.status.phase}"]);
    // Deleted outright, or on its way out.
    assert!(!phase.success || phase.stdout == "Terminating", "{phase:?}");
}

#[test]
fn a_certificate_user_is_authenticated_and_held_to_rbac() {
    let ns = cp().namespace("rbac").unwrap();
    let alice = cp().user("alice", Some("dev-team")).unwrap();
    let who = alice.ok(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(who, "alice");

    let denied = alice.run(&["get", "pods", "-n", &ns.name]);
    assert!(!denied.success);
    assert!(denied.stderr.contains("forbidden"), "{}", denied.stderr);

    cp().kubectl().ok(&[
        "create",
        "rolebinding",
        "alice-view",
        "--clusterrole=view",
        "--group=dev-team",
        "-n",
        &ns.name,
    ]);
    let allowed = alice.eventually(
        &["get", "pods", "-n", &ns.name],
        std::time::Duration::from_secs(10),
    );
    assert!(allowed.success, "{}", allowed.stderr);
}

#[test]
fn impersonation_carries_user_and_groups() {
    let bob = cp().kubectl().impersonating("bob", &["qa", "ops"]);
    let groups = bob.ok(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"]);
    assert!(groups.contains("qa") && groups.contains("ops"), "{groups}");
    assert!(!bob.run(&["get", "secrets", "-n", "kube-system"]).success);
}

#[test]
fn a_component_that_fails_to_start_reports_its_log_tail_and_leaves_nothing_running() {
    let mut opts = Options::for_tests(BIN);
    opts.dir = opts
        .dir
        .with_file_name(format!("failing-start-{}", std::process::id()));
    opts.server_args = vec!["--no-such-flag".to_owned()];
    let err = sta_testenv::ControlPlane::start(opts.clone())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("storage-transfer-apiserver exited during start-up"),
        "{err}"
    );
    assert!(
        err.contains("--no-such-flag"),
        "the log tail is missing: {err}"
    );
    let leftovers = sta_testenv::process::pids_of_run(&opts.dir);
    assert!(leftovers.is_empty(), "still running: {leftovers:?}");
}

#[test]
fn a_csi_component_that_fails_to_start_is_named_with_its_log_and_leaves_no_process_or_socket() {
    let mut opts = Options::for_tests(BIN);
    opts.dir = opts
        .dir
        .with_file_name(format!("failing-csi-{}", std::process::id()));
    opts.component_args = vec![("csi-provisioner".to_owned(), "--no-such-flag".to_owned())];
    let err = ControlPlane::start(opts.clone()).unwrap_err().to_string();
    let log = opts.dir.join("logs/csi-provisioner.log");
    assert!(
        err.contains("csi-provisioner exited during start-up")
            && err.contains(&log.display().to_string()),
        "{err}"
    );
    assert!(
        err.contains("no-such-flag"),
        "the log tail is missing: {err}"
    );
    let leftovers: Vec<_> = pids_of_run(&opts.dir)
        .into_iter()
        .map(|p| (p, sta_testenv::process::cmdline(p)))
        .collect();
    assert!(leftovers.is_empty(), "still running: {leftovers:?}");
    let socket = sta_testenv::csi::socket_path(&opts.dir);
    assert!(!socket.exists(), "{} was left behind", socket.display());
}

/// Run in a child process by the test below: starts its own control plane, says
/// so, and hangs until it is killed.
#[test]
#[ignore = "helper, run in a child process by killing_the_test_binary_still_tears_the_control_plane_down"]
fn helper_starts_a_control_plane_and_hangs_until_killed() {
    let Some(dir) = std::env::var_os(PROBE_DIR_ENV) else {
        return;
    };
    let mut opts = Options::for_tests(BIN);
    opts.dir = PathBuf::from(dir);
    let cp = ControlPlane::start(opts).unwrap();
    std::fs::write(cp.dir.join("ready"), "").unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn killing_the_test_binary_still_tears_the_control_plane_down() {
    let dir = Options::for_tests(BIN)
        .dir
        .with_file_name(format!("watchdog-probe-{}", std::process::id()));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "helper_starts_a_control_plane_and_hangs_until_killed",
            "--exact",
            "--ignored",
        ])
        .env(PROBE_DIR_ENV, &dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.join("ready").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the helper exited early"
        );
        assert!(
            Instant::now() < deadline,
            "the helper's control plane never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = pids_of_run(&dir);
    assert!(
        running.len() >= sta_testenv::COMPONENTS.len(),
        "expected {:?}, found {running:?}",
        sta_testenv::COMPONENTS
    );
    let socket = sta_testenv::csi::socket_path(&dir);
    assert!(
        socket.exists(),
        "the CSI driver listens on {}",
        socket.display()
    );

    child.kill().unwrap(); // SIGKILL: no destructor, no panic hook runs.
    child.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = pids_of_run(&dir);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after SIGKILL: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the CSI socket {} was not removed",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let etcd_data = std::fs::read_to_string(dir.join("etcd-data.path")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(etcd_data.trim()).exists() {
        assert!(
            Instant::now() < deadline,
            "etcd data {etcd_data} was not removed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
