//! The chaos soak (issue 19): transfers through every failure a production
//! cluster has, checked by code.
//!
//! The control plane runs on a 3-member etcd, with two replicas of our server
//! behind one APIService (a loopback balancer stands in for the Service), on
//! CSI volumes: the mock driver's, annotated as the external-provisioner's
//! own, so that a volume released under `Delete` would really be deleted.
//! A fleet of pairs is prepared; their requests are filed in waves while a
//! fault injector, one fault at a time, SIGKILLs the leading replica and the
//! other one, SIGSTOPs the leading replica for longer than its lease,
//! SIGKILLs the etcd leader, SIGSTOPs an etcd member for longer than an
//! election, and kills kube-apiserver, kube-controller-manager and the CSI
//! sidecars, each started again after a few seconds. A recorder watches
//! every PV, claim and transfer all along; a prober asks for a list through
//! the aggregator every 250 ms.
//!
//! When the faults stop, every transfer must finish within a bound, and the
//! report (printed, and written to `CHAOS_REPORT` if set) must show no
//! anomaly: no PV ever Released, Failed, deleted, or bound to a claim other
//! than its source or destination; no `DeleteVolume` for a fleet volume;
//! every Completed pair's volume at its destination with its policy
//! restored, every Failed pair's back at its source; no controller write to a
//! PV or claim started by a replica after another was elected; every
//! transfer deleted cleanly (no object held by our finalizers) and no
//! `_index` key left behind. Any anomaly fails the run, with the history of
//! the PV concerned.
//!
//! Size: `CHAOS_PAIRS` (default 20; `make chaos` files 200),
//! `CHAOS_FAULT_SECONDS` (default 90; `make chaos` 600), `CHAOS_SEED` (the
//! fault schedule; printed in the report).

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use sta_testenv::balancer::Balancer;
use sta_testenv::scenario::ensure_classes;
use sta_testenv::scenario::many::{Fleet, Pair};
use sta_testenv::watch::{Ends, Recording};
use sta_testenv::{csi, ControlPlane, Kubectl, Options, Replica};
use sta_testenv::{ephemeral, scenario};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
/// The controllers' lease: short, so that a replica paused past it is taken
/// over within the soak.
const LEASE: Duration = Duration::from_secs(3);
/// How long every transfer may take to finish once the faults stop.
const SETTLE: Duration = Duration::from_secs(300);
/// How often a wave of requests is filed over the fault window (at least
/// six waves), so that transfers are in flight whenever a fault strikes.
const WAVE_EVERY: Duration = Duration::from_secs(15);

struct Settings {
    pairs: usize,
    faults_for: Duration,
    seed: u64,
    report: Option<PathBuf>,
}

impl Settings {
    fn from_env() -> Self {
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let seed = number(
            "CHAOS_SEED",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1),
        );
        Self {
            pairs: number("CHAOS_PAIRS", 20) as usize,
            faults_for: Duration::from_secs(number("CHAOS_FAULT_SECONDS", 90)),
            seed: seed.max(1),
            report: std::env::var_os("CHAOS_REPORT").map(PathBuf::from),
        }
    }
}

/// xorshift64: a fault schedule that a seed reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_millis() as u64;
        low + Duration::from_millis(self.next() % span.max(1))
    }
}

// ---------------------------------------------------------------------------
// The cluster under test: the control plane, a second replica, the balancer.

/// Fields drop in order: the second replica stops while etcd still runs.
struct Cluster {
    replica: Mutex<Replica>,
    balancer: Balancer,
    replicas_started: AtomicUsize,
    cp: ControlPlane,
}

impl Cluster {
    fn start() -> Self {
        let mut opts = Options::for_tests(BIN);
        opts.etcd_members = 3;
        opts.server_args.push(format!(
            "--leader-elect-lease-duration={}s",
            LEASE.as_secs()
        ));
        let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
        ensure_classes(cp.kubectl());
        let replica = cp.start_replica("replica-1", &[], &[]).unwrap();
        let balancer = Balancer::start(vec![cp.server_port, replica.port]).unwrap();
        scenario::serve_through_balancer(cp.kubectl(), balancer.port());
        Self {
            cp,
            replica: Mutex::new(replica),
            replicas_started: AtomicUsize::new(1),
            balancer,
        }
    }

    /// Which replica leads: `Some(true)` the control plane's own server,
    /// `Some(false)` the other replica.
    fn leader(&self) -> Option<bool> {
        let leads = |k: &Kubectl| {
            k.run(&["get", "--raw", "/metrics", "--request-timeout=5s"])
                .stdout
                .lines()
                .any(|l| l == "storage_transfer_leader 1")
        };
        if leads(self.cp.direct()) {
            return Some(true);
        }
        let replica = self.replica.lock().unwrap();
        leads(&replica.direct).then_some(false)
    }

