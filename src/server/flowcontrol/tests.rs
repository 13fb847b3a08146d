use super::*;

use std::collections::VecDeque;

use http::StatusCode;
use http_body_util::Full;

fn seated_or_panic(arrival: Arrival) {
    assert_eq!(arrival, Arrival::Seated);
}

fn ticket_of(arrival: Arrival) -> Ticket {
    match arrival {
        Arrival::Queued {
            ticket,
            evicted: None,
        } => ticket,
        other => panic!("expected a queued request, got {other:?}"),
    }
}

/// A queue and who holds its seats, oldest first, so that a test can give
/// back "the next seat" as the request that took it first would.
struct Seats {
    q: FairQueue,
    holders: VecDeque<(String, usize)>,
}

impl Seats {
    fn new(seats: usize, max_per_user: usize, max_total: usize) -> Self {
        Self {
            q: FairQueue::new(seats, max_per_user, max_total),
            holders: VecDeque::new(),
        }
    }

    /// Every seat taken, one per holder (`holder-0`, `holder-1`, ...).
    fn full(seats: usize, max_per_user: usize, max_total: usize) -> Self {
        let mut s = Self::new(seats, max_per_user, max_total);
        for i in 0..seats {
            seated_or_panic(s.arrive(&format!("holder-{i}")));
        }
        s
    }

    fn arrive(&mut self, user: &str) -> Arrival {
        self.arrive_wide(user, 1)
    }

    fn arrive_wide(&mut self, user: &str, width: usize) -> Arrival {
        let width = self.q.width_for(width);
        let arrival = self.q.arrive(user, width);
        if arrival == Arrival::Seated {
            self.holders.push_back((user.to_owned(), width));
        }
        arrival
    }

    /// The oldest holder gives its seats back; returns who was seated.
    fn release(&mut self) -> Vec<Ticket> {
        let Some((user, width)) = self.holders.pop_front() else {
            return self
                .q
                .release("nobody", 1)
                .into_iter()
                .map(|h| h.ticket)
                .collect();
        };
        let handed = self.q.release(&user, width);
        for h in &handed {
            self.holders.push_back((h.user.clone(), h.width));
        }
        handed.into_iter().map(|h| h.ticket).collect()
    }

    /// Gives seats back one holder at a time until one is handed on.
    fn release_one(&mut self) -> Option<Ticket> {
        while !self.holders.is_empty() {
            if let Some(t) = self.release().into_iter().next() {
                return Some(t);
            }
        }
        None
    }
}

fn user(name: &str) -> UserInfo {
    UserInfo {
        username: name.to_owned(),
        groups: vec!["system:authenticated".to_owned()],
        ..UserInfo::default()
    }
}

fn limits(seats: usize, per_user: usize) -> FlowControlLimits {
    FlowControlLimits {
        max_read_only: seats,
        max_mutating: seats,
        max_queued_per_user: per_user,
        max_queued_total: 100,
        queue_timeout: Duration::from_secs(15),
        max_watches_per_user: 2,
    }
}

// The queue itself: pure and deterministic.

#[test]
fn a_request_is_seated_while_seats_are_free() {
    let mut q = Seats::new(2, 10, 100);
    seated_or_panic(q.arrive("alice"));
    seated_or_panic(q.arrive("alice"));
    assert_eq!(q.q.in_use(), 2);
    assert!(matches!(q.arrive("alice"), Arrival::Queued { .. }));
}

#[test]
fn with_no_seat_limit_every_request_is_seated() {
    let mut q = FairQueue::new(0, 0, 0);
    for _ in 0..10_000 {
        seated_or_panic(q.arrive("alice", 1));
    }
    assert_eq!(q.queued(), 0);
}

#[test]
fn freed_seats_go_to_the_users_in_turn_one_request_each() {
    let mut q = Seats::full(1, 10, 100);
    let a1 = ticket_of(q.arrive("alice"));
    let a2 = ticket_of(q.arrive("alice"));
    let a3 = ticket_of(q.arrive("alice"));
    let b1 = ticket_of(q.arrive("bob"));
    let c1 = ticket_of(q.arrive("carol"));
    let b2 = ticket_of(q.arrive("bob"));
    let order: Vec<Ticket> = std::iter::from_fn(|| q.release_one()).collect();
    assert_eq!(order, [a1, b1, c1, a2, b2, a3]);
    assert_eq!(q.q.in_use(), 0, "the last release frees the seat");
}

