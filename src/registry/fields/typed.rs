//! Walks over an object and its schema, as structured-merge-diff's typed
//! values do: the set of fields a value sets, what changed between two
//! values, a merge of an applied configuration into a live object, and the
//! removal of a set of fields. Objects are plain JSON values here.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use super::path::{OrdValue, PathElement};
use super::schema::{Atom, ListKind, MapType, Schema, TypeId};
use super::set::Set;

/// What [`compare`] found, each as a set of paths.
#[derive(Debug, Default, Clone)]
pub struct Comparison {
    pub removed: Set,
    pub modified: Set,
    pub added: Set,
}

impl Comparison {
    /// Everything but `reset` (and what is below it).
    pub fn exclude(&self, reset: &Set) -> Comparison {
        Comparison {
            removed: self.removed.recursive_difference(reset),
            modified: self.modified.recursive_difference(reset),
            added: self.added.recursive_difference(reset),
        }
    }
}

/// A node's shape, with an untyped node's read from its value.
enum Shape<'a> {
    Scalar,
    List(TypeId, &'a ListKind),
    Map(Option<&'a MapType>),
}

const ATOMIC: ListKind = ListKind::Atomic;

fn shape<'a>(schema: &'a Schema, ty: TypeId, value: Option<&Value>) -> Shape<'a> {
    match schema.atom(ty) {
        Atom::Scalar => Shape::Scalar,
        Atom::List(l) => Shape::List(l.elem, &l.kind),
        Atom::Map(m) => Shape::Map(Some(m)),
        Atom::Untyped => match value {
            Some(Value::Object(_)) => Shape::Map(None),
            Some(Value::Array(_)) => Shape::List(Schema::UNTYPED, &ATOMIC),
            _ => Shape::Scalar,
        },
    }
}

fn field_type(map: Option<&MapType>, name: &str) -> TypeId {
    match map {
        Some(m) => m.field_type(name).unwrap_or(Schema::UNTYPED),
        None => Schema::UNTYPED,
    }
}

fn is_declared(map: Option<&MapType>, name: &str) -> bool {
    map.is_some_and(|m| m.fields.contains_key(name))
}

fn is_atomic_map(map: Option<&MapType>) -> bool {
    map.is_some_and(|m| m.atomic)
}

/// A list's items, or none for `null` (a valid, empty list).
fn as_list(v: Option<&Value>) -> Option<&Vec<Value>> {
    v.and_then(Value::as_array)
}

fn as_map(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

/// The keys of either map, each once, in order.
fn union_keys<'m>(
    l: Option<&'m Map<String, Value>>,
    r: Option<&'m Map<String, Value>>,
) -> std::collections::BTreeSet<&'m String> {
    l.into_iter().chain(r).flat_map(Map::keys).collect()
}

/// The path element naming a list item.
pub fn item_element(kind: &ListKind, item: &Value, index: usize) -> Result<PathElement, String> {
    match kind {
        ListKind::Atomic => Ok(PathElement::Index(index)),
        ListKind::Set => match item {
            Value::Object(_) | Value::Array(_) => Err(format!(
                "element {index}: only scalar values may be items of a list of type set"
            )),
            scalar => Ok(PathElement::Value(OrdValue(scalar.clone()))),
        },
        ListKind::Map(keys) => {
            let Value::Object(fields) = item else {
                return Err(format!(
                    "element {index}: an item of a list of type map must be an object"
                ));
            };
            let mut named = Vec::with_capacity(keys.len());
            for key in keys {
                let Some(v) = fields.get(key) else {
                    return Err(format!(
                        "element {index}: associative list with keys has an element that omits key field {key:?} (and doesn't have default value)"
                    ));
                };
                named.push((key.clone(), OrdValue(v.clone())));
            }
            named.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(PathElement::Key(named))
        }
    }
}

/// The fields `value` sets (structured-merge-diff's `ToFieldSet`): every
/// leaf, every list item, and every map key that is not a declared field.
pub fn to_field_set(schema: &Schema, ty: TypeId, value: &Value) -> Result<Set, String> {
    let mut set = Set::new();
    field_set_into(schema, ty, value, &mut Vec::new(), &mut set)?;
    Ok(set)
}

