//! Our API as Go clients use it (issue 15, "Clients"): the program in
//! `tests/clientgo`, built by `hack/build-clientgo.sh` against the client-go
//! of the Kubernetes release we run, drives our server through
//! kube-apiserver's aggregator. Discovery and the REST mapper resolve both
//! kinds; dynamic and metadata informers follow every change across two
//! restarts of our server, with the WatchList feature on and off, and end up
//! as a fresh LIST; server-side apply records managed fields. And
//! kube-controller-manager, whose garbage collector runs metadata informers
//! on our kinds, logs no watch it could not decode.
//!
//! The tests take turns on one private control plane, since some restart its
//! server. Its controllers are off, so that our objects change only when a
//! test changes them.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use sta_testenv::{repo_root, ControlPlane, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
/// How long the control plane stays idle while kube-controller-manager's
/// informers watch our kinds: more than two of our server's 30 s bookmark
/// intervals, so that every idle watch gets bookmarks.
const IDLE: Duration = Duration::from_secs(65);
/// How long the garbage collector may take to notice an orphan of our kinds
/// (it rediscovers resources every 30 s).
const GC_WAIT: Duration = Duration::from_secs(180);

static CP: OnceLock<ControlPlane> = OnceLock::new();
static TURN: Mutex<()> = Mutex::new(());

/// The control plane, and the right to restart its server.
fn turn() -> (&'static ControlPlane, MutexGuard<'static, ()>) {
    let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let cp = CP.get_or_init(|| {
        let mut opts = Options::for_tests(BIN);
        opts.server_args
            .push("--controllers=-namespacetransfer,-ephemeralclaim".to_owned());
        ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"))
    });
    (cp, guard)
}

