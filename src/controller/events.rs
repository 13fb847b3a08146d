//! Kubernetes Events from the controllers (`events.k8s.io/v1`, through the
//! API, with the server's ServiceAccount), so that `kubectl describe` and
//! `kubectl events` tell a tenant what happened to their transfer and their
//! claims.
//!
//! Owns the reporter identity and the object references of our kinds. An
//! Event that cannot be written is logged and otherwise ignored: Events are
//! reports, never part of the protocol.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::api::meta::Object;

/// The `reportingController` of our Events.
pub const REPORTING_CONTROLLER: &str = "storage.transfer.k8s.io/controller";

/// Normal or Warning.
pub use kube::runtime::events::EventType as Severity;

/// Publishes Events; a no-op without a cluster (unit tests).
#[derive(Clone)]
pub struct Events {
    recorder: Option<Recorder>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("enabled", &self.recorder.is_some())
            .finish()
    }
}

impl Events {
    /// Events reported by this replica (`instance`).
    pub fn new(client: kube::Client, instance: &str) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Some(Recorder::new(client, reporter)),
        }
    }

    /// Events that go nowhere.
    pub fn disabled() -> Self {
        Self { recorder: None }
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
        let Some(recorder) = &self.recorder else {
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
        if let Err(err) = recorder.publish(&event, regarding).await {
            tracing::warn!(
                object = ?regarding.name,
                namespace = ?regarding.namespace,
                reason,
                error = %err,
                "cannot record an Event"
            );
        }
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
