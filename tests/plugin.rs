//! `kubectl transfer` end to end: the real kubectl finds the plugin on PATH
//! and runs it as two tenants (`--as`), each holding the built-in `edit` role
//! in its own namespace only, against the whole control plane. What each
//! side is shown, the exit codes, the sentences of its errors, and the
//! progress display on a pseudo-terminal and piped.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use serde_json::Value;
use sta_testenv::scenario::*;
use sta_testenv::{shared, ControlPlane, Kubectl, Namespace};

const WAIT: Duration = Duration::from_secs(60);

fn cp() -> &'static ControlPlane {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    static CLASSES: std::sync::Once = std::sync::Once::new();
    CLASSES.call_once(|| ensure_classes(cp.kubectl()));
    cp
}

fn admin() -> &'static Kubectl {
    cp().kubectl()
}

/// PATH with the plugin's directory first, as a user who installed it has.
fn path_with_plugin() -> String {
    let plugin = sta_testenv::plugin_bin();
    let dir = plugin.parent().unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The arguments of `kubectl transfer …` as `user` (admin when `None`):
/// kubectl passes every flag after the plugin's name on to it.
fn argv(user: Option<&str>, args: &[&str]) -> Vec<String> {
    let mut all = vec!["transfer".to_owned()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    all.push(format!("--kubeconfig={}", admin().kubeconfig().display()));
    if let Some(user) = user {
        all.push(format!("--as={user}"));
    }
    all
}

fn command(user: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(admin().binary());
    cmd.args(argv(user, args))
        .env("PATH", path_with_plugin())
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What one `kubectl transfer` printed, and its exit code.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Ran {
    fn from(out: Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs `kubectl transfer …` as `user` to its end.
fn run(user: Option<&str>, args: &[&str]) -> Ran {
    command(user, args).output().unwrap().into()
}

/// Starts `kubectl transfer …` as `user`, for a command that waits.
fn spawn(user: Option<&str>, args: &[&str]) -> Background {
    let mut child = command(user, args).spawn().unwrap();
    let stdout = collect(Box::new(child.stdout.take().unwrap()));
    let stderr = collect(Box::new(child.stderr.take().unwrap()));
    Background {
        child: Some(child),
        stdout,
        stderr,
    }
}

type Collected = (Arc<Mutex<String>>, std::thread::JoinHandle<()>);

/// Reads `pipe` on a thread of its own until it ends (for a terminal: EIO
/// once the child has gone), keeping what it has read so far where the test
/// can look.
fn collect(mut pipe: Box<dyn Read + Send>) -> Collected {
    let seen = Arc::new(Mutex::new(String::new()));
    let into = Arc::clone(&seen);
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    (seen, reader)
}

/// A running `kubectl transfer`, killed if the test ends before it; what it
/// prints is read as it comes.
struct Background {
    child: Option<Child>,
    stdout: Collected,
    stderr: Collected,
}

impl Background {
    /// Waits until it has printed `text`: it is past that point.
    #[track_caller]
    fn wait_for(&self, text: &str) {
        eventually(&format!("the plugin to print {text:?}"), WAIT, || {
            self.stdout.0.lock().unwrap().contains(text)
        });
    }

    fn finish(mut self) -> Ran {
        let status = self.child.take().unwrap().wait().unwrap();
        let (stdout, out_reader) = std::mem::replace(&mut self.stdout, empty());
        let (stderr, err_reader) = std::mem::replace(&mut self.stderr, empty());
        out_reader.join().unwrap();
        err_reader.join().unwrap();
        let text = |s: Arc<Mutex<String>>| s.lock().unwrap().clone();
        Ran {
            code: status.code().unwrap_or(-1),
            stdout: text(stdout),
            stderr: text(stderr),
        }
    }
}

fn empty() -> Collected {
    (Arc::default(), std::thread::spawn(|| {}))
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A tenant: `user` with the built-in `edit` role in `ns` alone.
fn tenant(prefix: &str, ns: &str) -> String {
    let user = unique(prefix);
    grant_edit(admin(), &user, ns);
    user
}

/// Two namespaces, a bound claim `db` in the first, and a tenant of each.
struct Pair {
    src: Namespace,
    dst: Namespace,
    alice: String,
    bob: String,
}

impl Pair {
    fn new() -> Self {
        let src = cp().namespace("src").unwrap();
        let dst = cp().namespace("dst").unwrap();
        provisioned_volume(admin(), ALLOWED_CLASS, &src.name, "db", "1Gi");
        let alice = tenant("alice", &src.name);
        let bob = tenant("bob", &dst.name);
        Self {
            src,
            dst,
            alice,
            bob,
        }
    }

    fn offer_name(&self) -> String {
        format!("db-to-{}", self.dst.name)
    }

    fn request_name(&self) -> String {
        format!("db-from-{}", self.src.name)
    }

    fn source(&self) -> String {
        format!("{}/db", self.src.name)
    }
}

/// The stage words of the plain progress lines (`HH:MM:SS  +7s  <word>  …`),
/// in the order printed.
fn stage_words(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.len() > 8 && l.as_bytes()[2] == b':' && l.as_bytes()[5] == b':')
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|w| *w != "waiting")
        .collect()
}

const EVERY_STAGE: [&str; 8] = [
    "matched",
    "free",
    "locked",
    "retained",
    "created",
    "committed",
    "released",
    "settled",
];

#[test]
fn an_offer_and_a_request_that_wait_both_complete_showing_every_step_in_order() {
    let p = Pair::new();
    let timeout = "--timeout=120s";
    let offer = spawn(
        Some(&p.alice),
        &[
            "offer",
            "db",
            "--to",
            &p.dst.name,
            "--wait",
            timeout,
            "-n",
            &p.src.name,
        ],
    );
    wait_phase(
        admin(),
        &p.src.name,
        &p.offer_name(),
        "WaitingForPeer",
        WAIT,
    );
    let request = run(
        Some(&p.bob),
        &["request", &p.source(), "--wait", timeout, "-n", &p.dst.name],
    );
    let offer = offer.finish();
    for (side, ran) in [("offer", &offer), ("request", &request)] {
        assert_eq!(ran.code, 0, "{side}: {ran:?}");
        assert_eq!(
            stage_words(&ran.stdout),
            EVERY_STAGE,
            "{side}: {}",
            ran.stdout
        );
        assert!(
            ran.stdout
                .trim_end()
                .lines()
                .last()
                .unwrap()
                .starts_with("Completed: volume "),
            "{side}: {}",
            ran.stdout
        );
        assert!(
            !ran.stdout.contains('\x1b'),
            "piped output is plain: {:?}",
            ran.stdout
        );
    }
    assert!(
        offer.stdout.starts_with(&format!(
            "namespacetransfer.storage.transfer.k8s.io/{} created\nNext, in namespace {}: kubectl transfer request {} -n {}\n",
            p.offer_name(),
            p.dst.name,
            p.source(),
            p.dst.name
        )),
        "{}",
        offer.stdout
    );
    assert!(
        offer.stdout.contains("(WaitingForPeer)"),
        "the offer waited for its peer: {}",
        offer.stdout
    );
    wait_bound(admin(), &p.dst.name, "db");
    let requester = transfer_json(admin(), &p.src.name, &p.offer_name()).unwrap();
    assert_eq!(requester["spec"]["requester"]["username"], p.alice.as_str());
}

#[test]
fn a_claim_in_use_waits_naming_its_pods_to_the_source_side_only_until_cancelled() {
    let p = Pair::new();
    running_pod(admin(), &p.src.name, "web-0", "db");
    let offered = run(
        Some(&p.alice),
        &["offer", "db", "--to", &p.dst.name, "-n", &p.src.name],
    );
    assert_eq!(offered.code, 0, "{offered:?}");
    let requested = run(Some(&p.bob), &["request", &p.source(), "-n", &p.dst.name]);
    assert_eq!(requested.code, 0, "{requested:?}");
    wait_phase(
        admin(),
        &p.src.name,
        &p.offer_name(),
        "WaitingForRelease",
        WAIT,
    );
    wait_phase(
        admin(),
        &p.dst.name,
        &p.request_name(),
        "WaitingForRelease",
        WAIT,
    );

    let source = run(
        Some(&p.alice),
        &["status", &p.offer_name(), "-n", &p.src.name],
    );
    assert_eq!(source.code, 0, "{source:?}");
    assert!(
        source.stdout.contains("Phase:  WaitingForRelease"),
        "{}",
        source.stdout
    );
    assert!(
        source.stdout.contains(&format!(
            "PersistentVolumeClaim {}/db is in use by pod(s) web-0 (SourceInUse)",
            p.src.name
        )),
        "{}",
        source.stdout
    );
    let destination = run(
        Some(&p.bob),
        &["status", &p.request_name(), "-n", &p.dst.name],
    );
    assert_eq!(destination.code, 0, "{destination:?}");
    assert!(
        destination
            .stdout
            .contains("waiting until no pod in the source namespace uses the claim (SourceInUse)"),
        "{}",
        destination.stdout
    );
    assert!(
        !destination.stdout.contains("web-0"),
        "{}",
        destination.stdout
    );

    // Alice follows; Bob changes his mind.
    let watching = spawn(
        Some(&p.alice),
        &["status", &p.offer_name(), "--watch", "-n", &p.src.name],
    );
    watching.wait_for("(SourceInUse)");
    let cancelled = run(
        Some(&p.bob),
        &["cancel", &p.request_name(), "-n", &p.dst.name],
    );
    assert_eq!(cancelled.code, 0, "{cancelled:?}");
    assert_eq!(
        cancelled.stdout,
        format!(
            "namespacetransfer.storage.transfer.k8s.io/{} cancelled: the source claim stays as it was\n",
            p.request_name()
        )
    );
    let watched = watching.finish();
    assert_eq!(watched.code, 4, "Cancelled exits 4: {watched:?}");
    assert!(
        watched
            .stdout
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("Cancelled ("),
        "{}",
        watched.stdout
    );
    let claim = claim_json(admin(), &p.src.name, "db").unwrap();
    assert_eq!(claim["status"]["phase"], "Bound");
}

#[test]
fn a_revoked_right_fails_the_waiting_request_with_exit_code_3_and_the_reason() {
    let p = Pair::new();
    running_pod(admin(), &p.src.name, "app", "db");
    let offered = run(
        Some(&p.alice),
        &["offer", "db", "--to", &p.dst.name, "-n", &p.src.name],
    );
    assert_eq!(offered.code, 0, "{offered:?}");
    let waiting = spawn(
        Some(&p.bob),
        &[
            "request",
            &p.source(),
            "--wait",
            "--timeout=2m",
            "-n",
            &p.dst.name,
        ],
    );
    wait_phase(
        admin(),
        &p.src.name,
        &p.offer_name(),
        "WaitingForRelease",
        WAIT,
    );
    revoke(admin(), &p.src.name, &p.alice);
    eventually("the revocation to apply", WAIT, || {
        !admin()
            .run(&[
                "auth",
                "can-i",
                "delete",
                "persistentvolumeclaims/db",
                "-n",
                &p.src.name,
                &format!("--as={}", p.alice),
            ])
            .success
    });
    set_pod_phase(admin(), &p.src.name, "app", "Succeeded");
    let ran = waiting.finish();
    assert_eq!(ran.code, 3, "Failed exits 3: {ran:?}");
    let last = ran.stdout.trim_end().lines().last().unwrap().to_owned();
    assert!(last.starts_with("Failed (Forbidden): "), "{}", ran.stdout);
    assert!(
        ran.stderr
            .contains("no longer holds a right the transfer needs"),
        "the advice for Forbidden: {ran:?}"
    );
    // The re-check before R2 refused: the lock came off, nothing was committed.
    assert!(!ran.stdout.contains("committed"), "{}", ran.stdout);
    eventually("the lock to come off", WAIT, || {
        claim_json(admin(), &p.src.name, "db").is_some_and(|c| {
            c["status"]["phase"] == "Bound"
                && c["metadata"]["annotations"]
                    .get("storage.transfer.k8s.io/transfer")
                    .is_none()
        })
    });
}

#[test]
fn list_shows_each_side_with_its_peer_and_phase_and_every_output_format_works() {
    let p = Pair::new();
    let yaml = run(
        Some(&p.alice),
        &[
            "offer",
            "db",
            "--to",
            &p.dst.name,
            "-o",
            "yaml",
            "-n",
            &p.src.name,
        ],
    );
    assert_eq!(yaml.code, 0, "{yaml:?}");
    let offer: Value = serde_saphyr::from_str(&yaml.stdout).unwrap();
    assert_eq!(offer["kind"], "NamespaceTransfer");
    assert_eq!(offer["apiVersion"], "storage.transfer.k8s.io/v1alpha1");
    assert_eq!(offer["spec"]["requester"]["username"], p.alice.as_str());
    let name = run(
        Some(&p.bob),
        &["request", &p.source(), "-o", "name", "-n", &p.dst.name],
    );
    assert_eq!(
        name.stdout,
        format!(
            "namespacetransfer.storage.transfer.k8s.io/{}\n",
            p.request_name()
        )
    );
    wait_phase(admin(), &p.src.name, &p.offer_name(), "Completed", WAIT);
    wait_phase(admin(), &p.dst.name, &p.request_name(), "Completed", WAIT);

    let table = run(Some(&p.alice), &["list", "-n", &p.src.name]);
    assert_eq!(table.code, 0, "{table:?}");
    let rows: Vec<Vec<&str>> = table
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "ROLE", "MODE", "PEER", "PHASE", "REASON", "AGE"]
    );
    let peer = format!("{}/{}", p.dst.name, p.request_name());
    assert_eq!(
        rows[1][..6],
        [
            p.offer_name().as_str(),
            "Source",
            "Move",
            peer.as_str(),
            "Completed",
            "Completed"
        ]
    );
    let all = run(None, &["list", "-A"]);
    assert!(
        all.stdout.lines().any(|l| {
            let cells: Vec<_> = l.split_whitespace().collect();
            cells.len() > 5
                && cells[0] == p.dst.name
                && cells[1] == p.request_name()
                && cells[2] == "Destination"
        }),
        "{}",
        all.stdout
    );
    let forbidden = run(Some(&p.alice), &["list", "-A"]);
    assert_eq!(
        forbidden.code, 1,
        "a tenant may not list every namespace: {forbidden:?}"
    );
    assert!(
        forbidden.stderr.contains("Ask a cluster administrator"),
        "{forbidden:?}"
    );
    let json = run(Some(&p.bob), &["list", "-o", "json", "-n", &p.dst.name]);
    let list: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["status"]["phase"], "Completed");
    let status = run(
        Some(&p.bob),
        &["status", &p.request_name(), "-o", "json", "-n", &p.dst.name],
    );
    let one: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(one["status"]["steps"].as_array().unwrap().len(), 6);
    let summary = run(
        Some(&p.bob),
        &["status", &p.request_name(), "-n", &p.dst.name],
    );
    assert_eq!(
        stage_words(&summary.stdout),
        EVERY_STAGE,
        "{}",
        summary.stdout
    );
}

#[test]
fn a_server_dry_run_gives_the_admission_answer_and_creates_nothing() {
    let p = Pair::new();
    let dry = run(
        Some(&p.alice),
        &[
            "offer",
            "db",
            "--to",
            &p.dst.name,
            "--dry-run=server",
            "-n",
            &p.src.name,
        ],
    );
    assert_eq!(dry.code, 0, "{dry:?}");
    assert_eq!(
        dry.stdout,
        format!(
            "namespacetransfer.storage.transfer.k8s.io/{} created (server dry run)\n",
            p.offer_name()
        )
    );
    assert!(transfer_json(admin(), &p.src.name, &p.offer_name()).is_none());

    // Carol may write transfers in the source namespace, but not give its
    // claims away: admission's 403 names the right she lacks.
    let carol = unique("carol");
    admin()
        .apply(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: transfers-only, namespace: {ns}}}\nrules:\n- apiGroups: [storage.transfer.k8s.io]\n  resources: [namespacetransfers]\n  verbs: ['*']\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {carol}, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: transfers-only}}\nsubjects:\n- {{kind: User, name: {carol}, apiGroup: rbac.authorization.k8s.io}}\n",
            ns = p.src.name
        ))
        .unwrap();
    wait_may_create_transfers(admin(), &carol, &p.src.name);
    let refused = run(
        Some(&carol),
        &[
            "offer",
            "db",
            "--to",
            &p.dst.name,
            "--dry-run=server",
            "-n",
            &p.src.name,
        ],
    );
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.starts_with("error: ")
            && refused.stderr.contains(&format!(
                "User \"{carol}\" cannot delete persistentvolumeclaims \"db\""
            ))
            && refused
                .stderr
                .contains(&format!("Ask an administrator of namespace {}", p.src.name)),
        "{refused:?}"
    );
    assert_eq!(
        refused.stderr.lines().count(),
        1,
        "one sentence: {refused:?}"
    );
    let client = run(
        Some(&p.alice),
        &[
            "offer",
            "db",
            "--to",
            &p.dst.name,
            "--dry-run=client",
            "-n",
            &p.src.name,
        ],
    );
    let printed: Value = serde_saphyr::from_str(&client.stdout).unwrap();
    assert_eq!(
        printed["spec"]["destination"]["namespace"],
        p.dst.name.as_str()
    );
    assert!(transfer_json(admin(), &p.src.name, &p.offer_name()).is_none());
}