fn field_set_into(
    schema: &Schema,
    ty: TypeId,
    value: &Value,
    path: &mut Vec<PathElement>,
    set: &mut Set,
) -> Result<(), String> {
    match shape(schema, ty, Some(value)) {
        Shape::Scalar => set.insert(path),
        Shape::List(_, ListKind::Atomic) => set.insert(path),
        Shape::List(elem, kind) => {
            let Some(items) = value.as_array() else {
                return Ok(());
            };
            let mut elements = Vec::with_capacity(items.len());
            let mut counts: BTreeMap<PathElement, usize> = BTreeMap::new();
            for (i, item) in items.iter().enumerate() {
                let pe = item_element(kind, item, i)?;
                *counts.entry(pe.clone()).or_default() += 1;
                elements.push(pe);
            }
            let mut repeated_done = BTreeSet::new();
            for (item, pe) in items.iter().zip(&elements) {
                path.push(pe.clone());
                if counts.get(pe).is_some_and(|n| *n > 1) {
                    // A repeated item is owned whole, once.
                    if repeated_done.insert(pe.clone()) {
                        set.insert(path);
                    }
                } else {
                    field_set_into(schema, elem, item, path, set)?;
                    set.insert(path);
                }
                path.pop();
            }
        }
        Shape::Map(m) if is_atomic_map(m) => set.insert(path),
        Shape::Map(m) => {
            let Some(fields) = value.as_object() else {
                return Ok(());
            };
            for (key, child) in fields {
                path.push(PathElement::Field(key.clone()));
                field_set_into(schema, field_type(m, key), child, path, set)?;
                let empty = child.is_null() || child.as_object().is_some_and(Map::is_empty);
                if empty || !is_declared(m, key) {
                    set.insert(path);
                }
                path.pop();
            }
        }
    }
    Ok(())
}

/// What changed from `lhs` to `rhs` (structured-merge-diff's `Compare`).
pub fn compare(
    schema: &Schema,
    ty: TypeId,
    lhs: &Value,
    rhs: &Value,
) -> Result<Comparison, String> {
    let mut out = Comparison::default();
    compare_node(schema, ty, Some(lhs), Some(rhs), &mut Vec::new(), &mut out)?;
    Ok(out)
}

fn leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &[PathElement], out: &mut Comparison) {
    match (lhs, rhs) {
        (None, _) => out.added.insert(path),
        (_, None) => out.removed.insert(path),
        (Some(l), Some(r)) if l != r => out.modified.insert(path),
        _ => {}
    }
}

fn compare_node(
    schema: &Schema,
    ty: TypeId,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) -> Result<(), String> {
    let is_leaf = match shape(schema, ty, rhs.or(lhs)) {
        Shape::Scalar => true,
        Shape::List(elem, kind) => {
            let (l, r) = (as_list(lhs), as_list(rhs));
            let empty = l.is_none_or(Vec::is_empty) && r.is_none_or(Vec::is_empty);
            if *kind == ListKind::Atomic || empty {
                true
            } else {
                compare_lists(schema, elem, kind, l, r, path, out)?;
                false
            }
        }
        Shape::Map(m) => {
            let (l, r) = (as_map(lhs), as_map(rhs));
            let empty = l.is_none_or(Map::is_empty) && r.is_none_or(Map::is_empty);
            if is_atomic_map(m) || empty {
                true
            } else {
                for key in union_keys(l, r) {
                    path.push(PathElement::Field(key.clone()));
                    compare_node(
                        schema,
                        field_type(m, key),
                        l.and_then(|l| l.get(key)),
                        r.and_then(|r| r.get(key)),
                        path,
                        out,
                    )?;
                    path.pop();
                }
                false
            }
        }
    };
    if is_leaf {
        leaf(lhs, rhs, path, out);
    } else if lhs.is_none() {
        out.added.insert(path);
    } else if rhs.is_none() {
        out.removed.insert(path);
    }
    Ok(())
}

/// Items by path element, in order; a repeated element keeps its first
/// item.
struct Indexed<'v> {
    order: Vec<PathElement>,
    items: BTreeMap<PathElement, &'v Value>,
}

fn index_items<'v>(kind: &ListKind, items: Option<&'v Vec<Value>>) -> Result<Indexed<'v>, String> {
    let mut out = Indexed {
        order: Vec::new(),
        items: BTreeMap::new(),
    };
    for (i, item) in items.into_iter().flatten().enumerate() {
        let pe = item_element(kind, item, i)?;
        if let std::collections::btree_map::Entry::Vacant(slot) = out.items.entry(pe.clone()) {
            slot.insert(item);
            out.order.push(pe);
        }
    }
    Ok(out)
}