#[test]
fn a_flooding_user_is_refused_once_their_queue_is_full_while_another_gets_the_next_seat() {
    let mut q = Seats::full(2, 5, 100);
    for _ in 0..5 {
        ticket_of(q.arrive("flood"));
    }
    for _ in 0..45 {
        assert_eq!(
            q.arrive("flood"),
            Arrival::Refused(QueueFull::UserQueueFull)
        );
    }
    let polite = ticket_of(q.arrive("polite"));
    let first = q.release_one();
    let second = q.release_one();
    assert!(
        [first, second].contains(&Some(polite)),
        "the polite user waits at most one turn: {first:?}, {second:?}"
    );
}

#[test]
fn a_user_flooding_at_ten_times_capacity_does_not_starve_another() {
    // Four seats; every round the flooder sends 40 requests and the other
    // user one, then every seat is given back once. Each request of the
    // other user must be seated within the round it was sent in.
    let seats = 4;
    let mut q = Seats::new(seats, 50, 1000);
    let mut flooder_seated = 0;
    for round in 0..100 {
        for _ in 0..40 {
            match q.arrive("flood") {
                Arrival::Seated => flooder_seated += 1,
                Arrival::Queued { .. } | Arrival::Refused(QueueFull::UserQueueFull) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let mine = match q.arrive("polite") {
            Arrival::Seated => continue,
            Arrival::Queued { ticket, .. } => ticket,
            other => panic!("round {round}: the polite user was refused: {other:?}"),
        };
        let granted: Vec<Ticket> = (0..seats).flat_map(|_| q.release()).collect();
        assert!(
            granted.contains(&mine),
            "round {round}: the polite user's request waited past {seats} freed seats"
        );
        assert!(q.q.queued_for("polite") == 0);
    }
    assert!(flooder_seated > 0);
    assert!(q.q.queued_for("flood") <= 50);
}

#[test]
fn with_queuing_off_a_request_past_the_seats_is_refused_at_once() {
    let mut q = Seats::full(1, 0, 100);
    assert_eq!(q.arrive("alice"), Arrival::Refused(QueueFull::NoQueue));
    assert_eq!(q.q.queued(), 0);
}

#[test]
fn when_every_queue_is_full_a_shorter_queue_takes_the_place_of_the_longest_queues_newest() {
    let mut q = Seats::full(1, 10, 4);
    let _f1 = ticket_of(q.arrive("flood"));
    let _f2 = ticket_of(q.arrive("flood"));
    let f3 = ticket_of(q.arrive("flood"));
    let _b1 = ticket_of(q.arrive("bob"));
    match q.arrive("carol") {
        Arrival::Queued {
            evicted: Some(evicted),
            ..
        } => assert_eq!(evicted, f3, "the flooder's newest request makes room"),
        other => panic!("expected an eviction, got {other:?}"),
    }
    assert_eq!(q.q.queued(), 4);
    assert_eq!(q.q.queued_for("flood"), 2);
}

#[test]
fn when_every_queue_is_full_a_user_with_the_longest_queue_is_refused() {
    let mut q = Seats::full(1, 10, 4);
    for _ in 0..2 {
        ticket_of(q.arrive("alice"));
        ticket_of(q.arrive("bob"));
    }
    // Queues of 2 and 2: a third for either would only swap places.
    assert_eq!(
        q.arrive("alice"),
        Arrival::Refused(QueueFull::AllQueuesFull)
    );
    // A newcomer (0 + 1 < 2) may take a place.
    assert!(matches!(
        q.arrive("carol"),
        Arrival::Queued {
            evicted: Some(_),
            ..
        }
    ));
    assert_eq!(q.q.queued(), 4);
}

#[test]
fn a_withdrawn_request_never_gets_a_seat() {
    let mut q = Seats::full(1, 10, 100);
    let a = ticket_of(q.arrive("alice"));
    let b = ticket_of(q.arrive("bob"));
    assert!(q.q.withdraw("alice", a));
    assert!(!q.q.withdraw("alice", a), "a ticket is withdrawn once");
    assert_eq!(q.release(), [b]);
    assert_eq!(q.release(), []);
    assert_eq!(q.q.in_use(), 0);
}

#[test]
fn a_seated_request_cannot_be_withdrawn() {
    let mut q = Seats::full(1, 10, 100);
    let a = ticket_of(q.arrive("alice"));
    assert_eq!(q.release(), [a]);
    assert!(!q.q.withdraw("alice", a));
    assert_eq!(q.q.in_use(), 1);
}

#[test]
fn releasing_more_seats_than_were_taken_never_goes_below_zero() {
    let mut q = FairQueue::new(3, 10, 100);
    seated_or_panic(q.arrive("alice", 1));
    for _ in 0..5 {
        assert_eq!(q.release("alice", 1), []);
    }
    assert_eq!(q.in_use(), 0);
    assert_eq!(q.held_by("alice"), 0);
    assert_eq!(q.queued(), 0);
}

#[test]
fn a_list_takes_one_seat_per_hundred_objects_it_may_return_up_to_ten() {
    assert_eq!(list_width(0), 1);
    assert_eq!(list_width(100), 1);
    assert_eq!(list_width(101), 2);
    assert_eq!(list_width(MAX_WEIGHED_OBJECTS), 10);
    assert_eq!(list_width(100_000), 10);
}

#[test]
fn one_user_never_holds_more_than_all_but_an_eighth_of_the_seats() {
    let mut q = Seats::new(8, 50, 100);
    for _ in 0..7 {
        seated_or_panic(q.arrive("flood"));
    }
    ticket_of(q.arrive("flood"));
    assert_eq!(q.q.held_by("flood"), 7);
    assert_eq!(q.q.in_use(), 7);
    seated_or_panic(q.arrive("polite"));
    // A pool of fewer than 8 seats keeps none back.
    let mut small = Seats::new(7, 50, 100);
    for _ in 0..7 {
        seated_or_panic(small.arrive("alone"));
    }
}

#[test]
fn a_request_wider_than_one_user_may_hold_takes_what_they_may() {
    let mut q = Seats::new(8, 50, 100);
    seated_or_panic(q.arrive_wide("lister", 10));
    assert_eq!(q.q.held_by("lister"), 7);
    seated_or_panic(q.arrive("other"));
    assert_eq!(q.q.in_use(), 8);
}

#[test]
fn a_wide_request_is_not_overtaken_by_narrower_ones_behind_it() {
    let mut q = Seats::new(8, 50, 100);
    for _ in 0..4 {
        seated_or_panic(q.arrive("holder"));
    }
    let wide = ticket_of(q.arrive_wide("lister", 7));
    let narrow = ticket_of(q.arrive("reader"));
    assert_eq!(
        q.release(),
        [],
        "5 free seats do not fit 7, and the reader waits behind"
    );
    assert_eq!(q.release(), [], "6 free");
    assert_eq!(q.release(), [wide], "7 free: the wide request first");
    assert_eq!(q.release(), [narrow]);
}

#[test]
fn a_user_at_their_cap_does_not_hold_up_another_users_requests() {
    let mut q = Seats::new(8, 50, 100);
    seated_or_panic(q.arrive_wide("lister", 7));
    let later = ticket_of(q.arrive("lister"));
    seated_or_panic(q.arrive("reader"));
    // When the reader is done, its seat stays free: the lister is at its cap.
    let seat = q.holders.iter().position(|(u, _)| u == "reader").unwrap();
    let (user, width) = q.holders.remove(seat).unwrap();
    assert_eq!(q.q.release(&user, width), []);
    assert_eq!(q.q.in_use(), 7);
    // When the lister's wide request ends, its next one is seated.
    assert_eq!(q.release(), [later]);
}

#[test]
fn a_wide_request_given_back_seats_several_narrow_ones_at_once() {
    let mut q = Seats::new(8, 50, 100);
    seated_or_panic(q.arrive_wide("lister", 7));
    seated_or_panic(q.arrive("a"));
    let waiting: Vec<Ticket> = ["b", "c", "d"]
        .iter()
        .map(|u| ticket_of(q.arrive(u)))
        .collect();
    assert_eq!(q.release(), waiting);
    assert_eq!(q.q.in_use(), 4);
}

// The async wrapper: waiting, timeouts, permits.

#[test]
fn requests_are_classified_as_kube_apiserver_classifies_them() {
    use crate::endpoints::request::{parse, Query};
    let path = "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/a/namespacetransfers";
    let named = format!("{path}/x");
    let cases = [
        (Method::GET, path, "", RequestKind::ReadOnly),
        (Method::GET, named.as_str(), "", RequestKind::ReadOnly),
        (Method::GET, path, "watch=true", RequestKind::Watch),
        (Method::POST, path, "", RequestKind::Mutating),
        (Method::PUT, named.as_str(), "", RequestKind::Mutating),
        (Method::PATCH, named.as_str(), "", RequestKind::Mutating),
        (Method::DELETE, named.as_str(), "", RequestKind::Mutating),
        (Method::DELETE, path, "", RequestKind::Mutating),
        (Method::GET, "/apis", "", RequestKind::ReadOnly),
        (Method::GET, "/openapi/v2", "", RequestKind::ReadOnly),
        (Method::POST, "/apis", "", RequestKind::Mutating),
    ];
    for (method, path, query, want) in cases {
        let query_str = (!query.is_empty()).then_some(query);
        let resource = parse(
            &method,
            path,
            &Query::parse(query_str),
            &crate::endpoints::kinds::Kinds::served(),
        )
        .ok()
        .flatten();
        assert_eq!(
            RequestKind::of(resource.as_ref(), &method),
            want,
            "{method} {path}?{query}"
        );
    }
}

#[tokio::test]
async fn a_request_past_the_seats_with_queuing_off_is_refused_with_the_flag_named() {
    let flow = FlowControl::new(limits(1, 0));
    let _held = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let refused = flow
        .admit(&user("bob"), RequestKind::Mutating)
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), Reason::ConcurrencyLimit);
    let message = ApiError::from(refused).to_string();
    assert!(
        message.contains("--max-mutating-requests-inflight"),
        "{message}"
    );
    assert_eq!(
        flow.rejected(RequestKind::Mutating, Reason::ConcurrencyLimit),
        1
    );
    // The other pool is untouched.
    assert!(flow
        .admit(&user("bob"), RequestKind::ReadOnly)
        .await
        .is_ok());
}

