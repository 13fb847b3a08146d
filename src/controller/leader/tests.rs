use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const MS: Duration = Duration::from_millis(1);

fn leadership(clock: &LeaseClock) -> Leadership {
    let fence = Fence {
        key: "/election/694d".to_owned(),
        create_revision: 9,
    };
    clock.leadership(&Arc::from("replica-a"), fence)
}

#[test]
fn margin_is_a_fifth_of_the_ttl_but_at_least_200ms() {
    for (ttl_secs, expected_ms) in [(1, 200), (2, 400), (10, 2000), (60, 12000)] {
        assert_eq!(
            margin(ttl(ttl_secs)),
            Duration::from_millis(expected_ms),
            "ttl {ttl_secs}s"
        );
    }
}

#[test]
fn requested_ttl_rounds_up_to_whole_seconds_and_is_at_least_one() {
    for (ttl, secs) in [
        (Duration::ZERO, 1),
        (Duration::from_millis(300), 1),
        (Duration::from_secs(2), 2),
        (Duration::from_millis(2001), 3),
    ] {
        assert_eq!(requested_ttl_secs(ttl), secs, "{ttl:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn check_holds_until_the_ttl_minus_the_margin_after_the_grant_was_sent() {
    let clock = LeaseClock::new(7, Instant::now(), 5);
    let leadership = leadership(&clock);
    assert_eq!(leadership.check(), Ok(()));
    sleep(4000 * MS - MS).await;
    assert!(leadership.is_leader());
    sleep(MS).await;
    assert_eq!(leadership.check(), Err(NotLeader { lease_id: 7 }));
}

#[tokio::test(start_paused = true)]
async fn an_answer_is_credited_to_the_send_time_not_the_arrival_time() {
    let t0 = Instant::now();
    let mut clock = LeaseClock::new(7, t0, 5);
    let leadership = leadership(&clock);
    sleep(1000 * MS).await;
    clock.on_send(Instant::now());
    sleep(2000 * MS).await;
    clock.on_answer(Instant::now(), 5).unwrap();
    // Sent at t0+1s, so live until t0+1s+5s−1s, however late the answer came.
    sleep_until(t0 + 5000 * MS - MS).await;
    assert!(leadership.is_leader());
    sleep(MS).await;
    assert!(!leadership.is_leader());
}

#[tokio::test(start_paused = true)]
async fn a_stalled_keep_alive_fails_check_before_the_lease_could_expire() {
    let t0 = Instant::now();
    let mut clock = LeaseClock::new(7, t0, 3);
    let leadership = leadership(&clock);
    let period = clock.keep_alive_interval();
    clock.on_send(t0);
    clock.on_answer(t0 + 10 * MS, 3).unwrap();
    // etcd stops answering: keep-alives go out but nothing comes back.
    let lost = tokio::spawn({
        let leadership = leadership.clone();
        async move {
            leadership.lost().await;
            Instant::now()
        }
    });
    while leadership.is_leader() {
        sleep(period / 4).await;
        clock.on_send(Instant::now());
    }
    // The last answered keep-alive was sent at t0, so etcd keeps the lease
    // until t0+3s at the earliest; we stop relying on it before that.
    assert!(Instant::now() < t0 + ttl(3));
    assert!(lost.await.unwrap() < t0 + ttl(3));
}

#[tokio::test(start_paused = true)]
async fn an_answer_after_the_deadline_does_not_revive_the_term() {
    let t0 = Instant::now();
    let mut clock = LeaseClock::new(7, t0, 2);
    let leadership = leadership(&clock);
    clock.on_send(t0 + 500 * MS);
    sleep(2000 * MS).await;
    assert!(matches!(
        clock.on_answer(Instant::now(), 2),
        Err(LossReason::Unanswered)
    ));
    assert!(!leadership.is_leader());
    clock.on_send(Instant::now());
    assert!(clock.on_answer(Instant::now(), 2).is_err());
    assert!(!leadership.is_leader());
}

#[tokio::test(start_paused = true)]
async fn an_answer_with_ttl_zero_ends_the_term_at_once() {
    let mut clock = LeaseClock::new(7, Instant::now(), 10);
    let leadership = leadership(&clock);
    clock.on_send(Instant::now());
    assert!(matches!(
        clock.on_answer(Instant::now(), 0),
        Err(LossReason::Gone)
    ));
    assert!(!leadership.is_leader());
    leadership.lost().await;
}

#[tokio::test(start_paused = true)]
async fn lost_resolves_at_the_deadline_without_anyone_calling_check() {
    let clock = LeaseClock::new(7, Instant::now(), 5);
    let leadership = leadership(&clock);
    let resolved = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let resolved = resolved.clone();
        async move {
            leadership.lost().await;
            resolved.store(true, Ordering::SeqCst);
        }
    });
    sleep(4000 * MS - MS).await;
    assert!(!resolved.load(Ordering::SeqCst));
    sleep(2 * MS).await;
    waiter.await.unwrap();
    assert!(resolved.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn lost_keeps_waiting_while_keep_alives_are_answered() {
    let mut clock = LeaseClock::new(7, Instant::now(), 3);
    let leadership = leadership(&clock);
    let waiter = tokio::spawn({
        let leadership = leadership.clone();
        async move { leadership.lost().await }
    });
    for _ in 0..10 {
        sleep(clock.keep_alive_interval()).await;
        clock.on_send(Instant::now());
        clock.on_answer(Instant::now(), 3).unwrap();
        assert!(!waiter.is_finished());
    }
    clock.end();
    waiter.await.unwrap();
    assert!(!leadership.is_leader());
}

#[tokio::test(start_paused = true)]
async fn a_leadership_outlives_its_term_only_as_a_refusal() {
    let clock = LeaseClock::new(7, Instant::now(), 60);
    let leadership = leadership(&clock);
    drop(clock);
    assert_eq!(leadership.check(), Err(NotLeader { lease_id: 7 }));
    leadership.lost().await;
}

#[test]
fn not_leader_names_the_lease() {
    assert_eq!(
        NotLeader { lease_id: 0x694d }.to_string(),
        "not the controller leader: lease 694d is lost or may have expired"
    );
}

#[tokio::test(start_paused = true)]
async fn forfeiting_ends_the_term_for_every_clone_and_the_next_answer_reports_it() {
    let mut clock = LeaseClock::new(7, Instant::now(), 5);
    let leadership = leadership(&clock);
    let other = leadership.clone();
    let lost = tokio::spawn({
        let leadership = leadership.clone();
        async move { leadership.lost().await }
    });
    assert!(other.is_leader());

    leadership.forfeit();
    assert_eq!(other.check(), Err(NotLeader { lease_id: 7 }));
    timeout(Duration::from_millis(10), lost)
        .await
        .expect("lost() resolved at once")
        .unwrap();
    // A keep-alive answered afterwards does not revive the term.
    clock.on_send(Instant::now());
    assert!(matches!(
        clock.on_answer(Instant::now(), 5),
        Err(LossReason::Forfeited)
    ));
    assert!(!other.is_leader());
}
