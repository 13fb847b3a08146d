//! What both kinds share: the [`Object`] contract the generic registry is written
//! against, the [`Requester`] identity the server stamps into `spec.requester`, and
//! helpers for `status.conditions`.
//!
//! Pure data and pure functions only. Times are passed in by the caller, so nothing
//! here reads a clock.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff;
use serde::{Deserialize, Serialize};

use crate::errors::FieldCause;
use crate::ResourceInfo;

/// The group whose members kube-apiserver always allows: this server
/// allows them without a review, never limits them in flow control, and
/// lets them write what only the controllers write, as a break-glass.
pub const SYSTEM_MASTERS: &str = "system:masters";

/// Now, to the second: what a `metav1.Time` holds once it is written (kube
/// stores and serializes it to the second), so that a time this server
/// compares in memory is the time it stores.
pub fn now() -> Time {
    let now = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// A user as the server's authenticator identified them: name, uid, groups and
/// extra attributes, as a CertificateSigningRequest records its requester.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Requester {
    /// The name of the user who created this object. Set by the server; any value a
    /// client sends is replaced.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The UID of the user who created this object, when the authenticator provides
    /// one. Set by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The groups the user belonged to when the object was created. Set by the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub groups: Vec<String>,
    /// Extra attributes of the user, as the authenticator reported them. Set by the
    /// server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The [`Object`] methods every kind implements alike, from its fields
/// `api_version`, `kind`, `metadata`, `spec` and `status` and its
/// [`ResourceInfo`](crate::ResourceInfo) `$info`. Used inside the
/// kind's `impl Object`, which adds what differs; exported, so that a kind
/// the server defines for its tests writes its own `impl Object` as ours do.
#[macro_export]
macro_rules! object_fields {
    ($info:expr) => {
        fn resource() -> &'static $crate::ResourceInfo {
            &$info
        }

        fn metadata(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &self.metadata
        }

        fn metadata_mut(
            &mut self,
        ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &mut self.metadata
        }

        fn set_type_meta(&mut self) {
            $crate::GROUP_VERSION.clone_into(&mut self.api_version);
            $info.kind.clone_into(&mut self.kind);
        }

        fn type_meta(&self) -> (&str, &str) {
            (&self.api_version, &self.kind)
        }

        fn same_spec(&self, other: &Self) -> bool {
            self.spec == other.spec
        }

        fn set_spec_from(&mut self, other: &Self) {
            self.spec = other.spec.clone();
        }

        fn set_status_from(&mut self, other: &Self) {
            self.status = other.status.clone();
        }
    };
}
pub use object_fields;

/// The contract between a kind of this API group and the one generic store and
/// registry that serve every kind: its schema, its metadata and status, its
/// defaulting and validation. A new resource implements this, and the server
/// adds a strategy and a line in its table of kinds.
pub trait Object:
    Serialize
    + serde::de::DeserializeOwned
    + schemars::JsonSchema
    + Clone
    + std::fmt::Debug
    + PartialEq
    + Send
    + Sync
    + 'static
{
    /// The static resource facts (crate::NAMESPACE_TRANSFERS / EPHEMERAL_CLAIMS).
    fn resource() -> &'static ResourceInfo;
    fn metadata(&self) -> &ObjectMeta;
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
    /// Sets apiVersion and kind to this group/version/kind.
    fn set_type_meta(&mut self);
    /// (apiVersion, kind) as sent by the client, possibly empty.
    fn type_meta(&self) -> (&str, &str);
    fn same_spec(&self, other: &Self) -> bool;
    /// Replaces self.spec with other.spec (used on /status writes).
    fn set_spec_from(&mut self, other: &Self);
    /// Replaces self.status with other.status (used on main-resource writes).
    fn set_status_from(&mut self, other: &Self);
    /// Replaces whatever status a client sent on create with the status a new
    /// object starts with (kube's PrepareForCreate). Called after defaulting.
    fn reset_status(&mut self);
    /// Cuts the status's free texts (messages and reasons, which may quote
    /// another component's answer) to [`MAX_STATUS_TEXT_BYTES`] each, so
    /// that a status always fits in the room the store keeps for the
    /// controllers' writes. Called on every update (a create starts from
    /// the status [`Object::reset_status`] gives it).
    fn bound_status(&mut self);
    /// status.phase as a string, for the status.phase field selector; None when unset.
    fn phase(&self) -> Option<&str>;
    fn requester(&self) -> Option<&Requester>;
    fn set_requester(&mut self, requester: Requester);
    /// Defaulting at create (and update) time, per DESIGN.
    fn apply_defaults(&mut self);
    /// Validation of a new object (metadata + spec + status enums). Empty = valid.
    fn validate_create(&self) -> Vec<FieldCause>;
    /// Validation of an update: everything validate_create checks, plus spec immutability
    /// (a changed spec is an error naming the changed field path, e.g. "spec.source.name", with
    /// message "field is immutable"), and spec.requester immutability.
    fn validate_update(&self, old: &Self) -> Vec<FieldCause>;
}