#[tokio::test]
async fn a_rejection_is_a_429_too_many_requests_status_with_retry_after() {
    let flow = FlowControl::new(limits(1, 0));
    let _held = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let err: ApiError = flow
        .admit(&user("bob"), RequestKind::ReadOnly)
        .await
        .unwrap_err()
        .into();
    let status = err.to_status();
    assert_eq!(status.code, Some(429));
    assert_eq!(status.reason.as_deref(), Some("TooManyRequests"));
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(
        status.details.and_then(|d| d.retry_after_seconds),
        Some(RETRY_AFTER_SECONDS)
    );
    assert!(status
        .message
        .is_some_and(|m| m.contains("--max-requests-inflight")));
    let resp = crate::endpoints::error_response(&err);
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        resp.headers().get(http::header::RETRY_AFTER),
        Some(&http::HeaderValue::from(RETRY_AFTER_SECONDS))
    );
}

#[tokio::test]
async fn a_queued_request_gets_the_seat_its_holder_gives_back() {
    let flow = FlowControl::new(limits(1, 5));
    let held = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let bob = user("bob");
    let waiting = flow.admit(&bob, RequestKind::Mutating);
    tokio::pin!(waiting);
    assert!(futures::poll!(&mut waiting).is_pending());
    assert_eq!(flow.in_queue(RequestKind::Mutating), 1);
    drop(held);
    let permit = waiting.await.unwrap();
    assert_eq!(permit.kind(), Some(RequestKind::Mutating));
    assert_eq!(flow.in_flight(RequestKind::Mutating), 1);
    assert_eq!(flow.in_queue(RequestKind::Mutating), 0);
    drop(permit);
    assert_eq!(flow.in_flight(RequestKind::Mutating), 0);
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_is_refused_after_the_queue_timeout() {
    let flow = FlowControl::new(limits(1, 5));
    let _held = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let refused = flow
        .admit(&user("bob"), RequestKind::ReadOnly)
        .await
        .unwrap_err();
    assert_eq!(refused.reason(), Reason::TimeOut);
    assert!(ApiError::from(refused)
        .to_string()
        .contains("--request-queue-timeout"));
    assert_eq!(flow.in_queue(RequestKind::ReadOnly), 0);
    assert_eq!(flow.rejected(RequestKind::ReadOnly, Reason::TimeOut), 1);
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_still_waits_just_before_the_queue_timeout() {
    let flow = FlowControl::new(limits(1, 5));
    let held = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let bob = user("bob");
    let waiting = flow.admit(&bob, RequestKind::ReadOnly);
    tokio::pin!(waiting);
    assert!(futures::poll!(&mut waiting).is_pending());
    tokio::time::advance(Duration::from_secs(14)).await;
    assert!(futures::poll!(&mut waiting).is_pending());
    drop(held);
    assert!(waiting.await.is_ok());
}

#[tokio::test]
async fn a_waiter_whose_client_goes_away_leaves_the_queue_to_the_next() {
    let flow = FlowControl::new(limits(1, 5));
    let held = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let (bob, carol) = (user("bob"), user("carol"));
    let mut gone = Box::pin(flow.admit(&bob, RequestKind::Mutating));
    assert!(futures::poll!(&mut gone).is_pending());
    let next = flow.admit(&carol, RequestKind::Mutating);
    tokio::pin!(next);
    assert!(futures::poll!(&mut next).is_pending());
    drop(gone);
    assert_eq!(flow.in_queue(RequestKind::Mutating), 1);
    assert_eq!(flow.rejected(RequestKind::Mutating, Reason::Cancelled), 1);
    drop(held);
    let permit = next.await.unwrap();
    assert_eq!(flow.in_flight(RequestKind::Mutating), 1);
    drop(permit);
    assert_eq!(flow.in_flight(RequestKind::Mutating), 0);
}

#[tokio::test]
async fn a_seat_handed_to_a_waiter_that_went_away_passes_to_the_next() {
    let flow = FlowControl::new(limits(1, 5));
    let held = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let (bob, carol) = (user("bob"), user("carol"));
    let mut gone = Box::pin(flow.admit(&bob, RequestKind::Mutating));
    assert!(futures::poll!(&mut gone).is_pending());
    let next = flow.admit(&carol, RequestKind::Mutating);
    tokio::pin!(next);
    assert!(futures::poll!(&mut next).is_pending());
    // Bob is handed the seat, but his client is gone before he takes it.
    drop(held);
    drop(gone);
    let permit = next.await.unwrap();
    assert_eq!(flow.in_flight(RequestKind::Mutating), 1);
    drop(permit);
    assert_eq!(flow.in_flight(RequestKind::Mutating), 0);
    assert_eq!(flow.in_queue(RequestKind::Mutating), 0);
}

#[tokio::test]
async fn a_seat_is_given_back_when_its_handler_panics() {
    let flow = Arc::new(FlowControl::new(limits(1, 0)));
    let handler = {
        let flow = flow.clone();
        tokio::spawn(async move {
            let _permit = flow
                .admit(&user("alice"), RequestKind::Mutating)
                .await
                .unwrap();
            panic!("the handler fails");
        })
    };
    assert!(handler.await.unwrap_err().is_panic());
    assert_eq!(flow.in_flight(RequestKind::Mutating), 0);
    assert!(flow
        .admit(&user("bob"), RequestKind::Mutating)
        .await
        .is_ok());
}

#[tokio::test]
async fn a_seat_is_given_back_when_its_handler_is_cancelled() {
    let flow = Arc::new(FlowControl::new(limits(1, 0)));
    let (seated_tx, seated_rx) = oneshot::channel();
    let handler = {
        let flow = flow.clone();
        tokio::spawn(async move {
            let _permit = flow
                .admit(&user("alice"), RequestKind::Mutating)
                .await
                .unwrap();
            let _ = seated_tx.send(());
            std::future::pending::<()>().await;
        })
    };
    seated_rx.await.unwrap();
    assert_eq!(flow.in_flight(RequestKind::Mutating), 1);
    handler.abort();
    assert!(handler.await.unwrap_err().is_cancelled());
    assert_eq!(flow.in_flight(RequestKind::Mutating), 0);
}

#[tokio::test]
async fn a_queued_request_dropped_for_another_users_is_refused() {
    let mut l = limits(1, 5);
    l.max_queued_total = 2;
    let flow = FlowControl::new(l);
    let _held = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let flood = user("flood");
    let first = flow.admit(&flood, RequestKind::ReadOnly);
    tokio::pin!(first);
    assert!(futures::poll!(&mut first).is_pending());
    let newest = flow.admit(&flood, RequestKind::ReadOnly);
    tokio::pin!(newest);
    assert!(futures::poll!(&mut newest).is_pending());
    let bob = user("bob");
    let polite = flow.admit(&bob, RequestKind::ReadOnly);
    tokio::pin!(polite);
    assert!(futures::poll!(&mut polite).is_pending());
    let refused = newest.await.unwrap_err();
    assert!(matches!(refused, Rejection::Evicted { .. }));
    assert_eq!(refused.reason(), Reason::QueueFull);
    assert!(ApiError::from(refused)
        .to_string()
        .contains("--max-queued-requests"));
    assert_eq!(flow.in_queue(RequestKind::ReadOnly), 2);
}

#[tokio::test]
async fn members_of_system_masters_are_exempt() {
    let flow = FlowControl::new(limits(1, 0));
    let _held = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let admin = UserInfo {
        username: "admin".to_owned(),
        groups: vec![EXEMPT_GROUP.to_owned()],
        ..UserInfo::default()
    };
    let mut permits = Vec::new();
    for kind in [
        RequestKind::Mutating,
        RequestKind::ReadOnly,
        RequestKind::Watch,
    ] {
        for _ in 0..10 {
            let permit = flow.admit(&admin, kind).await.unwrap();
            assert_eq!(permit.kind(), None);
            permits.push(permit);
        }
    }
    assert_eq!(flow.in_flight(RequestKind::Mutating), 1);
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 0);
    assert_eq!(flow.in_flight(RequestKind::Watch), 0);
}

#[tokio::test]
async fn watches_take_no_seat() {
    let flow = FlowControl::new(limits(1, 0));
    let _held = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let watch = flow
        .admit(&user("alice"), RequestKind::Watch)
        .await
        .unwrap();
    assert_eq!(watch.kind(), Some(RequestKind::Watch));
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 1);
}

