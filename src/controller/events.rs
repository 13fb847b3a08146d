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

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(instance.to_owned()),
        };
        let recorder = Recorder::new(client, reporter);
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
async fn write(recorder: &Recorder, event: &Event, regarding: &ObjectReference) {
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

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests;