    /// Waits (up to twice the lease) for a replica to lead.
    fn wait_for_leader(&self) -> Option<bool> {
        let deadline = Instant::now() + 2 * LEASE;
        loop {
            let leader = self.leader();
            if leader.is_some() || Instant::now() > deadline {
                return leader;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn pid(&self, main: bool) -> Option<u32> {
        if main {
            self.cp.server_pid()
        } else {
            Some(self.replica.lock().unwrap().pid)
        }
    }

    fn kill_replica(&self, main: bool) {
        if main {
            self.cp.kill_server();
        } else {
            self.replica.lock().unwrap().kill();
        }
    }

    /// Starts the replica again: the control plane's own on its port; the
    /// other as a new process on a new port, which the balancer then serves.
    fn restart_replica(&self, main: bool) {
        if main {
            self.cp.restart_server(&[], &[]).unwrap();
            return;
        }
        let n = self.replicas_started.fetch_add(1, Ordering::SeqCst) + 1;
        let fresh = self
            .cp
            .start_replica(&format!("replica-{n}"), &[], &[])
            .unwrap();
        self.balancer
            .set_backends(vec![self.cp.server_port, fresh.port]);
        let old = std::mem::replace(&mut *self.replica.lock().unwrap(), fresh);
        old.kill();
    }
}

/// Sends `signal` to `pid`. A fault that cannot be injected fails the soak;
/// the signal to a process that has already gone (a recorder's `kubectl`
/// that ended) is no failure.
fn signal(pid: u32, signal: &str) {
    if let Err(e) = sta_testenv::process::send_signal(pid, signal) {
        assert!(
            !sta_testenv::process::pid_is_running(pid),
            "cannot send a signal: {e}"
        );
    }
}

// ---------------------------------------------------------------------------
// The fault injector.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillLeadingReplica,
    KillOtherReplica,
    PauseLeadingReplica,
    KillEtcdLeader,
    PauseEtcdMember,
    KillApiserver,
    KillControllerManager,
    KillCsiSidecar,
}

const FAULTS: [Fault; 8] = [
    Fault::KillLeadingReplica,
    Fault::KillOtherReplica,
    Fault::PauseLeadingReplica,
    Fault::KillEtcdLeader,
    Fault::PauseEtcdMember,
    Fault::KillApiserver,
    Fault::KillControllerManager,
    Fault::KillCsiSidecar,
];

/// One fault as it was injected.
#[derive(Debug, Clone)]
struct Injected {
    fault: Fault,
    detail: String,
    began: Instant,
    ended: Instant,
}

/// Injects faults, one at a time and each undone before the next, until
/// `until`; every kind comes once in each round, in an order the seed picks.
fn inject(cluster: &Cluster, rng: &mut Rng, until: Instant) -> Vec<Injected> {
    let mut done = Vec::new();
    let mut round: Vec<Fault> = Vec::new();
    while Instant::now() < until {
        if round.is_empty() {
            round = FAULTS.to_vec();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i + 1));
            }
        }
        let fault = round.pop().unwrap();
        let began = Instant::now();
        let detail = apply(cluster, fault, rng);
        let ended = Instant::now();
        eprintln!(
            "chaos: {fault:?} ({detail}) for {:.1} s",
            (ended - began).as_secs_f64()
        );
        done.push(Injected {
            fault,
            detail,
            began,
            ended,
        });
        std::thread::sleep(rng.between(Duration::from_secs(2), Duration::from_secs(6)));
    }
    done
}

/// Applies one fault and undoes it; says what it did.
fn apply(cluster: &Cluster, fault: Fault, rng: &mut Rng) -> String {
    let cp = &cluster.cp;
    let down = rng.between(Duration::from_secs(1), Duration::from_secs(5));
    match fault {
        Fault::KillLeadingReplica | Fault::KillOtherReplica => {
            let Some(leader) = cluster.wait_for_leader() else {
                return "no replica led: nothing killed".to_owned();
            };
            let main = if fault == Fault::KillLeadingReplica {
                leader
            } else {
                !leader
            };
            cluster.kill_replica(main);
            std::thread::sleep(down);
            cluster.restart_replica(main);
            format!(
                "{} replica, the {}, down {down:.1?}",
                if main { "main" } else { "second" },
                if main == leader { "leader" } else { "follower" }
            )
        }
        Fault::PauseLeadingReplica => {
            let Some(main) = cluster.wait_for_leader() else {
                return "no replica led: nothing paused".to_owned();
            };
            let Some(pid) = cluster.pid(main) else {
                return "no replica to pause".to_owned();
            };
            let paused = 2 * LEASE + down;
            signal(pid, "STOP");
            std::thread::sleep(paused);
            signal(pid, "CONT");
            format!("pid {pid} stopped {paused:.1?}, past its {LEASE:?} lease")
        }
        Fault::KillEtcdLeader => {
            let member = {
                let mut etcd = cp.etcd_cluster().unwrap();
                let member = etcd.wait_for_leader(Duration::from_secs(10)).unwrap();
                etcd.kill(member);
                member
            };
            std::thread::sleep(down);
            cp.etcd_cluster().unwrap().restart(member).unwrap();
            format!("member {member} down {down:.1?}")
        }
        Fault::PauseEtcdMember => {
            let (member, leader) = {
                let mut etcd = cp.etcd_cluster().unwrap();
                let leader = etcd.leader();
                let member = leader.filter(|_| rng.below(2) == 0).unwrap_or(rng.below(3));
                etcd.pause(member, true);
                (member, leader == Some(member))
            };
            // etcd's election timeout is 1 s.
            let paused = Duration::from_secs(2) + down;
            std::thread::sleep(paused);
            cp.etcd_cluster().unwrap().pause(member, false);
            format!(
                "member {member}{} stopped {paused:.1?}",
                if leader { " (the leader)" } else { "" }
            )
        }
        Fault::KillApiserver => {
            restart_component(cp, "kube-apiserver", down);
            scenario::eventually(
                "kube-apiserver to answer again",
                Duration::from_secs(120),
                || cp.kubectl().run(&["get", "--raw=/readyz"]).success,
            );
            format!("down {down:.1?}")
        }
        Fault::KillControllerManager => {
            restart_component(cp, "kube-controller-manager", down);
            format!("down {down:.1?}")
        }
        Fault::KillCsiSidecar => {
            let sidecars = [csi::PROVISIONER, csi::SNAPSHOTTER, csi::SNAPSHOT_CONTROLLER];
            let sidecar = sidecars[rng.below(sidecars.len())];
            restart_component(cp, sidecar, down);
            format!("{sidecar} down {down:.1?}")
        }
    }
}

