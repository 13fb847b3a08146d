//! Leader election for the controllers against a real etcd: one leader at a
//! time, fast handover on shutdown, a leader that loses its lease (revoked,
//! or unreachable) stops passing `check` before anyone else leads, and a
//! write fenced on a term that has ended is refused by etcd, however late it
//! arrives.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sta_testenv::Etcd;
use storage_transfer_apiserver::controller::leader::{LeaderElection, LeaderStatus, Leadership};
use storage_transfer_apiserver::storage::etcd::{EtcdConfig, EtcdStorage};
use storage_transfer_apiserver::storage::{Storage, StorageError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

const ELECTION: &str = "/registry/storage.transfer.k8s.io/_leader/controllers";

async fn storage(url: &str) -> EtcdStorage {
    EtcdStorage::connect(&EtcdConfig {
        endpoints: vec![url.to_owned()],
        ..EtcdConfig::default()
    })
    .await
    .unwrap()
}

async fn client(url: &str) -> etcd_client::Client {
    storage(url).await.client()
}

/// What every candidate's `lead` reports to: how many lead at once, and in
/// which order terms started and ended.
#[derive(Default)]
struct Referee {
    leading_now: AtomicUsize,
    overlapped: AtomicBool,
    events: Mutex<Vec<(Instant, &'static str, Event)>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Started,
    Stopped,
}

impl Referee {
    fn record(&self, who: &'static str, event: Event) {
        self.events
            .lock()
            .unwrap()
            .push((Instant::now(), who, event));
    }

    fn first(&self, who: &str, event: Event) -> Option<Instant> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|(_, w, e)| *w == who && *e == event)
            .map(|(at, _, _)| *at)
    }

    fn count(&self, who: &str, event: Event) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, w, e)| *w == who && *e == event)
            .count()
    }
}

/// A running `lead` future; reports its end when dropped.
struct Term {
    who: &'static str,
    referee: Arc<Referee>,
    current: watch::Sender<Option<Leadership>>,
}

impl Drop for Term {
    fn drop(&mut self) {
        self.current.send_replace(None);
        self.referee.leading_now.fetch_sub(1, Ordering::SeqCst);
        self.referee.record(self.who, Event::Stopped);
    }
}

