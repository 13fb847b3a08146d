//! Our server on a three-member etcd cluster, through etcd's own failures
//! (issue 19): the leader killed in the middle of a stream of creates, and a
//! member that stops answering for a minute. Nothing written is lost or
//! written twice, the one-active-transfer-per-claim index stays exact, and
//! the quorum keeps serving.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sta_testenv::http::HttpClient;
use sta_testenv::pki::Pki;
use sta_testenv::standalone::{offer, Replica, SERVER_NAME};
use sta_testenv::EtcdCluster;

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const COLLECTION: &str =
    "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/prod/namespacetransfers";
/// Where the server keeps the unique index of source claims (`--etcd-prefix`
/// is the default `/registry`).
const CLAIM_INDEX: &str = "/registry/storage.transfer.k8s.io/_index/namespacetransfers/";
/// How long one create may keep being retried before the test gives up.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("etcd-cluster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three etcd members and our server on all of them.
fn start(dir: &Path) -> (EtcdCluster, Replica) {
    let pki = Pki::generate(&dir.join("pki"), SERVER_NAME).unwrap();
    let etcd = EtcdCluster::start(&dir.join("etcd"), 3).unwrap_or_else(|e| panic!("{e}"));
    // The writes go on through the failures: more than the default 1,000
    // transfers in one namespace.
    let unbounded = ["--max-objects-per-namespace=0".to_owned()];
    let server = Replica::start(
        Path::new(BIN),
        dir,
        "server",
        &pki,
        &etcd.urls(),
        &unbounded,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (etcd, server)
}

/// What one create came to, after as many attempts as it took.
#[derive(Debug)]
struct Outcome {
    /// Each attempt's status, or the transport error's text.
    attempts: Vec<String>,
    /// Whether it ended in 201 (this attempt wrote it) or in 409
    /// AlreadyExists (an earlier attempt without an answer had).
    created_by_last: bool,
    /// Whether it began after the server had stopped sending requests to
    /// the failed member.
    after_exclusion: bool,
}

/// Whether an answer leaves the create's fate unknown, so that the client
/// must ask again: etcd unavailable, a timeout, or being told to wait.
fn uncertain(status: u16) -> bool {
    matches!(status, 429 | 503 | 504)
}

/// POSTs `name` (offering claim `claim`) until it is answered for certain;
/// `excluded` says whether the failed member is out of the server's
/// balancer by now.
fn create_until_answered(
    http: &HttpClient,
    name: &str,
    claim: &str,
    excluded: &AtomicBool,
) -> Outcome {
    let after_exclusion = excluded.load(Ordering::SeqCst);
    let deadline = Instant::now() + ANSWER_WITHIN;
    let mut attempts = Vec::new();
    loop {
        match http.request("POST", COLLECTION, &[JSON], &offer(name, claim)) {
            Ok(r) if r.status == 201 => {
                attempts.push("201".to_owned());
                return Outcome {
                    attempts,
                    created_by_last: true,
                    after_exclusion,
                };
            }
            Ok(r) if r.status == 409 && r.json()["reason"] == "AlreadyExists" => {
                attempts.push("409 AlreadyExists".to_owned());
                return Outcome {
                    attempts,
                    created_by_last: false,
                    after_exclusion,
                };
            }
            Ok(r) if uncertain(r.status) => attempts.push(format!(
                "{} {}",
                r.status,
                r.json()["message"].as_str().unwrap_or_default()
            )),
            Ok(r) => panic!(
                "{name}: a create answered {} after {attempts:?}: {}",
                r.status,
                r.text()
            ),
            Err(e) => attempts.push(format!("no answer: {e}")),
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no answer for certain in {ANSWER_WITHIN:?}: {attempts:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every transfer in `prod`, by name, as our server lists it.
fn listed(http: &HttpClient) -> BTreeMap<String, Value> {
    let r = http.request("GET", COLLECTION, &[], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["metadata"]["name"].as_str().unwrap().to_owned(),
                t.clone(),
            )
        })
        .collect()
}

/// What the server logs when it stops sending requests to a member, and
/// when it sends them there again (`storage::etcd::endpoints`).
const EXCLUDED: &str = "etcd member does not answer";
const READMITTED: &str = "etcd member answers again";

/// How many lines of the server's log say `needle` of the member at `url`.
fn logged(server: &Replica, needle: &str, url: &str) -> usize {
    std::fs::read_to_string(&server.process.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle) && l.contains(&format!("endpoint={url}")))
        .count()
}

/// Waits until the server's log says `needle` of the member at `url` once
/// more than the `before` times it had.
fn wait_for_log(server: &Replica, needle: &str, url: &str, before: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while logged(server, needle, url) <= before {
        assert!(
            Instant::now() < deadline,
            "the server never logged {needle:?} for {url}:\n{}",
            server.process.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `counter` reaches `at_least`, for the writer to get there.
fn wait_for_count(counter: &AtomicUsize, at_least: usize) {
    let deadline = Instant::now() + ANSWER_WITHIN;
    while counter.load(Ordering::SeqCst) < at_least {
        assert!(Instant::now() < deadline, "the writer stalled");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every create began after the failed member was out of the server's
/// balancer needed one attempt: the quorum served it.
fn assert_served_by_the_quorum(outcomes: &[(String, Outcome)]) {
    let retried: Vec<_> = outcomes
        .iter()
        .filter(|(_, o)| o.after_exclusion && o.attempts.len() > 1)
        .collect();
    assert!(
        retried.is_empty(),
        "retried with the quorum up: {retried:?}"
    );
    assert!(
        outcomes.iter().any(|(_, o)| o.after_exclusion),
        "no create began after the member was excluded"
    );
}

/// A thread creating `<prefix>-<i>`, one after another, until stopped;
/// each offers claim `c-<prefix>-<i>`.
struct Writer {
    /// How many creates were answered for certain.
    answered: Arc<AtomicUsize>,
    /// Set by the test once the failed member is out of the balancer.
    excluded: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(String, Outcome)>>,
}

impl Writer {
    fn start(http: HttpClient, prefix: &'static str) -> Self {
        let answered = Arc::new(AtomicUsize::new(0));
        let excluded = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (answered, excluded, stop) = (answered.clone(), excluded.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let name = format!("{prefix}-{i}");
                    let outcome =
                        create_until_answered(&http, &name, &format!("c-{name}"), &excluded);
                    outcomes.push((name, outcome));
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                outcomes
            })
        };
        Self {
            answered,
            excluded,
            stop,
            thread,
        }
    }

    /// Waits until `more` creates past the ones answered so far are answered.
    fn wait_for_more(&self, more: usize) {
        wait_for_count(&self.answered, self.answered.load(Ordering::SeqCst) + more);
    }

    /// Says the failed member is out of the server's balancer from now on.
    fn member_excluded(&self) {
        self.excluded.store(true, Ordering::SeqCst);
    }

    /// Stops it after the create in progress, and returns every outcome.
    fn finish(self) -> Vec<(String, Outcome)> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

#[test]
fn creates_through_a_killed_etcd_leader_are_neither_lost_nor_doubled_and_the_claim_index_stays_exact(
) {
    let dir = scratch("leader-kill");
    let (mut etcd, server) = start(&dir);
    let creates = Writer::start(server.http.clone(), "t");
    // The leader dies with creates on the wire.
    creates.wait_for_more(20);
    let old = etcd.wait_for_leader(Duration::from_secs(10)).unwrap();
    let url = etcd.url(old);
    let (excluded, readmitted) = (
        logged(&server, EXCLUDED, &url),
        logged(&server, READMITTED, &url),
    );
    etcd.kill(old);
    let new = etcd.wait_for_leader(Duration::from_secs(30)).unwrap();
    assert_ne!(new, old, "another member leads");
    wait_for_log(&server, EXCLUDED, &url, excluded);
    creates.member_excluded();
    // Twenty more on the two members left; then it comes back as a
    // follower, the server sends it requests again, and twenty more.
    creates.wait_for_more(20);
    etcd.restart(old).unwrap_or_else(|e| panic!("{e}"));
    wait_for_log(&server, READMITTED, &url, readmitted);
    creates.wait_for_more(20);
    let outcomes = creates.finish();

    let retried: Vec<_> = outcomes
        .iter()
        .filter(|(_, o)| o.attempts.len() > 1)
        .map(|(name, o)| format!("{name}: {:?}", o.attempts))
        .collect();
    println!(
        "etcd leader member-{old} killed; member-{new} took over; retried creates: {retried:?}"
    );
    for (name, o) in &outcomes {
        // AlreadyExists is the truth only after an attempt whose fate was
        // unknown: a first attempt that hears it found a ghost.
        assert!(o.created_by_last || o.attempts.len() > 1, "{name}: {o:?}");
    }
    assert_served_by_the_quorum(&outcomes);

    // Every create is there once, with its own claim.
    let stored = listed(&server.http);
    let names: Vec<&String> = outcomes.iter().map(|(name, _)| name).collect();
    assert_eq!(
        stored.keys().collect::<Vec<_>>(),
        {
            let mut sorted = names.clone();
            sorted.sort();
            sorted
        },
        "exactly the transfers created"
    );
    for name in &names {
        assert_eq!(stored[*name]["spec"]["source"]["name"], format!("c-{name}"));
    }

    // The index holds one entry per claim, naming its transfer by uid.
    let entries = etcd.range(CLAIM_INDEX).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        entries.len(),
        outcomes.len(),
        "one index entry per claim: {entries:?}"
    );
    for (key, value) in &entries {
        let holder: Value = serde_json::from_slice(value).unwrap();
        let name = holder["name"].as_str().unwrap();
        let t = stored
            .get(name)
            .unwrap_or_else(|| panic!("{key} names {name}, which does not exist"));
        assert_eq!(holder["uid"], t["metadata"]["uid"], "{key}");
        let claim = t["spec"]["source"]["name"].as_str().unwrap();
        assert!(key.ends_with(&format!("/prod/{claim}")), "{key} for {name}");
    }
    // And it still refuses a second transfer of any claim.
    for (i, name) in names.iter().enumerate() {
        let rival = server
            .http
            .request(
                "POST",
                COLLECTION,
                &[JSON],
                &offer(&format!("rival-{i}"), &format!("c-{name}")),
            )
            .unwrap();
        assert_eq!(rival.status, 409, "{}", rival.text());
        assert!(
            rival.json()["message"]
                .as_str()
                .unwrap()
                .contains(&format!("prod/{name}")),
            "{}",
            rival.text()
        );
    }
}

#[test]
fn with_the_etcd_leader_stopped_for_a_minute_reads_writes_and_watches_go_on_with_the_quorum() {
    let dir = scratch("member-stopped");
    let (mut etcd, server) = start(&dir);
    let first = server
        .http
        .request("POST", COLLECTION, &[JSON], &offer("before", "before"))
        .unwrap();
    assert_eq!(first.status, 201, "{}", first.text());
    let rv = first.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // A watch from before the stop, open through it.
    let watch = {
        let http = server.http.clone();
        std::thread::spawn(move || {
            http.request(
                "GET",
                &format!("{COLLECTION}?watch=true&resourceVersion={rv}&timeoutSeconds=100"),
                &[],
                b"",
            )
            .unwrap()
        })
    };

    // A member that is there but answers nothing (SIGSTOP): its peers elect
    // another leader, and the server's connections to it hang.
    let creates = Writer::start(server.http.clone(), "during");
    let stopped = etcd.wait_for_leader(Duration::from_secs(10)).unwrap();
    let url = etcd.url(stopped);
    let (excluded, readmitted) = (
        logged(&server, EXCLUDED, &url),
        logged(&server, READMITTED, &url),
    );
    let paused_at = Instant::now();
    etcd.pause(stopped, true);
    wait_for_log(&server, EXCLUDED, &url, excluded);
    let new = etcd.wait_for_leader(Duration::from_secs(30)).unwrap();
    assert_ne!(new, stopped, "another member leads");
    creates.member_excluded();
    let excluded_after = paused_at.elapsed();
    // Reads of what was written, while the member stays stopped.
    let mut reads = 0;
    while paused_at.elapsed() < Duration::from_secs(60) {
        let r = server.http.request("GET", COLLECTION, &[], b"").unwrap();
        assert_eq!(r.status, 200, "a list with the quorum up: {}", r.text());
        reads += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let outcomes = creates.finish();
    etcd.pause(stopped, false);
    wait_for_log(&server, READMITTED, &url, readmitted);
    println!(
        "etcd leader member-{stopped} stopped for 60 s, out of the server's balancer after {excluded_after:?}: {} creates, {reads} lists; retried: {:?}",
        outcomes.len(),
        outcomes
            .iter()
            .filter(|(_, o)| o.attempts.len() > 1)
            .collect::<Vec<_>>()
    );
    assert_served_by_the_quorum(&outcomes);

    // Every write is listed, and the watch saw each one once, in order.
    let stored = listed(&server.http);
    let written: Vec<String> = outcomes.into_iter().map(|(name, _)| name).collect();
    for name in &written {
        assert!(stored.contains_key(name), "{name} was lost");
    }
    let events = watch.join().unwrap();
    assert_eq!(events.status, 200, "{}", events.text());
    let added: Vec<String> = events
        .text()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(added, written, "the watch saw every create once, in order");
}