#[tokio::test]
async fn a_watch_past_the_per_user_cap_is_refused_while_another_user_may_watch() {
    let flow = FlowControl::new(limits(1, 0));
    let alice = user("alice");
    let _w1 = flow.admit(&alice, RequestKind::Watch).await.unwrap();
    let w2 = flow.admit(&alice, RequestKind::Watch).await.unwrap();
    let refused = flow.admit(&alice, RequestKind::Watch).await.unwrap_err();
    assert_eq!(refused, Rejection::TooManyWatches { max: 2 });
    assert!(ApiError::from(refused)
        .to_string()
        .contains("--max-watches-per-user"));
    assert!(flow.admit(&user("bob"), RequestKind::Watch).await.is_ok());
    drop(w2);
    assert!(flow.admit(&alice, RequestKind::Watch).await.is_ok());
    assert_eq!(
        flow.rejected(RequestKind::Watch, Reason::ConcurrencyLimit),
        1
    );
}

#[tokio::test]
async fn with_no_watch_cap_a_user_may_watch_without_limit() {
    let mut l = limits(1, 0);
    l.max_watches_per_user = 0;
    let flow = FlowControl::new(l);
    let alice = user("alice");
    let mut watches = Vec::new();
    for _ in 0..1000 {
        watches.push(flow.admit(&alice, RequestKind::Watch).await.unwrap());
    }
    assert_eq!(flow.in_flight(RequestKind::Watch), 1000);
}