#[test]
fn bad_input_gets_one_sentence_and_the_exit_code_of_its_kind() {
    let p = Pair::new();
    let src = p.src.name.as_str();
    let dst = p.dst.name.as_str();
    let alice = Some(p.alice.as_str());
    let bob = Some(p.bob.as_str());

    let unknown = run(alice, &["offer", "nosuch", "--to", dst, "-n", src]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(
        unknown.stderr.contains(&format!(
            "There is no PersistentVolumeClaim nosuch in namespace {src}"
        )),
        "{unknown:?}"
    );
    for malformed in [src, "a/b/c", "/db", "Prod/db"] {
        let ran = run(bob, &["request", malformed, "-n", dst]);
        assert_eq!(ran.code, 2, "{malformed}: {ran:?}");
        assert!(ran.stderr.starts_with("error: "), "{ran:?}");
    }
    let same = run(alice, &["offer", "db", "--to", src, "-n", src]);
    assert_eq!(same.code, 2, "{same:?}");
    assert!(
        same.stderr.contains("that is a rename, so pass --name NEW"),
        "{same:?}"
    );
    let to_self = run(bob, &["request", &format!("{dst}/db"), "-n", dst]);
    assert_eq!(to_self.code, 2, "{to_self:?}");
    let usage = run(alice, &["offer", "db", "-n", src]);
    assert_eq!(usage.code, 2, "--to is required: {usage:?}");

    let first = run(alice, &["offer", "db", "--to", dst, "-n", src]);
    assert_eq!(first.code, 0, "{first:?}");
    let again = run(alice, &["offer", "db", "--to", dst, "-n", src]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("already exists"), "{again:?}");
    let second = run(
        alice,
        &[
            "offer",
            "db",
            "--to",
            dst,
            "--transfer-name",
            "second",
            "-n",
            src,
        ],
    );
    assert_eq!(second.code, 1, "{second:?}");
    assert!(
        second.stderr.contains(&format!(
            "already has an active NamespaceTransfer: {src}/{}",
            p.offer_name()
        )) && second.stderr.contains(&format!(
            "kubectl transfer cancel {} -n {src}",
            p.offer_name()
        )),
        "the 409 names the holder and how to free the claim: {second:?}"
    );
    assert_eq!(second.stderr.lines().count(), 1, "{second:?}");
    let missing = run(bob, &["status", "nosuch", "-n", dst]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains(&format!(
            "There is no NamespaceTransfer nosuch in namespace {dst}"
        )),
        "{missing:?}"
    );
    let cross = run(bob, &["status", &p.offer_name(), "-n", src]);
    assert_eq!(cross.code, 1, "bob may not read the source side: {cross:?}");
    assert!(cross.stderr.contains("forbidden"), "{cross:?}");
    let timeout = run(
        alice,
        &[
            "status",
            &p.offer_name(),
            "--watch",
            "--timeout=2s",
            "-n",
            src,
        ],
    );
    assert_eq!(timeout.code, 5, "{timeout:?}");
    assert!(
        timeout
            .stderr
            .contains("did not finish within --timeout 2s"),
        "{timeout:?}"
    );
}

#[test]
fn progress_on_a_terminal_is_drawn_live_and_ends_with_the_same_lines() {
    let p = Pair::new();
    let pty = native_pty_system();
    let pair = pty
        .openpty(PtySize {
            rows: 40,
            cols: 140,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(admin().binary());
    let offer_args = [
        "offer",
        "db",
        "--to",
        &p.dst.name,
        "--wait",
        "--timeout=2m",
        "-n",
        &p.src.name,
    ];
    for arg in argv(Some(&p.alice), &offer_args) {
        cmd.arg(arg);
    }
    cmd.env("PATH", path_with_plugin());
    cmd.env("TERM", "xterm-256color");
    cmd.env_remove("KUBECONFIG");
    let mut child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let (seen, reading) = collect(pair.master.try_clone_reader().unwrap());
    wait_phase(
        admin(),
        &p.src.name,
        &p.offer_name(),
        "WaitingForPeer",
        WAIT,
    );
    // Until the display shows the wait (its redraws are throttled).
    eventually("the display to show the wait", WAIT, || {
        seen.lock().unwrap().contains("WaitingForPeer")
    });
    let piped = run(
        Some(&p.bob),
        &[
            "request",
            &p.source(),
            "--wait",
            "--timeout=2m",
            "-n",
            &p.dst.name,
        ],
    );
    let status = child.wait().unwrap();
    drop(pair.master);
    reading.join().unwrap();
    let drawn = seen.lock().unwrap().clone();
    assert!(status.success(), "{drawn}");
    assert_eq!(piped.code, 0, "{piped:?}");

    // On the terminal: a live bar of the eight stages, redrawn in place.
    assert!(
        drawn.contains('\x1b'),
        "drawn with escape sequences: {drawn:?}"
    );
    assert!(drawn.contains("/8 "), "the stage counter: {drawn:?}");
    assert!(
        drawn.contains("WaitingForPeer"),
        "the wait is shown: {drawn:?}"
    );
    let plain = strip_escapes(&drawn);
    for stage in EVERY_STAGE {
        assert!(
            plain
                .lines()
                .any(|l| l.split_whitespace().nth(2) == Some(stage)),
            "{stage} printed above the bar: {plain}"
        );
    }
    assert!(plain.contains("Completed: volume "), "{plain}");
    // Piped: plain lines, no escapes, one line per stage.
    assert!(!piped.stdout.contains('\x1b'), "{:?}", piped.stdout);
    assert_eq!(stage_words(&piped.stdout), EVERY_STAGE, "{}", piped.stdout);
}

/// The text of a terminal's output without its escape sequences, each
/// carriage return (a redraw) starting a line.
fn strip_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            '\r' => out.push('\n'),
            c => out.push(c),
        }
    }
    out
}

