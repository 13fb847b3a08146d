//! Memory, from one tenant (issue 30): a namespace holds no more of our
//! objects than its ResourceQuotas allow, counted as kube-apiserver counts
//! custom resources (`count/<resource>.storage.transfer.k8s.io`), charged at
//! create so that kube-controller-manager's quota controller sees the usage;
//! and no more than the server's own `--max-objects-per-namespace`, whatever
//! the quotas say.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sta_testenv::{shared, ControlPlane, Kubectl, Replica};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const COUNT: &str = "count/namespacetransfers.storage.transfer.k8s.io";
const WAIT: Duration = Duration::from_secs(90);

fn cp() -> &'static ControlPlane {
    shared(BIN)
}

fn admin() -> &'static Kubectl {
    cp().kubectl()
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn transfer(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  source:\n    name: {name}\n  destination:\n    namespace: elsewhere\n"
    )
}

fn create(k: &Kubectl, ns: &str, name: &str, dry_run: bool) -> sta_testenv::kubectl::Run {
    let mut args = vec!["create", "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    k.run_with_stdin(&args, Some(&transfer(ns, name)))
}

/// Waits until kube-controller-manager's quota controller has found our
/// resources in discovery (it looks every 30s). A quota made before then
/// is not counted until its next full resync, minutes later, as for any
/// custom resource.
fn quota_controller_knows_our_resources() {
    let log = cp().logs_dir().join("kube-controller-manager.log");
    eventually("the quota controller to discover our resources", || {
        std::fs::read_to_string(&log).is_ok_and(|text| {
            ["namespacetransfers", "ephemeralclaims"].iter().all(|r| {
                text.lines().any(|l| {
                    l.contains("created object count evaluator")
                        && l.contains(&format!("\"{r}.storage.transfer.k8s.io\""))
                })
            })
        })
    });
}

/// A quota of `hard` transfers in `ns`, once the quota controller has
/// counted it (until then kube, and so this server, refuses every create:
/// "status unknown for quota").
fn quota(ns: &str, hard: u32) {
    quota_controller_knows_our_resources();
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q\n  namespace: {ns}\nspec:\n  hard:\n    {COUNT}: \"{hard}\"\n"
        ))
        .unwrap();
    eventually("the quota controller to count the quota", || {
        !used(ns).is_empty()
    });
}

/// The quota's `status.used` of transfers; empty until counted.
fn used(ns: &str) -> String {
    admin()
        .run(&[
            "get",
            "resourcequota",
            "q",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.used.count/namespacetransfers\\.storage\\.transfer\\.k8s\\.io}",
        ])
        .stdout
        .trim()
        .to_owned()
}

fn exceeded(used: u32, hard: u32) -> String {
    format!(
        "namespacetransfers.storage.transfer.k8s.io \"t6\" is forbidden: exceeded quota: q, requested: {COUNT}=1, used: {COUNT}={used}, limited: {COUNT}={hard}"
    )
}

#[test]
fn a_quota_of_five_transfers_refuses_the_sixth_and_the_quota_controller_counts_five() {
    let ns = cp().namespace("quota").unwrap();
    quota(&ns.name, 5);
    for i in 1..=5 {
        let run = create(admin(), &ns.name, &format!("t{i}"), false);
        assert!(run.success, "create {i}: {}", run.stderr);
    }
    let sixth = create(admin(), &ns.name, "t6", false);
    assert!(!sixth.success, "the sixth transfer was admitted");
    assert!(
        sixth.stderr.contains("(Forbidden)") && sixth.stderr.contains(&exceeded(5, 5)),
        "{}",
        sixth.stderr
    );
    assert_eq!(used(&ns.name), "5");
    // The quota controller's own count agrees: a change of the quota makes
    // it recount the namespace from its informer on our resource.
    admin().ok(&[
        "patch",
        "resourcequota",
        "q",
        "-n",
        &ns.name,
        "--type=merge",
        &format!("--patch={{\"spec\":{{\"hard\":{{\"{COUNT}\":\"7\"}}}}}}"),
    ]);
    eventually("the quota controller to take in the new limit", || {
        admin()
            .run(&["get", "resourcequota", "q", "-n", &ns.name, "-o", "json"])
            .stdout
            .contains(&format!("\"{COUNT}\": \"7\""))
    });
    assert_eq!(used(&ns.name), "5");
    // And it gives back what a delete frees.
    admin().ok(&["delete", "nst", "t1", "-n", &ns.name, "--wait=false"]);
    eventually("the quota controller to count the delete", || {
        used(&ns.name) == "4"
    });
}