#[tokio::test]
async fn a_watch_is_counted_until_its_response_body_is_dropped() {
    let flow = FlowControl::new(limits(1, 0));
    let permit = flow
        .admit(&user("alice"), RequestKind::Watch)
        .await
        .unwrap();
    let body: Body = Full::new(Bytes::from_static(b"{}\n")).boxed_unsync();
    let resp = permit.hold_through(Response::new(body));
    assert_eq!(flow.in_flight(RequestKind::Watch), 1);
    let (_, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], b"{}\n", "the body passes through unchanged");
    assert_eq!(flow.in_flight(RequestKind::Watch), 0);
}

#[tokio::test]
async fn a_seat_is_given_back_once_the_handler_has_answered() {
    let flow = FlowControl::new(limits(1, 0));
    let permit = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let body: Body = Full::new(Bytes::new()).boxed_unsync();
    let _resp = permit.hold_through(Response::new(body));
    assert_eq!(flow.in_flight(RequestKind::Mutating), 0);
}

#[tokio::test]
async fn with_queuing_off_a_user_at_their_cap_is_told_so_while_seats_are_free() {
    let flow = FlowControl::new(limits(8, 0));
    let _list = flow
        .admit_wide(&user("alice"), RequestKind::ReadOnly, 10)
        .await
        .unwrap();
    let refused = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap_err();
    let status = ApiError::from(refused).to_status();
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("you hold 7 of the 8 seats for read-only requests, the most one user may"),
        "{message}"
    );
    assert!(flow
        .admit(&user("bob"), RequestKind::ReadOnly)
        .await
        .is_ok());
}

