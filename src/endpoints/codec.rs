//! Decoding request bodies into objects (with `fieldValidation`) and encoding
//! objects, lists, Tables and metadata-only views into response bodies.

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use crate::api::errors::ApiError;
use crate::api::meta::Object;
use crate::api::{self};
use crate::registry::table::{Table, TableRow};
use crate::registry::{ObjectList, Shared, Strategy};

use super::negotiate::{IncludeObject, Output};
use crate::wire::json_cost;

/// `?fieldValidation=`: what to do with fields the schema does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::BadRequest(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// Decodes a JSON object body. Unknown fields are never stored: they are
/// dropped, reported as warnings, or (Strict) refused. Returns the warnings.
pub fn decode<T: Object>(
    body: &[u8],
    validation: FieldValidation,
) -> Result<(T, Vec<String>), ApiError> {
    let value = parse_json(body, "the body of the request could not be decoded as JSON")?;
    decode_value(value, validation)
}

/// Parses a client's JSON body into a tree, within the bound of
/// [`json_cost`]: a body whose tree would cost too much is too large
/// (413); one that is not JSON is a bad request that begins `not_json`.
pub fn parse_json(body: &[u8], not_json: &str) -> Result<Value, ApiError> {
    json_cost::parse(body).map_err(|e| parse_error(e, not_json))
}

/// Parses a JSON Patch body into its operations, within the bound of
/// [`json_cost`]; one that is JSON but not a list of operations is a bad
/// request that says it is malformed.
pub fn parse_json_patch(body: &[u8], not_json: &str) -> Result<json_patch::Patch, ApiError> {
    json_cost::parse_json_patch(body).map_err(|e| match e {
        json_cost::ParseError::Invalid(e) if e.is_data() => {
            ApiError::BadRequest(format!("the JSON patch is malformed: {e}"))
        }
        other => parse_error(other, not_json),
    })
}

fn parse_error(err: json_cost::ParseError, not_json: &str) -> ApiError {
    match err {
        json_cost::ParseError::Invalid(e) => ApiError::BadRequest(format!("{not_json}: {e}")),
        too_costly @ json_cost::ParseError::TooCostly { .. } => {
            ApiError::TooLarge(too_costly.to_string())
        }
    }
}

/// Decodes an already-parsed JSON value (a patched object).
pub fn decode_value<T: Object>(
    value: Value,
    validation: FieldValidation,
) -> Result<(T, Vec<String>), ApiError> {
    let info = T::resource();
    let Value::Object(map) = &value else {
        return Err(ApiError::BadRequest(format!(
            "the body of the request must be a JSON object, not {}",
            kind_of(&value)
        )));
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err(ApiError::BadRequest(
            "Object 'Kind' is missing in the request body".to_owned(),
        ));
    }
    if api_version != api::GROUP_VERSION {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            api::GROUP_VERSION
        )));
    }
    if kind != info.kind {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    let mut unknown = Vec::new();
    let obj: T = serde_ignored::deserialize(value, |path| {
        unknown.push(format!("unknown field \"{path}\""));
    })
    .map_err(|e| {
        ApiError::BadRequest(format!(
            "the body of the request is not a valid {}: {e}",
            info.kind
        ))
    })?;
    match validation {
        FieldValidation::Strict if !unknown.is_empty() => Err(ApiError::BadRequest(format!(
            "strict decoding error: {}",
            unknown.join(", ")
        ))),
        FieldValidation::Warn => Ok((obj, unknown)),
        _ => Ok((obj, Vec::new())),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::Internal(format!("encoding response: {e}")))
}

pub fn to_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|e| ApiError::Internal(format!("encoding response: {e}")))
}

/// `PartialObjectMetadata` of one object.
pub fn partial_metadata<T: Object>(obj: &T) -> Result<Value, ApiError> {
    Ok(partial_object_metadata(to_value(obj.metadata())?))
}

/// `PartialObjectMetadata` around `metadata`.
fn partial_object_metadata(metadata: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
    })
}

fn row<S: Strategy>(
    strategy: &S,
    obj: &S::Object,
    include: IncludeObject,
) -> Result<TableRow, ApiError> {
    Ok(TableRow {
        cells: strategy.table_cells(obj),
        object: match include {
            IncludeObject::None => None,
            IncludeObject::Metadata => Some(partial_metadata(obj)?),
            IncludeObject::Object => Some(to_value(obj)?),
        },
    })
}

/// One object in the negotiated representation.
pub fn encode_object<S: Strategy>(
    strategy: &S,
    obj: &S::Object,
    output: Output,
) -> Result<Bytes, ApiError> {
    match output {
        // Straight from the typed object: no intermediate JSON tree.
        Output::Json => to_bytes(obj).map(Bytes::from),
        Output::Metadata => to_bytes(&partial_metadata(obj)?).map(Bytes::from),
        Output::Table { v1beta1, include } => {
            let metadata = json!({"resourceVersion": obj.metadata().resource_version});
            to_bytes(&table(
                strategy,
                vec![row(strategy, obj, include)?],
                metadata,
                v1beta1,
            )?)
            .map(Bytes::from)
        }
    }
}

