//! What the store hands to admission on every client write, and what
//! admission hands back besides a refusal: the request's attributes (kube's
//! `admission.Attributes`), the one [`Plugin`] trait every admission plugin
//! implements, the [`Chain`] that runs them in order in kube's two phases,
//! and the [`Notes`] (warnings, audit annotations) a request collects on
//! its way through.
//!
//! The store owns *when* admission runs (mutating before the strategy
//! prepares the object, validating after validation, both inside the retry
//! of a write); `crate::admission` owns *what* runs, and in which order.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::api::errors::ApiError;
use crate::api::meta::Requester;
use crate::api::schema::KindSchema;

use super::rights::Right;
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
    /// The written kind's schemas, for a plugin that merges as server-side
    /// apply does (a mutating policy's `ApplyConfiguration`).
    pub schema: KindSchema,
    /// On a create, the rights the object needs its requester to hold, as
    /// its kind's strategy names them ([`super::Strategy::create_rights`]).
    pub rights: Vec<Right>,
}

/// kube's two phases of admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A plugin may change the object (kube's `MutationInterface`).
    Mutating,
    /// A plugin may only refuse it (kube's `ValidationInterface`).
    Validating,
}

/// One admission plugin, as k8s.io/apiserver's `admission.Interface`: which
/// operations it acts on in which of kube's two phases, and what it does in
/// each. A plugin acts in the mutating phase, the validating phase, or
/// both; what it leaves out does nothing. Only client writes are admitted: the
/// controllers' own protocol steps are not (a webhook that could refuse a
/// finalizer's removal would wedge a transfer halfway).
#[async_trait::async_trait]
pub trait Plugin: Send + Sync + std::fmt::Debug {
    /// Its name, as kube's `--enable-admission-plugins` names it.
    fn name(&self) -> &'static str;
    /// Whether it would act on a write of `operation` in `phase` now
    /// (kube's `Handles`, and whether it is a mutation or a validation
    /// interface); when no plugin would, the store builds no attributes
    /// for that phase.
    fn handles(&self, operation: Operation, phase: Phase) -> bool;
    /// The mutating phase: may replace `attrs.object`. `passes` is shared
    /// by the request's mutators, for kube's reinvocation.
    async fn admit(
        &self,
        _ctx: &Context,
        _attrs: &mut Attributes,
        _passes: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        Ok(())
    }
    /// The validating phase, on the object as it will be stored.
    async fn validate(&self, _ctx: &Context, _attrs: &Attributes) -> Result<(), ApiError> {
        Ok(())
    }
}

/// One request's mutating passes, shared by the mutating plugins (kube's
/// `admission.ReinvocationContext`): a mutator with `reinvocationPolicy:
/// IfNeeded` runs a second time when a later mutator changed the object
/// after it ran.
#[derive(Debug, Default)]
pub struct Reinvocation {
    /// Set by a plugin whose mutator changed the object after a mutator
    /// that may be reinvoked had run.
    pub should_reinvoke: bool,
    /// True during the second pass.
    pub reinvoking: bool,
    /// Each plugin's own state between the passes, by plugin name.
    pub state: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
}

/// The admission plugins in their order (kube's `chainAdmissionHandler`):
/// each phase runs every plugin that handles the write, in this order, and
/// stops at the first refusal.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    plugins: Vec<Arc<dyn Plugin>>,
}

impl Chain {
    pub fn new(plugins: Vec<Arc<dyn Plugin>>) -> Self {
        Self { plugins }
    }

    /// The plugins' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Whether any plugin would act on a write of `operation` in `phase`.
    pub fn handles(&self, operation: Operation, phase: Phase) -> bool {
        self.plugins.iter().any(|p| p.handles(operation, phase))
    }

    /// The mutating phase; and, when a mutator asked for it and a later one
    /// changed the object, every mutator once more (kube's reinvocation).
    pub async fn admit(&self, ctx: &Context, attrs: &mut Attributes) -> Result<(), ApiError> {
        let mut passes = Reinvocation::default();
        self.admit_pass(ctx, attrs, &mut passes).await?;
        if passes.should_reinvoke {
            passes.should_reinvoke = false;
            passes.reinvoking = true;
            self.admit_pass(ctx, attrs, &mut passes).await?;
        }
        Ok(())
    }

