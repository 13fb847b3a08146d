use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;

/// A reconciler whose first look at a key never returns (a call nobody
/// answers), and whose later looks finish.
#[derive(Default)]
struct HangsOnce {
    looks: AtomicUsize,
}

#[async_trait::async_trait]
impl Reconciler for HangsOnce {
    async fn reconcile(&self, _key: &str) -> Result<Next, Error> {
        if self.looks.fetch_add(1, Ordering::SeqCst) == 0 {
            std::future::pending::<()>().await;
        }
        Ok(Next::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_that_never_returns_is_abandoned_and_its_key_looked_at_again() {
    let queue = WorkQueue::new();
    let controller = Arc::new(HangsOnce::default());
    let leadership = Leadership::held_for(Duration::from_secs(3600));
    queue.add("ns/claim");

    let worker = {
        let (queue, controller, leadership) =
            (queue.clone(), controller.clone(), leadership.clone());
        tokio::spawn(async move { work(&queue, controller.as_ref(), &leadership).await })
    };
    tokio::time::sleep(RECONCILE_TIMEOUT - Duration::from_secs(1)).await;
    assert_eq!(
        controller.looks.load(Ordering::SeqCst),
        1,
        "the first look is still running before the timeout"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        controller.looks.load(Ordering::SeqCst),
        2,
        "the key was looked at again after the timeout, with the failure's backoff"
    );
    assert!(leadership.is_leader(), "a timeout is not a lost term");
    queue.shut_down();
    worker.await.unwrap();
}

#[test]
fn a_reconcile_error_prints_its_cause_once() {
    use std::error::Error as _;
    let err = Error::from(ClusterError::Unavailable("gone".to_owned()));
    assert_eq!(err.to_string(), "kube-apiserver: gone");
    assert!(err.source().is_none(), "the cause is in the message only");
}
