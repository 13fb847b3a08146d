use super::*;
use tokio::time::Instant;

#[tokio::test]
async fn a_key_added_twice_while_waiting_is_handed_out_once() {
    let q = WorkQueue::new();
    q.add("a");
    q.add("b");
    q.add("a");
    assert_eq!(q.len(), 2);
    assert_eq!(q.next().await.as_deref(), Some("a"));
    assert_eq!(q.next().await.as_deref(), Some("b"));
    assert!(q.is_empty());
}

#[tokio::test]
async fn a_key_added_while_held_is_queued_again_when_done() {
    let q = WorkQueue::new();
    q.add("a");
    let key = q.next().await.unwrap();
    q.add("a");
    assert!(q.is_empty(), "a held key is not handed to a second worker");
    q.done(&key);
    assert_eq!(q.next().await.as_deref(), Some("a"));
    q.done("a");
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_delayed_key_arrives_after_its_delay() {
    let q = WorkQueue::new();
    q.add_after("a", Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(q.is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(q.next().await.as_deref(), Some("a"));
}

#[test]
fn failures_back_off_exponentially_up_to_a_limit() {
    assert_eq!(backoff(1), Duration::from_millis(250));
    assert_eq!(backoff(2), Duration::from_millis(500));
    assert_eq!(backoff(3), Duration::from_secs(1));
    assert_eq!(backoff(40), BACKOFF_MAX);
}

#[tokio::test]
async fn shutting_down_wakes_waiting_workers() {
    let q = WorkQueue::new();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.next().await }
    });
    tokio::task::yield_now().await;
    q.shut_down();
    assert_eq!(waiter.await.unwrap(), None);
    q.add("a");
    assert!(q.is_empty(), "adds after shut-down are dropped");
}

#[test]
fn waits_back_off_exponentially_up_to_the_same_limit() {
    assert_eq!(wait_backoff(1), Duration::from_secs(1));
    assert_eq!(wait_backoff(2), Duration::from_secs(2));
    assert_eq!(wait_backoff(5), Duration::from_secs(16));
    assert_eq!(wait_backoff(6), BACKOFF_MAX);
    assert_eq!(wait_backoff(u32::MAX), BACKOFF_MAX);
}

#[tokio::test(start_paused = true)]
async fn a_key_that_keeps_failing_reaches_the_backoff_cap_and_stays_there() {
    let q = WorkQueue::new();
    let mut waited = Vec::new();
    for _ in 0..10 {
        let before = Instant::now();
        q.add_rate_limited("a");
        let key = q.next().await.unwrap();
        waited.push(Instant::now() - before);
        q.done(&key);
    }
    let expected: Vec<Duration> = [
        250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000,
    ]
    .into_iter()
    .map(Duration::from_millis)
    .collect();
    assert_eq!(waited, expected);
    // Progress starts it over.
    q.progressed("a");
    let before = Instant::now();
    q.add_rate_limited("a");
    q.next().await.unwrap();
    assert_eq!(Instant::now() - before, BACKOFF_BASE);
}

#[test]
fn the_bucket_lets_a_burst_through_then_says_when_its_next_token_comes() {
    let start = Instant::now();
    let mut b = Bucket::new(10.0, 3.0);
    let taken: Vec<bool> = (0..4).map(|_| b.try_take(start).is_ok()).collect();
    assert_eq!(taken, vec![true, true, true, false]);
    let wait = b.try_take(start).unwrap_err();
    assert!(
        wait >= Duration::from_millis(100) && wait < Duration::from_micros(100_001),
        "{wait:?}"
    );
    assert_eq!(b.try_take(start + wait), Ok(()));
    // Tokens come back with time, never more than the burst.
    let later = start + Duration::from_secs(60);
    assert_eq!(b.try_take(later), Ok(()));
    assert_eq!(b.try_take(later), Ok(()));
    assert_eq!(b.try_take(later), Ok(()));
    assert!(b.try_take(later).is_err(), "a refusal takes nothing");
}

