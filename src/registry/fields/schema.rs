//! The shape of our kinds as structured-merge-diff sees it, read from our
//! own OpenAPI definitions: which nodes are scalars, structs, maps, and how
//! each list merges (`x-kubernetes-list-type`: `atomic`, the default, `set`,
//! or `map` keyed by `x-kubernetes-list-map-keys`). So a new kind needs no
//! code here, only markers on its types.

use std::collections::BTreeMap;

use serde_json::Value;

pub type TypeId = usize;

/// How a list's items are told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole; one owner.
    Atomic,
    /// Scalars, each owned on its own.
    Set,
    /// Objects, each named by its keys' values.
    Map(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct ListType {
    pub elem: TypeId,
    pub kind: ListKind,
}

#[derive(Debug, Clone, Default)]
pub struct MapType {
    /// A struct's declared fields.
    pub fields: BTreeMap<String, TypeId>,
    /// A map's values (or a struct's unknown fields).
    pub elem: Option<TypeId>,
    pub atomic: bool,
}

impl MapType {
    pub fn field_type(&self, name: &str) -> Option<TypeId> {
        self.fields.get(name).copied().or(self.elem)
    }
}

#[derive(Debug, Clone)]
pub enum Atom {
    Scalar,
    List(ListType),
    Map(MapType),
    /// No schema: the shape is read from the value (an object is a map of
    /// untyped values, a list is atomic).
    Untyped,
}

#[derive(Debug, Clone)]
pub struct Schema {
    atoms: Vec<Atom>,
    named: BTreeMap<String, TypeId>,
}

const REF_PREFIX: &str = "#/definitions/";

impl Schema {
    /// Builds the types reachable from `roots` in Swagger 2.0 `definitions`.
    pub fn from_definitions(definitions: &BTreeMap<String, Value>, roots: &[&str]) -> Self {
        let mut schema = Schema {
            atoms: vec![Atom::Untyped],
            named: BTreeMap::new(),
        };
        for root in roots {
            schema.named_type(definitions, root);
        }
        schema
    }

    pub fn atom(&self, id: TypeId) -> &Atom {
        self.atoms.get(id).unwrap_or(&Atom::Untyped)
    }

    pub fn named(&self, name: &str) -> Option<TypeId> {
        self.named.get(name).copied()
    }

    /// The untyped atom, for nodes without a schema.
    pub const UNTYPED: TypeId = 0;

    fn named_type(&mut self, definitions: &BTreeMap<String, Value>, name: &str) -> TypeId {
        if let Some(id) = self.named.get(name) {
            return *id;
        }
        // Reserved first, so that recursive types terminate.
        let id = self.atoms.len();
        self.atoms.push(Atom::Untyped);
        self.named.insert(name.to_owned(), id);
        let atom = match definitions.get(name) {
            Some(node) => self.atom_of(definitions, node),
            None => Atom::Untyped,
        };
        self.atoms[id] = atom;
        id
    }

    fn type_of(&mut self, definitions: &BTreeMap<String, Value>, node: &Value) -> TypeId {
        if let Some(name) = reference(node) {
            return self.named_type(definitions, name);
        }
        let atom = self.atom_of(definitions, node);
        self.atoms.push(atom);
        self.atoms.len() - 1
    }

    fn atom_of(&mut self, definitions: &BTreeMap<String, Value>, node: &Value) -> Atom {
        if let Some(name) = reference(node) {
            let id = self.named_type(definitions, name);
            return self.atoms[id].clone();
        }
        let ty = node.get("type").and_then(Value::as_str).unwrap_or_default();
        if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return Atom::Scalar;
        }
        if ty == "array" || node.get("items").is_some() {
            let elem = match node.get("items") {
                Some(items) => self.type_of(definitions, items),
                None => Self::UNTYPED,
            };
            return Atom::List(ListType {
                elem,
                kind: list_kind(node),
            });
        }
        let properties = node.get("properties").and_then(Value::as_object);
        let additional = node.get("additionalProperties").filter(|v| v.is_object());
        if ty == "object" || properties.is_some() || additional.is_some() {
            let mut map = MapType {
                atomic: node.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
                ..MapType::default()
            };
            if let Some(properties) = properties {
                for (field, sub) in properties {
                    let id = self.type_of(definitions, sub);
                    map.fields.insert(field.clone(), id);
                }
            }
            map.elem = match additional {
                Some(sub) => Some(self.type_of(definitions, sub)),
                // An object with nothing declared holds anything.
                None if properties.is_none() => Some(Self::UNTYPED),
                None => None,
            };
            return Atom::Map(map);
        }
        Atom::Scalar
    }
}

fn reference(node: &Value) -> Option<&str> {
    let r = node.get("$ref").or_else(|| {
        node.get("allOf")
            .and_then(Value::as_array)
            .filter(|all| all.len() == 1)
            .and_then(|all| all[0].get("$ref"))
    })?;
    r.as_str()?.strip_prefix(REF_PREFIX)
}

/// kube-openapi's rule: `x-kubernetes-list-type` first, then a merge patch
/// strategy with its merge key, and otherwise atomic.
fn list_kind(node: &Value) -> ListKind {
    let keys = || -> Vec<String> {
        node.get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => return ListKind::Set,
        Some("map") => return ListKind::Map(keys()),
        Some(_) => return ListKind::Atomic,
        None => {}
    }
    let strategy = node
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if strategy.split(',').any(|s| s == "merge") {
        return match node
            .get("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
        {
            Some(key) => ListKind::Map(vec![key.to_owned()]),
            None => ListKind::Set,
        };
    }
    ListKind::Atomic
}