fn restart_component(cp: &ControlPlane, name: &str, down: Duration) {
    cp.kill_component(name);
    std::thread::sleep(down);
    cp.restart_component(name).unwrap();
}

// ---------------------------------------------------------------------------
// The recorder: every version of every PV, claim and transfer.

/// One version of an object, as a watch delivered it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    kind: &'static str,
    event: String,
    name: String,
    object: Value,
}

/// The soak's watches, as `kubectl get -w` in every namespace: every PV,
/// claim and transfer, each watch started again whenever its stream ends.
struct Recorder(Vec<(&'static str, Recording)>);

impl Recorder {
    fn start(k: &Kubectl) -> Self {
        Self(
            [
                ("pv", "persistentvolumes"),
                ("pvc", "persistentvolumeclaims"),
                ("transfer", "namespacetransfers"),
            ]
            .into_iter()
            .map(|(kind, resource)| {
                (
                    kind,
                    Recording::start(k, &[resource, "-A"], Ends::StartAgain),
                )
            })
            .collect(),
        )
    }

    /// Every version seen, in the order they arrived, and how often a
    /// watch had to be started again (each one a re-list).
    fn finish(self) -> (Vec<Seen>, usize) {
        let mut seen = Vec::new();
        let mut restarts = 0;
        for (kind, recording) in self.0 {
            let (events, again) = recording.finish();
            restarts += again;
            seen.extend(events.into_iter().map(|e| Seen {
                at: e.at,
                kind,
                name: e.name().to_owned(),
                object: summary(kind, &e.object),
                event: e.kind,
            }));
        }
        seen.sort_by_key(|s| s.at);
        (seen, restarts)
    }
}

/// What the checks need of an object, so that the record stays small.
fn summary(kind: &str, o: &Value) -> Value {
    match kind {
        "pv" => serde_json::json!({
            "uid": o["metadata"]["uid"],
            "phase": o["status"]["phase"],
            "claimRef": {
                "namespace": o["spec"]["claimRef"]["namespace"],
                "name": o["spec"]["claimRef"]["name"],
                "uid": o["spec"]["claimRef"]["uid"],
            },
            "policy": o["spec"]["persistentVolumeReclaimPolicy"],
        }),
        "pvc" => serde_json::json!({
            "uid": o["metadata"]["uid"],
            "phase": o["status"]["phase"],
            "volumeName": o["spec"]["volumeName"],
        }),
        _ => serde_json::json!({
            "phase": o["status"]["phase"],
            "reason": o["status"]["reason"],
            "message": o["status"]["message"],
        }),
    }
}

// ---------------------------------------------------------------------------
// The prober: is the API there?

struct Prober {
    results: Arc<Mutex<Vec<(Instant, bool)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Prober {
    fn start(k: &Kubectl) -> Self {
        let results = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (k, results, stop) = (k.clone(), results.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::SeqCst) {
                    let run = k.run(&[
                        "get",
                        "--raw",
                        "/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers?limit=1",
                        "--request-timeout=10s",
                    ]);
                    results.lock().unwrap().push((Instant::now(), run.success));
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        });
        Self {
            results,
            stop,
            thread: Some(thread),
        }
    }

    /// The windows in which every probe failed: (first failure, first
    /// success after it).
    fn finish(mut self) -> (usize, Vec<(Instant, Instant)>) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let results = self.results.lock().unwrap();
        let mut windows = Vec::new();
        let mut open: Option<Instant> = None;
        for &(at, ok) in results.iter() {
            match (ok, open) {
                (false, None) => open = Some(at),
                (true, Some(from)) => {
                    windows.push((from, at));
                    open = None;
                }
                _ => {}
            }
        }
        if let (Some(from), Some(&(last, _))) = (open, results.last()) {
            windows.push((from, last));
        }
        (results.len(), windows)
    }
}

// ---------------------------------------------------------------------------
// Filing the requests in waves, through whatever is failing.

fn request_yaml(p: &Pair) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {}-from-src\n  namespace: {}\nspec:\n  source:\n    namespace: {}\n    name: {}\n",
        p.claim, p.dst, p.src, p.claim
    )
}

