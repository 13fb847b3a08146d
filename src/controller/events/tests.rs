use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::*;
use crate::audit::{controller_client, ControllerUser};
use crate::authn::UserInfo;

/// What kube-apiserver was sent: the User-Agent and the Event's reason.
type Sent = Arc<Mutex<Vec<(String, String)>>>;

/// A kube-apiserver that answers each request only once `gate` lets it,
/// and records it then; `arrived` counts the requests it has been sent.
#[derive(Clone)]
struct SlowApiserver {
    sent: Sent,
    gate: Arc<Semaphore>,
    arrived: Arc<std::sync::atomic::AtomicUsize>,
}

impl tonic::codegen::Service<Request<kube::client::Body>> for SlowApiserver {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let (sent, gate, arrived) = (self.sent.clone(), self.gate.clone(), self.arrived.clone());
        Box::pin(async move {
            let agent = req.headers()[http::header::USER_AGENT]
                .to_str()
                .unwrap_or_default()
                .to_owned();
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            let event: Value = body
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            gate.acquire().await.expect("the gate stays open").forget();
            let reason = event["reason"].as_str().unwrap_or_default().to_owned();
            sent.lock().unwrap().push((agent, reason));
            let created = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "e", "namespace": "src"}, "eventTime": null,
                "reportingController": REPORTING_CONTROLLER});
            Ok(Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(created.to_string())))
                .unwrap())
        })
    }
}

fn events(gate: &Arc<Semaphore>) -> (Events, Sent) {
    let (events, sent, _) = events_counted(gate);
    (events, sent)
}

fn events_counted(gate: &Arc<Semaphore>) -> (Events, Sent, Arc<std::sync::atomic::AtomicUsize>) {
    let sent = Sent::default();
    let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fake = SlowApiserver {
        sent: sent.clone(),
        gate: gate.clone(),
        arrived: arrived.clone(),
    };
    let user = ControllerUser::new(UserInfo {
        username: "system:serviceaccount:storage-transfer:apiserver".to_owned(),
        ..UserInfo::default()
    });
    let client = controller_client(kube::Client::new(fake, "default"), None, user, "replica-a");
    (Events::new(client, "replica-a"), sent, arrived)
}

fn claim() -> ObjectReference {
    claim_reference("src", "data", Some("c1"))
}

fn acting() -> ActingFor {
    ActingFor {
        transfer: "src/move-data".to_owned(),
        transfer_uid: "7d3c".to_owned(),
        ..ActingFor::default()
    }
}

async fn written(sent: &Sent, n: usize) -> Vec<(String, String)> {
    for _ in 0..500 {
        if sent.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sent.lock().unwrap().clone()
}

#[tokio::test]
async fn publishing_returns_before_kube_apiserver_answers_and_the_events_are_written_in_order() {
    let gate = Arc::new(Semaphore::new(0));
    let (events, sent) = events(&gate);
    let reasons = ["Matched", "Rebinding", "Completed"];
    acting()
        .scope(async {
            for reason in reasons {
                events
                    .publish(&claim(), Severity::Normal, reason, "Reconcile", "note")
                    .await;
            }
        })
        .await;
    // Every publish returned while kube-apiserver answered nothing.
    assert!(sent.lock().unwrap().is_empty());
    gate.add_permits(reasons.len());
    let sent = written(&sent, reasons.len()).await;
    let written: Vec<&str> = sent.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(written, reasons, "in the order they were published");
    for (agent, _) in &sent {
        assert!(
            agent.ends_with("(transfer src/move-data uid 7d3c)"),
            "each Event still names the transfer it was published for: {agent}"
        );
    }
}

#[tokio::test]
async fn a_full_queue_drops_new_events_instead_of_holding_the_controller() {
    let gate = Arc::new(Semaphore::new(0));
    let (events, sent) = events(&gate);
    // One is taken off the queue and waits on kube-apiserver, and the
    // next, about the same claim, may be taken off and held behind it;
    // QUEUE more fill it; the rest are dropped, and no publish waits for
    // room.
    for i in 0..QUEUE + 50 {
        let reason = if i == 0 { "First" } else { "Later" };
        events
            .publish(&claim(), Severity::Normal, reason, "Reconcile", "note")
            .await;
    }
    gate.add_permits(QUEUE + 50);
    let got = written(&sent, QUEUE).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let got_after = sent.lock().unwrap().len();
    assert_eq!(got[0].1, "First");
    assert!(
        (QUEUE..=QUEUE + 2).contains(&got_after),
        "at most the one in flight, the one held and a full queue are written: {got_after}"
    );
}

#[tokio::test]
async fn disabled_events_write_nothing() {
    let events = Events::disabled();
    events
        .publish(&claim(), Severity::Warning, "Failed", "Reconcile", "note")
        .await;
    assert!(format!("{events:?}").contains("enabled: false"));
}

#[tokio::test]
async fn events_about_different_objects_are_written_side_by_side_and_one_objects_in_order() {
    use std::sync::atomic::Ordering;
    let gate = Arc::new(Semaphore::new(0));
    let (events, sent, arrived) = events_counted(&gate);
    let claims: Vec<ObjectReference> = (0..IN_FLIGHT)
        .map(|i| claim_reference("src", &format!("data-{i}"), None))
        .collect();
    for c in &claims {
        events
            .publish(c, Severity::Normal, "First", "Reconcile", "note")
            .await;
    }
    // A second Event about the first claim waits for its first.
    events
        .publish(&claims[0], Severity::Normal, "Second", "Reconcile", "note")
        .await;
    for _ in 0..500 {
        if arrived.load(Ordering::SeqCst) >= IN_FLIGHT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        arrived.load(Ordering::SeqCst),
        IN_FLIGHT,
        "{IN_FLIGHT} at once, none of them a second about one object"
    );
    gate.add_permits(IN_FLIGHT + 1);
    let sent = written(&sent, IN_FLIGHT + 1).await;
    assert_eq!(sent.len(), IN_FLIGHT + 1);
    assert_eq!(
        sent.last().map(|(_, r)| r.as_str()),
        Some("Second"),
        "after the Event before it about the same object: {sent:?}"
    );
}
