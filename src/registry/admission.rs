//! What the store hands to admission on every client write, and what
//! admission hands back besides a refusal: the request's attributes (kube's
//! `admission.Attributes`), the [`AdmissionControl`] the store calls in
//! kube's two phases, and the [`Notes`] (warnings, audit annotations) a
//! request collects on its way through.
//!
//! The store owns *when* admission runs (mutating before the strategy
//! prepares the object, validating after validation, both inside the retry
//! of a write); `crate::admission` owns *what* runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::api::errors::ApiError;
use crate::api::meta::Requester;

use super::Context;

/// The operation an admission request is for, as `AdmissionRequest.operation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    /// The options kind that goes with it (`request.options`).
    pub fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// One write as admission sees it. Objects are JSON, as webhooks and CEL
/// see them; the mutating phase may replace `object`.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributes {
    pub operation: Operation,
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The plural resource name, e.g. `namespacetransfers`.
    pub resource: String,
    /// `status` for the status subresource, empty otherwise.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The new object: none for a delete.
    pub object: Option<serde_json::Value>,
    /// The stored object: none for a create.
    pub old_object: Option<serde_json::Value>,
    /// The operation's options (`CreateOptions`, …) with apiVersion and kind.
    pub options: serde_json::Value,
    pub dry_run: bool,
    pub user: Requester,
}

/// The cluster's admission plugins, in kube's two phases. Only client writes
/// are admitted: the controllers' own protocol steps are not (a webhook that
/// could refuse a finalizer's removal would wedge a transfer halfway).
#[async_trait::async_trait]
pub trait AdmissionControl: Send + Sync + std::fmt::Debug {
    /// Whether no plugin could act on any write (no configuration at all):
    /// the store then skips building the attributes.
    fn is_idle(&self) -> bool {
        false
    }
    /// Mutating admission (policies, then webhooks, with reinvocation):
    /// may replace `attrs.object`.
    async fn mutate(&self, ctx: &Context, attrs: &mut Attributes) -> Result<(), ApiError>;
    /// Validating admission (policies, then webhooks), on the final object.
    async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError>;
}

/// What a request collects besides its answer: `Warning` headers for the
/// client and annotations for its audit event. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Notes(Arc<Mutex<NotesInner>>);

#[derive(Debug, Default)]
struct NotesInner {
    warnings: Vec<String>,
    annotations: BTreeMap<String, String>,
}

/// Warnings beyond this many are dropped, as kube caps a response's
/// warnings; each is also capped in length.
const MAX_WARNINGS: usize = 100;
const MAX_WARNING_LEN: usize = 4096;

impl Notes {
    fn inner(&self) -> std::sync::MutexGuard<'_, NotesInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a warning for the client; duplicates are kept once.
    pub fn warn(&self, text: impl Into<String>) {
        let mut text: String = text.into();
        if text.len() > MAX_WARNING_LEN {
            let mut cut = MAX_WARNING_LEN;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let mut inner = self.inner();
        if inner.warnings.len() < MAX_WARNINGS && !inner.warnings.contains(&text) {
            inner.warnings.push(text);
        }
    }

    /// Adds an audit annotation; the first value for a key wins, as kube's
    /// `AddAnnotation` keeps it.
    pub fn annotate(&self, key: impl Into<String>, value: impl Into<String>) {
        self.inner()
            .annotations
            .entry(key.into())
            .or_insert_with(|| value.into());
    }

    pub fn warnings(&self) -> Vec<String> {
        self.inner().warnings.clone()
    }

    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.inner().annotations.clone()
    }
}