/// `kubectl create` of every request of a wave until each exists: a create
/// whose fate was unknown is found `AlreadyExists` on the retry. Returns the
/// attempts, or an error past `deadline`.
fn file(k: &Kubectl, pairs: &[Pair], deadline: Instant) -> Result<usize, String> {
    let yaml = pairs
        .iter()
        .map(request_yaml)
        .collect::<Vec<_>>()
        .join("---\n");
    let mut attempts = 0;
    until("a wave of requests to be filed", deadline, || {
        attempts += 1;
        let run = k.run_with_stdin(&["create", "-f", "-", "--request-timeout=30s"], Some(&yaml));
        let refused_other = run
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .any(|l| !l.contains("AlreadyExists") && !l.contains("already exists"));
        (run.success || !refused_other).then_some(())
    })?;
    Ok(attempts)
}

// ---------------------------------------------------------------------------
// EphemeralClaims with pods, through the same faults.

/// Set when the soak fails early (the injector panicked): every loop that
/// waits gives up, so that the failure is reported at once.
static ABORT: AtomicBool = AtomicBool::new(false);

/// Polls `f` every half second until it answers, or fails naming `what`.
fn until<T>(what: &str, deadline: Instant, mut f: impl FnMut() -> Option<T>) -> Result<T, String> {
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() > deadline || ABORT.load(Ordering::SeqCst) {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `kubectl get … -o json`: `Some(None)` when it does not exist, `None`
/// when kubectl failed (something is down; ask again).
fn get(k: &Kubectl, args: &[&str]) -> Option<Option<Value>> {
    let mut args = args.to_vec();
    args.extend(["-o", "json", "--ignore-not-found", "--request-timeout=10s"]);
    let run = k.run(&args);
    if !run.success {
        return None;
    }
    if run.stdout.trim().is_empty() {
        return Some(None);
    }
    serde_json::from_str(&run.stdout).ok().map(Some)
}

/// One EphemeralClaim's life, as a tenant's pod lives it: made for a pod,
/// Bound (the external-provisioner makes its volume), InUse once the pod
/// runs, Deleted once it succeeds, and its volume destroyed once the pod
/// is gone. Its volume must not be deleted before the pod ran. Returns the
/// volume's CSI handle.
fn ephemeral_life(
    k: &Kubectl,
    csi: &sta_testenv::Csi,
    ns: &str,
    i: usize,
    deadline: Instant,
) -> Result<String, String> {
    use sta_testenv::ephemeral::{ephemeral_claim_yaml, pod_yaml, Policy, Scheduling};
    let (pod, ec) = (format!("runner-{i}"), format!("scratch-{i}"));
    let claim = format!("{pod}-{ec}");
    let phase = |want: &str| {
        get(k, &["get", "ephemeralclaim", &ec, "-n", ns])
            .flatten()
            .filter(|o| o["status"]["phase"] == want)
            .map(drop)
    };
    let patch_pod = |phase: &str| {
        k.run(&[
            "patch",
            "pod",
            &pod,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            &format!("--patch={{\"status\":{{\"phase\":\"{phase}\"}}}}"),
        ])
        .success
        .then_some(())
    };
    until("the pod", deadline, || {
        k.apply(&pod_yaml(ns, &pod, &claim, Scheduling::Scheduled))
            .ok()
    })?;
    until("the EphemeralClaim", deadline, || {
        k.apply(&ephemeral_claim_yaml(ns, &ec, &pod, Policy::Delete, ""))
            .ok()
    })?;
    until("Bound", deadline, || phase("Bound"))?;
    let handle = until("its volume", deadline, || {
        let pvc = get(k, &["get", "pvc", &claim, "-n", ns])??;
        let pv = pvc["spec"]["volumeName"].as_str()?.to_owned();
        let volume = get(k, &["get", "pv", &pv])??;
        volume["spec"]["csi"]["volumeHandle"]
            .as_str()
            .map(str::to_owned)
    })?;
    if !csi.deletions_of(&handle).is_empty() {
        return Err(format!("volume {handle} deleted before its pod ran"));
    }
    until("the pod to run", deadline, || patch_pod("Running"))?;
    until("InUse", deadline, || phase("InUse"))?;
    if !csi.deletions_of(&handle).is_empty() {
        return Err(format!("volume {handle} deleted while its pod ran"));
    }
    until("the pod to succeed", deadline, || patch_pod("Succeeded"))?;
    // The finished pod still names the claim: Deleting until it goes.
    until("Deleting", deadline, || phase("Deleting"))?;
    until("the pod's deletion", deadline, || {
        k.run(&[
            "delete",
            "pod",
            &pod,
            "-n",
            ns,
            "--grace-period=0",
            "--force",
            "--ignore-not-found",
        ])
        .success
        .then_some(())
    })?;
    until("the claim to be gone", deadline, || {
        get(k, &["get", "pvc", &claim, "-n", ns])?
            .is_none()
            .then_some(())
    })?;
    until("Deleted", deadline, || phase("Deleted"))?;
    until("the volume's destruction", deadline, || {
        (!csi.destructions_of(&handle).is_empty()).then_some(())
    })?;
    Ok(handle)
}

// ---------------------------------------------------------------------------
// The checks.

/// A list as JSON, asked again while it fails (for a minute): right after
/// the faults, the aggregator may still be finding the replicas.
fn listed(k: &Kubectl, args: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    // `--ignore-not-found` prints nothing for an empty list.
    let last = until(&format!("kubectl {args:?}"), deadline, || {
        get(k, args).map(|list| list.unwrap_or_else(|| serde_json::json!({"items": []})))
    });
    last.unwrap_or_else(|e| panic!("{e}"))
}

/// The final state of one pair: the offer's phase and reason.
fn outcomes(k: &Kubectl, pairs: &[Pair]) -> HashMap<String, (String, String)> {
    let list: Value = listed(k, &["get", "namespacetransfers", "-A"]);
    let by_key: HashMap<(String, String), &Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                (
                    t["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    t["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                ),
                t,
            )
        })
        .collect();
    pairs
        .iter()
        .map(|p| {
            let offer = by_key.get(&(p.src.clone(), format!("{}-to-dst", p.claim)));
            let status = |f: &str| {
                offer
                    .and_then(|o| o["status"][f].as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            (p.pv.clone(), (status("phase"), status("reason")))
        })
        .collect()
}

fn finished(phase: &str) -> bool {
    phase == "Completed" || phase == "Failed"
}

struct Report {
    text: String,
    anomalies: Vec<String>,
    /// PVs whose history the failure prints.
    suspects: HashSet<String>,
}

impl Report {
    fn line(&mut self, line: impl AsRef<str>) {
        self.text.push_str(line.as_ref());
        self.text.push('\n');
    }

    fn anomaly(&mut self, pv: Option<&str>, what: String) {
        if let Some(pv) = pv {
            self.suspects.insert(pv.to_owned());
        }
        self.anomalies.push(what);
    }
}

/// Every PV of the fleet, as the recorder saw it: never deleted, Released
/// or Failed, never bound to a claim other than its pair's two.
fn check_history(report: &mut Report, pairs: &[Pair], seen: &[Seen]) {
    let by_pv: HashMap<&str, &Pair> = pairs.iter().map(|p| (p.pv.as_str(), p)).collect();
    let mut versions = 0;
    for s in seen.iter().filter(|s| s.kind == "pv") {
        let Some(p) = by_pv.get(s.name.as_str()) else {
            continue;
        };
        versions += 1;
        if s.event == "DELETED" {
            report.anomaly(Some(&s.name), format!("PV {} was deleted", s.name));
        }
        let phase = s.object["phase"].as_str().unwrap_or_default();
        if phase == "Released" || phase == "Failed" {
            report.anomaly(Some(&s.name), format!("PV {} went {phase}", s.name));
        }
        let claim = &s.object["claimRef"];
        if let (Some(ns), Some(name)) = (claim["namespace"].as_str(), claim["name"].as_str()) {
            if name != p.claim || (ns != p.src && ns != p.dst) {
                report.anomaly(
                    Some(&s.name),
                    format!("PV {} was bound to a third claim {ns}/{name}", s.name),
                );
            }
        }
    }
    let seen_pvs: HashSet<&str> = seen
        .iter()
        .filter(|s| s.kind == "pv")
        .map(|s| s.name.as_str())
        .collect();
    for p in pairs.iter().filter(|p| !seen_pvs.contains(p.pv.as_str())) {
        report.anomaly(None, format!("the recorder never saw PV {}", p.pv));
    }
    report.line(format!(
        "- recorder: {versions} versions of the fleet's {} PVs seen",
        pairs.len()
    ));
}

/// Where every volume is now: at its destination if the pair Completed,
/// back at its source if it Failed, with its uid and its `Delete` policy.
fn check_volumes(
    report: &mut Report,
    k: &Kubectl,
    pairs: &[Pair],
    outcome: &HashMap<String, (String, String)>,
) {
    let volumes = listed(k, &["get", "pv"]);
    let by_name: HashMap<&str, &Value> = volumes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["metadata"]["name"].as_str().unwrap(), v))
        .collect();
    for p in pairs {
        let Some(v) = by_name.get(p.pv.as_str()) else {
            report.anomaly(Some(&p.pv), format!("PV {} is gone", p.pv));
            continue;
        };
        let (phase, _) = &outcome[&p.pv];
        let home = match phase.as_str() {
            "Completed" => &p.dst,
            "Failed" => &p.src,
            _ => continue,
        };
        let claim_ref = &v["spec"]["claimRef"];
        let problems = [
            (v["metadata"]["uid"] != p.pv_uid.as_str(), "a new PV"),
            (
                claim_ref["namespace"] != home.as_str(),
                "not in its pair's final namespace",
            ),
            (
                claim_ref["name"] != p.claim.as_str(),
                "bound to another claim",
            ),
            (v["status"]["phase"] != "Bound", "not Bound"),
            (
                v["spec"]["persistentVolumeReclaimPolicy"] != "Delete",
                "policy not restored",
            ),
        ];
        for (bad, what) in problems {
            if bad {
                report.anomaly(
                    Some(&p.pv),
                    format!(
                        "PV {} ({phase} pair {}/{} → {}): {what}: {claim_ref} {}",
                        p.pv, p.src, p.claim, p.dst, v["status"]
                    ),
                );
            }
        }
    }
}

