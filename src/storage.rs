//! Persistence of our objects in etcd: the [`Storage`] trait, its etcd backend,
//! and the watch cache that serves lists and watches without a round trip per
//! client.
//!
//! Owns the key layout (`<prefix>/storage.transfer.k8s.io/<resource>/<ns>/<name>`,
//! built by [`key_for`], and the index keys beside it, built by [`index_key`]),
//! transactions on `mod_revision`, consistent lists at one revision, and watches
//! from a revision (DESIGN §3 "etcd layout"). Values are opaque bytes here. It
//! speaks its own error type, [`StorageError`]; nothing above `registry` ever
//! sees it. It knows nothing of HTTP, users or strategies.

pub mod barrier;
pub mod cache;
pub mod etcd;
#[cfg(test)]
pub(crate) mod memory;

use bytes::Bytes;

/// An etcd revision; the `resourceVersion` of everything stored.
pub type Revision = i64;

/// Why a storage operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("key {key} not found")]
    NotFound { key: String },
    #[error("key {key} already exists")]
    AlreadyExists { key: String },
    #[error("key {key} was modified: expected revision {expected}, found {actual}")]
    Conflict {
        key: String,
        expected: Revision,
        actual: Revision,
    },
    #[error("revision {requested} has been compacted")]
    Compacted { requested: Revision },
    #[error("revision {requested} is newer than the store's current revision {current}")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    /// The write's [`Fence`] key is gone or was made again: the writer's
    /// right to write has ended, and nothing was written.
    #[error("fenced: {key} is not the key this write is fenced on (created at revision {expected}, found {actual})")]
    Fenced {
        key: String,
        expected: Revision,
        actual: Revision,
    },
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("storage error: {0}")]
    Internal(String),
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// One stored value with its revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    pub create_revision: Revision,
    pub mod_revision: Revision,
    /// What readers derive from this value, shared by every clone of it.
    pub memo: Memo,
}

/// What an upper layer derives from one stored revision of a value (its
/// decoded object and that object's encoding), kept beside the value so that
/// every reader of the watch cache's copy shares one: N lists or N watchers
/// decode and encode each revision once, as kube-apiserver's watch cache
/// keeps decoded objects and serializes each event once for all watchers.
///
/// Opaque here: storage never looks inside. It is not part of the value, so
/// equality ignores it; clones of a [`KeyValue`] share it.
#[derive(Clone, Default)]
pub struct Memo(std::sync::Arc<std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>>);

impl Memo {
    /// The memo, if it holds a `T`; otherwise `init()`, which is kept for
    /// the next reader unless another reader got there first.
    pub fn get_or_try_init<T, E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<T, E>
    where
        T: Clone + Send + Sync + 'static,
    {
        if let Some(value) = self.0.get().and_then(|v| v.downcast_ref::<T>()) {
            return Ok(value.clone());
        }
        let value = init()?;
        let _ = self.0.set(Box::new(value.clone()));
        Ok(value)
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Memo {}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Memo(set)"
        } else {
            "Memo(empty)"
        })
    }
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Created (`prev` is `None`) or modified.
    Put {
        kv: KeyValue,
        prev: Option<KeyValue>,
    },
    /// Deleted at `revision`; `prev` is the last value.
    Delete { prev: KeyValue, revision: Revision },
}

impl Event {
    pub fn revision(&self) -> Revision {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }

    pub fn key(&self) -> &str {
        match self {
            Event::Put { kv, .. } => &kv.key,
            Event::Delete { prev, .. } => &prev.key,
        }
    }
}

/// What a watch stream delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMessage {
    /// Events in revision order.
    Events(Vec<Event>),
    /// Every event up to this revision has been delivered.
    Progress(Revision),
}

/// A range read: `[start_after, end of prefix)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read at this revision; `None` reads the latest.
    pub revision: Option<Revision>,
    /// Continue after this key (exclusive).
    pub start_after: Option<String>,
    /// At most this many items; `None` for all.
    pub limit: Option<i64>,
}

/// One page of a list, read at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub items: Vec<KeyValue>,
    /// The revision the read was made at.
    pub revision: Revision,
    /// Whether keys remain after the last item.
    pub more: bool,
    /// How many keys remain after this page (when `more`).
    pub remaining: i64,
}

/// A key written in the same transaction as a create, on the condition that
/// it has not moved since it was read: how a create claims a unique index
/// entry atomically, across any number of server replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub key: String,
    /// The `mod_revision` the key was read at; `None` when it must not exist.
    pub expected: Option<Revision>,
    /// What to write to the key when the create goes through.
    pub value: Bytes,
}

