//! kube's field manager for one kind: who owns which field
//! (`metadata.managedFields`), updated on every write, and server-side apply.
//!
//! The layers are kube's (k8s.io/apimachinery's `managedfields/internal`),
//! flattened into functions here: decode the entries, skip objects that are
//! not tracked, remember who first set what (`before-first-apply`), cap the
//! number of update entries (`ancient-changes`), name the manager
//! (`{manager, operation, apiVersion, subresource}`), stamp times, strip the
//! metadata nobody owns, and at the bottom structured-merge-diff's updater.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use serde_json::{json, Map, Value};

use super::path::{Path, PathElement};
use super::schema::{Schema, TypeId};
use super::set::Set;
use super::typed::{self, Comparison};

/// kube's `DefaultMaxUpdateManagers`.
const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_CHANGES: &str = "ancient-changes";
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
const CURRENT_OPERATION: &str = "current-operation";
/// The annotation `kubectl apply` (client-side) keeps.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// kube's limit on a field manager's name.
pub const MAX_MANAGER_LENGTH: usize = 128;

/// One manager's fields.
#[derive(Debug, Clone, PartialEq)]
struct Owned {
    set: Set,
    api_version: String,
    applied: bool,
}

/// Every manager's fields and times, keyed by manager identifier.
#[derive(Debug, Clone, Default)]
pub struct Managed {
    fields: BTreeMap<String, Owned>,
    times: BTreeMap<String, Option<Time>>,
}