#[tokio::test(start_paused = true)]
async fn many_waiting_keys_are_paced_by_the_bucket() {
    let q = WorkQueue::new();
    let keys = 1_000usize;
    let start = Instant::now();
    for i in 0..keys {
        q.add_paced(&format!("k{i}"), Duration::ZERO);
    }
    let mut last = start;
    for _ in 0..keys {
        let key = q.next().await.unwrap();
        last = Instant::now();
        q.done(&key);
    }
    // Every timer fires after the least wait (1 s) and takes its token then:
    // the burst goes at once, the rest at the bucket's rate, so the last
    // one waits (keys - burst) / rate more.
    let paced = WAIT_BASE + Duration::from_secs_f64((keys as f64 - PACE_BURST) / PACE_PER_SECOND);
    let took = last - start;
    assert!(
        took + Duration::from_millis(1) >= paced && took <= paced + Duration::from_millis(1),
        "{took:?}, not {paced:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_key_looks_again_less_and_less_often_until_it_progresses() {
    let q = WorkQueue::new();
    let mut waited = Vec::new();
    for _ in 0..7 {
        let before = Instant::now();
        q.add_paced("a", Duration::from_millis(1));
        let key = q.next().await.unwrap();
        waited.push((Instant::now() - before).as_secs());
        q.done(&key);
    }
    assert_eq!(waited, vec![1, 2, 4, 8, 16, 30, 30]);
    q.progressed("a");
    let before = Instant::now();
    q.add_paced("a", Duration::from_secs(5));
    q.next().await.unwrap();
    assert_eq!(
        Instant::now() - before,
        Duration::from_secs(5),
        "a longer wait asked for wins"
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_keeps_only_its_earliest_timer() {
    let q = WorkQueue::new();
    q.add_after("a", Duration::from_secs(10));
    q.add_after("a", Duration::from_secs(2));
    q.add_after("a", Duration::from_secs(20));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(q.next().await.as_deref(), Some("a"));
    q.done("a");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(q.is_empty(), "the replaced timers add nothing");
}

#[tokio::test(start_paused = true)]
async fn a_resync_skips_keys_already_scheduled_soon_and_brings_far_ones_forward() {
    let q = WorkQueue::new();
    q.add_after("soon", Duration::from_secs(20));
    q.add_after("far", Duration::from_secs(3_600));
    q.add("queued");
    for key in ["soon", "far", "queued", "idle"] {
        q.add_resync(key, Duration::from_secs(30));
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        let key = q.next().await.unwrap();
        q.done(&key);
        seen.push(key);
    }
    assert_eq!(seen, vec!["queued", "far", "idle"]);
    assert!(q.is_empty(), "the 20 s timer was left as it was");
    tokio::time::sleep(Duration::from_secs(21)).await;
    assert_eq!(q.next().await.as_deref(), Some("soon"));
}

#[tokio::test(start_paused = true)]
async fn timers_take_their_token_when_they_fire_so_far_or_replaced_ones_cost_nothing_now() {
    let q = WorkQueue::new();
    // A thousand looks due in an hour (TTLs) and as many replaced timers.
    for i in 0..1_000 {
        q.add_paced(&format!("ttl{i}"), Duration::from_secs(3_600));
        q.add_after(&format!("r{i}"), Duration::from_secs(5));
        q.add_paced(&format!("r{i}"), Duration::from_secs(60));
    }
    for _ in 0..1_000 {
        let key = q.next().await.unwrap();
        assert!(key.starts_with('r'), "{key}");
        q.done(&key);
    }
    // The bucket is still full: a failure now waits only its own backoff.
    let before = Instant::now();
    q.add_rate_limited("fresh");
    assert_eq!(q.next().await.as_deref(), Some("fresh"));
    assert_eq!(Instant::now() - before, BACKOFF_BASE);
}

/// Lets `n` paced looks of `prefix{i}` come due at 1 s (their least wait)
/// and hands the bucket's burst of them to a worker: the rest wait for a
/// token.
async fn exhaust_the_bucket(q: &WorkQueue, prefix: &str, n: usize) {
    for i in 0..n {
        q.add_paced(&format!("{prefix}{i}"), Duration::ZERO);
    }
    tokio::time::sleep(WAIT_BASE).await;
    for _ in 0..PACE_BURST as usize {
        let key = q.next().await.unwrap();
        q.done(&key);
    }
    // Every timer has fired by now.
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_event_that_overtakes_a_paced_look_gives_back_its_token() {
    let q = WorkQueue::new();
    exhaust_the_bucket(&q, "w", 300).await;
    // Events for all of them (a hundred still wait for a token): looked at
    // now.
    for i in 0..300 {
        q.add(&format!("w{i}"));
    }
    for _ in 0..300 {
        let key = q.next().await.unwrap();
        q.done(&key);
    }
    // None of them took a token: a failure now waits only its backoff and
    // what the bucket has refilled by then.
    let before = Instant::now();
    q.add_rate_limited("fresh");
    assert_eq!(q.next().await.as_deref(), Some("fresh"));
    assert_eq!(Instant::now() - before, BACKOFF_BASE);
    q.done("fresh");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(q.is_empty(), "the overtaken looks add nothing later");
}

#[tokio::test(start_paused = true)]
async fn a_paced_look_replaced_by_an_earlier_timer_gives_back_its_token() {
    let q = WorkQueue::new();
    exhaust_the_bucket(&q, "w", 300).await;
    // Sooner timers for all of them (a hundred still wait for a token).
    for i in 0..300 {
        q.add_after(&format!("w{i}"), Duration::from_millis(100));
    }
    for _ in 0..300 {
        let key = q.next().await.unwrap();
        q.done(&key);
    }
    let before = Instant::now();
    q.add_rate_limited("fresh");
    assert_eq!(q.next().await.as_deref(), Some("fresh"));
    assert_eq!(Instant::now() - before, BACKOFF_BASE);
    q.done("fresh");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(q.is_empty(), "the replaced looks add nothing later");
}

#[tokio::test]
async fn one_namespace_s_many_ready_keys_do_not_queue_ahead_of_another_s() {
    let q = WorkQueue::new();
    for i in 0..100 {
        q.add(&format!("dev/r{i}"));
    }
    q.add("prod/p");
    q.add("test/t");
    let first: Vec<String> = vec![
        q.next().await.unwrap(),
        q.next().await.unwrap(),
        q.next().await.unwrap(),
        q.next().await.unwrap(),
    ];
    assert_eq!(first, vec!["dev/r0", "prod/p", "test/t", "dev/r1"]);
}

#[tokio::test(start_paused = true)]
async fn a_namespace_s_due_look_is_not_delayed_by_another_namespace_s_waiting_keys() {
    let q = WorkQueue::new();
    let dev: Vec<String> = (0..2_000).map(|i| format!("dev/r{i}")).collect();
    for key in &dev {
        q.add(key);
    }
    let start = Instant::now();
    q.add_paced("prod/deadline", Duration::from_secs(5));
    // Two workers, each look 5 ms; every dev key waits again after its look,
    // as an unmatched request does.
    let (seen, mut prod) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..2 {
        let (q, seen) = (q.clone(), seen.clone());
        tokio::spawn(async move {
            while let Some(key) = q.next().await {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if key.starts_with("dev/") {
                    q.add_paced(&key, Duration::ZERO);
                } else {
                    let _ = seen.send(Instant::now());
                }
                q.done(&key);
            }
        });
    }
    // A resync of every dev key, and a storm of dev events, just before
    // the prod key is due.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    for key in &dev {
        q.add_resync(key, Duration::from_secs(30));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    for key in &dev {
        q.add(key);
    }
    let handed = tokio::time::timeout(Duration::from_secs(10), prod.recv())
        .await
        .expect("the prod key is handed to a worker")
        .unwrap();
    assert!(
        handed - start <= Duration::from_secs(6),
        "prod waited {:?}",
        handed - start
    );
    q.shut_down();
}

#[tokio::test(start_paused = true)]
async fn a_paced_look_due_while_its_key_is_held_waits_until_the_key_is_done() {
    let q = WorkQueue::new();
    q.add("ns/a");
    let key = q.next().await.unwrap();
    q.add_rate_limited("ns/a");
    let second = tokio::time::timeout(Duration::from_secs(1), q.next()).await;
    assert!(
        second.is_err(),
        "a held key is not handed to a second worker"
    );
    q.done(&key);
    assert_eq!(q.next().await.as_deref(), Some("ns/a"));
}

#[tokio::test(start_paused = true)]
async fn a_named_queue_counts_adds_depth_time_queued_time_worked_and_retries_as_client_go_does() {
    let q = WorkQueue::named("a-queue-of-the-queue-tests");
    let m = crate::metrics::global()
        .workqueue
        .queue("a-queue-of-the-queue-tests");
    q.add("ns/a");
    q.add("ns/a");
    q.add("ns/b");
    assert_eq!(
        (m.adds.get(), m.depth.get()),
        (2, 2),
        "a key waiting is added once"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let key = q.next().await.unwrap();
    assert_eq!(m.depth.get(), 1);
    q.add(&key);
    assert_eq!(m.adds.get(), 3, "a held key added again is an add");
    tokio::time::sleep(Duration::from_secs(2)).await;
    q.done(&key);
    assert_eq!(
        m.adds.get(),
        3,
        "queued again on done, it is not added twice"
    );
    q.add_rate_limited("ns/c");
    assert_eq!(m.retries.get(), 1);
    let text = crate::metrics::text(|r| {
        r.register("q", "queue", m.queue_duration.clone());
        r.register("w", "work", m.work_duration.clone());
    });
    // ns/a waited 3 s for a worker, which held it 2 s.
    assert!(
        text.contains("q_sum 3.0\n") || text.contains("q_sum 3\n"),
        "{text}"
    );
    assert!(
        text.contains("w_sum 2.0\n") || text.contains("w_sum 2\n"),
        "{text}"
    );
}