/// The client-go program, built once per test binary (at once when cached).
fn clientgo() -> &'static Path {
    static PROGRAM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = PROGRAM.get_or_init(|| {
        let script = repo_root().join("hack/build-clientgo.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "hack/build-clientgo.sh failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    });
    match built {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

/// A child process that is killed if the test ends before it does.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// How a run of the program went.
#[derive(Debug)]
struct Outcome {
    scenario: String,
    passed: bool,
    /// Its protocol lines (stdout).
    lines: Vec<String>,
    /// Its stderr: client-go's log.
    log: PathBuf,
    restarts: usize,
}

impl Outcome {
    fn assert_passed(&self) {
        if self.passed {
            return;
        }
        let (failures, others): (Vec<&str>, Vec<&str>) = self
            .lines
            .iter()
            .map(String::as_str)
            .partition(|l| l.starts_with("FAIL "));
        panic!(
            "client-go scenario {} failed:\n{}\n--- its other lines ---\n{}\n--- the last lines of its log, {} ---\n{}",
            self.scenario,
            failures.join("\n"),
            others.join("\n"),
            self.log.display(),
            tail(&self.log, 40),
        );
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs one scenario of the program against `cp`, restarting our server
/// whenever it asks, with `env` on top of ours (and no inherited client-go
/// feature gate).
fn run_clientgo(
    cp: &ControlPlane,
    scenario: &str,
    namespace: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Outcome {
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let log = cp.logs_dir().join(format!("clientgo-{scenario}-{n}.log"));
    let stderr = File::create(&log).unwrap();
    let kubeconfig = cp.kubeconfig();
    let mut cmd = Command::new(clientgo());
    cmd.arg(format!("-kubeconfig={}", kubeconfig.display()));
    if let Some(ns) = namespace {
        cmd.arg(format!("-namespace={ns}"));
    }
    cmd.args(args)
        .arg(scenario)
        .env_remove("KUBE_FEATURE_WatchListClient")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let mut child = Running(cmd.spawn().unwrap());
    let mut stdin = child.0.stdin.take().unwrap();
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut restarts = 0;
    for line in stdout.lines() {
        let line = line.unwrap();
        eprintln!("clientgo {scenario}: {line}");
        if line == "RESTART" {
            let answer = match cp.restart_server(&[], &[]) {
                Ok(()) => {
                    restarts += 1;
                    "RESTARTED".to_owned()
                }
                Err(e) => format!("ERROR {}", e.to_string().replace('\n', " ")),
            };
            eprintln!("clientgo {scenario}: <- {answer}");
            // If the program is gone, its verdict says why: read on.
            let _ = writeln!(stdin, "{answer}").and_then(|()| stdin.flush());
        }
        lines.push(line);
    }
    let status = child.0.wait().unwrap();
    let passed = status.success() && lines.last().map(String::as_str) == Some("PASS");
    if !passed {
        lines.push(format!("(exit status: {status})"));
    }
    Outcome {
        scenario: scenario.to_owned(),
        passed,
        lines,
        log,
        restarts,
    }
}

fn informers_converge_through_two_restarts(watch_list: &str) {
    let (cp, _turn) = turn();
    let ns = cp
        .namespace(&format!("informers-watchlist-{watch_list}"))
        .unwrap();
    let gate = if watch_list == "on" { "true" } else { "false" };
    let outcome = run_clientgo(
        cp,
        "informers",
        Some(&ns.name),
        &[&format!("-watch-list={watch_list}"), "-restarts=2"],
        &[("KUBE_FEATURE_WatchListClient", gate)],
    );
    outcome.assert_passed();
    assert_eq!(outcome.restarts, 2, "{outcome:?}");
}

#[test]
fn client_go_discovery_and_restmapper_resolve_both_kinds() {
    let (cp, _turn) = turn();
    run_clientgo(cp, "discovery", None, &[], &[]).assert_passed();
}

#[test]
fn dynamic_and_metadata_informers_converge_through_two_server_restarts_with_watch_list_off() {
    informers_converge_through_two_restarts("off");
}

#[test]
fn dynamic_and_metadata_informers_converge_through_two_server_restarts_with_watch_list_on() {
    informers_converge_through_two_restarts("on");
}

#[test]
fn dynamic_client_apply_creates_and_updates_with_managed_fields() {
    let (cp, _turn) = turn();
    let ns = cp.namespace("apply").unwrap();
    run_clientgo(cp, "apply", Some(&ns.name), &[], &[]).assert_passed();
}

/// What one line of kube-controller-manager's log says about its watches.
#[derive(Debug, PartialEq, Eq)]
enum LogLine {
    Fine,
    /// A watch event it could not decode or did not expect: a server bug.
    Broken,
    /// A watch that ended with its connection, as it does when our server is
    /// killed under the aggregator's proxy.
    Transport,
}

/// As `tests/clientgo/logwatch.go` classifies client-go's log.
fn classify(line: &str) -> LogLine {
    let l = line.to_lowercase();
    // `no kind "NamespaceTransfer" is registered`, its quotes escaped once
    // or twice as klog nests the error in err="…".
    if l.contains("no kind ")
        && [
            "namespacetransfer",
            "ephemeralclaim",
            "storage.transfer.k8s.io",
        ]
        .iter()
        .any(|ours| l.contains(ours))
    {
        return LogLine::Broken;
    }
    const WATCH_FAILED: &[&str] = &[
        "unable to decode an event from the watch stream",
        "watch ended with error",
        "unable to understand watch event",
        "unexpected watch event object",
        "unsupported watch event object",
    ];
    const TRANSPORT: &[&str] = &[
        "stream error: stream id",
        "internal_error; received from peer",
        "connection reset by peer",
        "connection refused",
        "unexpected eof",
        "broken pipe",
        "goaway",
        "use of closed network connection",
        "http2: client connection lost",
        "the server is currently unable to handle the request",
        "service unavailable",
    ];
    if !WATCH_FAILED.iter().any(|s| l.contains(s)) {
        LogLine::Fine
    } else if TRANSPORT.iter().any(|s| l.contains(s)) {
        LogLine::Transport
    } else {
        LogLine::Broken
    }
}

#[test]
fn kube_controller_manager_logs_no_watch_decode_errors_for_our_kinds_over_a_minute_idle() {
    let (cp, _turn) = turn();
    let k = cp.kubectl();
    let ns = cp.namespace("kcm-idle").unwrap();

    // First make sure the garbage collector does watch our kinds: it deletes
    // our objects whose owner is gone.
    k.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: owner, namespace: {}}}\n",
        ns.name
    ))
    .unwrap();
    let uid = k.ok(&[
        "get",
        "configmap",
        "owner",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let owner =
        format!("ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}]");
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: dependent\n  namespace: {ns}\n  {owner}\nspec:\n  source: {{name: claim-x}}\n  destination: {{namespace: dev}}\n---\napiVersion: storage.transfer.k8s.io/v1alpha1\nkind: EphemeralClaim\nmetadata:\n  name: dependent\n  namespace: {ns}\n  {owner}\nspec:\n  owner: {{apiVersion: v1, kind: Pod, name: runner}}\n  claimTemplate:\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: 1Gi}}}}\n",
        ns = ns.name
    ))
    .unwrap();
    k.ok(&["delete", "configmap", "owner", "-n", &ns.name]);
    let deadline = Instant::now() + GC_WAIT;
    loop {
        let left = k.ok(&[
            "get",
            "namespacetransfers,ephemeralclaims",
            "-n",
            &ns.name,
            "-o",
            "name",
        ]);
        if left.trim().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the garbage collector did not delete the dependents of a deleted ConfigMap within {GC_WAIT:?}: {left}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }

    // Then leave everything idle: no writes, no restarts (this test holds
    // the turn), so that every watch only gets bookmarks.
    let log = cp.logs_dir().join("kube-controller-manager.log");
    let idle_from = std::fs::metadata(&log).unwrap().len() as usize;
    std::thread::sleep(IDLE);
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();

    // Before the idle minute, the other tests restarted our server: a watch
    // cut then is fine. During it, nothing may break.
    let mut broken = Vec::new();
    let mut cut_by_restarts = 0;
    let mut offset = 0;
    for line in text.lines() {
        let idle = offset >= idle_from;
        offset += line.len() + 1;
        match classify(line) {
            LogLine::Fine => {}
            LogLine::Transport if !idle => cut_by_restarts += 1,
            LogLine::Transport | LogLine::Broken => broken.push(line),
        }
    }
    eprintln!(
        "kube-controller-manager: {cut_by_restarts} watch(es) cut by earlier server restarts"
    );
    assert!(
        broken.is_empty(),
        "kube-controller-manager's log ({}) has watch failures:\n{}",
        log.display(),
        broken.join("\n")
    );
}

