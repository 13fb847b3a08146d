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
