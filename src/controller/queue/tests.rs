use super::*;

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
