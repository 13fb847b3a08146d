//! MutatingAdmissionPolicy values: typed object construction
//! (`Object{metadata: Object.metadata{labels: {"a": "b"}}}`, for
//! ApplyConfiguration mutations), `JSONPatch{op: "add", path: ..., value:
//! ...}` and `jsonpatch.escapeKey(k)`.
//!
//! Struct literals reach here as `@struct("Object.metadata", {fields})`
//! calls (see [`crate::rewrite`]); they evaluate to a [`TypedObject`], which
//! selects its fields like a map and renders as a JSON object.

use std::collections::HashMap;

use cel::common::traits::Indexer;
use cel::common::types::{CelMap, CelString, Kind, Type, DYN_TYPE, MAP_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use serde_json::Value as Json;

use crate::convert::{key_string, to_json, to_static, KubeValue};
use crate::cost;
use crate::errors::error;
use crate::rewrite::STRUCT;
use crate::util::{arg, str_arg, string_ret, Args, Ret};

/// The fields a `JSONPatch` has.
const JSON_PATCH_FIELDS: &[&str] = &["op", "path", "from", "value"];

static OBJECT_TYPE: Type = Type::simple_type(Kind::Struct, "Object");

pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        STRUCT,
        "kube_struct",
        vec![STRING_TYPE, MAP_TYPE],
        construct,
    )?;
    env.add_overload(
        "jsonpatch.escapeKey",
        "string_jsonpatch_escape_key",
        vec![STRING_TYPE],
        escape_key,
    )?;
    let _ = DYN_TYPE;
    Ok(())
}

/// An object built by a struct literal: `Object{...}`, `Object.spec{...}`
/// or `JSONPatch{...}`.
#[derive(Debug)]
pub(crate) struct TypedObject {
    r#type: Type,
    fields: CelMap<'static>,
}

impl Clone for TypedObject {
    fn clone(&self) -> Self {
        TypedObject {
            r#type: self.r#type.to_owned(),
            fields: self.fields.clone(),
        }
    }
}

impl PartialEq for TypedObject {
    fn eq(&self, other: &Self) -> bool {
        self.r#type == other.r#type && self.fields.equals(&other.fields)
    }
}

impl Val for TypedObject {
    fn get_type(&self) -> &Type {
        &self.r#type
    }

    fn cel_type() -> &'static Type {
        &OBJECT_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<TypedObject>()
            .is_some_and(|o| o == self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl StaticVal for TypedObject {}

impl Indexer for TypedObject {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Indexer::get(&self.fields, idx)
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl KubeValue for TypedObject {
    fn to_json(&self) -> Result<Json, ExecutionError> {
        let mut entries: Vec<_> = self.fields.inner().iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = serde_json::Map::new();
        for (k, v) in entries {
            out.insert(key_string(k), to_json(v.as_ref())?);
        }
        Ok(Json::Object(out))
    }

    fn boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

/// Whether `name` names a type a struct literal may construct.
fn is_object_type(name: &str) -> bool {
    name == "Object"
        || name.strip_prefix("Object.").is_some_and(|path| {
            path.split('.').all(|seg| {
                !seg.is_empty() && seg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
}

/// `@struct(name, fields)`.
fn construct<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let name = str_arg(&args, 0)?.trim_start_matches('.');
    let fields = arg::<CelMap>(&args, 1)?;
    cost::charge(1 + fields.inner().len() as u64)?;
    if name == "JSONPatch" {
        for (k, v) in fields.inner() {
            let key = key_string(k);
            if !JSON_PATCH_FIELDS.contains(&key.as_str()) {
                return Err(error(format!("no such field '{key}' in type 'JSONPatch'")));
            }
            if key != "value" && v.downcast_ref::<CelString>().is_none() {
                return Err(error(format!(
                    "field '{key}' of type 'JSONPatch' must be a string, got '{}'",
                    v.get_type().name()
                )));
            }
        }
    } else if !is_object_type(name) {
        return Err(error(format!(
            "undeclared reference to '{name}': only Object, Object.<field>... and JSONPatch can be constructed"
        )));
    }
    let entries = fields
        .inner()
        .iter()
        .map(|(k, v)| Ok((k.clone().into_static(), to_static(v.as_ref())?)))
        .collect::<Result<HashMap<_, _>, ExecutionError>>()?;
    Ok(CowVal::owned(TypedObject {
        r#type: Type::new_struct(name.to_owned()),
        fields: CelMap::from(entries),
    }))
}

/// `jsonpatch.escapeKey(k)`: `~` becomes `~0` and `/` becomes `~1`.
fn escape_key<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let key = str_arg(&args, 0)?;
    string_ret(key.replace('~', "~0").replace('/', "~1"))
}