fn compare_lists(
    schema: &Schema,
    elem: TypeId,
    kind: &ListKind,
    lhs: Option<&Vec<Value>>,
    rhs: Option<&Vec<Value>>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) -> Result<(), String> {
    let left = index_items(kind, lhs)?;
    let right = index_items(kind, rhs)?;
    for pe in &right.order {
        path.push(pe.clone());
        let r = right.items.get(pe).copied();
        compare_node(schema, elem, left.items.get(pe).copied(), r, path, out)?;
        path.pop();
    }
    for pe in &left.order {
        if !right.items.contains_key(pe) {
            path.push(pe.clone());
            compare_node(schema, elem, left.items.get(pe).copied(), None, path, out)?;
            path.pop();
        }
    }
    Ok(())
}

/// `rhs` merged into `lhs`, `rhs` winning every leaf (structured-merge-diff's
/// `Merge`), with list items kept in the order its algorithm gives them.
pub fn merge(schema: &Schema, ty: TypeId, lhs: &Value, rhs: &Value) -> Result<Value, String> {
    Ok(merge_node(schema, ty, Some(lhs), Some(rhs))?.unwrap_or(Value::Object(Map::new())))
}

fn merge_node(
    schema: &Schema,
    ty: TypeId,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
) -> Result<Option<Value>, String> {
    let keep_rhs = || rhs.or(lhs).cloned();
    match shape(schema, ty, rhs.or(lhs)) {
        Shape::Scalar => Ok(keep_rhs()),
        Shape::List(elem, kind) => {
            let (l, r) = (as_list(lhs), as_list(rhs));
            let empty = l.is_none_or(Vec::is_empty) && r.is_none_or(Vec::is_empty);
            if *kind == ListKind::Atomic || empty || (l.is_none() && r.is_none()) {
                return Ok(keep_rhs());
            }
            merge_lists(schema, elem, kind, l, r)
        }
        Shape::Map(m) => {
            let (l, r) = (as_map(lhs), as_map(rhs));
            let empty = l.is_none_or(Map::is_empty) && r.is_none_or(Map::is_empty);
            if is_atomic_map(m) || empty || (l.is_none() && r.is_none()) {
                return Ok(keep_rhs());
            }
            let mut out = Map::new();
            for key in union_keys(l, r) {
                let merged = merge_node(
                    schema,
                    field_type(m, key),
                    l.and_then(|l| l.get(key)),
                    r.and_then(|r| r.get(key)),
                )?;
                if let Some(v) = merged {
                    out.insert(key.clone(), v);
                }
            }
            Ok((!out.is_empty()).then_some(Value::Object(out)))
        }
    }
}