#[test]
fn log_lines_are_classified_as_client_go_prints_them() {
    let cases = [
        (
            r#"I1130 15:04:44.680892   14460 reflector.go:664] "Warning: watch ended with error" reflector="k8s.io/client-go@v0.36.3/tools/cache/reflector.go:343" type="*v1.PartialObjectMetadata" err="an error on the server (\"unable to decode an event from the watch stream: stream error: stream ID 1657; INTERNAL_ERROR; received from peer\") has prevented the request from succeeding""#,
            LogLine::Transport,
        ),
        (
            r#"I1130 reflector.go:664] "Warning: watch ended with error" type="*v1.PartialObjectMetadata" err="an error on the server (\"unable to decode an event from the watch stream: unable to decode watch event: no kind \\\"NamespaceTransfer\\\" is registered for version \\\"storage.transfer.k8s.io/v1alpha1\\\" in scheme \\\"k8s.io/client-go/metadata/metadata.go:56\\\"\") has prevented the request from succeeding""#,
            LogLine::Broken,
        ),
        (
            r#"E1130 "Unable to decode an event from the watch stream" err="json: cannot unmarshal""#,
            LogLine::Broken,
        ),
        (
            r#"I1130 resource_quota_monitor.go:229] "QuotaMonitor created object count evaluator" resource="namespacetransfers.storage.transfer.k8s.io""#,
            LogLine::Fine,
        ),
    ];
    for (line, want) in cases {
        assert_eq!(classify(line), want, "{line}");
    }
}
