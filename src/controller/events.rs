//! Kubernetes Events from the controllers (`events.k8s.io/v1`, through the
//! API, with the server's ServiceAccount), so that `kubectl describe` and
//! `kubectl events` tell a tenant what happened to their transfer and their
//! claims.
//!
//! Owns the reporter identity, the object references of our kinds, and the
//! queue Events wait in. An Event that cannot be written is logged and
//! otherwise ignored: Events are reports, never part of the protocol.
//!
//! # Off the protocol's path
//! As client-go's event broadcaster does, [`Events::publish`] only queues
//! the Event; one task per leadership term writes them, with the transfer
//! the work was done for (`crate::audit::ActingFor`) still named in each
//! request. So a step's write is never held behind its report: a
//! transfer's steps follow each other at the speed of their own writes.
//! The queue holds [`QUEUE`] Events, as client-go's; when it is full a new
//! one is dropped and logged, so a storm of them costs bounded memory.
//!
//! The task writes up to [`IN_FLIGHT`] Events at once, each about another
//! object, so the Events about one object are written in the order they
//! were published. One at a time, at a few milliseconds each, a fleet of
//! a thousand transfers (nine Events a pair) filled the queue, and four
//! Events in ten were dropped.
//!
//! # Series
//! An Event that repeats one written less than [`SERIES_TTL`] before (the
//! same type, reason and action about the same object) is written as the
//! next count of that Event's `series` ([`Series`]), as kube-runtime's
//! recorder wrote it (client-go's counts repeats the same way, and writes
//! the count less often). kube-runtime's `Recorder` swept its memory of
//! written Events on every Event, a walk over all of them: at a thousand
//! transfers, nine thousand entries walked per Event, 4% of the server's
//! CPU. [`Series`] sweeps at most once per [`SWEEP_EVERY`] and remembers
//! at most [`MAX_SERIES`] series, so neither its time nor its memory grows
//! with the rate a tenant can make Events at. Past the bound, new series
//! are not remembered rather than old ones forgotten: their repeats are
//! written as Events of their own, which costs objects, not memory.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use tokio::sync::mpsc;

use crate::api::meta::Object;
use crate::audit::ActingFor;

/// How many Events may wait to be written (client-go's
/// `maxQueuedEvents`).
pub const QUEUE: usize = 1000;

/// How many Events the task writes at once.
pub const IN_FLIGHT: usize = 8;

/// The `reportingController` of our Events.
pub const REPORTING_CONTROLLER: &str = "storage.transfer.k8s.io/controller";

/// What an Event about an object without a name is named after.
const UNNAMED: &str = "storage-transfer";

/// How long after an Event's last count a repeat still counts in its
/// series (client-go's and kube-runtime's six minutes).
pub const SERIES_TTL: SignedDuration = SignedDuration::from_secs(6 * 60);

/// How often, at most, [`Series`] forgets the series older than
/// [`SERIES_TTL`].
pub const SWEEP_EVERY: SignedDuration = SignedDuration::from_secs(60);

/// How many series [`Series`] remembers at most (client-go's Event
/// correlator keeps 4,096). An Event past it is written, and its repeats
/// are written as Events of their own until a sweep makes room.
pub const MAX_SERIES: usize = 4096;

/// Normal or Warning.
pub use kube::runtime::events::EventType as Severity;

/// One queued Event: what it is about, and for which transfer.
struct Queued {
    regarding: ObjectReference,
    event: Event,
    acting: Option<ActingFor>,
}

/// Publishes Events; a no-op without a cluster (unit tests).
#[derive(Clone)]
pub struct Events {
    queue: Option<mpsc::Sender<Queued>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("enabled", &self.queue.is_some())
            .finish()
    }
}

impl Events {
    /// Events reported by this replica (`instance`), written by a task
    /// that ends once every clone of this is dropped and the queue is
    /// drained. Must be called inside a Tokio runtime.
    pub fn new(client: kube::Client, instance: &str) -> Self {
        let recorder = Writer {
            client,
            instance: instance.to_owned(),
            series: Mutex::new(Series::default()),
        };
        let (queue, mut queued) = mpsc::channel::<Queued>(QUEUE);
        tokio::spawn(async move {
            // The next batch's first Event, when it was taken off the
            // queue but regards an object the batch was writing about.
            let mut held = None;
            loop {
                let first = match held.take() {
                    Some(q) => q,
                    None => match queued.recv().await {
                        Some(q) => q,
                        None => break,
                    },
                };
                let mut batch = vec![first];
                while batch.len() < IN_FLIGHT {
                    let Ok(q) = queued.try_recv() else { break };
                    if batch
                        .iter()
                        .any(|b| same_object(&b.regarding, &q.regarding))
                    {
                        held = Some(q);
                        break;
                    }
                    batch.push(q);
                }
                futures::future::join_all(batch.into_iter().map(|q| {
                    let recorder = &recorder;
                    async move {
                        let write = write(recorder, &q.event, &q.regarding);
                        match q.acting {
                            Some(acting) => acting.scope(write).await,
                            None => write.await,
                        }
                    }
                }))
                .await;
            }
        });
        Self { queue: Some(queue) }
    }

    /// Events that go nowhere.
    pub fn disabled() -> Self {
        Self { queue: None }
    }

    /// Records `reason` (CamelCase) with a human `note` about `regarding`.
    /// `action` says what the controller did or tried (CamelCase, e.g. `Lock`).
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        severity: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let Some(queue) = &self.queue else {
            return;
        };
        let event = Event {
            type_: severity,
            reason: reason.to_owned(),
            // The API limits a note to 1 kB.
            note: Some(truncate(note, 1000)),
            action: action.to_owned(),
            secondary: None,
        };
        let queued = Queued {
            regarding: regarding.clone(),
            event,
            acting: ActingFor::current(),
        };
        if let Err(mpsc::error::TrySendError::Full(q)) = queue.try_send(queued) {
            tracing::warn!(
                object = ?q.regarding.name,
                namespace = ?q.regarding.namespace,
                reason,
                "dropped an Event: {QUEUE} are waiting to be written"
            );
        }
    }
}