/// A shared object in the negotiated representation: as JSON, the encoding
/// every reader of this revision shares.
pub fn encode_shared<S: Strategy>(
    strategy: &S,
    obj: &Shared<S::Object>,
    output: Output,
) -> Result<Bytes, ApiError> {
    match output {
        Output::Json => obj.json(),
        _ => encode_object(strategy, obj, output),
    }
}

fn table<S: Strategy>(
    strategy: &S,
    rows: Vec<TableRow>,
    metadata: Value,
    v1beta1: bool,
) -> Result<Value, ApiError> {
    let mut t = Table::new(strategy.table_columns(), rows, metadata);
    if v1beta1 {
        t.api_version = "meta.k8s.io/v1beta1";
    }
    to_value(&t)
}

/// A list in the negotiated representation.
pub fn encode_list<S: Strategy>(
    strategy: &S,
    list: &ObjectList<Shared<S::Object>>,
    output: Output,
) -> Result<Bytes, ApiError> {
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "resourceVersion".to_owned(),
        Value::String(list.resource_version.clone()),
    );
    if let Some(token) = &list.continue_token {
        metadata.insert("continue".to_owned(), Value::String(token.clone()));
    }
    if let Some(remaining) = list.remaining_item_count {
        metadata.insert("remainingItemCount".to_owned(), json!(remaining));
    }
    let metadata = Value::Object(metadata);
    let value = match output {
        Output::Json => {
            // The items' shared encodings, spliced in as they are.
            let items = list
                .items
                .iter()
                .map(Shared::json)
                .collect::<Result<Vec<_>, _>>()?;
            let head = to_bytes(&json!({
                "apiVersion": api::GROUP_VERSION,
                "kind": format!("{}List", S::Object::resource().kind),
                "metadata": metadata,
            }))?;
            let size = head.len() + items.iter().map(|i| i.len() + 1).sum::<usize>() + 12;
            let mut out = Vec::with_capacity(size);
            // `{…head…}` becomes `{…head…,"items":[…]}`.
            out.extend_from_slice(&head[..head.len() - 1]);
            out.extend_from_slice(b",\"items\":[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(item);
            }
            out.extend_from_slice(b"]}");
            return Ok(Bytes::from(out));
        }
        Output::Metadata => {
            let items = list
                .items
                .iter()
                .map(|o| partial_metadata(&**o))
                .collect::<Result<Vec<_>, _>>()?;
            json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadataList",
                "metadata": metadata,
                "items": items,
            })
        }
        Output::Table { v1beta1, include } => {
            let rows = list
                .items
                .iter()
                .map(|o| row(strategy, o, include))
                .collect::<Result<Vec<_>, _>>()?;
            table(strategy, rows, metadata, v1beta1)?
        }
    };
    to_bytes(&value).map(Bytes::from)
}

/// A bookmark's object: only kind, apiVersion and metadata.
pub fn bookmark_object<T: Object>(resource_version: &str, initial_events_end: bool) -> Value {
    json!({
        "kind": T::resource().kind,
        "apiVersion": api::GROUP_VERSION,
        "metadata": bookmark_metadata(resource_version, initial_events_end),
    })
}

fn bookmark_metadata(resource_version: &str, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": resource_version});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    metadata
}

/// A bookmark in the negotiated representation, as kube-apiserver turns its
/// bookmark object into what the watch asked for: a metadata watch gets a
/// `PartialObjectMetadata`, a Table watch a one-row Table whose cells are
/// those of an object that has nothing but its resourceVersion. The
/// `k8s.io/initial-events-end` row carries at least the metadata, even
/// with `includeObject=None`, since that annotation is how the client sees it.
pub fn encode_bookmark<S: Strategy>(
    strategy: &S,
    resource_version: &str,
    initial_events_end: bool,
    output: Output,
) -> Result<Bytes, ApiError> {
    let metadata = bookmark_metadata(resource_version, initial_events_end);
    let partial = || partial_object_metadata(metadata.clone());
    let value = match output {
        Output::Json => bookmark_object::<S::Object>(resource_version, initial_events_end),
        Output::Metadata => partial(),
        Output::Table { v1beta1, include } => {
            let object = match include {
                IncludeObject::Object => Some(bookmark_object::<S::Object>(
                    resource_version,
                    initial_events_end,
                )),
                IncludeObject::Metadata => Some(partial()),
                IncludeObject::None if initial_events_end => Some(partial()),
                IncludeObject::None => None,
            };
            // The cells of an object with no name, no fields and no
            // creation time, as kube's column printers give them.
            let cells = strategy
                .table_columns()
                .iter()
                .map(|c| match c.name {
                    "Name" => Value::String(String::new()),
                    "Age" => Value::String("<unknown>".to_owned()),
                    _ => Value::Null,
                })
                .collect();
            table(
                strategy,
                vec![TableRow { cells, object }],
                json!({"resourceVersion": resource_version}),
                v1beta1,
            )?
        }
    };
    to_bytes(&value).map(Bytes::from)
}

#[cfg(test)]
mod tests;
