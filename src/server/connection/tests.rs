#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use super::*;
use futures::FutureExt;

#[tokio::test]
async fn past_the_cap_with_none_idle_a_connection_waits_until_another_closes() {
    let open = OpenConnections::default();
    let mut cap = ConnectionCap::new(2);
    let first = cap.acquire(&open).await.unwrap();
    let _second = cap.acquire(&open).await.unwrap();
    assert!(!cap.warned);
    {
        let third = cap.acquire(&open);
        tokio::pin!(third);
        assert!(
            (&mut third).now_or_never().is_none(),
            "waits while two are open"
        );
    }
    assert!(cap.warned, "says so once");
    drop(first);
    assert!(cap.acquire(&open).now_or_never().flatten().is_some());
}

#[tokio::test]
async fn the_warning_is_given_again_only_after_the_cap_was_left() {
    let open = OpenConnections::default();
    let mut cap = ConnectionCap::new(1);
    let only = cap.acquire(&open).await.unwrap();
    assert!(cap.acquire(&open).now_or_never().is_none());
    assert!(cap.warned);
    drop(only);
    let again = cap.acquire(&open).await.unwrap();
    assert!(
        !cap.warned,
        "a permit was free at once: the episode is over"
    );
    drop(again);
}

#[test]
fn a_cap_of_zero_still_serves_one_connection_at_a_time() {
    // Options refuse 0; a cap built from it anyway must not wait forever.
    let open = OpenConnections::default();
    let mut cap = ConnectionCap::new(0);
    assert!(cap.acquire(&open).now_or_never().flatten().is_some());
}

fn limits(http2_max_streams_per_connection: u32) -> ConnectionLimits {
    ConnectionLimits {
        tls_handshake_timeout: Duration::from_secs(10),
        read_header_timeout: Duration::from_secs(10),
        http2_read_idle_timeout: Duration::from_secs(30),
        http2_ping_timeout: Duration::from_secs(15),
        http2_max_streams_per_connection,
        idle_connection_timeout: Duration::from_secs(90),
        max_connections: 8,
    }
}

/// The SETTINGS a connection served by `limits`' builder announces to an
/// HTTP/2 client, as (identifier, value) pairs.
async fn announced_settings(limits: ConnectionLimits) -> Vec<(u16, u32)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (client, server) = tokio::io::duplex(64 * 1024);
    let builder = limits.http_builder();
    let served = tokio::spawn(async move {
        let service = service_fn(|_req| async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(String::new()))
        });
        let _ = builder
            .serve_connection(TokioIo::new(server), service)
            .await;
    });
    let mut client = client;
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    // An empty SETTINGS frame of the client's own.
    client
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    let mut head = [0u8; 9];
    client.read_exact(&mut head).await.unwrap();
    assert_eq!(head[3], 4, "the server's first frame is its SETTINGS");
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    client.read_exact(&mut payload).await.unwrap();
    served.abort();
    payload
        .chunks(6)
        .map(|s| {
            (
                u16::from_be_bytes([s[0], s[1]]),
                u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
            )
        })
        .collect()
}

/// SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §6.5.2).
const MAX_CONCURRENT_STREAMS: u16 = 3;

#[tokio::test]
async fn an_http2_client_is_told_the_streams_one_connection_may_carry() {
    let settings = announced_settings(limits(100)).await;
    assert!(
        settings.contains(&(MAX_CONCURRENT_STREAMS, 100)),
        "{settings:?}"
    );
    let settings = announced_settings(limits(7)).await;
    assert!(
        settings.contains(&(MAX_CONCURRENT_STREAMS, 7)),
        "{settings:?}"
    );
}

#[tokio::test]
async fn a_stream_limit_of_zero_leaves_hypers_default() {
    let settings = announced_settings(limits(0)).await;
    assert!(
        settings.contains(&(MAX_CONCURRENT_STREAMS, 200)),
        "{settings:?}"
    );
}

fn facts(open_requests: usize, requested: bool, quiet_for: u64) -> IdleFacts {
    IdleFacts {
        open_requests,
        requested,
        quiet_for: Duration::from_secs(quiet_for),
    }
}

#[test]
fn a_connection_with_a_request_open_is_never_idle_however_long_it_was_quiet() {
    assert_eq!(
        idle_verdict(facts(1, true, 10_000), &limits(0)),
        IdleVerdict::Busy
    );
}

#[test]
fn a_connection_that_never_sent_a_request_gets_the_header_timeout() {
    assert_eq!(
        idle_verdict(facts(0, false, 4), &limits(0)),
        IdleVerdict::WaitFor(Duration::from_secs(6))
    );
    assert_eq!(
        idle_verdict(facts(0, false, 10), &limits(0)),
        IdleVerdict::Close(Close::NoRequestInTime)
    );
}

#[test]
fn a_connection_quiet_since_its_last_response_gets_the_idle_timeout() {
    assert_eq!(
        idle_verdict(facts(0, true, 30), &limits(0)),
        IdleVerdict::WaitFor(Duration::from_secs(60))
    );
    assert_eq!(
        idle_verdict(facts(0, true, 90), &limits(0)),
        IdleVerdict::Close(Close::Idle)
    );
}

#[test]
fn the_connection_closed_to_make_room_is_the_one_quiet_longest_with_nothing_open() {
    // (id, open requests, quiet since, closing)
    let open = [
        (1, 0, 50, false),
        (2, 3, 10, false),
        (3, 0, 20, false),
        (4, 0, 5, true),
    ];
    assert_eq!(
        longest_idle(open),
        Some(3),
        "2 is busy, 4 is already closing"
    );
    assert_eq!(longest_idle([(2, 1, 0, false)]), None);
}

#[tokio::test]
async fn past_the_cap_the_longest_idle_connection_is_told_to_close() {
    let open = Arc::new(OpenConnections::default());
    let older = open.register();
    let newer = open.register();
    let busy = open.register();
    let _request = busy.request_started();
    assert!(open.close_longest_idle());
    assert!(older.activity.closing.load(Ordering::Relaxed));
    assert!(!newer.activity.closing.load(Ordering::Relaxed));
    assert!(
        older.activity.evict.notified().now_or_never().is_some(),
        "the chosen one is woken"
    );
    assert!(open.close_longest_idle(), "then the next");
    assert!(newer.activity.closing.load(Ordering::Relaxed));
    assert!(!open.close_longest_idle(), "the busy one is never chosen");
}

#[tokio::test]
async fn the_drain_ends_when_the_last_connection_is_gone() {
    let open = Arc::new(OpenConnections::default());
    let first = open.register();
    let second = open.register();
    assert_eq!(open.len(), 2);
    let drained = open.drained();
    tokio::pin!(drained);
    assert!((&mut drained).now_or_never().is_none());
    drop(first);
    assert!((&mut drained).now_or_never().is_none());
    drop(second);
    assert!(drained.now_or_never().is_some());
}

#[tokio::test]
async fn a_request_that_ends_restarts_the_idle_clock_and_wakes_the_timer() {
    let open = Arc::new(OpenConnections::default());
    let conn = open.register();
    let request = conn.request_started();
    assert!(conn.facts().requested);
    assert_eq!(conn.facts().open_requests, 1);
    drop(request);
    assert_eq!(conn.facts().open_requests, 0);
    assert!(conn.activity.quiet.notified().now_or_never().is_some());
}