/// Whether two references name one object (its kind, namespace and name).
fn same_object(a: &ObjectReference, b: &ObjectReference) -> bool {
    a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

/// Writes one Event; a refusal is logged.
async fn write(recorder: &Writer, event: &Event, regarding: &ObjectReference) {
    if let Err(err) = recorder.publish(event, regarding).await {
        tracing::warn!(
            object = ?regarding.name,
            namespace = ?regarding.namespace,
            reason = %event.reason,
            error = %err,
            "cannot record an Event"
        );
    }
}

/// Writes Events as this replica (`instance`), a repeat as its series.
struct Writer {
    client: kube::Client,
    instance: String,
    series: Mutex<Series>,
}

impl Writer {
    async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let now = Timestamp::now();
        let key = SeriesKey::of(ev, regarding);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let repeat = self.lock().repeat(&key, now);
        if let Some((name, count)) = repeat {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.lock().counted(&key, count, now);
                    return Ok(());
                }
                // Gone (kube-apiserver's Event TTL, or deleted): the repeat
                // is written as a new Event, as client-go writes it.
                Err(kube::Error::Api(status)) if status.code == 404 => self.lock().forget(&key),
                Err(e) => return Err(e),
            }
        }
        let event = self.event(ev, regarding, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        events.create(&PostParams::default(), &event).await?;
        self.lock().written(key, name, now);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Event written for `ev`, named after the object and the time, as
    /// client-go names them; the object's name cut to what leaves the
    /// Event's name within kube's 253 characters (a claim's name may be
    /// 253 long itself).
    fn event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let object = regarding.name.as_deref().unwrap_or(UNNAMED);
        let suffix = format!(".{:x}", now.as_nanosecond());
        let object = cut_name(object, 253 - suffix.len());
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!("{object}{suffix}")),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..K8sEvent::default()
        }
    }
}

/// What makes two Events one series: their type, reason and action, about
/// one object (client-go's `getKey` adds the reporter, which is ours for
/// every Event here).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    warning: bool,
    reason: String,
    action: String,
    regarding: [Option<String>; 4],
}

impl SeriesKey {
    fn of(ev: &Event, regarding: &ObjectReference) -> Self {
        Self {
            warning: matches!(ev.type_, EventType::Warning),
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            regarding: [
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ],
        }
    }
}

/// The Events written in the last [`SERIES_TTL`]: each one's name, the
/// count of its series and when it was last counted. Bounded by
/// [`MAX_SERIES`], swept at most once per [`SWEEP_EVERY`].
#[derive(Debug, Default)]
struct Series {
    seen: HashMap<SeriesKey, Seen>,
    swept: Option<Timestamp>,
}

#[derive(Debug)]
struct Seen {
    name: String,
    count: i32,
    last: Timestamp,
}

impl Series {
    /// The name of the Event `key` repeats and its series' next count, if
    /// it was last counted less than [`SERIES_TTL`] before `now`.
    fn repeat(&mut self, key: &SeriesKey, now: Timestamp) -> Option<(String, i32)> {
        self.sweep(now);
        let seen = self.seen.get(key).filter(|s| s.last + SERIES_TTL > now)?;
        Some((seen.name.clone(), seen.count.saturating_add(1)))
    }

    /// The Event for `key` was written as `name` at `now`.
    fn written(&mut self, key: SeriesKey, name: String, now: Timestamp) {
        if self.seen.len() < MAX_SERIES || self.seen.contains_key(&key) {
            let seen = Seen {
                name,
                count: 1,
                last: now,
            };
            self.seen.insert(key, seen);
        }
    }

    /// The Event for `key` is gone: its next repeat is a new Event.
    fn forget(&mut self, key: &SeriesKey) {
        self.seen.remove(key);
    }

    /// The series of `key` was written with `count` at `now`.
    fn counted(&mut self, key: &SeriesKey, count: i32, now: Timestamp) {
        if let Some(seen) = self.seen.get_mut(key) {
            seen.count = count;
            seen.last = now;
        }
    }

    /// Forgets the series older than [`SERIES_TTL`], once [`SWEEP_EVERY`]
    /// has passed since the last sweep.
    fn sweep(&mut self, now: Timestamp) {
        if self.swept.is_some_and(|at| at + SWEEP_EVERY > now) {
            return;
        }
        self.swept = Some(now);
        self.seen.retain(|_, s| s.last + SERIES_TTL > now);
    }
}

/// A reference to one of our objects.
pub fn reference_to<O: Object>(obj: &O) -> ObjectReference {
    let info = O::resource();
    let m = obj.metadata();
    ObjectReference {
        api_version: Some(crate::api::GROUP_VERSION.to_owned()),
        kind: Some(info.kind.to_owned()),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
        uid: m.uid.clone(),
        resource_version: None,
        field_path: None,
    }
}

/// A reference to a PersistentVolumeClaim.
pub fn claim_reference(namespace: &str, name: &str, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("PersistentVolumeClaim".to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        uid: uid.map(str::to_owned),
        resource_version: None,
        field_path: None,
    }
}

/// `name` cut to at most `max` bytes, at a character boundary, without a
/// trailing `-` or `.` (which the `.` after it would make invalid).
fn cut_name(name: &str, max: usize) -> &str {
    prefix(name, max).trim_end_matches(['-', '.'])
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}…", prefix(text, max))
}

/// The longest prefix of `text` of at most `max` bytes that ends at a
/// character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests;
