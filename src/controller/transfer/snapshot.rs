//! Moving a VolumeSnapshot (DESIGN §2.1.7): the facts the move decides on,
//! read from the snapshot controller's objects, and the two objects its R3
//! makes. No I/O: `gather` reads, `decide::snapshot` decides, and
//! `plan::snapshot` lists the writes.
//!
//! The snapshot controller's rules the move is built on:
//! - it binds a pre-provisioned VolumeSnapshot
//!   (`spec.source.volumeSnapshotContentName`) only to a content with
//!   `spec.source.snapshotHandle` whose `volumeSnapshotRef` names that
//!   snapshot, writing the snapshot's uid into the content's ref;
//! - it never deletes a content whose `volumeSnapshotRef` names a snapshot
//!   that is gone (or has another uid);
//! - a snapshot deleted while its content is under `Delete` takes the content
//!   and the backend snapshot with it; under `Retain` only the snapshot goes;
//! - the csi-snapshotter calls `DeleteSnapshot` only for a content being
//!   deleted under `Delete`, and lets a deleted content go only when it is
//!   unbound and pre-provisioned, or marked being-deleted (which the
//!   snapshot controller does only while it processes its snapshot's
//!   deletion: a snapshot that vanished otherwise never marks it, so the
//!   move marks a content itself, under `Retain`, before deleting it).
//!
//! So the backend snapshot is never at risk while every content that names
//! it is under `Retain`, and the move keeps it so from R2 until only one
//! content is left.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::{json, Value};

use crate::api::namespace_transfer::{
    NamespaceTransfer, ANNOTATION_ORIGINAL_DELETION_POLICY, ANNOTATION_TRANSFER_LOCK,
    SNAPSHOT_GROUP,
};

/// The annotations of a content that name the secret its deletion needs
/// (set by the snapshot controller from the class's parameters).
pub const DELETION_SECRET_ANNOTATIONS: [&str; 2] = [
    "snapshot.storage.kubernetes.io/deletion-secret-name",
    "snapshot.storage.kubernetes.io/deletion-secret-namespace",
];

/// The annotation the snapshot controller puts on a content whose snapshot
/// is being deleted; without it the csi-snapshotter never lets a deleted
/// content go (it keeps its bound-protection finalizer).
pub const ANNOTATION_BEING_DELETED: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted";

/// The class parameters that name the snapshotter's secret; a value that
/// names the snapshot's namespace or name would name the source namespace's
/// secret for the destination's snapshot.
pub const SECRET_PARAMETERS: [&str; 2] = [
    "csi.storage.k8s.io/snapshotter-secret-name",
    "csi.storage.k8s.io/snapshotter-secret-namespace",
];

/// Everything a snapshot move decides on besides the pair itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotFacts {
    /// The source VolumeSnapshot (`spec.source.name` in the source
    /// namespace), live.
    pub source: Option<Snapshot>,
    /// The content it is bound to (or, after R1, the one recorded), live.
    pub old_content: Option<Content>,
    /// The content this move makes ([`content_name`]), live.
    pub new_content: Option<Content>,
    /// The VolumeSnapshot at the destination's namespace and name, live;
    /// `None` also while the destination is not known.
    pub destination: Option<Snapshot>,
    /// Whether the snapshot's class lets it move, and its deletion secret
    /// can go with it (`None`: allowed).
    pub refused_by_class: Option<String>,
    /// When the source snapshot carries another transfer's lock: whether
    /// that transfer exists and is active.
    pub lock_holder_active: bool,
}

/// A VolumeSnapshot, as the move sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// Our lock annotation: the uid of the transfer that holds it.
    pub lock: Option<String>,
    pub deleting: bool,
    /// `metadata.deletionTimestamp`, Unix seconds (0 if not being deleted).
    pub deleted_at: i64,
    /// `spec.volumeSnapshotClassName`.
    pub class: Option<String>,
    /// `spec.source.volumeSnapshotContentName`: a pre-provisioned snapshot.
    pub content_source: Option<String>,
    /// `spec.source.persistentVolumeClaimName`: the claim it was taken from.
    pub volume_source: Option<String>,
    /// `status.boundVolumeSnapshotContentName`.
    pub bound_content: Option<String>,
    /// `status.readyToUse`.
    pub ready: bool,
    /// `status.restoreSize`.
    pub restore_size: Option<String>,
    /// `status.volumeGroupSnapshotName`: a member of a group snapshot.
    pub group: Option<String>,
    /// `status.error.message`.
    pub error: Option<String>,
}

