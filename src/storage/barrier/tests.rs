use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::*;

/// A fake etcd: read `n` (from 1) answers revision `10 × n` once the test
/// lets one read through the gate.
struct Fake {
    sent: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
    barrier: RevisionBarrier,
}

fn fake(outcome: fn(usize) -> Result<Revision>) -> Fake {
    let sent = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (s, g) = (sent.clone(), gate.clone());
    let barrier = RevisionBarrier::new(move || {
        let n = s.fetch_add(1, Ordering::SeqCst) + 1;
        let g = g.clone();
        Box::pin(async move {
            g.acquire().await.unwrap().forget();
            outcome(n)
        })
    });
    Fake {
        sent,
        gate,
        barrier,
    }
}

fn revision(n: usize) -> Result<Revision> {
    Ok(10 * n as Revision)
}

/// A caller asking for the current revision, on a task of its own.
fn ask(f: &Arc<Fake>) -> tokio::task::JoinHandle<Result<Revision>> {
    let f = f.clone();
    tokio::spawn(async move { f.barrier.current().await })
}

/// Lets the spawned tasks run until they block.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_caller_who_asks_while_a_read_is_on_the_wire_is_answered_by_the_next_read() {
    let f = Arc::new(fake(revision));
    let first = ask(&f);
    settle().await;
    assert_eq!(
        f.sent.load(Ordering::SeqCst),
        1,
        "the first caller's read is sent"
    );
    let second = ask(&f);
    settle().await;
    f.gate.add_permits(1);
    assert_eq!(first.await.unwrap(), Ok(10));
    settle().await;
    assert_eq!(
        f.sent.load(Ordering::SeqCst),
        2,
        "the second caller asked after read 1 was sent, so it needs read 2"
    );
    assert!(
        !second.is_finished(),
        "read 1's answer is not the second caller's"
    );
    f.gate.add_permits(1);
    assert_eq!(second.await.unwrap(), Ok(20));
}

#[tokio::test]
async fn callers_who_wait_together_share_one_read() {
    let f = Arc::new(fake(revision));
    let first = ask(&f);
    settle().await;
    let waiting: Vec<_> = (0..10).map(|_| ask(&f)).collect();
    settle().await;
    f.gate.add_permits(2);
    assert_eq!(first.await.unwrap(), Ok(10));
    for w in waiting {
        assert_eq!(w.await.unwrap(), Ok(20));
    }
    settle().await;
    assert_eq!(
        f.sent.load(Ordering::SeqCst),
        2,
        "eleven callers, two reads: the first caller's and the one the ten shared"
    );
}

#[tokio::test]
async fn a_failed_read_fails_its_callers_and_the_next_caller_reads_again() {
    let f = fake(|n| {
        if n == 1 {
            Err(StorageError::Unavailable("etcd is down".to_owned()))
        } else {
            revision(n)
        }
    });
    f.gate.add_permits(2);
    assert_eq!(
        f.barrier.current().await,
        Err(StorageError::Unavailable("etcd is down".to_owned()))
    );
    assert_eq!(f.barrier.current().await, Ok(20));
}

#[tokio::test]
async fn a_caller_who_goes_away_strands_nobody() {
    let f = Arc::new(fake(revision));
    let gone = ask(&f);
    settle().await;
    let staying = ask(&f);
    settle().await;
    gone.abort();
    f.gate.add_permits(2);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), staying)
            .await
            .expect("answered")
            .unwrap(),
        Ok(20)
    );
}

#[tokio::test]
async fn a_read_that_panics_abandons_its_callers_and_the_next_caller_starts_afresh() {
    let f = fake(|n| {
        assert!(n != 1, "read 1 panics");
        revision(n)
    });
    f.gate.add_permits(2);
    let abandoned = f.barrier.current().await;
    assert!(
        matches!(&abandoned, Err(StorageError::Unavailable(m)) if m.contains("abandoned")),
        "{abandoned:?}"
    );
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), f.barrier.current())
            .await
            .expect("a new read is sent"),
        Ok(20)
    );
}

#[tokio::test(start_paused = true)]
async fn a_read_that_stalls_fails_its_callers_in_time_and_the_next_caller_reads_afresh() {
    let f = Arc::new(fake(revision));
    let stalled = ask(&f);
    settle().await;
    // Read 1 never gets through the gate; paused time runs on to the timeout.
    let failed = stalled.await.unwrap();
    assert!(
        matches!(&failed, Err(StorageError::Unavailable(m)) if m.contains("did not answer")),
        "{failed:?}"
    );
    let next = ask(&f);
    settle().await;
    assert_eq!(f.sent.load(Ordering::SeqCst), 2, "a fresh read is sent");
    f.gate.add_permits(1);
    assert_eq!(next.await.unwrap(), Ok(20));
}

#[tokio::test(start_paused = true)]
async fn a_read_refused_during_an_etcd_election_is_sent_again_and_answers_its_callers() {
    let f = Arc::new(fake(|n| match n {
        1 => Err(StorageError::Unavailable(
            "etcdserver: leader changed".to_owned(),
        )),
        2 => Err(StorageError::Unavailable(
            "etcdserver: no leader".to_owned(),
        )),
        n => revision(n),
    }));
    f.gate.add_permits(3);
    assert_eq!(ask(&f).await.unwrap(), Ok(30));
    assert_eq!(f.sent.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn an_election_that_outlasts_the_read_timeout_fails_the_read() {
    let f = Arc::new(fake(|_| {
        Err(StorageError::Unavailable(
            "etcdserver: leader changed".to_owned(),
        ))
    }));
    f.gate.add_permits(1000);
    let failed = ask(&f).await.unwrap();
    assert!(
        matches!(&failed, Err(StorageError::Unavailable(m)) if m.contains("did not answer")),
        "{failed:?}"
    );
}
