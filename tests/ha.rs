//! Two server replicas on one etcd behind the APIService (DESIGN §3
//! "Scale-out"; issue 7 item 6). A loopback balancer stands in for the
//! Service's endpoints. While one replica is killed and restarted, a client
//! keeps listing and watching through kube-apiserver's aggregator and sees at
//! most one failed request per kill, which a retry answers; a transfer in
//! flight completes. Both replicas are killed in turn, so whichever one the
//! aggregator's connections went to is killed once.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sta_testenv::balancer::Balancer;
use sta_testenv::scenario::*;
use sta_testenv::watch::{Ends, Recording};
use sta_testenv::{ControlPlane, Kubectl, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const WAIT: Duration = Duration::from_secs(90);

/// Lists every 100 ms; a failure is retried at once. Records the failures
/// and whether any retry failed too.
fn lister(
    k: Kubectl,
    ns: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut lists, mut failures) = (0, Vec::new());
        while !stop.load(Ordering::Relaxed) {
            let run = k.run(&["get", "namespacetransfers", "-n", &ns, "-o", "name"]);
            lists += 1;
            if !run.success {
                let retry = k.run(&["get", "namespacetransfers", "-n", &ns, "-o", "name"]);
                failures.push(format!(
                    "{} (retry {})",
                    run.stderr.trim(),
                    if retry.success { "succeeded" } else { "FAILED" }
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (lists, failures)
    })
}

/// Creates an offer (of a claim of its own name) as a client would: one
/// failure is retried once.
fn create(k: &Kubectl, ns: &str, name: &str, to: &str) {
    let yaml = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  source:\n    name: {name}\n  destination:\n    namespace: {to}\n"
    );
    if let Err(first) = k.apply(&yaml) {
        std::thread::sleep(Duration::from_millis(200));
        k.apply(&yaml)
            .unwrap_or_else(|e| panic!("creating {ns}/{name} failed twice: {first}; then {e}"));
        println!("HA: creating {ns}/{name} needed its retry: {first}");
    }
}

#[test]
fn clients_and_a_transfer_ride_through_each_replica_being_killed_in_turn() {
    let mut opts = Options::for_tests(BIN);
    opts.server_args
        .push("--leader-elect-lease-duration=2s".to_owned());
    let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
    ensure_classes(cp.kubectl());
    let replica = cp.start_replica("replica-b", &[], &[]).unwrap();
    let balancer = Balancer::start(vec![cp.server_port, replica.port]).unwrap();
    serve_through_balancer(cp.kubectl(), balancer.port());
    let admin = cp.kubectl();

    // A transfer held before R1 by a running pod, so that it is in flight
    // when a replica dies.
    let src = cp.namespace("src").unwrap();
    let dst = cp.namespace("dst").unwrap();
    let pv = unique("pv");
    bound_volume(admin, &pv, "1Gi", ALLOWED_CLASS, &src.name, "db");
    running_pod(admin, &src.name, "app", "db");
    offer(admin, &src.name, "give", "db", &dst.name);
    request(admin, &dst.name, "take", &src.name, "db");
    wait_phase(admin, &src.name, "give", "WaitingForRelease", WAIT);

    let stop = Arc::new(AtomicBool::new(false));
    let lists = lister(admin.clone(), dst.name.clone(), stop.clone());
    // Started again when its stream ends, as a reflector's watch is.
    let watch = Recording::start(
        admin,
        &["namespacetransfers", "-n", &dst.name],
        Ends::StartAgain,
    );
    std::thread::sleep(Duration::from_secs(2));

    // Kill one replica; objects made while it is down and after it is back
    // must all reach the watcher.
    cp.kill_server();
    let killed = Instant::now();
    for i in 0..5 {
        create(admin, &dst.name, &format!("down-{i}"), &src.name);
        std::thread::sleep(Duration::from_millis(300));
    }
    set_pod_phase(admin, &src.name, "app", "Succeeded");
    cp.restart_server(&[], &[]).unwrap();
    let main_down = killed.elapsed();
    for i in 0..5 {
        create(admin, &dst.name, &format!("up-{i}"), &src.name);
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_phase(admin, &src.name, "give", "Completed", WAIT);
    wait_phase(admin, &dst.name, "take", "Completed", WAIT);

    // Then the other replica, so that whichever one kube-apiserver's
    // connections went to has been killed once.
    let before = balancer.forwarded_to(replica.port);
    replica.kill();
    for i in 0..5 {
        create(admin, &dst.name, &format!("late-{i}"), &src.name);
        std::thread::sleep(Duration::from_millis(300));
    }
    let replacement = cp.start_replica("replica-c", &[], &[]).unwrap();
    balancer.set_backends(vec![cp.server_port, replacement.port]);
    let used = before + balancer.forwarded_to(cp.server_port);
    assert!(
        used > 0,
        "the aggregator's connections went to a replica that was killed"
    );
    eventually("the watcher to see every object", WAIT, || {
        watch.read(|seen| {
            let saw = |name: String| seen.iter().any(|e| e.name() == name);
            (0..5).all(|i| {
                saw(format!("down-{i}")) && saw(format!("up-{i}")) && saw(format!("late-{i}"))
            })
        })
    });
    stop.store(true, Ordering::Relaxed);
    let (lists, failures) = lists.join().unwrap();
    let (_, restarts) = watch.finish();
    println!(
        "HA: {lists} lists, failures {failures:?}; watch restarted {restarts} time(s); the main replica was down for {main_down:?}"
    );
    assert!(
        failures.iter().all(|f| f.ends_with("(retry succeeded)")),
        "every failed list succeeded on its retry: {failures:?}"
    );
    assert!(
        failures.len() <= 2,
        "at most one failed list per kill: {failures:?}"
    );
    assert!(
        restarts <= 2,
        "the watch was cut at most once per kill: {restarts}"
    );
    drop(balancer);
}

/// Whether a replica's `/metrics` says it leads.
fn leads(k: &Kubectl) -> bool {
    k.run(&["get", "--raw", "/metrics"])
        .stdout
        .lines()
        .any(|l| l == "storage_transfer_leader 1")
}

#[test]
fn a_leader_that_is_stopped_gracefully_hands_over_before_its_lease_runs_out() {
    // The default 15 s lease: a hand-over by expiry would take that long.
    let cp = ControlPlane::start(Options::for_tests(BIN)).unwrap_or_else(|e| panic!("{e}"));
    let replica = cp.start_replica("replica-b", &[], &[]).unwrap();
    eventually("one replica to lead", WAIT, || {
        leads(cp.direct()) != leads(&replica.direct)
    });
    let (leader_is_main, other) = if leads(cp.direct()) {
        (true, replica.direct.clone())
    } else {
        (false, cp.direct().clone())
    };
    let pid = if leader_is_main {
        cp.server_pid().unwrap()
    } else {
        replica.pid
    };
    let stopped = Instant::now();
    // SIGTERM, without waiting: the server drains its connections for a few
    // seconds, but its controllers stop and hand over first.
    assert!(sta_testenv::process::sigterm(pid));
    eventually("the other replica to lead", WAIT, || leads(&other));
    let handover = stopped.elapsed();
    println!("HA: graceful stop handed over leadership in {handover:?}");
    // Left to expire, the 15 s lease would last at least 10 s more (it is
    // renewed every 5 s).
    assert!(
        handover < Duration::from_secs(8),
        "the lease was revoked, not left to expire: {handover:?}"
    );
}