/// A key deleted in the same transaction as a write, provided it is still at
/// the revision it was read at: how an object gives up a unique index entry
/// it holds in the same write that finishes or removes it. A key that moved
/// since has been taken over by someone else; it is left alone, and the
/// write goes through all the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub key: String,
    /// The `mod_revision` the key was read at.
    pub revision: Revision,
}

/// A key that must exist, as created at `create_revision`, for a write to go
/// through: checked in the write's own transaction. The controllers fence
/// every write on their election key (DESIGN §3 "Scale-out"): once their
/// lease has expired or was revoked, etcd has deleted that key, and a write
/// sent before (or delayed past) that moment can no longer land, however
/// long the writer was paused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub key: String,
    pub create_revision: Revision,
}

/// A live watch.
#[async_trait::async_trait]
pub trait WatchStream: Send + std::fmt::Debug {
    /// The next message; `Ok(None)` when the stream ended.
    async fn next(&mut self) -> Result<Option<WatchMessage>>;
    /// Asks for a [`WatchMessage::Progress`] as soon as possible.
    async fn request_progress(&mut self) -> Result<()>;
}

/// The storage interface the registry is written against.
#[async_trait::async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Creates `key` if it does not exist (`create_revision == 0`).
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.create_guarded(key, value, &[], None).await
    }
    /// Creates `key` if it does not exist and every guard key is still at its
    /// expected revision, and writes the guard keys, all in one transaction.
    /// An existing `key` is [`StorageError::AlreadyExists`]; otherwise a guard
    /// key that moved is a [`StorageError::Conflict`] naming it (a missing key
    /// has revision 0). A `fence` that does not hold is [`StorageError::Fenced`],
    /// whatever else failed.
    async fn create_guarded(
        &self,
        key: &str,
        value: Bytes,
        guards: &[Guard],
        fence: Option<&Fence>,
    ) -> Result<KeyValue>;
    /// A linearizable read of `key`.
    async fn get(&self, key: &str) -> Result<KeyValue>;
    /// Replaces `key` if its `mod_revision` is still `expected`.
    async fn update(&self, key: &str, expected: Revision, value: Bytes) -> Result<KeyValue> {
        self.update_releasing(key, expected, value, &[], None).await
    }
    /// Like [`Storage::update`], and in the same transaction deletes each
    /// [`Release`] key that is still at its revision; only while `fence`
    /// holds, if given.
    async fn update_releasing(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
        releases: &[Release],
        fence: Option<&Fence>,
    ) -> Result<KeyValue>;
    /// Deletes `key` if its `mod_revision` is still `expected`; returns the
    /// deleted value and the revision of the deletion.
    async fn delete(&self, key: &str, expected: Revision) -> Result<(KeyValue, Revision)> {
        self.delete_releasing(key, expected, &[], None).await
    }
    /// Like [`Storage::delete`], and in the same transaction deletes each
    /// [`Release`] key that is still at its revision; only while `fence`
    /// holds, if given.
    async fn delete_releasing(
        &self,
        key: &str,
        expected: Revision,
        releases: &[Release],
        fence: Option<&Fence>,
    ) -> Result<(KeyValue, Revision)>;
    /// Reads keys under `prefix` at one revision.
    async fn list(&self, prefix: &str, opts: ListOptions) -> Result<ListPage>;
    /// The store's current revision: a linearizable read, sent after the
    /// call began (callers waiting together may share one).
    async fn current_revision(&self) -> Result<Revision>;
    /// Watches `prefix` for changes after revision `after`.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<Box<dyn WatchStream>>;
}

/// The etcd key of an object.
pub fn key_for(prefix: &str, group: &str, resource: &str, namespace: &str, name: &str) -> String {
    format!(
        "{}/{namespace}/{name}",
        resource_prefix(prefix, group, resource)
    )
}

/// The etcd key of one entry of a resource's unique index, e.g.
/// `<prefix>/storage.transfer.k8s.io/_index/namespacetransfers/source/prod/db`.
///
/// Index keys sit beside the resources, never under a [`resource_prefix`]: the
/// watch cache watches that prefix without a trailing slash, and a resource
/// name (a DNS label) cannot start with `_`.
pub fn index_key(prefix: &str, group: &str, resource: &str, index: &str) -> String {
    format!(
        "{}/{group}/_index/{resource}/{index}",
        prefix.trim_end_matches('/')
    )
}

/// The key prefix of a resource (without a trailing slash).
pub fn resource_prefix(prefix: &str, group: &str, resource: &str) -> String {
    format!("{}/{group}/{resource}", prefix.trim_end_matches('/'))
}

/// The first key after every key that starts with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range is open-ended.
    vec![0]
}

#[cfg(test)]
mod tests;
