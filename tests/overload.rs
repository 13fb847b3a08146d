//! Overload degrades, never collapses (issue 18): past its in-flight limits
//! the server answers 429 `TooManyRequests` with `Retry-After` and a Status
//! naming the limit, records the refusal in its audit log and metrics, and
//! serves again as soon as a seat is free; one user's watches cannot use up
//! another's; bad limits stop it at start-up.
//!
//! Deterministic by construction: a replica of our server with one mutating
//! seat and no queue, whose seat a create holds while a validating webhook
//! the test controls keeps it waiting (a body sent slowly holds none: it is
//! read before the seat is taken), and which only this test binary talks
//! to. Users reach it as the aggregator does, through the
//! front-proxy certificate and `X-Remote-*` headers; they are in a group
//! bound to `cluster-admin`, but not in `system:masters`, who are exempt.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use sta_testenv::http::{HttpClient, HttpResponse};
use sta_testenv::webhook::{Reply, WebhookServer};
use sta_testenv::{shared, ControlPlane, Replica, SERVICE_NAME, SERVICE_NAMESPACE};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
/// The group the test users are in: everything allowed by RBAC, nothing
/// exempt from flow control.
const GROUP: &str = "overload:tenants";
const WAIT: Duration = Duration::from_secs(60);

fn cp() -> &'static ControlPlane {
    shared(BIN)
}

/// The replica under test: one mutating seat, no queue, one watch per user,
/// and no controllers (the shared server runs them).
fn limited() -> &'static Replica {
    static REPLICA: OnceLock<Replica> = OnceLock::new();
    REPLICA.get_or_init(|| {
        grant_group_everything();
        cp().start_replica(
            "overload",
            &[
                "--max-mutating-requests-inflight=1".to_owned(),
                "--max-queued-requests-per-user=0".to_owned(),
                "--max-watches-per-user=1".to_owned(),
                "--controllers=-namespacetransfer,-ephemeralclaim".to_owned(),
            ],
            &[],
        )
        .unwrap()
    })
}

/// Binds [`GROUP`] to `cluster-admin` and waits until RBAC says so.
fn grant_group_everything() {
    cp().kubectl()
        .apply(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: overload-tenants\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: '{GROUP}'}}\n"
        ))
        .unwrap();
    eventually("the group's binding to apply", || {
        cp().kubectl()
            .run(&[
                "auth",
                "can-i",
                "create",
                "namespacetransfers.storage.transfer.k8s.io",
                "--as=someone",
                &format!("--as-group={GROUP}"),
                "-A",
            ])
            .success
    });
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn server_name() -> String {
    format!("{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc")
}

fn list_path(ns: &str) -> String {
    format!("/apis/storage.transfer.k8s.io/v1alpha1/namespaces/{ns}/namespacetransfers")
}

/// A transfer of the claim of the same name: one active transfer per claim.
fn transfer(name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": name},
        "spec": {"source": {"name": name}, "destination": {"namespace": "dev"}},
    }))
    .unwrap()
}

/// The headers the aggregator sends for `user`.
fn as_user(user: &str) -> [(&str, &str); 3] {
    [
        ("X-Remote-User", user),
        ("X-Remote-Group", GROUP),
        ("Content-Type", "application/json"),
    ]
}

/// A client to the replica presenting the front-proxy certificate.
fn front_proxy() -> HttpClient {
    let pki = &cp().pki;
    HttpClient::new(
        limited().port,
        &pki.serving_ca.cert,
        &server_name(),
        Some((
            pki.front_proxy_client.cert.as_path(),
            pki.front_proxy_client.key.as_path(),
        )),
    )
    .unwrap()
}

/// The replica's `/metrics`, read as admin (never limited).
fn metrics() -> String {
    let resp = limited()
        .http()
        .unwrap()
        .request("GET", "/metrics", &[], b"")
        .unwrap();
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.text()
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

/// Creates transfer `name` at `path` as admin, who is exempt from flow
/// control: it succeeds whatever seats are held.
fn create_as_admin(path: &str, name: &str) {
    let made = limited()
        .http()
        .unwrap()
        .request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            &transfer(name),
        )
        .unwrap();
    assert_eq!(made.status, 201, "{}", made.text());
}

