use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{serves, GroupCommit};

#[test]
fn a_write_serves_only_the_checks_that_arrived_before_it_was_sent() {
    // Tickets 0..5 arrived, then a write was sent with bound 5.
    assert!(serves(5, 0));
    assert!(serves(5, 4));
    assert!(!serves(5, 5), "arrived as the write was sent");
    assert!(!serves(5, 9));
}

#[tokio::test]
async fn one_check_alone_writes_its_own_fence() {
    let commits = GroupCommit::default();
    let writes = AtomicUsize::new(0);
    let write = |bound: u64| {
        writes.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ()>(Some(format!("rv-{bound}"))) }
    };
    assert_eq!(commits.run(write).await, Ok(Some("rv-1".to_owned())));
    assert_eq!(commits.run(write).await, Ok(Some("rv-2".to_owned())));
    assert_eq!(
        writes.load(Ordering::SeqCst),
        2,
        "a check after a finished write never reuses it"
    );
}

#[tokio::test]
async fn checks_that_arrive_during_a_write_share_the_next_one_never_the_one_in_flight() {
    let commits = Arc::new(GroupCommit::default());
    let writes = Arc::new(AtomicUsize::new(0));
    let (release_first, first_released) = tokio::sync::oneshot::channel::<()>();
    let first_released = Arc::new(tokio::sync::Mutex::new(Some(first_released)));

    // The first check starts a write and holds it in flight.
    let first = {
        let (commits, writes, gate) = (commits.clone(), writes.clone(), first_released.clone());
        tokio::spawn(async move {
            commits
                .run(|bound| async move {
                    let n = writes.fetch_add(1, Ordering::SeqCst);
                    if let Some(gate) = gate.lock().await.take() {
                        let _ = gate.await;
                    }
                    Ok::<_, ()>(Some(format!("write-{n}-bound-{bound}")))
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Three more arrive while it is in flight.
    let later: Vec<_> = (0..3)
        .map(|_| {
            let (commits, writes) = (commits.clone(), writes.clone());
            tokio::spawn(async move {
                commits
                    .run(|bound| async move {
                        let n = writes.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, ()>(Some(format!("write-{n}-bound-{bound}")))
                    })
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    release_first.send(()).unwrap();

    assert_eq!(first.await.unwrap(), Ok(Some("write-0-bound-1".to_owned())));
    for check in later {
        assert_eq!(
            check.await.unwrap(),
            Ok(Some("write-1-bound-4".to_owned())),
            "served by the write sent after they arrived"
        );
    }
    assert_eq!(writes.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failed_write_is_not_shared_and_the_next_check_writes_again() {
    let commits = GroupCommit::default();
    let failed = commits
        .run(|_| async { Err::<Option<String>, _>("timeout") })
        .await;
    assert_eq!(failed, Err("timeout"));
    let next = commits
        .run(|bound| async move { Ok::<_, &str>(Some(format!("rv-{bound}"))) })
        .await;
    assert_eq!(next, Ok(Some("rv-2".to_owned())));
}

#[tokio::test]
async fn no_fence_is_an_outcome_shared_like_a_revision() {
    let commits = GroupCommit::default();
    assert_eq!(commits.run(|_| async { Ok::<_, ()>(None) }).await, Ok(None));
}
