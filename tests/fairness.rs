//! Fairness between namespaces (issue 30): thousands of NamespaceTransfers
//! that wait in one namespace do not hold back another namespace's deadline.
//! The controller's queue paces the looks it schedules itself through one
//! bucket for the whole server; a namespace's waiting objects must cost
//! another namespace a bounded delay, however many they are. Its own test
//! binary, so that its load never slows another test's timeouts.
//!
//! Under `STA_TEST_SAMPLE=1` (a quick local check) it files 200 waiting
//! requests; the full run files 2,000.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

mod scenario;

use std::time::{Duration, Instant};

use scenario::{ensure_classes, eventually, wait_phase};
use sta_testenv::{shared, Kubectl};

const WAITING: usize = 2_000;
const SAMPLE_WAITING: usize = 200;
/// How long the controller takes at most to look at every transfer again
/// without an event.
const RESYNC: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(300);
/// How long after its creation the deadline's failure must be recorded: the
/// deadline (5 s) plus a margin for one look on a loaded two-core machine.
const BOUND: Duration = Duration::from_secs(15);

fn waiting() -> usize {
    if std::env::var("STA_TEST_SAMPLE").as_deref() == Ok("1") {
        SAMPLE_WAITING
    } else {
        WAITING
    }
}

/// `kubectl create -f -` of every document, 200 at a time.
fn create_all(k: &Kubectl, documents: &[String]) {
    for chunk in documents.chunks(200) {
        let yaml = chunk.join("---\n");
        let run = k.run_with_stdin(&["create", "-f", "-"], Some(&yaml));
        assert!(run.success, "kubectl create: {}", run.stderr);
    }
}

#[test]
fn a_deadline_in_one_namespace_is_kept_while_another_has_thousands_of_requests_waiting() {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    let k = cp.kubectl();
    ensure_classes(k);
    let dev = cp.namespace("dev").unwrap();
    let prod = cp.namespace("prod").unwrap();
    // Nobody offers anything here: dev's requests wait for ever, and prod's
    // offer to it has no peer.
    let elsewhere = cp.namespace("elsewhere").unwrap();

    let n = waiting();
    let requests: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: take-{i}\n  namespace: {}\nspec:\n  source:\n    namespace: {}\n    name: claim-{i}\n",
                dev.name, elsewhere.name
            )
        })
        .collect();
    let filing = Instant::now();
    create_all(k, &requests);
    eprintln!("{n} waiting requests created in {:?}", filing.elapsed());
    // Every request has been looked at once; then a resync period passes,
    // so that a resync of every one of them has gone through the queue and
    // the looks it schedules itself are as many as they will be.
    eventually("every request to wait for its peer", WAIT, || {
        let phases = k.ok(&[
            "get",
            "namespacetransfers",
            "-n",
            &dev.name,
            "-o",
            "jsonpath={.items[*].status.phase}",
        ]);
        phases
            .split_whitespace()
            .filter(|p| *p == "WaitingForPeer")
            .count()
            == n
    });
    std::thread::sleep(RESYNC);

    let created = Instant::now();
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  source:\n    name: db\n  destination:\n    namespace: {}\n  activeDeadlineSeconds: 5\n",
        prod.name, elsewhere.name
    ))
    .unwrap();
    let t = wait_phase(
        k,
        &prod.name,
        "give",
        "Failed",
        BOUND.saturating_sub(created.elapsed()),
    );
    assert_eq!(t["status"]["reason"], "DeadlineExceeded");
    eprintln!(
        "prod's deadline failed it {:?} after its creation",
        created.elapsed()
    );
    // The namespaces go when dropped, and their transfers with them.
}