/// Each replica's terms, from its logs: (identity, elected at), in order.
fn elections(logs: &Path) -> Vec<(String, SystemTime)> {
    let mut out = Vec::new();
    for line in log_lines(logs, "storage-transfer-apiserver", "replica-") {
        if !line.contains("became the controller leader") {
            continue;
        }
        let (Some(at), Some(identity)) = (log_time(&line), field(&line, "identity=")) else {
            continue;
        };
        out.push((identity, at));
    }
    out.sort_by_key(|(_, at)| *at);
    out
}

fn log_lines(logs: &Path, main: &str, replica: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = (name.starts_with(main) || name.starts_with(replica))
            && name.ends_with(".log")
            && !name.contains("audit");
        if ours {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    lines
}

/// The timestamp that starts a log line (RFC 3339, as tracing writes it).
fn log_time(line: &str) -> Option<SystemTime> {
    let stamp = strip_ansi(line.split_whitespace().next()?);
    parse_rfc3339(&stamp)
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn field(line: &str, name: &str) -> Option<String> {
    let clean = strip_ansi(line);
    let start = clean.find(name)? + name.len();
    Some(
        clean[start..]
            .split_whitespace()
            .next()?
            .trim_matches('"')
            .to_owned(),
    )
}

/// `2026-12-02T03:04:05.123456Z` to a time.
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>());
    let (h, min, sec) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Days since the epoch (a civil-from-days inverse, proleptic Gregorian).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + min * 60 + sec;
    let nanos: u32 = format!("{frac:0<9}")[..9].parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::new(u64::try_from(secs).ok()?, nanos))
}