/// The LISTs of ResourceQuotas kube-apiserver has answered.
fn quota_lists() -> u64 {
    admin()
        .ok(&["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"resourcequotas\"")
                && l.contains("verb=\"LIST\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn creates_read_the_quotas_from_a_watch_not_with_a_list_each() {
    let ns = cp().namespace("quota-watch").unwrap();
    let bare = cp().namespace("quota-none").unwrap();
    quota(&ns.name, 50);
    // The first create in each may look its namespace up live (the watch
    // may not have the new quota yet, and has none in `bare`).
    for namespace in [&ns.name, &bare.name] {
        let run = create(admin(), namespace, "t0", false);
        assert!(run.success, "{}", run.stderr);
    }
    let before = quota_lists();
    for i in 1..=10 {
        for namespace in [&ns.name, &bare.name] {
            let run = create(admin(), namespace, &format!("t{i}"), false);
            assert!(run.success, "create {i} in {namespace}: {}", run.stderr);
        }
    }
    let lists = quota_lists() - before;
    // 20 creates; the other tests of this binary, running beside this one,
    // may list a few namespaces of their own.
    assert!(lists <= 8, "20 creates listed the quotas {lists} times");
    assert_eq!(used(&ns.name), "11", "each create was charged once");
}

#[test]
fn a_dry_run_past_the_quota_is_refused_and_one_within_it_charges_nothing() {
    let ns = cp().namespace("quota-dry").unwrap();
    quota(&ns.name, 1);
    let dry = create(admin(), &ns.name, "t5", true);
    assert!(dry.success, "{}", dry.stderr);
    assert_eq!(used(&ns.name), "0");
    assert!(create(admin(), &ns.name, "t1", false).success);
    let past = create(admin(), &ns.name, "t6", true);
    assert!(!past.success, "a dry run past the quota was admitted");
    assert!(past.stderr.contains(&exceeded(1, 1)), "{}", past.stderr);
    assert_eq!(used(&ns.name), "1");
}

#[test]
fn concurrent_creates_never_pass_the_quota_together() {
    let ns = cp().namespace("quota-race").unwrap();
    quota(&ns.name, 3);
    let admitted: usize = std::thread::scope(|s| {
        let runs: Vec<_> = (0..8)
            .map(|i| {
                let ns = ns.name.clone();
                s.spawn(move || create(admin(), &ns, &format!("r{i}"), false).success)
            })
            .collect();
        runs.into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum()
    });
    assert_eq!(admitted, 3);
    let listed = admin().ok(&["get", "nst", "-n", &ns.name, "-o", "name"]);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert_eq!(used(&ns.name), "3");
}

/// A replica of our server with a backstop of two objects per namespace,
/// without controllers (the shared server runs them).
fn small() -> &'static Replica {
    static REPLICA: OnceLock<Replica> = OnceLock::new();
    REPLICA.get_or_init(|| {
        cp().start_replica(
            "quota-backstop",
            &[
                "--max-objects-per-namespace=2".to_owned(),
                "--controllers=-namespacetransfer,-ephemeralclaim".to_owned(),
            ],
            &[],
        )
        .unwrap()
    })
}

#[test]
fn past_max_objects_per_namespace_a_create_is_refused_naming_the_flag() {
    let ns = cp().namespace("backstop").unwrap();
    let other = cp().namespace("backstop-other").unwrap();
    let k = &small().direct;
    for name in ["a", "b"] {
        let run = create(k, &ns.name, name, false);
        assert!(run.success, "{name}: {}", run.stderr);
    }
    let third = create(k, &ns.name, "c", false);
    assert!(!third.success, "the third object was admitted");
    assert!(
        third.stderr.contains("(Forbidden)")
            && third.stderr.contains("already holds 2 namespacetransfers")
            && third.stderr.contains("--max-objects-per-namespace=2"),
        "{}",
        third.stderr
    );
    assert!(!create(k, &ns.name, "c", true).success);
    // Another namespace has its own room.
    assert!(create(k, &other.name, "a", false).success);
}

#[test]
fn a_quota_kube_refuses_as_invalid_leaves_creates_working() {
    let ns = cp().namespace("quota-bad").unwrap();
    for hard in ["-1", "lots", "1.5"] {
        let bad = admin().apply(&format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: bad\n  namespace: {}\nspec:\n  hard:\n    {COUNT}: \"{hard}\"\n",
            ns.name
        ));
        assert!(bad.is_err(), "kube-apiserver stored a quota of {hard}");
    }
    let run = create(admin(), &ns.name, "t1", false);
    assert!(run.success, "{}", run.stderr);
}

#[test]
fn ephemeral_claims_are_counted_under_their_own_name() {
    let ns = cp().namespace("quota-claims").unwrap();
    quota_controller_knows_our_resources();
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: claims\n  namespace: {}\nspec:\n  hard:\n    count/ephemeralclaims.storage.transfer.k8s.io: \"1\"\n",
            ns.name
        ))
        .unwrap();
    let claim = |name: &str| {
        format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: EphemeralClaim\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n  owner: {{apiVersion: v1, kind: Pod, name: runner}}\n  claimTemplate:\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: 1Gi}}}}\n",
            ns.name
        )
    };
    // Until the quota controller has counted the quota, kube refuses.
    eventually("the first claim to be admitted", || {
        admin()
            .run_with_stdin(&["create", "-f", "-"], Some(&claim("first")))
            .success
    });
    // Transfers are not counted against it.
    assert!(create(admin(), &ns.name, "t1", false).success);
    let second = admin().run_with_stdin(&["create", "-f", "-"], Some(&claim("second")));
    assert!(!second.success, "the second claim was admitted");
    assert!(
        second.stderr.contains(
            "ephemeralclaims.storage.transfer.k8s.io \"second\" is forbidden: exceeded quota: claims, requested: count/ephemeralclaims.storage.transfer.k8s.io=1, used: count/ephemeralclaims.storage.transfer.k8s.io=1, limited: count/ephemeralclaims.storage.transfer.k8s.io=1"
        ),
        "{}",
        second.stderr
    );
}
