//! `patchType: ApplyConfiguration`: merging the object an expression built
//! into the request's object as server-side apply merges, with our kinds'
//! schemas (kube's `patch.ApplyStructuredMergeDiff`). Reuses the registry's
//! structured merge (`registry::fields::typed::merge`): maps and structs
//! merge field by field, `x-kubernetes-list-type: map`/`set` lists merge by
//! key or value, atomic lists and maps are replaced — and, as in kube, an
//! apply configuration may not set an atomic list, map or struct at all.
//!
//! No field ownership is recorded: a policy's fields are not managed, as in
//! kube. Pure; the schemas are built once per kind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::api::schema;
use crate::registry::fields::path::{Path, PathElement};
use crate::registry::fields::schema::{Atom, ListKind, Schema, TypeId};
use crate::registry::fields::typed;

/// One kind's schema and its root type.
#[derive(Debug)]
pub(super) struct KindSchema {
    schema: Schema,
    root: TypeId,
}

impl KindSchema {
    fn build(kind: &schema::KindSchema) -> Self {
        let definition = schema::kind_definition(kind.resource.kind);
        let definitions = schema::definitions(&[*kind]);
        let schema = Schema::from_definitions(&definitions, &[definition.as_str()]);
        let root = schema.named(&definition).unwrap_or(Schema::UNTYPED);
        Self { schema, root }
    }
}

/// The schemas of the kinds written, by kind, built on first use from what
/// each write says of its kind.
#[derive(Debug, Default)]
pub(super) struct Schemas {
    kinds: Mutex<HashMap<&'static str, Arc<KindSchema>>>,
}

impl Schemas {
    pub(super) fn for_kind(&self, kind: &schema::KindSchema) -> Arc<KindSchema> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        kinds
            .entry(kind.resource.kind)
            .or_insert_with(|| Arc::new(KindSchema::build(kind)))
            .clone()
    }
}

/// `object` with `patch` applied; the error is kube's, without its
/// `error applying patch: ` prefix.
pub(super) fn apply_configuration(
    kind: &KindSchema,
    object: &Value,
    mut patch: Map<String, Value>,
) -> Result<Value, String> {
    // kube stamps the object's group, version and kind on the patch.
    for key in ["apiVersion", "kind"] {
        match object.get(key) {
            Some(v) => patch.insert(key.to_owned(), v.clone()),
            None => patch.remove(key),
        };
    }
    let patch = Value::Object(patch);
    typed::validate(&kind.schema, kind.root, &patch)
        .map_err(|e| format!("failed to convert patch object to typed object: {e}"))?;
    let mut atomics = Vec::new();
    find_atomics(
        &kind.schema,
        kind.root,
        &patch,
        &mut Vec::new(),
        &mut atomics,
    );
    if !atomics.is_empty() {
        return Err(format!(
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
            atomics.join(", ")
        ));
    }
    typed::merge(&kind.schema, kind.root, object, &patch)
        .map_err(|e| format!("failed to merge patch: {e}"))
}

/// The paths in `value` where it sets an atomic list, map or struct
/// (structured-merge-diff's `findAtomics`: it descends into declared fields
/// only; a list without a schema counts as atomic).
fn find_atomics(
    schema: &Schema,
    ty: TypeId,
    value: &Value,
    path: &mut Vec<PathElement>,
    out: &mut Vec<String>,
) {
    match (schema.atom(ty), value) {
        (Atom::Map(map), Value::Object(fields)) => {
            if map.atomic {
                out.push(Path(path.clone()).to_string());
            }
            for (key, child) in fields {
                if let Some(&field) = map.fields.get(key) {
                    path.push(PathElement::Field(key.clone()));
                    find_atomics(schema, field, child, path, out);
                    path.pop();
                }
            }
        }
        (Atom::List(list), Value::Array(items)) => {
            if list.kind == ListKind::Atomic {
                out.push(Path(path.clone()).to_string());
            }
            for (i, item) in items.iter().enumerate() {
                path.push(PathElement::Index(i));
                find_atomics(schema, list.elem, item, path, out);
                path.pop();
            }
        }
        (Atom::Untyped, Value::Array(_)) => out.push(Path(path.clone()).to_string()),
        _ => {}
    }
}