/// No controller write to a PV or claim begun by a replica after another
/// replica was elected (and before it was elected again itself): the audit
/// of writes against the terms.
fn check_leadership(report: &mut Report, logs: &Path) {
    let terms = elections(logs);
    let mut writes = 0;
    let mut writers = HashSet::new();
    for entry in std::fs::read_dir(logs).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("server-") && name.contains("audit")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(identity) = event["annotations"]["storage.transfer.k8s.io/replica"].as_str()
            else {
                continue;
            };
            let Some(at) = event["requestReceivedTimestamp"]
                .as_str()
                .and_then(parse_rfc3339)
            else {
                continue;
            };
            writes += 1;
            writers.insert(identity.to_owned());
            let leader = terms.iter().rev().find(|(_, elected)| *elected <= at);
            if let Some((leader, elected)) = leader {
                if leader != identity {
                    report.anomaly(
                        None,
                        format!(
                            "double leadership: {identity} began a write ({} {}) after {leader} was elected ({:?} earlier)",
                            event["verb"].as_str().unwrap_or_default(),
                            event["objectRef"]["name"].as_str().unwrap_or_default(),
                            at.duration_since(*elected).unwrap_or_default()
                        ),
                    );
                }
            }
        }
    }
    // Vacuous checks pass: say so instead.
    if writes == 0 || terms.is_empty() {
        report.anomaly(
            None,
            format!(
                "the leadership audit saw {writes} controller writes and {} terms: nothing to check",
                terms.len()
            ),
        );
    }
    report.line(format!(
        "- leadership: {} terms over {} replicas; {writes} controller writes to PVs and claims audited, by {} replicas; each begun within its writer's term",
        terms.len(),
        terms.iter().map(|(i, _)| i).collect::<HashSet<_>>().len(),
        writers.len()
    ));
}

/// Deletes every transfer of the fleet and waits until all are gone: none
/// may stay held by our finalizers. Then no `_index` key may remain.
fn check_cleanup(report: &mut Report, cluster: &Cluster, namespaces: &[String]) {
    let k = cluster.cp.kubectl();
    for ns in namespaces {
        let _ = k.run(&[
            "delete",
            "namespacetransfers",
            "--all",
            "-n",
            ns,
            "--wait=false",
        ]);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let left = loop {
        let list = listed(k, &["get", "namespacetransfers", "-A"]);
        let left: Vec<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                namespaces
                    .iter()
                    .any(|ns| t["metadata"]["namespace"] == ns.as_str())
            })
            .map(|t| {
                format!(
                    "{}/{} (finalizers {})",
                    t["metadata"]["namespace"].as_str().unwrap_or_default(),
                    t["metadata"]["name"].as_str().unwrap_or_default(),
                    t["metadata"]["finalizers"]
                )
            })
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    for t in &left {
        report.anomaly(
            None,
            format!("transfer {t} still there 120 s after its deletion"),
        );
    }
    let index = cluster
        .cp
        .etcd_cluster()
        .unwrap()
        .range("/registry/storage.transfer.k8s.io/_index/")
        .unwrap();
    for (key, value) in &index {
        report.anomaly(
            None,
            format!(
                "dangling index key {key} ({}) with no transfer left",
                String::from_utf8_lossy(value)
            ),
        );
    }
    report.line(format!(
        "- clean-up: every transfer deleted: {} left; `_index` keys left: {}",
        left.len(),
        index.len()
    ));
}