/// One replica's election, running in a task.
struct Candidate {
    status: LeaderStatus,
    /// The leadership its `lead` future runs with; `None` when not running.
    leading: watch::Receiver<Option<Leadership>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Candidate {
    fn spawn(
        who: &'static str,
        client: etcd_client::Client,
        ttl: Duration,
        referee: &Arc<Referee>,
    ) -> Self {
        let election = LeaderElection::new(client, ELECTION.to_owned(), who.to_owned(), ttl);
        let status = election.status();
        let (current, leading) = watch::channel(None);
        let (stop, stopped) = oneshot::channel::<()>();
        let referee = referee.clone();
        let task = tokio::spawn(election.run(
            async move {
                let _ = stopped.await;
            },
            move |leadership: Leadership| {
                assert!(leadership.is_leader());
                if referee.leading_now.fetch_add(1, Ordering::SeqCst) > 0 {
                    referee.overlapped.store(true, Ordering::SeqCst);
                }
                referee.record(who, Event::Started);
                current.send_replace(Some(leadership));
                let term = Term {
                    who,
                    referee: referee.clone(),
                    current: current.clone(),
                };
                async move {
                    let _term = term;
                    std::future::pending::<()>().await
                }
            },
        ));
        Self {
            status,
            leading,
            stop: Some(stop),
            task,
        }
    }

    /// Waits until its `lead` future runs, and returns that term's leadership.
    async fn wait_until_leading(&mut self, within: Duration) -> Leadership {
        timeout(within, self.leading.wait_for(Option::is_some))
            .await
            .expect("became leader in time")
            .unwrap()
            .clone()
            .unwrap()
    }

    async fn wait_until_not_leading(&mut self, within: Duration) {
        timeout(within, self.leading.wait_for(Option::is_none))
            .await
            .expect("its lead future was dropped in time")
            .unwrap();
    }

    fn is_leading(&self) -> bool {
        self.leading.borrow().is_some()
    }

    async fn shut_down(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        timeout(Duration::from_secs(10), self.task)
            .await
            .expect("run returned after shutdown")
            .unwrap();
    }
}

/// Waits until one of `a` and `b` leads; returns (leader, follower).
async fn wait_for_a_leader(
    mut a: Candidate,
    mut b: Candidate,
    within: Duration,
) -> (Candidate, Candidate) {
    let deadline = Instant::now() + within;
    loop {
        if a.is_leading() {
            return (a, b);
        }
        if b.is_leading() {
            return (b, a);
        }
        assert!(Instant::now() < deadline, "nobody became leader");
        tokio::select! {
            _ = a.leading.changed() => {}
            _ = b.leading.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

#[tokio::test]
async fn two_candidates_on_one_election_never_lead_at_the_same_time() {
    let etcd = Etcd::for_test("two");
    let ttl = Duration::from_secs(2);
    let referee = Arc::new(Referee::default());
    let a = Candidate::spawn("a", client(&etcd.url).await, ttl, &referee);
    let b = Candidate::spawn("b", client(&etcd.url).await, ttl, &referee);

    let (leader, follower) = wait_for_a_leader(a, b, 10 * ttl).await;
    // Several keep-alive rounds and TTLs: the leader stays, the other waits.
    let until = Instant::now() + 3 * ttl;
    while Instant::now() < until {
        assert!(leader.is_leading() && leader.status.is_leader());
        assert!(!follower.is_leading() && !follower.status.is_leader());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!referee.overlapped.load(Ordering::SeqCst));
    assert_eq!(
        referee.count("a", Event::Started) + referee.count("b", Event::Started),
        1
    );

    follower.shut_down().await;
    leader.shut_down().await;
}

#[tokio::test]
async fn a_leader_shutting_down_hands_over_well_within_the_ttl() {
    let etcd = Etcd::for_test("handover");
    let ttl = Duration::from_secs(10);
    let referee = Arc::new(Referee::default());
    let a = Candidate::spawn("a", client(&etcd.url).await, ttl, &referee);
    let b = Candidate::spawn("b", client(&etcd.url).await, ttl, &referee);
    let (leader, mut follower) = wait_for_a_leader(a, b, 2 * ttl).await;
    let leadership = leader.leading.borrow().clone().unwrap();

    let asked = Instant::now();
    leader.shut_down().await;
    assert!(leadership.check().is_err());
    follower.wait_until_leading(2 * ttl).await;

    // Without resigning, the follower would wait for the lease to expire.
    assert!(
        asked.elapsed() < ttl / 2,
        "handover took {:?}",
        asked.elapsed()
    );
    assert!(!referee.overlapped.load(Ordering::SeqCst));
    follower.shut_down().await;
}

#[tokio::test]
async fn a_leader_whose_lease_is_revoked_stops_and_the_other_takes_over() {
    let etcd = Etcd::for_test("revoked");
    let ttl = Duration::from_secs(3);
    let referee = Arc::new(Referee::default());
    let mut a = Candidate::spawn("a", client(&etcd.url).await, ttl, &referee);
    let leadership = a.wait_until_leading(10 * ttl).await;
    let mut b = Candidate::spawn("b", client(&etcd.url).await, ttl, &referee);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b.is_leading());

    client(&etcd.url)
        .await
        .lease_client()
        .revoke(leadership.lease_id())
        .await
        .unwrap();

    timeout(3 * ttl, leadership.lost())
        .await
        .expect("lost() resolved");
    assert!(leadership.check().is_err());
    assert!(!leadership.is_leader());
    a.wait_until_not_leading(3 * ttl).await;
    let taken_over = b.wait_until_leading(3 * ttl).await;
    assert_ne!(taken_over.lease_id(), leadership.lease_id());
    assert_eq!(taken_over.identity(), "b");

    a.shut_down().await;
    b.shut_down().await;
}

#[tokio::test]
async fn a_leader_cut_off_from_etcd_stops_passing_check_before_anyone_else_leads() {
    let etcd = Etcd::for_test("cut-off");
    let proxy = FreezableProxy::start(&etcd.url).await;
    let ttl = Duration::from_secs(3);
    let referee = Arc::new(Referee::default());
    let mut a = Candidate::spawn("a", client(&proxy.url).await, ttl, &referee);
    let leadership = a.wait_until_leading(10 * ttl).await;
    let mut b = Candidate::spawn("b", client(&etcd.url).await, ttl, &referee);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b.is_leading());

    // a's connection stalls without closing, as behind a partition.
    proxy.freeze();
    timeout(3 * ttl, leadership.lost())
        .await
        .expect("lost() resolved");
    let a_lost = Instant::now();
    assert!(leadership.check().is_err());
    a.wait_until_not_leading(3 * ttl).await;

    // b is elected once etcd expires a's lease: only after a has let go.
    b.wait_until_leading(5 * ttl).await;
    let b_started = referee.first("b", Event::Started).unwrap();
    let a_stopped = referee.first("a", Event::Stopped).unwrap();
    assert!(a_lost < b_started, "a still trusted its lease while b led");
    assert!(a_stopped < b_started);
    assert!(!referee.overlapped.load(Ordering::SeqCst));

    a.shut_down().await;
    b.shut_down().await;
}

#[tokio::test]
async fn a_leaders_write_held_up_until_another_leads_is_refused_when_it_lands() {
    let etcd = Etcd::for_test("held-write");
    let proxy = FreezableProxy::start(&etcd.url).await;
    let ttl = Duration::from_secs(2);
    let referee = Arc::new(Referee::default());
    let mut a = Candidate::spawn("a", client(&proxy.url).await, ttl, &referee);
    let leadership = a.wait_until_leading(10 * ttl).await;
    let mut b = Candidate::spawn("b", client(&etcd.url).await, ttl, &referee);
    // a writes through the same partition as its election; the test reads
    // and writes around it.
    let (a_storage, direct) = (storage(&proxy.url).await, storage(&etcd.url).await);
    let (fenced_key, unfenced_key) = ("/test/fenced", "/test/unfenced");
    let fenced_at = direct.create(fenced_key, Bytes::from("0")).await.unwrap();
    let unfenced_at = direct.create(unfenced_key, Bytes::from("0")).await.unwrap();
    let fence = leadership.fence().clone();

    // Both writes pass `check`, then the partition holds them, as a pause
    // after the check would.
    proxy.freeze();
    assert!(leadership.check().is_ok());
    let late = |key: &'static str, revision, fenced: bool| {
        let (s, fence) = (a_storage.clone(), fence.clone());
        tokio::spawn(async move {
            let fence = fenced.then_some(&fence);
            s.update_releasing(key, revision, Bytes::from("late"), &[], fence)
                .await
        })
    };
    let fenced_write = late(fenced_key, fenced_at.mod_revision, true);
    let unfenced_write = late(unfenced_key, unfenced_at.mod_revision, false);

    let taken_over = b.wait_until_leading(10 * ttl).await;
    assert!(leadership.check().is_err());
    let b_wrote = direct.create("/test/by-b", Bytes::from("b")).await.unwrap();
    proxy.thaw();

    let refused = timeout(Duration::from_secs(20), fenced_write)
        .await
        .expect("the held write was answered")
        .unwrap();
    assert_eq!(
        refused.unwrap_err(),
        StorageError::Fenced {
            key: fence.key.clone(),
            expected: fence.create_revision,
            actual: 0,
        }
    );
    assert_eq!(
        direct.get(fenced_key).await.unwrap().value,
        Bytes::from("0")
    );
    // The same write without the fence lands after b took over: what the
    // fence is there for.
    let landed = timeout(Duration::from_secs(20), unfenced_write)
        .await
        .expect("the held write was answered")
        .unwrap()
        .unwrap();
    assert!(landed.mod_revision > b_wrote.mod_revision);
    assert_ne!(taken_over.fence(), &fence);

    a.shut_down().await;
    b.shut_down().await;
}

#[tokio::test]
async fn a_leader_whose_election_key_is_deleted_ends_its_term_and_can_no_longer_write() {
    let etcd = Etcd::for_test("key-deleted");
    let ttl = Duration::from_secs(3);
    let referee = Arc::new(Referee::default());
    let mut a = Candidate::spawn("a", client(&etcd.url).await, ttl, &referee);
    let leadership = a.wait_until_leading(10 * ttl).await;
    let mut b = Candidate::spawn("b", client(&etcd.url).await, ttl, &referee);
    let s = storage(&etcd.url).await;
    let object = s.create("/test/object", Bytes::from("0")).await.unwrap();
    let written = s
        .update_releasing(
            "/test/object",
            object.mod_revision,
            Bytes::from("a"),
            &[],
            Some(leadership.fence()),
        )
        .await
        .unwrap();

    // Someone deletes a's key: b is elected at once, although a's lease is
    // still kept alive. a sees its key go and ends its term; a write it had
    // already decided on is refused by its fence whenever it lands.
    let key = s.get(&leadership.fence().key).await.unwrap();
    s.delete(&key.key, key.mod_revision).await.unwrap();
    let by_b = b.wait_until_leading(10 * ttl).await;
    timeout(Duration::from_secs(5), leadership.lost())
        .await
        .expect("a ended its term once its key was gone, well before its lease");
    assert!(leadership.check().is_err());
    a.wait_until_not_leading(3 * ttl).await;
    let refused = s
        .update_releasing(
            "/test/object",
            written.mod_revision,
            Bytes::from("a again"),
            &[],
            Some(leadership.fence()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StorageError::Fenced { .. }),
        "{refused:?}"
    );
    s.update_releasing(
        "/test/object",
        written.mod_revision,
        Bytes::from("b"),
        &[],
        Some(by_b.fence()),
    )
    .await
    .unwrap();
    assert_eq!(s.get("/test/object").await.unwrap().value, Bytes::from("b"));

    a.shut_down().await;
    b.shut_down().await;
}

/// A TCP proxy that can freeze: bytes in flight are then held, and the
/// connection neither delivers nor closes, as with a partition or a stopped
/// etcd.
struct FreezableProxy {
    url: String,
    frozen: Arc<AtomicBool>,
}

impl FreezableProxy {
    async fn start(etcd_url: &str) -> Self {
        let target = etcd_url.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = frozen.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(&target).await else {
                    continue;
                };
                let (in_read, in_write) = inbound.into_split();
                let (out_read, out_write) = outbound.into_split();
                tokio::spawn(pipe(in_read, out_write, flag.clone()));
                tokio::spawn(pipe(out_read, in_write, flag.clone()));
            }
        });
        Self { url, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Delivers what was held, in order, and goes on.
    fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