/// Asserts `resp` is the 429 Status of a refusal that names `flag`.
fn assert_too_many_requests(resp: &HttpResponse, flag: &str) {
    assert_eq!(resp.status, 429, "{}", resp.text());
    assert_eq!(resp.header("Retry-After"), Some("1"));
    let status = resp.json();
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "TooManyRequests", "{status}");
    assert_eq!(status["code"], 429, "{status}");
    assert_eq!(status["details"]["retryAfterSeconds"], 1, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(flag),
        "the message names {flag}: {message}"
    );
}

/// A request whose response is read only when the test says so: a POST
/// whose body is sent bit by bit, or a watch.
struct Open {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl Open {
    /// Sends `method path` as the aggregator would for `user`, with a
    /// body of `length` bytes of which only `first` is sent now.
    fn start(method: &str, path: &str, user: &str, length: usize, first: &[u8]) -> Self {
        let pki = &cp().pki;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&pki.serving_ca.cert).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let chain = CertificateDer::pem_file_iter(&pki.front_proxy_client.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&pki.front_proxy_client.key).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
        let tcp = TcpStream::connect(("127.0.0.1", limited().port)).unwrap();
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        let conn = rustls::ClientConnection::new(
            Arc::new(config),
            ServerName::try_from(server_name()).unwrap(),
        )
        .unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {length}\r\n"
        );
        for (name, value) in as_user(user) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        tls.write_all(head.as_bytes()).unwrap();
        tls.write_all(first).unwrap();
        tls.flush().unwrap();
        Self { tls }
    }

    /// Sends `more` of the body; false once the server has closed.
    fn send(&mut self, more: &[u8]) -> bool {
        self.tls.write_all(more).is_ok() && self.tls.flush().is_ok()
    }

    /// Reads up to the end of the response's headers; its status code.
    fn status(&mut self) -> u16 {
        let mut raw = Vec::new();
        let mut byte = [0u8; 1];
        while !raw.ends_with(b"\r\n\r\n") {
            let n = self.tls.read(&mut byte).unwrap();
            assert!(n == 1, "the connection closed before the headers ended");
            raw.push(byte[0]);
        }
        status_code(&String::from_utf8_lossy(&raw))
    }
}

fn status_code(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// Tests that hold the replica's one mutating seat take turns.
fn the_mutating_seat() -> std::sync::MutexGuard<'static, ()> {
    static SEAT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SEAT.lock().unwrap_or_else(|p| p.into_inner())
}

/// The label of a transfer whose create the [`Holder`] webhook keeps
/// waiting until the test lets it go; the webhook sees only objects with it.
const HOLD_LABEL: &str = "overload-hold";

/// A validating webhook that keeps a create labelled [`HOLD_LABEL`]`: wait`
/// waiting while the gate is shut, and allows everything else at once.
struct Holder {
    _webhook: WebhookServer,
    /// Whether held creates may go on.
    gate: Arc<(Mutex<bool>, Condvar)>,
}

/// The holder, installed once (for this binary's control plane only) and
/// seen in effect by the replica.
fn holder() -> &'static Holder {
    static HOLDER: OnceLock<Holder> = OnceLock::new();
    HOLDER.get_or_init(|| {
        let gate = Arc::new((Mutex::new(true), Condvar::new()));
        let waits = gate.clone();
        let webhook = WebhookServer::start(move |review| {
            if review["object"]["metadata"]["labels"][HOLD_LABEL] == "wait" {
                let (open, opened) = &*waits;
                let open = open.lock().unwrap();
                let _ = opened
                    .wait_timeout_while(open, Duration::from_secs(25), |open| !*open)
                    .unwrap();
            }
            Reply::allow()
        })
        .unwrap();
        let hook = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "overload-holder"},
            "webhooks": [{
                "name": "holder.overload.test",
                "clientConfig": {
                    "url": webhook.url("/hold"),
                    "caBundle": sta_testenv::base64(webhook.ca_bundle_pem().as_bytes()),
                },
                "rules": [{
                    "apiGroups": ["storage.transfer.k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE"],
                    "resources": ["namespacetransfers"],
                    "scope": "Namespaced",
                }],
                "objectSelector": {"matchExpressions": [{"key": HOLD_LABEL, "operator": "Exists"}]},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 30,
            }],
        });
        cp().kubectl().apply(&hook.to_string()).unwrap();
        let ns = cp().namespace("overload-probe").unwrap();
        let mut probe = serde_json::from_slice::<Value>(&transfer("probe")).unwrap();
        probe["metadata"]["labels"] = json!({HOLD_LABEL: "probe"});
        eventually("the replica to call the holding webhook", || {
            let before = webhook.requests().len();
            let resp = front_proxy()
                .request(
                    "POST",
                    &format!("{}?dryRun=All", list_path(&ns.name)),
                    &as_user("prober"),
                    probe.to_string().as_bytes(),
                )
                .unwrap();
            assert_eq!(resp.status, 201, "{}", resp.text());
            webhook.requests().len() > before
        });
        Holder {
            _webhook: webhook,
            gate,
        }
    })
}