/// Watch-cache re-lists and fenced writes, from our servers' logs.
fn server_log_counts(logs: &Path) -> (usize, usize, usize) {
    let lines = log_lines(logs, "storage-transfer-apiserver", "replica-");
    let count = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
    (
        count("watch cache lost its etcd watch; resuming"),
        count("watch cache lost its watch; re-listing"),
        count("no longer leads the controllers"),
    )
}

#[test]
fn timestamps_in_logs_and_audit_events_read_as_the_same_instant() {
    let at = parse_rfc3339("2026-12-02T02:49:08.293170Z").unwrap();
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(since, Duration::new(1_796_179_748, 293_170_000));
    assert_eq!(
        parse_rfc3339("1970-01-01T00:00:00Z"),
        Some(SystemTime::UNIX_EPOCH)
    );
    assert_eq!(
        parse_rfc3339("2024-02-29T23:59:59.5Z")
            .unwrap()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap(),
        Duration::new(1_709_251_199, 500_000_000)
    );
    let line = "2026-12-02T02:49:08.293170Z  INFO storage_transfer_apiserver::controller::leader: became the controller leader identity=vm_26391 lease_id=42";
    assert_eq!(log_time(line), Some(at));
    assert_eq!(field(line, "identity=").as_deref(), Some("vm_26391"));
    assert_eq!(parse_rfc3339("yesterday"), None);
}

