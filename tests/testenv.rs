//! The harness itself: per-test namespaces and per-user credentials behave as a
//! test author relies on.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use sta_testenv::{shared, ControlPlane};

fn cp() -> &'static ControlPlane {
    shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"))
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
    let mut opts =
        sta_testenv::Options::for_tests(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
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
    let leftovers = sta_testenv::process::pids_mentioning(&opts.dir.display().to_string());
    assert!(leftovers.is_empty(), "still running: {leftovers:?}");
}
