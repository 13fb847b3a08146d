#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use super::*;
use futures::FutureExt;

#[tokio::test]
async fn past_the_cap_a_connection_waits_until_another_closes() {
    let mut cap = ConnectionCap::new(2);
    let first = cap.acquire().await.unwrap();
    let _second = cap.acquire().await.unwrap();
    assert!(!cap.warned);
    {
        let third = cap.acquire();
        tokio::pin!(third);
        assert!(
            (&mut third).now_or_never().is_none(),
            "waits while two are open"
        );
    }
    assert!(cap.warned, "says so once");
    drop(first);
    assert!(cap.acquire().now_or_never().flatten().is_some());
}

#[tokio::test]
async fn the_warning_is_given_again_only_after_the_cap_was_left() {
    let mut cap = ConnectionCap::new(1);
    let only = cap.acquire().await.unwrap();
    assert!(cap.acquire().now_or_never().is_none());
    assert!(cap.warned);
    drop(only);
    let again = cap.acquire().await.unwrap();
    assert!(
        !cap.warned,
        "a permit was free at once: the episode is over"
    );
    drop(again);
}

#[test]
fn a_cap_of_zero_still_serves_one_connection_at_a_time() {
    // Options refuse 0; a cap built from it anyway must not wait forever.
    let mut cap = ConnectionCap::new(0);
    assert!(cap.acquire().now_or_never().flatten().is_some());
}

fn limits(http2_max_streams_per_connection: u32) -> ConnectionLimits {
    ConnectionLimits {
        tls_handshake_timeout: Duration::from_secs(10),
        read_header_timeout: Duration::from_secs(10),
        http2_read_idle_timeout: Duration::from_secs(30),
        http2_ping_timeout: Duration::from_secs(15),
        http2_max_streams_per_connection,
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