#[test]
fn transfers_ride_through_replica_etcd_apiserver_and_csi_failures_with_nothing_lost() {
    let settings = Settings::from_env();
    let mut rng = Rng(settings.seed);
    let cluster = Cluster::start();
    let cp = &cluster.cp;
    let k = cp.kubectl();

    let fleet = Fleet::prepare(cp, "chaos", settings.pairs);
    let mut namespaces: Vec<String> = fleet.namespaces().map(str::to_owned).collect();
    ephemeral::ensure_class(k);
    let ec_namespace = cp.namespace("chaos-ec").unwrap();
    namespaces.push(ec_namespace.name.clone());
    let claims = (settings.pairs / 4).max(4);
    let recorder = Recorder::start(k);
    let prober = Prober::start(k);
    let started = Instant::now();
    let until = started + settings.faults_for;
    let waves = (settings.faults_for.as_secs() / WAVE_EVERY.as_secs()).max(6) as usize;

    // Requests are filed in waves across the fault window.
    let filing = std::thread::scope(|scope| {
        let filer = scope.spawn(|| {
            let wave = fleet.pairs.len().div_ceil(waves).max(1);
            let mut attempts = 0;
            for (i, chunk) in fleet.pairs.chunks(wave).enumerate() {
                let at = started + settings.faults_for.mul_f64(i as f64 / waves as f64);
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                attempts += file(k, chunk, until + SETTLE)?;
            }
            Ok::<usize, String>(attempts)
        });
        // EphemeralClaims begin across the fault window too.
        let lives: Vec<_> = (0..claims)
            .map(|i| {
                let (ns, csi) = (&ec_namespace.name, &cp.csi);
                let at = started + settings.faults_for.mul_f64(i as f64 / claims as f64);
                scope.spawn(move || {
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    ephemeral_life(k, csi, ns, i, until + SETTLE)
                })
            })
            .collect();
        let injected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inject(&cluster, &mut rng, until)
        }));
        if injected.is_err() {
            ABORT.store(true, Ordering::SeqCst);
        }
        let lives: Vec<Result<String, String>> =
            lives.into_iter().map(|l| l.join().unwrap()).collect();
        let filed = filer.join().unwrap();
        let injected = injected.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (filed, injected, lives)
    });
    let (filed, injected, lives) = filing;
    let attempts = filed.unwrap_or_else(|e| panic!("{e}"));
    let faults_ended = Instant::now();

    // Every transfer finishes within SETTLE of the last fault.
    let mut outcome = outcomes(k, &fleet.pairs);
    while outcome.values().any(|(phase, _)| !finished(phase)) && faults_ended.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_secs(1));
        outcome = outcomes(k, &fleet.pairs);
    }
    let settled = faults_ended.elapsed();
    let (seen, restarts) = recorder.finish();
    let (probes, windows) = prober.finish();

    let mut report = Report {
        text: String::new(),
        anomalies: Vec::new(),
        suspects: HashSet::new(),
    };
    report.line(format!(
        "# Chaos soak: {} pairs, {:.0} s of faults, seed {}",
        settings.pairs,
        settings.faults_for.as_secs_f64(),
        settings.seed
    ));
    report.line("");
    let mut by_fault: BTreeMap<Fault, usize> = BTreeMap::new();
    for f in &injected {
        *by_fault.entry(f.fault).or_default() += 1;
    }
    report.line(format!(
        "- faults injected: {} ({})",
        injected.len(),
        by_fault
            .iter()
            .map(|(f, n)| format!("{f:?} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for f in &injected {
        report.line(format!(
            "  - at {:>6.1} s: {:?}, {}",
            (f.began - started).as_secs_f64(),
            f.fault,
            f.detail
        ));
    }
    report.line(format!(
        "- requests: {} filed in {waves} waves, {attempts} `kubectl create` attempts",
        fleet.pairs.len()
    ));
    let completed = outcome.values().filter(|(p, _)| p == "Completed").count();
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for (phase, reason) in outcome.values() {
        if phase == "Failed" {
            *failed.entry(reason.clone()).or_default() += 1;
        }
    }
    let stuck: Vec<String> = outcome
        .iter()
        .filter(|(_, (phase, _))| !finished(phase))
        .map(|(pv, (phase, _))| format!("{pv} ({phase:?})"))
        .collect();
    report.line(format!(
        "- transfers: {completed} Completed, {} Failed {failed:?}, {} stuck; all finished {:.1} s after the last fault",
        failed.values().sum::<usize>(),
        stuck.len(),
        settled.as_secs_f64()
    ));
    for s in &stuck {
        report.anomaly(
            Some(s.split_whitespace().next().unwrap_or_default()),
            format!("transfer of {s} not finished {SETTLE:?} after the faults"),
        );
    }
    let mut lived = 0;
    for (i, life) in lives.iter().enumerate() {
        match life {
            Ok(handle) => {
                lived += 1;
                let destroyed = cp.csi.destructions_of(handle).len();
                if destroyed != 1 {
                    report.anomaly(
                        None,
                        format!("EphemeralClaim scratch-{i}'s volume {handle} destroyed {destroyed} times"),
                    );
                }
            }
            Err(e) => report.anomaly(None, format!("EphemeralClaim scratch-{i}: {e}")),
        }
    }
    report.line(format!(
        "- EphemeralClaims: {lived} of {claims} lived Bound → InUse → Deleted through the faults, each volume destroyed once, none before its pod ran"
    ));
    check_history(&mut report, &fleet.pairs, &seen);
    check_volumes(&mut report, k, &fleet.pairs, &outcome);
    let mut deletes = 0;
    for p in &fleet.pairs {
        let calls = cp.csi.deletions_of(&p.handle);
        deletes += calls.len();
        if !calls.is_empty() {
            report.anomaly(
                Some(&p.pv),
                format!("DeleteVolume called for {} ({}): {calls:?}", p.pv, p.handle),
            );
        }
    }
    report.line(format!(
        "- `DeleteVolume` calls for the fleet's volumes: {deletes}"
    ));
    check_leadership(&mut report, &cp.logs_dir());
    let longest = windows
        .iter()
        .map(|(from, to)| *to - *from)
        .max()
        .unwrap_or_default();
    let down: Duration = windows.iter().map(|(from, to)| *to - *from).sum();
    report.line(format!(
        "- API through the aggregator: {probes} probes; {} windows without an answer, {:.1} s in all, the longest {:.1} s",
        windows.len(),
        down.as_secs_f64(),
        longest.as_secs_f64()
    ));
    for (from, to) in &windows {
        let during: Vec<String> = injected
            .iter()
            .filter(|f| f.began <= *to && *from <= f.ended + Duration::from_secs(5))
            .map(|f| format!("{:?}", f.fault))
            .collect();
        report.line(format!(
            "  - at {:>6.1} s for {:.1} s (during {})",
            (*from - started).as_secs_f64(),
            (*to - *from).as_secs_f64(),
            if during.is_empty() {
                "no fault".to_owned()
            } else {
                during.join(", ")
            }
        ));
    }
    let (resumed, relists, fenced) = server_log_counts(&cp.logs_dir());
    report.line(format!(
        "- watchers: the recorder's three `kubectl get -w` started again {restarts} times; our watch caches resumed their etcd watch {resumed} times and logged {relists} re-lists; {fenced} controller writes were refused by their fence"
    ));
    check_cleanup(&mut report, &cluster, &namespaces);

    report.line("");
    if report.anomalies.is_empty() {
        report.line("No anomaly.");
    } else {
        report.line(format!("{} anomalies:", report.anomalies.len()));
        let anomalies = report.anomalies.clone();
        for a in anomalies {
            report.line(format!("- {a}"));
        }
        let mut suspects: Vec<&String> = report.suspects.iter().collect();
        suspects.sort();
        let mut history = String::new();
        for pv in suspects.into_iter().take(5) {
            let _ = writeln!(history, "\nHistory of PV {pv}:");
            for s in seen.iter().filter(|s| s.kind == "pv" && &s.name == pv) {
                let _ = writeln!(
                    history,
                    "  {:>7.1} s {} {}",
                    s.at.saturating_duration_since(started).as_secs_f64(),
                    s.event,
                    s.object
                );
            }
        }
        report.text.push_str(&history);
    }
    eprintln!("{}", report.text);
    if let Some(path) = &settings.report {
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(path, &report.text).unwrap();
    }
    assert!(
        report.anomalies.is_empty(),
        "the soak found {} anomalies (report above; logs in {})",
        report.anomalies.len(),
        cp.logs_dir().display()
    );
}