#[test]
fn kubectl_completes_the_plugins_commands_flags_and_transfer_names() {
    let p = Pair::new();
    let offered = run(
        Some(&p.alice),
        &["offer", "db", "--to", &p.dst.name, "-n", &p.src.name],
    );
    assert_eq!(offered.code, 0, "{offered:?}");
    // kubectl runs kubectl_complete-transfer, a link to the plugin, from PATH.
    let dir = std::env::temp_dir().join(unique("complete"));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = RemoveDir(dir.clone());
    std::os::unix::fs::symlink(
        sta_testenv::plugin_bin(),
        dir.join("kubectl_complete-transfer"),
    )
    .unwrap();
    let complete = |words: &[&str]| {
        let out = Command::new(admin().binary())
            .args(["__complete", "transfer"])
            .args(words)
            .env("PATH", format!("{}:{}", dir.display(), path_with_plugin()))
            .env("KUBECONFIG", admin().kubeconfig())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let commands = complete(&[""]);
    for word in ["offer", "request", "status", "list", "cancel"] {
        assert!(commands.lines().any(|l| l == word), "{word}: {commands}");
    }
    let flags = complete(&["offer", "db", "--t"]);
    assert!(flags.lines().any(|l| l == "--to"), "{flags}");
    let names = complete(&["status", "-n", &p.src.name, "db-"]);
    assert!(
        names.lines().any(|l| l == p.offer_name()),
        "the transfers of the namespace: {names}"
    );
}

/// Removes a directory when the test ends, however it ends.
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