/// A VolumeSnapshotContent, as the move sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Content {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// `spec.deletionPolicy`: `Delete` or `Retain`.
    pub deletion_policy: String,
    /// The backend snapshot: `status.snapshotHandle`, or for a
    /// pre-provisioned content `spec.source.snapshotHandle`.
    pub handle: Option<String>,
    pub driver: String,
    /// `spec.volumeSnapshotClassName`.
    pub class: Option<String>,
    /// `spec.sourceVolumeMode`.
    pub source_volume_mode: Option<String>,
    /// `spec.volumeSnapshotRef`: namespace, name, uid (empty until bound).
    pub ref_namespace: String,
    pub ref_name: String,
    pub ref_uid: String,
    /// `status.readyToUse`.
    pub ready: bool,
    /// Our lock annotation: the transfer that holds the content.
    pub marker: Option<String>,
    /// The deletion policy to restore, recorded at R2.
    pub original_policy: Option<String>,
    /// The deletion-secret annotations.
    pub secrets: BTreeMap<String, String>,
    pub deleting: bool,
    /// [`ANNOTATION_BEING_DELETED`]: a deletion the csi-snapshotter acts on.
    pub being_deleted: bool,
    /// A member of a group snapshot (`status.volumeGroupSnapshotHandle`).
    pub in_group: bool,
}

fn text(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn annotation(o: &DynamicObject, key: &str) -> Option<String> {
    o.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}

impl From<&DynamicObject> for Snapshot {
    fn from(o: &DynamicObject) -> Self {
        let d = &o.data;
        Self {
            namespace: o.metadata.namespace.clone().unwrap_or_default(),
            name: o.metadata.name.clone().unwrap_or_default(),
            uid: o.metadata.uid.clone().unwrap_or_default(),
            resource_version: o.metadata.resource_version.clone().unwrap_or_default(),
            lock: annotation(o, ANNOTATION_TRANSFER_LOCK),
            deleting: o.metadata.deletion_timestamp.is_some(),
            deleted_at: o
                .metadata
                .deletion_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            class: text(d, "/spec/volumeSnapshotClassName"),
            content_source: text(d, "/spec/source/volumeSnapshotContentName"),
            volume_source: text(d, "/spec/source/persistentVolumeClaimName"),
            bound_content: text(d, "/status/boundVolumeSnapshotContentName"),
            ready: d.pointer("/status/readyToUse").and_then(Value::as_bool) == Some(true),
            restore_size: d.pointer("/status/restoreSize").and_then(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .or(v.as_i64().map(|n| n.to_string()))
            }),
            group: text(d, "/status/volumeGroupSnapshotName"),
            error: text(d, "/status/error/message"),
        }
    }
}

impl From<&DynamicObject> for Content {
    fn from(o: &DynamicObject) -> Self {
        let d = &o.data;
        let secrets = o
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| DELETION_SECRET_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            name: o.metadata.name.clone().unwrap_or_default(),
            uid: o.metadata.uid.clone().unwrap_or_default(),
            resource_version: o.metadata.resource_version.clone().unwrap_or_default(),
            deletion_policy: text(d, "/spec/deletionPolicy").unwrap_or_default(),
            handle: text(d, "/status/snapshotHandle")
                .or_else(|| text(d, "/spec/source/snapshotHandle")),
            driver: text(d, "/spec/driver").unwrap_or_default(),
            class: text(d, "/spec/volumeSnapshotClassName"),
            source_volume_mode: text(d, "/spec/sourceVolumeMode"),
            ref_namespace: text(d, "/spec/volumeSnapshotRef/namespace").unwrap_or_default(),
            ref_name: text(d, "/spec/volumeSnapshotRef/name").unwrap_or_default(),
            ref_uid: text(d, "/spec/volumeSnapshotRef/uid").unwrap_or_default(),
            ready: d.pointer("/status/readyToUse").and_then(Value::as_bool) == Some(true),
            marker: annotation(o, ANNOTATION_TRANSFER_LOCK),
            original_policy: annotation(o, ANNOTATION_ORIGINAL_DELETION_POLICY),
            secrets,
            deleting: o.metadata.deletion_timestamp.is_some(),
            being_deleted: annotation(o, ANNOTATION_BEING_DELETED).is_some(),
            in_group: text(d, "/status/volumeGroupSnapshotHandle").is_some(),
        }
    }
}

