//! What the store hands to admission on every client write, and what
//! admission hands back besides a refusal: the request's attributes (kube's
//! `admission.Attributes`), the [`AdmissionControl`] the store calls in
//! kube's two phases, the [`QuotaControl`] it calls last on a create, and
//! the [`Notes`] (warnings, audit annotations) a
//! request collects on its way through.
//!
//! The store owns *when* admission runs (mutating before the strategy
//! prepares the object, validating after validation, both inside the retry
//! of a write); `crate::admission` owns *what* runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::api::errors::{ApiError, GroupResource};
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

/// kube's `ResourceQuota` admission of a create: the last check, after
/// validating admission, once per create, dry runs included. Refuses a
/// create the namespace's quotas have no room for and, unless the write is
/// a dry run, charges it to them before it is written.
#[async_trait::async_trait]
pub trait QuotaControl: Send + Sync + std::fmt::Debug {
    async fn charge_create(
        &self,
        ctx: &Context,
        resource: &GroupResource,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError>;
}

/// What a request collects besides its answer: `Warning` headers for the
/// client and annotations for its audit event. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Notes(Arc<Mutex<NotesInner>>);

#[derive(Debug, Default)]
struct NotesInner {
    warnings: Vec<String>,
    annotations: BTreeMap<String, (String, AnnotationLevel)>,
}

/// The least audit level an annotation is recorded at (kube's
/// `AddAnnotationWithLevel`): a webhook's patch, say, shows object content
/// and so only goes into events that record the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AnnotationLevel {
    Metadata,
    Request,
}

/// What a request may hold in warnings, whatever its admission adds; the
/// header's own bounds are kube's ([`Notes::warnings`]).
const MAX_WARNINGS: usize = 100;
const MAX_WARNING_LEN: usize = 4096;
/// kube-apiserver's warning recorder: past this many characters in all,
/// every warning is cut to [`TRUNCATE_ITEM_CHARS`], and the rest dropped
/// once the total passes it again.
const TRUNCATE_AT_TOTAL_CHARS: usize = 4 * 1024;
const TRUNCATE_ITEM_CHARS: usize = 256;

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
        self.annotate_at(key, value, AnnotationLevel::Metadata);
    }

    /// Adds an audit annotation recorded only in events of `level` or more.
    pub fn annotate_at(
        &self,
        key: impl Into<String>,
        value: impl Into<String>,
        level: AnnotationLevel,
    ) {
        self.inner()
            .annotations
            .entry(key.into())
            .or_insert_with(|| (value.into(), level));
    }

    /// The warnings for the `Warning` headers, bounded as kube-apiserver's
    /// recorder bounds them: all of them while they total at most 4 Ki
    /// characters; past that, each cut to 256 characters, until the total
    /// passes 4 Ki again.
    pub fn warnings(&self) -> Vec<String> {
        let all = self.inner().warnings.clone();
        let cut = |w: &str| -> String { w.chars().take(TRUNCATE_ITEM_CHARS).collect() };
        let (mut out, mut written, mut truncating) = (Vec::new(), 0usize, false);
        for (i, w) in all.iter().enumerate() {
            if truncating && written >= TRUNCATE_AT_TOTAL_CHARS {
                break;
            }
            let text = if truncating { cut(w) } else { w.clone() };
            let len = text.chars().count();
            if truncating || written + len <= TRUNCATE_AT_TOTAL_CHARS {
                written += len;
                out.push(text);
                continue;
            }
            // Over the limit: replay everything so far, cut.
            truncating = true;
            out = all[..=i].iter().map(|w| cut(w)).collect();
            written = out.iter().map(|w| w.chars().count()).sum();
        }
        out
    }

    /// The annotations an event of the given level records.
    pub fn annotations_at(&self, level: AnnotationLevel) -> BTreeMap<String, String> {
        self.inner()
            .annotations
            .iter()
            .filter(|(_, (_, at))| *at <= level)
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect()
    }

    /// Every annotation, whatever its level.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.annotations_at(AnnotationLevel::Request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_within_four_ki_characters_are_sent_whole() {
        let notes = Notes::default();
        notes.warn("a".repeat(2000));
        notes.warn("b".repeat(2000));
        notes.warn("b".repeat(2000));
        assert_eq!(notes.warnings(), ["a".repeat(2000), "b".repeat(2000)]);
    }

    #[test]
    fn warnings_past_four_ki_characters_are_cut_as_kube_cuts_them() {
        let notes = Notes::default();
        for c in ["a", "b", "c"] {
            notes.warn(c.repeat(2000));
        }
        for i in 0..30 {
            notes.warn(format!("{i}-{}", "d".repeat(300)));
        }
        let sent = notes.warnings();
        assert!(sent.iter().all(|w| w.chars().count() <= 256), "{sent:?}");
        assert_eq!(sent[0], "a".repeat(256));
        let total: usize = sent.iter().map(|w| w.chars().count()).sum();
        assert!(total < 4096 + 256, "{total}");
        // Cut on character boundaries.
        let wide = Notes::default();
        for c in ["é", "ü", "ö"] {
            wide.warn(c.repeat(1500));
        }
        assert_eq!(
            wide.warnings(),
            ["é".repeat(256), "ü".repeat(256), "ö".repeat(256)]
        );
    }

    #[test]
    fn an_annotation_at_request_level_stays_out_of_metadata_events() {
        let notes = Notes::default();
        notes.annotate("seen", "yes");
        notes.annotate_at("patch", "{...}", AnnotationLevel::Request);
        assert_eq!(notes.annotations_at(AnnotationLevel::Metadata).len(), 1);
        assert_eq!(notes.annotations_at(AnnotationLevel::Request).len(), 2);
    }
}