/// A schemars transform for the string enums of this API (`mode`, `phase`, …).
///
/// schemars renders an enum whose variants carry doc comments as a `oneOf` of
/// `const`s, which OpenAPI v2 cannot express and `kubectl explain` does not show.
/// This turns it into what kube-openapi emits for a Go enum: `type: string`, an
/// `enum` list, and the variants' docs appended to the description as
/// "Possible enum values". Use it as `#[schemars(transform = string_enum_schema)]`.
pub fn string_enum_schema(schema: &mut schemars::Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let Some(serde_json::Value::Array(variants)) = object.get("oneOf") else {
        return;
    };
    let mut values = Vec::with_capacity(variants.len());
    let mut lines = Vec::with_capacity(variants.len());
    for variant in variants {
        let Some(serde_json::Value::String(value)) = variant.get("const") else {
            return;
        };
        let doc = variant
            .get("description")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .replace('\n', " ");
        lines.push(format!(" - `{value:?}` {doc}").trim_end().to_owned());
        values.push(serde_json::Value::String(value.clone()));
    }
    let mut description = object
        .get("description")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !description.is_empty() {
        description.push_str("\n\n");
    }
    description.push_str("Possible enum values:\n");
    description.push_str(&lines.join("\n"));
    object.remove("oneOf");
    object.insert("type".to_owned(), "string".into());
    object.insert("enum".to_owned(), serde_json::Value::Array(values));
    object.insert("description".to_owned(), description.into());
}

/// The most bytes a free text of a status (its `message`, a condition's
/// `message` or `reason`) keeps; past it the text is cut and ends in `…`.
/// kube's own bound on a condition's reason and an Event's note.
pub const MAX_STATUS_TEXT_BYTES: usize = 1024;

/// Cuts `text` to at most [`MAX_STATUS_TEXT_BYTES`] bytes, on a character
/// boundary, ending it in `…` when it was cut.
pub fn bound_text(text: &mut String) {
    const ELLIPSIS: &str = "…";
    if text.len() <= MAX_STATUS_TEXT_BYTES {
        return;
    }
    let mut end = MAX_STATUS_TEXT_BYTES - ELLIPSIS.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(ELLIPSIS);
}

/// [`bound_text`] on every condition's message and reason.
pub fn bound_conditions(conditions: &mut [Condition]) {
    for c in conditions {
        bound_text(&mut c.message);
        bound_text(&mut c.reason);
    }
}

/// `metav1.ConditionTrue`.
pub const CONDITION_TRUE: &str = "True";
/// `metav1.ConditionFalse`.
pub const CONDITION_FALSE: &str = "False";
/// `metav1.ConditionUnknown`.
pub const CONDITION_UNKNOWN: &str = "Unknown";

/// Puts `finalizer` on `meta` once (`present`), or takes it off, keeping
/// the others in order; an empty list becomes none, as kube stores it.
pub fn set_finalizer(meta: &mut ObjectMeta, finalizer: &str, present: bool) {
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    finalizers.retain(|f| f != finalizer);
    if present {
        finalizers.push(finalizer.to_owned());
    }
    if finalizers.is_empty() {
        meta.finalizers = None;
    }
}

/// The ownerReference that makes `owner`, an object of our `kind`, the
/// controller of another object (garbage collection deletes that object
/// with it).
pub fn controller_ref(kind: &ResourceInfo, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: crate::GROUP_VERSION.to_owned(),
        kind: kind.kind.to_owned(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == CONDITION_TRUE)
}

/// Adds or updates a condition, as apimachinery's `meta.SetStatusCondition` does:
/// `lastTransitionTime` moves only when the status changes, so that it records when
/// the condition last flipped rather than when it was last written. Returns whether
/// anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = new.last_transition_time;
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation != new.observed_generation {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of type `type_`. Returns whether it was present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests;