impl Content {
    /// Whether the content names the snapshot `namespace/name` (and, once
    /// bound, `uid`).
    pub fn names(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.ref_namespace == namespace && self.ref_name == name && self.ref_uid == uid
    }
}

/// The name of the content a move makes: derived from the transfer's uid,
/// so that a move finds its own again after a crash.
pub fn content_name(s: &NamespaceTransfer) -> String {
    format!(
        "snapcontent-transfer-{}",
        s.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// The content R3 makes for the destination snapshot `namespace/name`: the
/// same backend snapshot (`snapshotHandle`), driver, class, source volume
/// mode and deletion secret as `old`, under `Retain`, marked as ours, and
/// pre-bound to the destination snapshot.
pub fn new_content(s: &NamespaceTransfer, old: &Content, namespace: &str, name: &str) -> Value {
    let mine = s.metadata.uid.clone().unwrap_or_default();
    let mut annotations: BTreeMap<String, String> = old.secrets.clone();
    annotations.insert(ANNOTATION_TRANSFER_LOCK.to_owned(), mine);
    annotations.insert(
        ANNOTATION_ORIGINAL_DELETION_POLICY.to_owned(),
        old.original_policy
            .clone()
            .unwrap_or_else(|| old.deletion_policy.clone()),
    );
    let mut spec = json!({
        "deletionPolicy": "Retain",
        "driver": old.driver,
        "source": {"snapshotHandle": old.handle},
        "volumeSnapshotRef": {
            "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
            "kind": "VolumeSnapshot",
            "namespace": namespace,
            "name": name,
        },
    });
    if let Some(class) = &old.class {
        spec["volumeSnapshotClassName"] = json!(class);
    }
    if let Some(mode) = &old.source_volume_mode {
        spec["sourceVolumeMode"] = json!(mode);
    }
    json!({
        "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": content_name(s), "annotations": annotations},
        "spec": spec,
    })
}

/// The destination VolumeSnapshot R3 makes: pre-provisioned from the new
/// content, in the old content's class, locked by the transfer until R6.
pub fn new_snapshot(s: &NamespaceTransfer, old: &Content, namespace: &str, name: &str) -> Value {
    let mine = s.metadata.uid.clone().unwrap_or_default();
    let mut spec = json!({"source": {"volumeSnapshotContentName": content_name(s)}});
    if let Some(class) = &old.class {
        spec["volumeSnapshotClassName"] = json!(class);
    }
    json!({
        "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {ANNOTATION_TRANSFER_LOCK: mine},
        },
        "spec": spec,
    })
}

/// Whether `new` is the content R3 makes for this move, from `old`, for
/// the destination `namespace/name`: ours by name, mark and what it holds.
pub fn is_made_content(
    s: &NamespaceTransfer,
    new: &Content,
    old: &Content,
    namespace: &str,
    name: &str,
) -> bool {
    new.name == content_name(s)
        && new.marker.as_deref() == s.metadata.uid.as_deref()
        && new.handle.is_some()
        && new.handle == old.handle
        && new.driver == old.driver
        && new.ref_namespace == namespace
        && new.ref_name == name
}

/// Why the class `parameters` keep a snapshot from moving: a snapshotter
/// secret templated by the snapshot's namespace or name names a secret of
/// the source namespace, which the destination's snapshot would depend on.
pub fn templated_secret(parameters: &BTreeMap<String, String>) -> Option<String> {
    SECRET_PARAMETERS.iter().find_map(|key| {
        let value = parameters.get(*key)?;
        (value.contains("${volumesnapshot.namespace}") || value.contains("${volumesnapshot.name}"))
            .then(|| format!("its parameter {key} is {value:?}, a secret of the snapshot's own namespace, which the destination's snapshot cannot depend on"))
    })
}

#[cfg(test)]
mod tests;
