use std::convert::Infallible;

use futures::channel::mpsc;
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;

use super::*;

type Chunk = Result<Frame<Bytes>, Infallible>;
type Chunks = mpsc::UnboundedSender<Chunk>;
type Streamed = StreamBody<mpsc::UnboundedReceiver<Chunk>>;

/// A body whose chunks the test sends when it likes.
fn streamed() -> (Chunks, Streamed) {
    let (tx, rx) = mpsc::unbounded();
    (tx, StreamBody::new(rx))
}

fn send(tx: &Chunks, bytes: &'static [u8]) {
    tx.unbounded_send(Ok(Frame::data(Bytes::from_static(bytes))))
        .unwrap();
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

#[tokio::test]
async fn a_whole_body_is_read_and_its_share_of_the_budget_given_back_when_dropped() {
    let intake = Intake::new(100, DEFAULT_REQUEST_TIMEOUT);
    let taken = intake
        .take(Full::new(Bytes::from_static(b"0123456789")), 50, far())
        .await
        .unwrap();
    assert_eq!(&taken.body[..], b"0123456789");
    assert_eq!(intake.available(), 90);
    drop(taken);
    assert_eq!(intake.available(), 100);
}

#[tokio::test]
async fn a_body_past_the_limit_is_refused_with_413_naming_the_limit_and_holds_nothing() {
    let intake = Intake::new(100, DEFAULT_REQUEST_TIMEOUT);
    let err = intake
        .take(Full::new(Bytes::from(vec![b'x'; 51])), 50, far())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ApiError::TooLarge(m) if m.contains("limit of 50 bytes")),
        "{err:?}"
    );
    assert_eq!(intake.available(), 100);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_arrive_by_the_deadline_is_answered_504_and_gives_back_what_it_held() {
    let intake = Intake::new(100, Duration::from_secs(60));
    let (tx, body) = streamed();
    send(&tx, b"half");
    let deadline = intake.deadline(Instant::now());
    let reading = tokio::spawn({
        let intake = intake.clone();
        async move { intake.take(body, 50, deadline).await }
    });
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(intake.available(), 96, "the sent bytes are held meanwhile");
    assert!(!reading.is_finished());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let err = reading.await.unwrap().unwrap_err();
    assert_eq!(err.code(), 504, "{err:?}");
    assert!(err.to_string().contains(TIMEOUT_MESSAGE), "{err}");
    assert_eq!(intake.available(), 100);
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn a_body_waits_for_its_share_while_other_bodies_hold_the_budget() {
    let intake = Intake::new(10, DEFAULT_REQUEST_TIMEOUT);
    let first = intake
        .take(Full::new(Bytes::from_static(b"12345678")), 50, far())
        .await
        .unwrap();
    let (tx, body) = streamed();
    send(&tx, b"abcd");
    drop(tx);
    let second = tokio::spawn({
        let intake = intake.clone();
        async move { intake.take(body, 50, far()).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!second.is_finished(), "4 bytes do not fit in the 2 left");
    drop(first);
    let second = second.await.unwrap().unwrap();
    assert_eq!(&second.body[..], b"abcd");
    assert_eq!(intake.available(), 6);
}

#[tokio::test]
async fn many_slow_bodies_hold_only_the_bytes_they_have_sent() {
    let intake = Intake::new(1000, DEFAULT_REQUEST_TIMEOUT);
    let mut senders = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..100 {
        let (tx, body) = streamed();
        send(&tx, b"{");
        senders.push(tx);
        let intake = intake.clone();
        readers.push(tokio::spawn(
            async move { intake.take(body, 50, far()).await },
        ));
    }
    while intake.available() > 900 {
        tokio::task::yield_now().await;
    }
    assert_eq!(intake.available(), 900);
    for tx in &senders {
        send(tx, b"}");
    }
    drop(senders);
    let mut bodies = Vec::new();
    for reader in readers {
        bodies.push(reader.await.unwrap().unwrap());
    }
    assert!(bodies.iter().all(|t| &t.body[..] == b"{}"));
    drop(bodies);
    assert_eq!(intake.available(), 1000);
}