    async fn admit_pass(
        &self,
        ctx: &Context,
        attrs: &mut Attributes,
        passes: &mut Reinvocation,
    ) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            if plugin.handles(attrs.operation, Phase::Mutating) {
                plugin.admit(ctx, attrs, passes).await?;
            }
        }
        Ok(())
    }

    /// The validating phase.
    pub async fn validate(&self, ctx: &Context, attrs: &Attributes) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            if plugin.handles(attrs.operation, Phase::Validating) {
                plugin.validate(ctx, attrs).await?;
            }
        }
        Ok(())
    }
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

    /// A plugin that writes its name into the object's `seen` list in each
    /// phase it is given, and refuses or asks for reinvocation when told.
    #[derive(Debug)]
    struct Marks {
        name: &'static str,
        operations: Vec<Operation>,
        refuses: bool,
        /// Asks to be run again if a later mutator changes the object.
        reinvoked_if_needed: bool,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Marks {
        fn new(name: &'static str, log: &Arc<Mutex<Vec<String>>>) -> Self {
            Self {
                name,
                operations: vec![Operation::Create, Operation::Update],
                refuses: false,
                reinvoked_if_needed: false,
                log: log.clone(),
            }
        }
    }

    #[async_trait::async_trait]
    impl Plugin for Marks {
        fn name(&self) -> &'static str {
            self.name
        }

        fn handles(&self, operation: Operation, _: Phase) -> bool {
            self.operations.contains(&operation)
        }

        async fn admit(
            &self,
            _ctx: &Context,
            attrs: &mut Attributes,
            passes: &mut Reinvocation,
        ) -> Result<(), ApiError> {
            let pass = if passes.reinvoking { "again" } else { "admit" };
            self.log
                .lock()
                .unwrap()
                .push(format!("{pass} {}", self.name));
            if passes.reinvoking && !self.reinvoked_if_needed {
                return Ok(());
            }
            if let Some(seen) = attrs.object.as_mut().and_then(|o| o["seen"].as_array_mut()) {
                seen.push(self.name.into());
                // A change after a mutator that may be reinvoked had run.
                let ran_before = passes.state.contains_key("reinvocable");
                passes.should_reinvoke |= ran_before && !passes.reinvoking;
            }
            if self.reinvoked_if_needed {
                passes.state.insert("reinvocable", Box::new(()));
            }
            Ok(())
        }

        async fn validate(&self, _ctx: &Context, _attrs: &Attributes) -> Result<(), ApiError> {
            self.log
                .lock()
                .unwrap()
                .push(format!("validate {}", self.name));
            if self.refuses {
                return Err(ApiError::Forbidden {
                    message: format!("refused by {}", self.name),
                });
            }
            Ok(())
        }
    }

    fn write(operation: Operation) -> Attributes {
        Attributes {
            operation,
            group: crate::api::GROUP.to_owned(),
            version: crate::api::VERSION.to_owned(),
            kind: "NamespaceTransfer".to_owned(),
            resource: "namespacetransfers".to_owned(),
            subresource: String::new(),
            namespace: "prod".to_owned(),
            name: "t".to_owned(),
            object: Some(serde_json::json!({"seen": []})),
            old_object: None,
            options: serde_json::json!({}),
            dry_run: false,
            user: Requester::default(),
            schema: KindSchema::of::<crate::api::NamespaceTransfer>(),
            rights: Vec::new(),
        }
    }

    #[tokio::test]
    async fn each_phase_runs_the_plugins_that_handle_the_write_in_list_order_until_one_refuses() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let creates_only = Marks {
            operations: vec![Operation::Create],
            ..Marks::new("creates-only", &log)
        };
        let refuses = Marks {
            refuses: true,
            ..Marks::new("refuses", &log)
        };
        let chain = Chain::new(vec![
            Arc::new(Marks::new("first", &log)),
            Arc::new(creates_only),
            Arc::new(refuses),
            Arc::new(Marks::new("never", &log)),
        ]);
        assert_eq!(chain.names(), ["first", "creates-only", "refuses", "never"]);
        assert!(chain.handles(Operation::Update, Phase::Mutating));
        assert!(!chain.handles(Operation::Delete, Phase::Validating));
        let ctx = Context::default();
        let mut update = write(Operation::Update);
        chain.admit(&ctx, &mut update).await.unwrap();
        assert_eq!(
            update.object.unwrap()["seen"],
            serde_json::json!(["first", "refuses", "never"])
        );
        let err = chain
            .validate(&ctx, &write(Operation::Create))
            .await
            .unwrap_err();
        assert_eq!(err.code(), 403);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "admit first",
                "admit refuses",
                "admit never",
                "validate first",
                "validate creates-only",
                "validate refuses",
            ]
        );
    }

    #[tokio::test]
    async fn a_mutator_that_asks_runs_once_more_when_a_later_one_changed_the_object() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let reinvocable = Marks {
            reinvoked_if_needed: true,
            ..Marks::new("reinvocable", &log)
        };
        let chain = Chain::new(vec![
            Arc::new(reinvocable),
            Arc::new(Marks::new("later", &log)),
        ]);
        let mut create = write(Operation::Create);
        chain.admit(&Context::default(), &mut create).await.unwrap();
        assert_eq!(
            create.object.unwrap()["seen"],
            serde_json::json!(["reinvocable", "later", "reinvocable"])
        );
        assert_eq!(
            *log.lock().unwrap(),
            [
                "admit reinvocable",
                "admit later",
                "again reinvocable",
                "again later"
            ]
        );
        // Alone, nothing changes the object after it: it runs once.
        let log = Arc::new(Mutex::new(Vec::new()));
        let alone = Chain::new(vec![Arc::new(Marks {
            reinvoked_if_needed: true,
            ..Marks::new("reinvocable", &log)
        })]);
        alone
            .admit(&Context::default(), &mut write(Operation::Create))
            .await
            .unwrap();
        assert_eq!(*log.lock().unwrap(), ["admit reinvocable"]);
    }

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