#[tokio::test]
async fn a_wide_permit_holds_its_seats_until_it_is_dropped() {
    let flow = FlowControl::new(limits(8, 10));
    let list = flow
        .admit_wide(&user("alice"), RequestKind::ReadOnly, 5)
        .await
        .unwrap();
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 5);
    drop(list);
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 0);
}

#[tokio::test]
async fn a_large_response_holds_its_seat_until_its_last_frame_is_taken() {
    let flow = FlowControl::new(limits(1, 0));
    let permit = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let body: Body = Full::new(Bytes::from(data.clone())).boxed_unsync();
    let resp = permit.hold_through(Response::new(body));
    assert_eq!(
        hyper::body::Body::size_hint(resp.body()).exact(),
        Some(100_000),
        "the length is known before the first frame, for Content-Length"
    );
    let (_, mut body) = resp.into_parts();
    let mut got = Vec::new();
    while got.len() < data.len() {
        assert_eq!(
            flow.in_flight(RequestKind::ReadOnly),
            1,
            "held while written"
        );
        let chunk = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(chunk.len() <= FRAME_BYTES, "a frame of {}", chunk.len());
        got.extend_from_slice(&chunk);
    }
    assert_eq!(
        flow.in_flight(RequestKind::ReadOnly),
        0,
        "given back with the last frame"
    );
    assert!(body.frame().await.is_none());
    assert_eq!(got, data);
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 0);
}

