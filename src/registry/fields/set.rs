//! Sets of field paths (structured-merge-diff's `fieldpath.Set`): what one
//! manager owns, and what changed between two objects. Stored as a trie:
//! `members` are the paths that end at this node, `children` the ones that go
//! on. A child is never empty.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::path::{Path, PathElement};
use super::schema::{Atom, Schema, TypeId};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The paths below `pe`, without it.
    pub fn with_prefix(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe)
    }

    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.union_in(other);
        out
    }

    /// Adds `other` to this set, in place.
    pub fn union_in(&mut self, other: &Set) {
        self.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            self.children.entry(pe.clone()).or_default().union_in(child);
        }
    }

    pub fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, child)| {
                let both = child.intersection(other.children.get(pe)?);
                (!both.is_empty()).then(|| (pe.clone(), both))
            })
            .collect();
        Set { members, children }
    }

    pub fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(pe, child)| {
                let rest = match other.children.get(pe) {
                    Some(theirs) => child.difference(theirs),
                    None => child.clone(),
                };
                (!rest.is_empty()).then(|| (pe.clone(), rest))
            })
            .collect();
        Set { members, children }
    }

    /// Like [`Set::difference`], but a member of `other` also removes
    /// everything below it.
    pub fn recursive_difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter(|(pe, _)| !other.members.contains(*pe))
            .filter_map(|(pe, child)| {
                let rest = match other.children.get(pe) {
                    Some(theirs) => child.recursive_difference(theirs),
                    None => child.clone(),
                };
                (!rest.is_empty()).then(|| (pe.clone(), rest))
            })
            .collect();
        Set { members, children }
    }

    /// Every path, members of a node before its children, each in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut p = prefix.clone();
            p.push(pe.clone());
            out.push(Path(p));
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The set plus every named field (a struct's field, not a map's key)
    /// that has something below it: owning `.spec.a.b` also means `.spec.a`
    /// when the set is used to remove fields.
    pub fn ensure_named_fields_are_members(&self, schema: &Schema, ty: Option<TypeId>) -> Set {
        let atom = ty.map(|t| schema.atom(t));
        let mut members = self.members.clone();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let child_ty = match (pe, atom) {
                (PathElement::Field(name), Some(Atom::Map(m))) => {
                    if m.fields.contains_key(name) {
                        members.insert(pe.clone());
                    }
                    m.field_type(name)
                }
                (PathElement::Key(_), Some(Atom::List(l))) => Some(l.elem),
                _ => None,
            };
            children.insert(
                pe.clone(),
                child.ensure_named_fields_are_members(schema, child_ty),
            );
        }
        Set { members, children }
    }

    /// The `fieldsV1` encoding: `{"f:spec":{".":{},"f:a":{}}}`.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for pe in keys {
            let mut node = match self.children.get(pe) {
                Some(child) => match child.to_fields_v1() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                },
                None => Map::new(),
            };
            if self.children.contains_key(pe) && self.members.contains(pe) {
                node.insert(".".to_owned(), Value::Object(Map::new()));
            }
            out.insert(pe.to_key(), Value::Object(node));
        }
        Value::Object(out)
    }

    /// Parses a `fieldsV1` value.
    pub fn from_fields_v1(value: &Value) -> Result<Set, String> {
        let Value::Object(map) = value else {
            return Err("fieldsV1 must be an object".to_owned());
        };
        let mut set = Set::new();
        for (key, child) in map {
            if key == "." {
                continue;
            }
            let pe = PathElement::from_key(key)?;
            let Value::Object(inner) = child else {
                return Err(format!("fieldsV1 entry {key:?} must be an object"));
            };
            if inner.is_empty() || inner.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let sub = Set::from_fields_v1(child)?;
            if !sub.is_empty() {
                set.children.insert(pe, sub);
            }
        }
        Ok(set)
    }
}