impl Holder {
    fn shut(&self, shut: bool) {
        let (open, opened) = &*self.gate;
        *open.lock().unwrap() = !shut;
        opened.notify_all();
    }
}

/// A create as `user` that holds the replica's one mutating seat: its
/// admission webhook keeps it waiting.
struct HeldSeat {
    create: std::thread::JoinHandle<HttpResponse>,
}

fn hold_the_mutating_seat(path: &str, user: &str) -> HeldSeat {
    let holder = holder();
    holder.shut(true);
    let mut held = serde_json::from_slice::<Value>(&transfer(&format!("held-by-{user}"))).unwrap();
    held["metadata"]["labels"] = json!({HOLD_LABEL: "wait"});
    let (path, user) = (path.to_owned(), user.to_owned());
    let create = std::thread::spawn(move || {
        front_proxy()
            .request("POST", &path, &as_user(&user), held.to_string().as_bytes())
            .unwrap()
    });
    eventually("the held create to take the one mutating seat", || {
        has_line(
            &metrics(),
            "apiserver_current_inflight_requests{request_kind=\"mutating\"} 1",
        )
    });
    HeldSeat { create }
}

impl HeldSeat {
    /// Lets the webhook answer; the create succeeds.
    fn release(self) {
        holder().shut(false);
        let resp = self.create.join().unwrap();
        assert_eq!(resp.status, 201, "{}", resp.text());
    }
}

#[test]
fn the_in_flight_limit_answers_429_with_retry_after_and_serves_again_once_the_seat_is_free() {
    let _seat = the_mutating_seat();
    let ns = cp().namespace("overload").unwrap();
    let path = list_path(&ns.name);
    let held = hold_the_mutating_seat(&path, "writer-1");

    let refused = front_proxy()
        .request("POST", &path, &as_user("writer-2"), &transfer("refused"))
        .unwrap();
    assert_too_many_requests(&refused, "--max-mutating-requests-inflight");

    // Reads have seats of their own, and system:masters is exempt.
    let read = front_proxy()
        .request("GET", &path, &as_user("writer-2"), b"")
        .unwrap();
    assert_eq!(read.status, 200, "{}", read.text());
    create_as_admin(&path, "by-admin");

    held.release();
    let after = front_proxy()
        .request("POST", &path, &as_user("writer-2"), &transfer("after"))
        .unwrap();
    assert_eq!(after.status, 201, "{}", after.text());

    let text = metrics();
    assert!(has_line(
        &text,
        "apiserver_current_inflight_requests{request_kind=\"mutating\"} 0"
    ));
    assert!(
        text.lines().any(|l| l.starts_with(
            "apiserver_flowcontrol_rejected_requests_total{priority_level=\"mutating\",reason=\"concurrency-limit\"} "
        ) && !l.ends_with(" 0")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("apiserver_request_total{verb=\"CREATE\"")
                && l.contains("resource=\"namespacetransfers\"")
                && l.contains("code=\"429\"")),
        "the refusal is counted as a response: {text}"
    );
}