impl Managed {
    fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyError {
    /// 409: fields another manager owns, with other values.
    Conflicts {
        message: String,
        /// (field path, "conflict with …").
        causes: Vec<(String, String)>,
    },
    /// 400.
    BadRequest(String),
    /// 500: what kube answers when the object does not fit the schema.
    Internal(String),
}

/// The identifier kube keys a manager by: the entry without its fields and
/// time (and, for Apply, without its apiVersion), as Go marshals it.
fn identifier(manager: &str, operation: &str, api_version: &str, subresource: &str) -> String {
    let mut out = format!("{{\"manager\":{}", quote(manager));
    out.push_str(&format!(",\"operation\":{}", quote(operation)));
    if operation != "Apply" && !api_version.is_empty() {
        out.push_str(&format!(",\"apiVersion\":{}", quote(api_version)));
    }
    if !subresource.is_empty() {
        out.push_str(&format!(",\"subresource\":{}", quote(subresource)));
    }
    out.push('}');
    out
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The parts of an identifier.
#[derive(Debug, Default)]
struct Who {
    manager: String,
    operation: String,
    api_version: String,
    subresource: String,
}

fn parse_identifier(id: &str) -> Who {
    let v: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    Who {
        manager: s("manager"),
        operation: s("operation"),
        api_version: s("apiVersion"),
        subresource: s("subresource"),
    }
}

/// How a conflict names its manager (kube's `printManager`).
fn print_manager(id: &str) -> String {
    let who = parse_identifier(id);
    let mut out = quote(&who.manager);
    if !who.subresource.is_empty() {
        out = format!("{out} with subresource {}", quote(&who.subresource));
    }
    if who.operation == "Update" {
        out = format!("{out} using {}", who.api_version);
    }
    out
}

/// Decodes `metadata.managedFields`.
pub fn decode(entries: &[ManagedFieldsEntry]) -> Result<Managed, String> {
    let mut managed = Managed::default();
    for (i, e) in entries.iter().enumerate() {
        let operation = e.operation.as_deref().unwrap_or_default();
        if operation != "Apply" && operation != "Update" {
            return Err("operation must be `Apply` or `Update`".to_owned());
        }
        let api_version = e.api_version.clone().unwrap_or_default();
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".to_owned());
        }
        match e.fields_type.as_deref().unwrap_or_default() {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            other => {
                return Err(format!(
                    "invalid fieldsType {other:?} in managed fields entry {i}"
                ))
            }
        }
        let id = identifier(
            e.manager.as_deref().unwrap_or_default(),
            operation,
            &api_version,
            e.subresource.as_deref().unwrap_or_default(),
        );
        let set = match &e.fields_v1 {
            Some(FieldsV1(v)) => Set::from_fields_v1(v)?,
            None => Set::new(),
        };
        managed.fields.insert(
            id.clone(),
            Owned {
                set,
                api_version,
                applied: operation == "Apply",
            },
        );
        managed.times.insert(id, e.time.clone());
    }
    Ok(managed)
}

/// Encodes the entries in kube's order: operation, time, manager,
/// apiVersion, subresource. `None` when nobody owns anything.
pub fn encode(managed: &Managed) -> Option<Vec<ManagedFieldsEntry>> {
    if managed.is_empty() {
        return None;
    }
    let mut out: Vec<ManagedFieldsEntry> = managed
        .fields
        .iter()
        .map(|(id, owned)| {
            let who = parse_identifier(id);
            ManagedFieldsEntry {
                manager: Some(who.manager),
                operation: Some(if owned.applied { "Apply" } else { "Update" }.to_owned()),
                api_version: Some(owned.api_version.clone()),
                time: managed.times.get(id).cloned().flatten(),
                fields_type: Some("FieldsV1".to_owned()),
                fields_v1: Some(FieldsV1(owned.set.to_fields_v1())),
                subresource: Some(who.subresource).filter(|s| !s.is_empty()),
            }
        })
        .collect();
    let seconds = |e: &ManagedFieldsEntry| e.time.as_ref().map_or(0, |t| t.0.as_second());
    out.sort_by(|p, q| {
        p.operation
            .cmp(&q.operation)
            .then_with(|| seconds(p).cmp(&seconds(q)))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
    Some(out)
}

/// `managedFields: [{}]`: the client asks to clear them. (For built-in
/// kinds `[]` does too; for a custom resource kube-apiserver never sees an
/// empty list, which means "keep them", and so it means that here.)
fn is_reset(entries: Option<&Vec<ManagedFieldsEntry>>) -> bool {
    let empty = |e: &ManagedFieldsEntry| {
        let blank = |s: &Option<String>| s.as_deref().is_none_or(str::is_empty);
        blank(&e.manager)
            && blank(&e.operation)
            && blank(&e.api_version)
            && blank(&e.fields_type)
            && blank(&e.subresource)
            && e.time.is_none()
            && e.fields_v1.is_none()
    };
    matches!(entries, Some(e) if e.len() == 1 && empty(&e[0]))
}

/// The field manager of one kind.
#[derive(Debug)]
pub struct FieldManager {
    schema: Schema,
    root: TypeId,
    api_version: &'static str,
    kind: &'static str,
    /// What nobody owns: type and identity metadata.
    strip: Set,
    /// What a main-resource write does not own (its status).
    reset_main: Set,
    /// What a status write does not own (metadata and spec).
    reset_status: Set,
}

/// One write, as the field manager needs to know it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The manager's name (`fieldManager`, or derived from the User-Agent).
    pub manager: &'a str,
    /// `status`, or empty for the main resource.
    pub subresource: &'a str,
    pub now: &'a Time,
}

fn path(parts: &[&str]) -> Vec<PathElement> {
    parts.iter().map(|p| PathElement::field(p)).collect()
}

impl FieldManager {
    /// `definition` names the kind's schema in `schema`.
    pub fn new(
        schema: Schema,
        definition: &str,
        api_version: &'static str,
        kind: &'static str,
    ) -> Self {
        let root = schema.named(definition).unwrap_or(Schema::UNTYPED);
        let mut strip = Set::new();
        strip.insert(&path(&["apiVersion"]));
        strip.insert(&path(&["kind"]));
        strip.insert(&path(&["metadata"]));
        for field in [
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        ] {
            strip.insert(&path(&["metadata", field]));
        }
        let mut reset_main = Set::new();
        reset_main.insert(&path(&["status"]));
        // A status write keeps only its status, as a custom resource's.
        let mut reset_status = Set::new();
        reset_status.insert(&path(&["metadata"]));
        reset_status.insert(&path(&["spec"]));
        Self {
            schema,
            root,
            api_version,
            kind,
            strip,
            reset_main,
            reset_status,
        }
    }

    fn reset(&self, subresource: &str) -> &Set {
        if subresource.is_empty() {
            &self.reset_main
        } else {
            &self.reset_status
        }
    }

    /// An object of this kind with nothing set: what a create starts from.
    pub fn empty_object(&self) -> Value {
        json!({"apiVersion": self.api_version, "kind": self.kind})
    }

    /// The entries after a create, update or non-apply patch (kube's
    /// `UpdateNoErrors`). `live` and `new` are the objects without their
    /// managedFields; `live_entries` are the stored ones, `new_entries` what
    /// the request sent. `creating` when `live` is the empty object.
    pub fn update(
        &self,
        live: &Value,
        live_entries: Option<&Vec<ManagedFieldsEntry>>,
        new: &Value,
        new_entries: Option<&Vec<ManagedFieldsEntry>>,
        creating: bool,
        write: Write<'_>,
    ) -> Option<Vec<ManagedFieldsEntry>> {
        let live_managed =
            || decode(live_entries.map_or(&[][..], Vec::as_slice)).unwrap_or_default();
        let managed = if !write.subresource.is_empty() {
            live_managed()
        } else if is_reset(new_entries) {
            Managed::default()
        } else {
            match new_entries.map(|e| decode(e)) {
                Some(Ok(m)) if !m.is_empty() => m,
                _ => live_managed(),
            }
        };
        // An existing object nobody tracks stays untracked until an apply.
        if managed.is_empty() && !creating {
            return None;
        }
        match self.update_tracked(live, new, managed, write) {
            Ok(managed) => encode(&managed),
            // kube drops the entries rather than fail the write.
            Err(_) => None,
        }
    }

    /// Below the skip: cap, name, stamp, strip, update.
    fn update_tracked(
        &self,
        live: &Value,
        new: &Value,
        mut managed: Managed,
        write: Write<'_>,
    ) -> Result<Managed, String> {
        let id = identifier(
            if write.manager.is_empty() {
                "unknown"
            } else {
                write.manager
            },
            "Update",
            self.api_version,
            write.subresource,
        );
        self.updater_update(live, new, &mut managed, write.subresource)?;
        if let Some(mut current) = managed.fields.remove(CURRENT_OPERATION) {
            current.set = current.set.difference(&self.strip);
            managed.times.remove(CURRENT_OPERATION);
            if !current.set.is_empty() {
                if let Some(previous) = managed.fields.get(&id) {
                    current.set = current.set.union(&previous.set);
                }
                managed.fields.insert(id.clone(), current);
                managed.times.insert(id, Some(write.now.clone()));
            }
        }
        cap_update_managers(&mut managed);
        Ok(managed)
    }

    /// structured-merge-diff's `Updater.Update` for the `current-operation`
    /// workflow: the changed fields move to it from everyone else.
    fn updater_update(
        &self,
        live: &Value,
        new: &Value,
        managed: &mut Managed,
        subresource: &str,
    ) -> Result<(), String> {
        self.forget_other_versions(managed);
        let compare = self
            .update_others(live, new, managed, CURRENT_OPERATION, true, subresource)
            .map_err(|_| "conflicts in a forced update".to_owned())??;
        let set = compare
            .modified
            .union(&compare.added)
            .recursive_difference(self.reset(subresource));
        if !set.is_empty() {
            managed.fields.insert(
                CURRENT_OPERATION.to_owned(),
                Owned {
                    set,
                    api_version: self.api_version.to_owned(),
                    applied: false,
                },
            );
        }
        Ok(())
    }

    /// Entries of a version this server does not serve cannot be compared;
    /// kube drops them.
    fn forget_other_versions(&self, managed: &mut Managed) {
        managed
            .fields
            .retain(|_, owned| owned.api_version == self.api_version);
        let ids: Vec<String> = managed.times.keys().cloned().collect();
        for id in ids {
            if !managed.fields.contains_key(&id) {
                managed.times.remove(&id);
            }
        }
    }

    /// structured-merge-diff's `update`: what changed from `old` to `new`
    /// leaves every manager but `workflow`; without `force`, a changed field
    /// another manager owns is a conflict.
    #[allow(clippy::type_complexity)]
    fn update_others(
        &self,
        old: &Value,
        new: &Value,
        managed: &mut Managed,
        workflow: &str,
        force: bool,
        subresource: &str,
    ) -> Result<Result<Comparison, String>, Vec<(String, Path)>> {
        let compare = match typed::compare(&self.schema, self.root, old, new) {
            Ok(c) => c.exclude(self.reset(subresource)),
            Err(e) => return Ok(Err(format!("failed to compare objects: {e}"))),
        };
        let changed = compare.modified.union(&compare.added);
        let mut conflicts = Vec::new();
        for (id, owned) in &mut managed.fields {
            if id == workflow {
                continue;
            }
            let conflict = owned.set.intersection(&changed);
            if !force {
                for p in conflict.paths() {
                    conflicts.push((id.clone(), p));
                }
                continue;
            }
            owned.set = owned.set.difference(&conflict).difference(&compare.removed);
        }
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
        if !force {
            for (id, owned) in &mut managed.fields {
                if id != workflow {
                    owned.set = owned.set.difference(&compare.removed);
                }
            }
        }
        let empty: Vec<String> = managed
            .fields
            .iter()
            .filter(|(_, o)| o.set.is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in empty {
            managed.fields.remove(&id);
            managed.times.remove(&id);
        }
        Ok(Ok(compare))
    }

    /// Server-side apply of `config` to `live` (kube's `FieldManager.Apply`):
    /// the merged object and its entries. `live` is the stored object
    /// without managedFields (the empty object for a create).
    pub fn apply(
        &self,
        live: &Value,
        live_entries: Option<&Vec<ManagedFieldsEntry>>,
        config: &Value,
        force: bool,
        write: Write<'_>,
    ) -> Result<(Value, Option<Vec<ManagedFieldsEntry>>), ApplyError> {
        let mut managed = decode(live_entries.map_or(&[][..], Vec::as_slice))
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?;
        let (api_version, kind) = (
            config["apiVersion"].as_str().unwrap_or_default(),
            config["kind"].as_str().unwrap_or_default(),
        );
        if api_version != self.api_version || kind != self.kind {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            return Err(ApplyError::BadRequest(format!(
                "invalid object type: {group}/{version}, Kind={kind}"
            )));
        }
        if !config["metadata"]["managedFields"].is_null() {
            return Err(ApplyError::BadRequest(
                "metadata.managedFields must be nil".to_owned(),
            ));
        }
        if let Err(e) = typed::validate(&self.schema, self.root, config) {
            return Err(ApplyError::Internal(format!(
                "failed to create typed patch object ({}/{}; {}, Kind={}): {e}",
                config["metadata"]["namespace"].as_str().unwrap_or_default(),
                config["metadata"]["name"].as_str().unwrap_or_default(),
                self.api_version,
                self.kind
            )));
        }
        let result = self.apply_kubectl_aware(live, &mut managed, config, force, write)?;
        let mut merged = result.unwrap_or_else(|| live.clone());
        // kubectl's client-side annotation follows what kubectl applies.
        if write.manager == "kubectl"
            && merged["metadata"]["annotations"][LAST_APPLIED]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        {
            let mut last = config.clone();
            if let Some(meta) = last["metadata"].as_object_mut() {
                match meta.get_mut("annotations") {
                    Some(Value::Object(a)) => {
                        a.remove(LAST_APPLIED);
                    }
                    Some(_) => {
                        meta.remove("annotations");
                    }
                    None => {}
                }
            }
            let text = format!("{}\n", serde_json::to_string(&last).unwrap_or_default());
            merged["metadata"]["annotations"][LAST_APPLIED] = Value::String(text);
        }
        Ok((merged, encode(&managed)))
    }

    /// kubectl, moving from client-side to server-side apply, may take over
    /// the fields its last-applied annotation says it set, if they are
    /// unchanged since.
    fn apply_kubectl_aware(
        &self,
        live: &Value,
        managed: &mut Managed,
        config: &Value,
        force: bool,
        write: Write<'_>,
    ) -> Result<Option<Value>, ApplyError> {
        let before = managed.clone();
        match self.apply_tracked(live, managed, config, force, write) {
            Err(Inner::Conflicts(conflicts)) if write.manager == "kubectl" => {
                let Some(allowed) = self.unchanged_since_last_applied(live) else {
                    return Err(conflict_error(conflicts));
                };
                let remaining: Vec<(String, Path)> = conflicts
                    .into_iter()
                    .filter(|(_, p)| !allowed.has(&p.0))
                    .collect();
                if !remaining.is_empty() {
                    return Err(conflict_error(remaining));
                }
                *managed = before;
                self.apply_tracked(live, managed, config, true, write)
                    .map_err(Inner::into_error)
            }
            other => other.map_err(Inner::into_error),
        }
    }

    /// The fields of the last-applied annotation whose values are still live.
    fn unchanged_since_last_applied(&self, live: &Value) -> Option<Set> {
        let text = live["metadata"]["annotations"][LAST_APPLIED].as_str()?;
        let last: Value = serde_json::from_str(text).ok()?;
        if last["apiVersion"].as_str() != Some(self.api_version) {
            return None;
        }
        let set = typed::to_field_set(&self.schema, self.root, &last).ok()?;
        let c = typed::compare(&self.schema, self.root, &last, live).ok()?;
        Some(
            set.difference(&c.modified)
                .difference(&c.added)
                .difference(&c.removed),
        )
    }

    /// Below the kubectl layer: remember who set what before the first
    /// apply, then name, stamp, strip, apply.
    fn apply_tracked(
        &self,
        live: &Value,
        managed: &mut Managed,
        config: &Value,
        force: bool,
        write: Write<'_>,
    ) -> Result<Option<Value>, Inner> {
        if managed.is_empty() {
            let first = Write {
                manager: BEFORE_FIRST_APPLY,
                subresource: write.subresource,
                now: write.now,
            };
            *managed = self
                .update_tracked(&self.empty_object(), live, Managed::default(), first)
                .map_err(|e| {
                    Inner::Failed(format!("failed to create manager for existing fields: {e}"))
                })?;
        }
        // kube caps the update entries on updates only.
        self.apply_inner(live, managed, config, force, write)
    }

    fn apply_inner(
        &self,
        live: &Value,
        managed: &mut Managed,
        config: &Value,
        force: bool,
        write: Write<'_>,
    ) -> Result<Option<Value>, Inner> {
        let id = identifier(write.manager, "Apply", "", write.subresource);
        self.forget_other_versions(managed);
        let merged = typed::merge(&self.schema, self.root, live, config)
            .map_err(|e| Inner::Failed(format!("failed to merge config: {e}")))?;
        let last = managed.fields.get(&id).map(|o| o.set.clone());
        let set = typed::to_field_set(&self.schema, self.root, config)
            .map_err(|e| Inner::Failed(format!("failed to get field set: {e}")))?
            .recursive_difference(self.reset(write.subresource));
        managed.fields.insert(
            id.clone(),
            Owned {
                set,
                api_version: self.api_version.to_owned(),
                applied: true,
            },
        );
        let merged = self.prune(merged, managed, last.as_ref());
        match self.update_others(live, &merged, managed, &id, force, write.subresource) {
            Err(conflicts) => return Err(Inner::Conflicts(conflicts)),
            Ok(Err(e)) => return Err(Inner::Failed(e)),
            Ok(Ok(_)) => {}
        }
        if let Some(owned) = managed.fields.get_mut(&id) {
            owned.set = owned.set.difference(&self.strip);
            if owned.set.is_empty() {
                managed.fields.remove(&id);
            }
        }
        if merged == *live {
            return Ok(None);
        }
        managed.times.insert(id, Some(write.now.clone()));
        Ok(Some(merged))
    }

    /// Removes what the applier set last time and no longer applies, unless
    /// another manager owns it.
    fn prune(&self, merged: Value, managed: &Managed, last: Option<&Set>) -> Value {
        let Some(last) = last.filter(|s| !s.is_empty()) else {
            return merged;
        };
        let (schema, root) = (&self.schema, self.root);
        let named = |s: &Set| s.ensure_named_fields_are_members(schema, Some(root));
        let set_of = |v: &Value| typed::to_field_set(schema, root, v).unwrap_or_default();
        let remove = |v: &Value, s: &Set| {
            typed::remove_items(schema, root, v, s).unwrap_or(Value::Object(Map::new()))
        };
        let last = named(last);
        let pruned = remove(&merged, &last);
        // Add back what someone owns.
        let mut owned = Set::new();
        for o in managed.fields.values() {
            owned.union_in(&o.set);
        }
        let merged_set = named(&set_of(&merged));
        let pruned = remove(
            &merged,
            &merged_set.difference(&named(&set_of(&pruned)).union(&named(&owned))),
        );
        // Add back what the applier never set (items inside removed ones).
        let pruned_set = named(&set_of(&pruned));
        remove(
            &merged,
            &merged_set.difference(&pruned_set).intersection(&last),
        )
    }
}

enum Inner {
    Conflicts(Vec<(String, Path)>),
    Failed(String),
}

impl Inner {
    fn into_error(self) -> ApplyError {
        match self {
            Inner::Conflicts(c) => conflict_error(c),
            Inner::Failed(e) => ApplyError::Internal(e),
        }
    }
}

/// kube's conflict error: one cause per field, and a message that lists
/// them by manager.
fn conflict_error(conflicts: Vec<(String, Path)>) -> ApplyError {
    let causes = conflicts
        .iter()
        .map(|(id, p)| {
            (
                p.to_string(),
                format!("conflict with {}", print_manager(id)),
            )
        })
        .collect();
    let message = if let [(id, p)] = conflicts.as_slice() {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {p}",
            print_manager(id)
        )
    } else {
        let mut by_manager: BTreeMap<&str, Vec<&Path>> = BTreeMap::new();
        for (id, p) in &conflicts {
            by_manager.entry(id).or_default().push(p);
        }
        let mut lines = Vec::new();
        for (id, paths) in by_manager {
            lines.push(format!("conflicts with {}:", print_manager(id)));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApplyError::Conflicts { message, causes }
}

/// kube's `capUpdateManagers`: past ten update entries, the oldest merge
/// into one `ancient-changes` entry per apiVersion.
fn cap_update_managers(managed: &mut Managed) {
    let mut updaters: Vec<String> = managed
        .fields
        .iter()
        .filter(|(_, o)| !o.applied)
        .map(|(id, _)| id.clone())
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    let seconds = |id: &String| {
        managed
            .times
            .get(id)
            .cloned()
            .flatten()
            .map_or(0, |t| t.0.as_second())
    };
    updaters.sort_by(|a, b| seconds(a).cmp(&seconds(b)).then_with(|| a.cmp(b)));
    let mut first_of_version: BTreeMap<String, String> = BTreeMap::new();
    let mut length = updaters.len();
    for id in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(owned) = managed.fields.get(&id).cloned() else {
            continue;
        };
        let time = managed.times.get(&id).cloned().flatten();
        let bucket = identifier(ANCIENT_CHANGES, "Update", &owned.api_version, "");
        match first_of_version.get(&owned.api_version) {
            Some(first) => {
                if !managed.fields.contains_key(&bucket) {
                    if let Some(s) = managed.fields.remove(first) {
                        managed.times.remove(first);
                        managed.fields.insert(bucket.clone(), s);
                    }
                }
                if let Some(b) = managed.fields.get_mut(&bucket) {
                    b.set.union_in(&owned.set);
                }
                managed.fields.remove(&id);
                managed.times.remove(&id);
                length -= 1;
                managed.times.insert(bucket, time);
            }
            None => {
                first_of_version.insert(owned.api_version.clone(), id.clone());
            }
        }
    }
}

/// kube's `managerOrUserAgent`: the `fieldManager` parameter, else the
/// User-Agent up to its first `/`, printable characters only, at most 128
/// bytes.
pub fn manager_or_user_agent(field_manager: Option<&str>, user_agent: &str) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    let prefix = user_agent.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| is_printable(*c)) {
        if out.len() + c.len_utf8() > MAX_MANAGER_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// Go's `unicode.IsPrint`, close enough: no control characters, and of the
/// spaces only U+0020.
pub fn is_printable(c: char) -> bool {
    !c.is_control() && (c == ' ' || !c.is_whitespace())
}
