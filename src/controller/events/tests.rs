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

/// What kube-apiserver was sent: the User-Agent and the Event's reason, or
/// for a repeat the next count of its series.
type Sent = Arc<Mutex<Vec<(String, String)>>>;

/// A kube-apiserver that answers each request only once `gate` lets it,
/// and records it then; `arrived` counts the requests it has been sent.
#[derive(Clone)]
struct SlowApiserver {
    sent: Sent,
    gate: Arc<Semaphore>,
    arrived: Arc<std::sync::atomic::AtomicUsize>,
    /// Every Event a patch names is gone (404), recorded as "gone".
    gone: bool,
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
        let gone = self.gone && req.method() == http::Method::PATCH;
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
            // A create names its reason; a repeat, the next count of its
            // series ("+2").
            let reason = match (event["reason"].as_str(), event["series"]["count"].as_i64()) {
                _ if gone => "gone".to_owned(),
                (Some(reason), _) => reason.to_owned(),
                (None, Some(count)) => format!("+{count}"),
                (None, None) => String::new(),
            };
            sent.lock().unwrap().push((agent, reason));
            if gone {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "events \"e\" not found"});
                return Ok(Response::builder()
                    .status(404)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(status.to_string())))
                    .unwrap());
            }
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
    events_against(gate, false)
}

fn events_against(
    gate: &Arc<Semaphore>,
    gone: bool,
) -> (Events, Sent, Arc<std::sync::atomic::AtomicUsize>) {
    let sent = Sent::default();
    let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fake = SlowApiserver {
        sent: sent.clone(),
        gate: gate.clone(),
        arrived: arrived.clone(),
        gone,
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

#[tokio::test]
async fn a_repeated_event_is_written_as_the_next_count_of_its_series() {
    let gate = Arc::new(Semaphore::new(100));
    let (events, sent) = events(&gate);
    for reason in ["Waiting", "Waiting", "Other", "Waiting"] {
        events
            .publish(&claim(), Severity::Warning, reason, "Reconcile", "note")
            .await;
    }
    // The same reason about another object is an Event of its own.
    let other = claim_reference("src", "logs", Some("c2"));
    events
        .publish(&other, Severity::Warning, "Waiting", "Reconcile", "note")
        .await;
    let sent = written(&sent, 5).await;
    let reasons: Vec<&str> = sent.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(reasons, ["Waiting", "+2", "Other", "+3", "Waiting"]);
}

#[tokio::test]
async fn a_repeat_of_an_event_kube_apiserver_no_longer_has_is_written_as_a_new_one() {
    let gate = Arc::new(Semaphore::new(100));
    let (events, sent, _) = events_against(&gate, true);
    for _ in 0..3 {
        events
            .publish(&claim(), Severity::Warning, "Waiting", "Reconcile", "note")
            .await;
    }
    let sent = written(&sent, 5).await;
    let reasons: Vec<&str> = sent.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(reasons, ["Waiting", "gone", "Waiting", "gone", "Waiting"]);
}

/// A `Matched` Event, as the writer is handed one.
fn matched() -> Event {
    Event {
        type_: EventType::Normal,
        reason: "Matched".to_owned(),
        note: None,
        action: "Reconcile".to_owned(),
        secondary: None,
    }
}

fn key(name: &str) -> SeriesKey {
    SeriesKey::of(&matched(), &claim_reference("src", name, None))
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

#[test]
fn a_series_ends_when_its_event_was_last_counted_longer_ago_than_its_ttl() {
    let mut series = Series::default();
    assert_eq!(series.repeat(&key("a"), at(0)), None);
    series.written(key("a"), "a.1".to_owned(), at(0));
    assert_eq!(
        series.repeat(&key("a"), at(300)),
        Some(("a.1".to_owned(), 2))
    );
    series.counted(&key("a"), 2, at(300));
    // Six minutes after the last count, not the first.
    assert_eq!(
        series.repeat(&key("a"), at(659)),
        Some(("a.1".to_owned(), 3))
    );
    assert_eq!(series.repeat(&key("a"), at(660)), None);
}

#[test]
fn the_series_are_swept_once_a_minute_not_on_every_event() {
    let mut series = Series::default();
    series.written(key("old"), "old.1".to_owned(), at(0));
    series.sweep(at(350));
    assert_eq!(series.seen.len(), 1, "within its TTL at the sweep");
    // Past its TTL at 360, but the last sweep was less than a minute ago.
    series.sweep(at(400));
    assert_eq!(
        series.seen.len(),
        1,
        "not swept within a minute of the last sweep"
    );
    assert_eq!(
        series.repeat(&key("old"), at(400)),
        None,
        "yet no longer a series"
    );
    series.sweep(at(410));
    assert!(
        series.seen.is_empty(),
        "swept a minute after the last sweep"
    );
}

#[test]
fn the_series_remembered_are_bounded_and_events_past_the_bound_are_still_written() {
    let mut series = Series::default();
    for i in 0..MAX_SERIES + 10 {
        let name = format!("c{i}");
        assert_eq!(series.repeat(&key(&name), at(1)), None);
        series.written(key(&name), name.clone(), at(1));
    }
    assert_eq!(series.seen.len(), MAX_SERIES);
    // One past the bound is not remembered: its repeat is written anew.
    let past = format!("c{}", MAX_SERIES + 5);
    assert_eq!(series.repeat(&key(&past), at(2)), None);
    // One within it still counts.
    assert_eq!(series.repeat(&key("c0"), at(2)), Some(("c0".to_owned(), 2)));
}

#[tokio::test]
async fn an_events_name_stays_within_253_characters_for_an_object_named_at_the_limit() {
    let writer = Writer {
        client: kube::Client::new(
            SlowApiserver {
                sent: Sent::default(),
                gate: Arc::new(Semaphore::new(0)),
                arrived: Arc::default(),
                gone: false,
            },
            "default",
        ),
        instance: "replica-a".to_owned(),
        series: Mutex::default(),
    };
    let event = matched();
    // Cut right after the `-`, which goes too.
    let suffix = format!(".{:x}", at(0).as_nanosecond());
    let keep = 253 - suffix.len() - 1;
    let long = format!("{}-{}", "a".repeat(keep), "b".repeat(253 - keep - 1));
    assert_eq!(long.len(), 253);
    let named = writer.event(&event, &claim_reference("src", &long, None), at(0));
    let name = named.metadata.name.unwrap();
    assert_eq!(name, format!("{}{suffix}", "a".repeat(keep)));
    assert!(name.len() <= 253, "{}", name.len());
    let short = writer.event(&event, &claim(), at(0));
    assert!(short.metadata.name.unwrap().starts_with("data."));
    assert_eq!(cut_name("ab-cd", 3), "ab");
    assert_eq!(cut_name("añb", 2), "a", "never inside a character");
}