fn merge_lists(
    schema: &Schema,
    elem: TypeId,
    kind: &ListKind,
    lhs: Option<&Vec<Value>>,
    rhs: Option<&Vec<Value>>,
) -> Result<Option<Value>, String> {
    let mut rhs_pes = Vec::new();
    let mut observed_rhs: BTreeMap<PathElement, &Value> = BTreeMap::new();
    for (i, item) in rhs.into_iter().flatten().enumerate() {
        let pe = item_element(kind, item, i)?;
        if observed_rhs.insert(pe.clone(), item).is_some() {
            return Err(format!("duplicate entries for key {pe}"));
        }
        rhs_pes.push(pe);
    }
    // The live object may hold duplicates; a repeated item merges as none.
    let mut lhs_pes: Vec<(PathElement, &Value)> = Vec::new();
    let mut observed_lhs: BTreeMap<PathElement, Option<&Value>> = BTreeMap::new();
    for (i, item) in lhs.into_iter().flatten().enumerate() {
        let pe = item_element(kind, item, i)?;
        observed_lhs
            .entry(pe.clone())
            .and_modify(|seen| *seen = None)
            .or_insert(Some(item));
        lhs_pes.push((pe, item));
    }

    let mut shared: VecDeque<&PathElement> = rhs_pes
        .iter()
        .filter(|pe| observed_lhs.contains_key(*pe))
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs: BTreeSet<PathElement> = BTreeSet::new();
    let mut out = Vec::new();
    let (l_len, r_len) = (lhs_pes.len(), rhs_pes.len());
    let (mut li, mut ri) = (0, 0);
    while li < l_len || ri < r_len {
        if li < l_len && ri < r_len {
            let pe = &lhs_pes[li].0;
            if *pe == rhs_pes[ri] {
                merged_rhs.insert(pe.clone());
                let l = observed_lhs.get(pe).copied().flatten();
                let r = observed_rhs.get(pe).copied();
                if let Some(v) = merge_node(schema, elem, l, r)? {
                    out.push(v);
                }
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if observed_rhs.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < l_len {
            let pe = &lhs_pes[li].0;
            if !observed_rhs.contains_key(pe) {
                if let Some(v) = merge_node(schema, elem, Some(lhs_pes[li].1), None)? {
                    out.push(v);
                }
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
            }
        }
        if ri < r_len {
            let pe = &rhs_pes[ri];
            merged_rhs.insert(pe.clone());
            let l = observed_lhs.get(pe).copied().flatten();
            if let Some(v) = merge_node(schema, elem, l, observed_rhs.get(pe).copied())? {
                out.push(v);
            }
            ri += 1;
            if next_shared.is_some_and(|n| n == pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

/// `value` without the fields in `remove` (structured-merge-diff's
/// `RemoveItems`).
pub fn remove_items(schema: &Schema, ty: TypeId, value: &Value, remove: &Set) -> Option<Value> {
    match shape(schema, ty, Some(value)) {
        Shape::Scalar => Some(value.clone()),
        Shape::List(elem, kind) => {
            let items = value.as_array()?;
            if items.is_empty() || *kind == ListKind::Atomic {
                return Some(value.clone());
            }
            let mut kept = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Ok(pe) = item_element(kind, item, i) else {
                    kept.push(item.clone());
                    continue;
                };
                if remove.has(std::slice::from_ref(&pe)) {
                    continue;
                }
                match remove.with_prefix(&pe) {
                    Some(sub) => {
                        if let Some(v) = remove_items(schema, elem, item, sub) {
                            kept.push(v);
                        }
                    }
                    None => kept.push(item.clone()),
                }
            }
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Shape::Map(m) => {
            let fields = value.as_object()?;
            if fields.is_empty() || is_atomic_map(m) {
                return Some(value.clone());
            }
            let mut kept = Map::new();
            for (key, child) in fields {
                let pe = PathElement::Field(key.clone());
                if remove.has(std::slice::from_ref(&pe)) {
                    continue;
                }
                match remove.with_prefix(&pe) {
                    Some(sub) => {
                        if let Some(v) = remove_items(schema, field_type(m, key), child, sub) {
                            kept.insert(key.clone(), v);
                        }
                    }
                    None => {
                        kept.insert(key.clone(), child.clone());
                    }
                }
            }
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
    }
}

/// Whether `value` fits the schema: every field of a struct declared, every
/// list a list and every struct an object (structured-merge-diff's
/// validation of an applied configuration). The error names the first
/// offending path.
pub fn validate(schema: &Schema, ty: TypeId, value: &Value) -> Result<(), String> {
    validate_node(schema, ty, value, &mut Vec::new())
}

fn validate_node(
    schema: &Schema,
    ty: TypeId,
    value: &Value,
    path: &mut Vec<PathElement>,
) -> Result<(), String> {
    let at = |path: &[PathElement]| super::path::Path(path.to_vec()).to_string();
    if value.is_null() {
        return Ok(());
    }
    match shape(schema, ty, Some(value)) {
        Shape::Scalar => match value {
            Value::Object(_) | Value::Array(_) => Err(format!(
                "{}: expected scalar, got {}",
                at(path),
                if value.is_object() { "map" } else { "list" }
            )),
            _ => Ok(()),
        },
        Shape::List(elem, kind) => {
            let Some(items) = value.as_array() else {
                return Err(format!("{}: expected list, got {value}", at(path)));
            };
            for (i, item) in items.iter().enumerate() {
                let pe = match kind {
                    ListKind::Atomic => PathElement::Index(i),
                    _ => item_element(kind, item, i).map_err(|e| format!("{}: {e}", at(path)))?,
                };
                path.push(pe);
                validate_node(schema, elem, item, path)?;
                path.pop();
            }
            Ok(())
        }
        Shape::Map(m) => {
            let Some(fields) = value.as_object() else {
                return Err(format!("{}: expected map, got {value}", at(path)));
            };
            for (key, child) in fields {
                path.push(PathElement::Field(key.clone()));
                if m.is_some_and(|m| m.field_type(key).is_none()) {
                    return Err(format!("{}: field not declared in schema", at(path)));
                }
                validate_node(schema, field_type(m, key), child, path)?;
                path.pop();
            }
            Ok(())
        }
    }
}