#[test]
fn four_hundred_bodies_sent_at_ten_bytes_a_second_hold_no_seat_and_another_tenants_delete_is_answered_within_two_seconds(
) {
    let _seat = the_mutating_seat();
    let ns = cp().namespace("overload-slow").unwrap();
    let path = list_path(&ns.name);
    create_as_admin(&path, "doomed");

    // Two tenants start 200 creates each and send their bodies ten bytes
    // a second.
    const CHUNK: usize = 10;
    let slow: Vec<(Open, Vec<u8>)> = (0..400)
        .map(|i| {
            let user = ["dawdler-1", "dawdler-2"][i % 2];
            let body = transfer(&format!("slow-{i}"));
            let open = Open::start("POST", &path, user, body.len(), &body[..CHUNK]);
            (open, body[CHUNK..].to_vec())
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dripper = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut slow = slow;
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                for (open, rest) in &mut slow {
                    if let Some(more) = rest.get(sent..(sent + CHUNK).min(rest.len())) {
                        assert!(open.send(more), "the server hung up on a slow body");
                    }
                }
                sent += CHUNK;
            }
            slow.len()
        }
    });
    std::thread::sleep(Duration::from_millis(1500));

    let started = Instant::now();
    let deleted = front_proxy()
        .request(
            "DELETE",
            &format!("{path}/doomed"),
            &as_user("deleter"),
            b"",
        )
        .unwrap();
    let took = started.elapsed();
    let inflight = metrics();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(dripper.join().unwrap(), 400);
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert!(took < Duration::from_secs(2), "the delete took {took:?}");
    assert!(
        has_line(
            &inflight,
            "apiserver_current_inflight_requests{request_kind=\"mutating\"} 0"
        ),
        "no slow body holds the mutating seat:\n{inflight}"
    );
}

#[test]
fn a_refused_request_is_audited_with_its_429() {
    let _seat = the_mutating_seat();
    let ns = cp().namespace("overload-audit").unwrap();
    let path = list_path(&ns.name);
    let held = hold_the_mutating_seat(&path, "auditee-1");
    let refused = front_proxy()
        .request("POST", &path, &as_user("auditee-2"), &transfer("refused"))
        .unwrap();
    assert_too_many_requests(&refused, "--max-mutating-requests-inflight");
    held.release();
    let log = cp().server_audit_log(limited().port);
    eventually("the refusal in the audit log", || {
        std::fs::read_to_string(&log).is_ok_and(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .any(|event| {
                    event["user"]["username"] == "auditee-2"
                        && event["verb"] == "create"
                        && event["stage"] == "ResponseComplete"
                        && event["responseStatus"]["code"] == 429
                })
        })
    });
}

#[test]
fn a_watch_past_the_per_user_cap_is_refused_while_another_users_watch_is_accepted() {
    let ns = cp().namespace("overload-watch").unwrap();
    let path = list_path(&ns.name);
    let mut first = Open::start("GET", &format!("{path}?watch=true"), "watcher-a", 0, b"");
    assert_eq!(first.status(), 200);

    let again = front_proxy()
        .request(
            "GET",
            &format!("{path}?watch=true&timeoutSeconds=1"),
            &as_user("watcher-a"),
            b"",
        )
        .unwrap();
    assert_too_many_requests(&again, "--max-watches-per-user");

    let other = front_proxy()
        .request(
            "GET",
            &format!("{path}?watch=true&timeoutSeconds=1"),
            &as_user("watcher-b"),
            b"",
        )
        .unwrap();
    assert_eq!(other.status, 200, "{}", other.text());

    // Once the first watch's client goes away, its place is free again.
    drop(first);
    eventually("watcher-a's closed watch to be given back", || {
        front_proxy()
            .request(
                "GET",
                &format!("{path}?watch=true&timeoutSeconds=1"),
                &as_user("watcher-a"),
                b"",
            )
            .is_ok_and(|r| r.status == 200)
    });
}

#[test]
fn negative_or_non_numeric_limits_stop_the_server_at_start_up_naming_the_flag() {
    for (flag, says) in [
        ("--max-requests-inflight=-1", "is negative"),
        (
            "--max-mutating-requests-inflight=lots",
            "is not a whole number",
        ),
        ("--max-queued-requests-per-user=-3", "is negative"),
        ("--max-watches-per-user=1e3", "is not a whole number"),
        ("--request-queue-timeout=forever", "is not a duration"),
    ] {
        let name = flag.split('=').next().unwrap();
        let out = std::process::Command::new(BIN)
            .args(["--insecure-allow-all", "--secure-port=0", flag])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(name) && stderr.contains(says),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn limits_that_contradict_each_other_stop_the_server_at_start_up_naming_the_flag() {
    let out = std::process::Command::new(BIN)
        .args([
            "--insecure-allow-all",
            "--secure-port=0",
            "--max-queued-requests=5",
            "--max-queued-requests-per-user=10",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--max-queued-requests: 5 is less than --max-queued-requests-per-user=10"),
        "{stderr}"
    );
}
