//! The `audit.k8s.io/v1` `Event`, serialized as kube-apiserver's log
//! backend writes it: one JSON object per line, the fields in the order of
//! k8s.io/apiserver's `types.go`, timestamps in RFC 3339 with microseconds.
//!
//! Owns the event's shape and the small rules about its content
//! (managed fields left out, a long User-Agent cut short). It does no I/O.

use crate::wire::json_cost::ParseError;
use crate::wire::yaml::{DuplicateKeys, YamlError};
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::policy::{Level, Stage};
use crate::authn::UserInfo;

/// The annotation kube's truncating backend sets when it left a request or
/// response body out of an event; here, when it was over
/// [`super::MAX_AUDITED_BODY_BYTES`].
pub const ANNOTATION_TRUNCATED: &str = "audit.k8s.io/truncated";

/// kube cuts the User-Agent it records to this many bytes.
const MAX_USER_AGENT: usize = 1024;

/// One audit event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: User,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<User>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    #[serde(serialize_with = "micro_time")]
    pub request_received_timestamp: Timestamp,
    #[serde(serialize_with = "micro_time")]
    pub stage_timestamp: Timestamp,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Event {
    /// An event at `level` with the given id, received now; the caller
    /// fills in the rest.
    pub fn new(level: Level, audit_id: impl Into<String>, received: Timestamp) -> Self {
        Self {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level,
            audit_id: audit_id.into(),
            stage: Stage::RequestReceived,
            request_uri: String::new(),
            verb: String::new(),
            user: User::default(),
            impersonated_user: None,
            source_ips: Vec::new(),
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: received,
            stage_timestamp: received,
            annotations: BTreeMap::new(),
        }
    }

    /// Adds an annotation; the first value for a key wins, as kube's
    /// `AddAuditAnnotation` keeps it.
    pub fn annotate(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.annotations
            .entry(key.into())
            .or_insert_with(|| value.into());
    }

    /// Sets the User-Agent, cut to kube's limit.
    pub fn set_user_agent(&mut self, agent: &str) {
        self.user_agent = if agent.len() > MAX_USER_AGENT {
            let mut cut = MAX_USER_AGENT;
            while !agent.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}...TRUNCATED", &agent[..cut])
        } else {
            agent.to_owned()
        };
    }

    /// One line of the log: the JSON object and a newline.
    pub fn to_line(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        Ok(line)
    }
}

/// `authentication.k8s.io/v1` `UserInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct User {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for User {
    fn from(u: &UserInfo) -> Self {
        Self {
            username: u.username.clone(),
            uid: u.uid.clone().unwrap_or_default(),
            groups: u.groups.clone(),
            extra: u.extra.clone(),
        }
    }
}

/// The object a request is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

impl ObjectReference {
    /// Fills what the URL did not say (a create's name, the uid and
    /// resourceVersion) from the object's metadata, as kube's
    /// `LogRequestObject` does.
    pub fn fill_from(&mut self, object: &Value) {
        let meta = &object["metadata"];
        let fill = |field: &mut String, key: &str| {
            if field.is_empty() {
                if let Some(v) = meta[key].as_str() {
                    *field = v.to_owned();
                }
            }
        };
        fill(&mut self.namespace, "namespace");
        fill(&mut self.name, "name");
        fill(&mut self.uid, "uid");
        fill(&mut self.resource_version, "resourceVersion");
    }
}

/// The `metav1.Status` kube records as `responseStatus`: the code, and for
/// a failure its status, reason and message.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResponseStatus {
    /// Always `{}`, as Go writes a Status's empty ListMeta.
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(skip_serializing_if = "is_zero")]
    pub code: u16,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

impl ResponseStatus {
    /// Just the code, as kube records a response that is not a Status.
    pub fn code(code: u16) -> Self {
        Self {
            code,
            ..Self::default()
        }
    }

    /// The code, and the Status fields of `body` if it is a `Status`.
    pub fn from_body(code: u16, body: Option<&Value>) -> Self {
        let mut status = Self::code(code);
        if let Some(body) = body.filter(|b| b["kind"] == "Status") {
            let text = |key: &str| body[key].as_str().unwrap_or_default().to_owned();
            status.status = text("status");
            status.message = text("message");
            status.reason = text("reason");
            status.details = body.get("details").filter(|d| !d.is_null()).cloned();
        }
        status
    }
}

/// Now, to the microsecond as kube records it.
pub fn now() -> Timestamp {
    Timestamp::now()
}

fn micro_time<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

/// Drops `metadata.managedFields` from an object, from each item of a list
/// and from each row object of a Table, as kube's `omitManagedFields` does.
pub fn strip_managed_fields(object: &mut Value) {
    fn strip_one(o: &mut Value) {
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    strip_one(object);
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip_one);
    }
    if object["kind"] == "Table" {
        if let Some(rows) = object.get_mut("rows").and_then(Value::as_array_mut) {
            for row in rows {
                if let Some(o) = row.get_mut("object") {
                    strip_one(o);
                }
            }
        }
    }
}

/// A request or response body as the event carries it: JSON as is, YAML
/// (server-side apply) converted; anything else (CBOR) is left out, and so
/// is YAML that would cost more than its size (see [`read_body`]).
pub fn parse_body(bytes: &[u8], content_type: Option<&str>) -> Option<Value> {
    read_body(bytes, content_type).ok().flatten()
}

/// The annotation that says why a request body the level would record is
/// not in `requestObject`.
pub const ANNOTATION_REQUEST_OBJECT: &str = "audit.k8s.io/request-object";

/// [`parse_body`], saying why YAML was left out: `Err` holds the value of
/// [`ANNOTATION_REQUEST_OBJECT`].
///
/// JSON is read only if its tree would cost no more than the handler lets
/// it (`wire::json_cost`).
///
/// YAML is read within the bounds the apply handler reads it in
/// (`wire::yaml`: its nesting, its number of values, and its text at most
/// twice the body's bytes, counting what aliases repeat), so a few
/// kilobytes of aliases (`*name`) never become billions of values here; a
/// key given twice is read as kube reads it, the last one winning.
pub fn read_body(bytes: &[u8], content_type: Option<&str>) -> Result<Option<Value>, &'static str> {
    if bytes.is_empty() {
        return Ok(None);
    }
    match crate::wire::json_cost::parse(bytes) {
        Ok(v) => return Ok(Some(v)),
        Err(ParseError::TooCostly { .. }) => return Err("omitted (json too costly to decode)"),
        Err(ParseError::Invalid(_)) => {}
    }
    let yaml = content_type.is_some_and(|ct| ct.to_ascii_lowercase().contains("yaml"));
    if !yaml {
        return Ok(None);
    }
    match crate::wire::yaml::to_json(bytes, DuplicateKeys::LastWins) {
        Ok(v) => Ok(Some(v)),
        Err(YamlError::TooDeep(_) | YamlError::TooManyElements) => {
            Err("omitted (yaml too deep or too large)")
        }
        Err(YamlError::Expands) => Err("omitted (yaml aliases expand beyond the body)"),
        Err(YamlError::DuplicateKey(_) | YamlError::Invalid(_)) => Ok(None),
    }
}