#[tokio::test(start_paused = true)]
async fn a_seat_whose_response_nobody_reads_is_given_back_after_the_longest_hold() {
    let flow = FlowControl::new(limits(1, 0));
    let permit = flow
        .admit(&user("alice"), RequestKind::ReadOnly)
        .await
        .unwrap();
    let body: Body = Full::new(Bytes::from(vec![b'x'; 200_000])).boxed_unsync();
    let resp = permit.hold_through(Response::new(body));
    tokio::time::sleep(MAX_SEAT_HOLD - Duration::from_secs(1)).await;
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(flow.in_flight(RequestKind::ReadOnly), 0);
    // The response itself is still whole.
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(bytes.len(), 200_000);
}

#[tokio::test]
async fn metrics_show_seats_in_use_queued_requests_and_refusals() {
    let flow = FlowControl::new(limits(1, 0));
    let _held = flow
        .admit(&user("alice"), RequestKind::Mutating)
        .await
        .unwrap();
    let _ = flow.admit(&user("bob"), RequestKind::Mutating).await;
    let text = crate::metrics::text(|r| flow.scrape(r));
    for line in [
        "apiserver_current_inflight_requests{request_kind=\"mutating\"} 1",
        "apiserver_current_inflight_requests{request_kind=\"readOnly\"} 0",
        "apiserver_current_inqueue_requests{request_kind=\"mutating\"} 0",
        "apiserver_flowcontrol_current_executing_seats{priority_level=\"mutating\"} 1",
        "apiserver_flowcontrol_current_inqueue_requests{priority_level=\"mutating\"} 0",
        "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"mutating\"} 1",
        "apiserver_flowcontrol_dispatched_requests_total{priority_level=\"mutating\"} 1",
        "apiserver_flowcontrol_request_wait_duration_seconds_count{priority_level=\"mutating\"} 1",
        "apiserver_flowcontrol_rejected_requests_total{priority_level=\"mutating\",reason=\"concurrency-limit\"} 1",
        "apiserver_flowcontrol_rejected_requests_total{priority_level=\"readOnly\",reason=\"queue-full\"} 0",
        "apiserver_flowcontrol_rejected_requests_total{priority_level=\"watch\",reason=\"concurrency-limit\"} 0",
        "storage_transfer_watches 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}

#[test]
fn the_defaults_are_kube_apiservers() {
    let d = FlowControlLimits::default();
    assert_eq!((d.max_read_only, d.max_mutating), (400, 200));
    assert_eq!(d.queue_timeout, Duration::from_secs(15));
}
