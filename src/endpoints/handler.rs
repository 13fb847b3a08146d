//! The verbs of one resource, on top of its [`Store`]: decode, call the store,
//! encode. Generic over the strategy, so every resource is served by the same
//! code.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use crate::api::errors::ApiError;
use crate::api::meta::Object;
use crate::api::{self};
use crate::registry::{
    Context, DeleteOptions, DeleteOutcome, LabelSelector, ListOptions, Shared, Store, Strategy,
    WatchEvent, WatchOptions,
};

use super::codec::{self, FieldValidation};
use super::negotiate::{self, Output, PatchType};
use super::request::{Query, ResourceRequest, Verb};
use super::with_warnings;
use super::{json_response, Body};
use crate::wire::bounded_patch;
use crate::wire::MAX_BODY_BYTES;

/// Everything a verb needs from the HTTP request, already read and checked.
#[derive(Debug)]
pub struct Call {
    pub request: ResourceRequest,
    pub query: Query,
    pub output: Output,
    pub content_type: Option<String>,
    pub body: Bytes,
    pub ctx: Context,
}

/// A served resource, behind a trait object so that routing needs no generics.
#[async_trait::async_trait]
pub trait Resource: Send + Sync + std::fmt::Debug {
    async fn serve(&self, call: Call) -> Result<Response<Body>, ApiError>;

    /// How many objects a list of `namespace` with `query` may return,
    /// counted no further than `at_most`: the watch cache's count in that
    /// scope, or `limit` when the list honours it and it is fewer.
    fn list_objects(&self, namespace: Option<&str>, query: &Query, at_most: usize) -> usize;

    /// Whether the resource's watch cache has synced.
    fn is_ready(&self) -> bool;

    /// The resource's store, for a caller that knows its strategy (the
    /// controllers) to take back as `Store<S>`.
    fn store(&self) -> Arc<dyn std::any::Any + Send + Sync>;
}

/// The generic handler of one resource.
#[derive(Debug)]
pub struct Handler<S: Strategy> {
    store: Arc<Store<S>>,
}

impl<S: Strategy> Handler<S> {
    pub fn new(store: Arc<Store<S>>) -> Self {
        Self { store }
    }
}

#[async_trait::async_trait]
impl<S: Strategy> Resource for Handler<S> {
    fn is_ready(&self) -> bool {
        self.store.is_ready()
    }

    fn store(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.store.clone()
    }

    fn list_objects(&self, namespace: Option<&str>, query: &Query, at_most: usize) -> usize {
        let count = self.store.count_in(namespace, at_most);
        let limit = query
            .int("limit")
            .ok()
            .flatten()
            .and_then(|l| usize::try_from(l).ok())
            .filter(|l| *l > 0);
        match limit {
            Some(limit)
                if crate::registry::store::list_honours_limit(
                    query.get("resourceVersion"),
                    query.get("continue"),
                ) =>
            {
                count.min(limit)
            }
            _ => count,
        }
    }

    async fn serve(&self, call: Call) -> Result<Response<Body>, ApiError> {
        match call.request.verb {
            Verb::Get => self.get(&call).await,
            Verb::List => self.list(&call).await,
            Verb::Watch => self.watch(&call).await,
            Verb::Create => self.create(&call).await,
            Verb::Update => self.update(&call).await,
            Verb::Patch => self.patch(&call).await,
            Verb::Delete => self.delete(&call).await,
            Verb::DeleteCollection => self.delete_collection(&call).await,
        }
    }
}

fn namespace(call: &Call) -> &str {
    call.request.namespace.as_deref().unwrap_or_default()
}

fn name(call: &Call) -> &str {
    call.request.name.as_deref().unwrap_or_default()
}

fn respond(status: StatusCode, body: Bytes) -> Result<Response<Body>, ApiError> {
    Ok(json_response(status, body))
}

impl<S: Strategy> Handler<S> {
    fn encode(&self, obj: &S::Object, output: Output) -> Result<Bytes, ApiError> {
        codec::encode_object(self.store.strategy(), obj, output)
    }

    fn list_options(&self, q: &Query) -> Result<ListOptions, ApiError> {
        Ok(ListOptions {
            label_selector: LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?,
            field_selector: self
                .store
                .parse_field_selector(q.get("fieldSelector").unwrap_or_default())?,
            limit: q.int("limit")?,
            continue_token: q
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            resource_version: q.get("resourceVersion").map(str::to_owned),
            resource_version_match: q
                .get("resourceVersionMatch")
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
        })
    }

    /// Decodes an object body and checks it against the URL.
    fn decode_body(&self, call: &Call) -> Result<(S::Object, Vec<String>), ApiError> {
        negotiate::require_json(call.content_type.as_deref())?;
        let validation = FieldValidation::parse(call.query.get("fieldValidation"))?;
        let (obj, warnings) = codec::decode::<S::Object>(&call.body, validation)?;
        check_identity(&obj, call)?;
        Ok((obj, warnings))
    }

    async fn get(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        let obj = self
            .store
            .read(
                namespace(call),
                name(call),
                call.query.get("resourceVersion"),
            )
            .await?;
        respond(
            StatusCode::OK,
            codec::encode_shared(self.store.strategy(), &obj, call.output)?,
        )
    }

    async fn list(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        let opts = self.list_options(&call.query)?;
        let list = self
            .store
            .list(call.request.namespace.as_deref(), &opts)
            .await?;
        respond(
            StatusCode::OK,
            codec::encode_list(self.store.strategy(), &list, call.output)?,
        )
    }

    async fn create(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        validate_options(call, "CreateOptions", None)?;
        let (obj, warnings) = self.decode_body(call)?;
        let created = self.store.create(&call.ctx, namespace(call), obj).await?;
        let resp = respond(StatusCode::CREATED, self.encode(&created, call.output)?)?;
        Ok(with_warnings(resp, &warnings))
    }

    async fn update(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        validate_options(call, "UpdateOptions", None)?;
        let (obj, warnings) = self.decode_body(call)?;
        let updated = self
            .store
            .update(
                &call.ctx,
                namespace(call),
                name(call),
                obj,
                call.request.status,
            )
            .await?;
        let resp = respond(StatusCode::OK, self.encode(&updated, call.output)?)?;
        Ok(with_warnings(resp, &warnings))
    }

    async fn patch(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        let patch_type = negotiate::patch_type(call.content_type.as_deref())?;
        validate_options(call, "PatchOptions", Some(patch_type))?;
        let validation = FieldValidation::parse(call.query.get("fieldValidation"))?;
        if patch_type == PatchType::Apply {
            return self.apply(call, validation).await;
        }
        const NOT_JSON: &str = "the patch could not be decoded as JSON";
        let patch = match patch_type {
            PatchType::Json => Patch::Json(codec::parse_json_patch(&call.body, NOT_JSON)?),
            PatchType::Merge => {
                let patch = codec::parse_json(&call.body, NOT_JSON)?;
                if !patch.is_object() {
                    return Err(ApiError::BadRequest(
                        "a merge patch must be a JSON object".to_owned(),
                    ));
                }
                Patch::Merge(patch)
            }
            PatchType::Apply => unreachable_apply()?,
        };
        // No patch may grow the object past what a client could send whole.
        let limits = bounded_patch::Limits::new(MAX_BODY_BYTES);
        let warnings = std::sync::Mutex::new(Vec::new());
        let updated = self
            .store
            .guaranteed_update(
                &call.ctx,
                namespace(call),
                name(call),
                call.request.status,
                |current| {
                    let mut doc = serde_json::to_value(current)
                        .map_err(|e| ApiError::Internal(format!("encoding for patch: {e}")))?;
                    // A patch may pin the version it was made against; otherwise it
                    // applies to whatever is current.
                    let pinned_before = doc["metadata"]["resourceVersion"].clone();
                    match &patch {
                        Patch::Json(ops) => bounded_patch::apply(&mut doc, ops, &limits)
                            .map_err(|e| json_patch_error::<S::Object>(e, name(call)))?,
                        Patch::Merge(patch) => json_patch::merge(&mut doc, patch),
                    }
                    if doc["metadata"]["resourceVersion"] == pinned_before {
                        doc["metadata"]["resourceVersion"] = Value::Null;
                    }
                    let (obj, w) = codec::decode_value::<S::Object>(doc, validation)?;
                    if let Ok(mut all) = warnings.lock() {
                        *all = w;
                    }
                    check_identity(&obj, call)?;
                    Ok(obj)
                },
            )
            .await?;
        let resp = respond(StatusCode::OK, self.encode(&updated, call.output)?)?;
        let warnings = warnings.into_inner().unwrap_or_default();
        Ok(with_warnings(resp, &warnings))
    }

    /// Server-side apply: the body is the configuration the manager wants,
    /// in YAML (JSON is YAML too).
    async fn apply(
        &self,
        call: &Call,
        validation: FieldValidation,
    ) -> Result<Response<Body>, ApiError> {
        let (config, duplicates) = decode_apply_body(&call.body)?;
        let force = call.query.bool("force")?.unwrap_or(false);
        let warnings = std::sync::Mutex::new(Vec::new());
        let (obj, created) = self
            .store
            .apply(
                &call.ctx,
                namespace(call),
                name(call),
                call.request.status,
                &config,
                force,
                |merged| {
                    // As kube: the strict reading of the YAML comes after
                    // the merge, before the write.
                    if let Some(dup) = &duplicates {
                        if validation == FieldValidation::Strict {
                            return Err(ApiError::BadRequest(format!(
                                "error strict decoding YAML: {dup}"
                            )));
                        }
                    }
                    let (obj, mut w) = codec::decode_value::<S::Object>(merged, validation)?;
                    if validation == FieldValidation::Warn {
                        w.extend(duplicates.clone());
                    }
                    if let Ok(mut all) = warnings.lock() {
                        *all = w;
                    }
                    check_identity(&obj, call)?;
                    Ok(obj)
                },
            )
            .await?;
        let code = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        let resp = respond(code, self.encode(&obj, call.output)?)?;
        let warnings = warnings.into_inner().unwrap_or_default();
        Ok(with_warnings(resp, &warnings))
    }

    fn delete_options(&self, call: &Call) -> Result<(DeleteOptions, bool), ApiError> {
        let mut opts = DeleteOptions::default();
        let mut dry_run = false;
        if !call.body.is_empty() {
            let body =
                codec::parse_json(&call.body, "the DeleteOptions body could not be decoded")?;
            if !body.is_object() {
                return Err(ApiError::BadRequest(
                    "DeleteOptions must be a JSON object".to_owned(),
                ));
            }
            let text = |v: &Value, what: &str| -> Result<Option<String>, ApiError> {
                match v {
                    Value::Null => Ok(None),
                    Value::String(s) => Ok(Some(s.clone())),
                    _ => Err(ApiError::BadRequest(format!(
                        "DeleteOptions {what} must be a string"
                    ))),
                }
            };
            opts.precondition_uid = text(&body["preconditions"]["uid"], "preconditions.uid")?;
            opts.precondition_resource_version = text(
                &body["preconditions"]["resourceVersion"],
                "preconditions.resourceVersion",
            )?;
            match &body["dryRun"] {
                Value::Null => {}
                Value::Array(values) if values.iter().all(|v| v == "All") => {
                    dry_run = !values.is_empty()
                }
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "dryRun: Unsupported value: {other}: supported values: \"All\""
                    )))
                }
            }
        }
        Ok((opts, dry_run))
    }

    async fn delete(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        let (opts, body_dry_run) = self.delete_options(call)?;
        let mut ctx = call.ctx.clone();
        ctx.dry_run |= body_dry_run;
        match self
            .store
            .delete(&ctx, namespace(call), name(call), &opts)
            .await?
        {
            DeleteOutcome::Pending(obj) => respond(StatusCode::OK, self.encode(&obj, call.output)?),
            DeleteOutcome::Deleted(obj) => {
                let info = S::Object::resource();
                respond(
                    StatusCode::OK,
                    codec::to_bytes(&json!({
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {
                            "name": obj.metadata().name,
                            "group": api::GROUP,
                            "kind": info.plural,
                            "uid": obj.metadata().uid,
                        }
                    }))?
                    .into(),
                )
            }
        }
    }

    async fn delete_collection(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        let (opts, body_dry_run) = self.delete_options(call)?;
        let mut ctx = call.ctx.clone();
        ctx.dry_run |= body_dry_run;
        let list_opts = self.list_options(&call.query)?;
        let deleted = self
            .store
            .delete_collection(&ctx, call.request.namespace.as_deref(), &list_opts, &opts)
            .await?;
        respond(
            StatusCode::OK,
            codec::encode_list(self.store.strategy(), &deleted, call.output)?,
        )
    }

    async fn watch(&self, call: &Call) -> Result<Response<Body>, ApiError> {
        let q = &call.query;
        let mut field_selector = q.get("fieldSelector").unwrap_or_default().to_owned();
        // A watch on a named object is a watch with metadata.name=<name>.
        if let Some(n) = &call.request.name {
            if !field_selector.is_empty() {
                field_selector.push(',');
            }
            field_selector.push_str(&format!("metadata.name={n}"));
        }
        let opts = WatchOptions {
            label_selector: LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?,
            field_selector: self.store.parse_field_selector(&field_selector)?,
            resource_version: q.get("resourceVersion").map(str::to_owned),
            resource_version_match: q
                .get("resourceVersionMatch")
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
            send_initial_events: q.bool("sendInitialEvents")?,
            allow_bookmarks: q.bool("allowWatchBookmarks")?.unwrap_or(false),
        };
        let timeout = match q.int("timeoutSeconds")? {
            Some(t) if t < 0 => {
                return Err(ApiError::BadRequest(
                    "timeoutSeconds must not be negative".to_owned(),
                ))
            }
            Some(t) if t > 0 => Duration::from_secs(t.unsigned_abs()),
            // kube picks 30–60 minutes; clients re-watch either way.
            _ => Duration::from_secs(30 * 60),
        };
        let watch = self
            .store
            .watch(call.request.namespace.as_deref(), opts)
            .await?;
        let strategy = self.store.strategy().clone();
        let output = call.output;
        let deadline = tokio::time::Instant::now() + timeout;

        let events = futures::stream::unfold(Some(watch), move |state| {
            let strategy = strategy.clone();
            async move {
                let mut watch = state?;
                let next = tokio::time::timeout_at(deadline, watch.next())
                    .await
                    .ok()??;
                let line = match next {
                    Ok(event) => encode_event(&strategy, event, output),
                    Err(e) => {
                        let status = serde_json::to_value(e.to_status()).unwrap_or(Value::Null);
                        let line = json!({"type": "ERROR", "object": status});
                        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
                        bytes.push(b'\n');
                        return Some((Ok::<_, Infallible>(Frame::data(Bytes::from(bytes))), None));
                    }
                };
                Some((Ok(Frame::data(line)), Some(watch)))
            }
        });
        let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(StreamExt::boxed(
            events,
        ))));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        Ok(resp)
    }
}

/// One watch event as a JSON line. The object's encoding is the one every
/// watcher of this revision shares, spliced in as it is.
fn encode_event<S: Strategy>(
    strategy: &S,
    event: WatchEvent<Shared<S::Object>>,
    output: Output,
) -> Bytes {
    let (kind, object) = match event {
        WatchEvent::Added(o) => ("ADDED", codec::encode_shared(strategy, &o, output)),
        WatchEvent::Modified(o) => ("MODIFIED", codec::encode_shared(strategy, &o, output)),
        WatchEvent::Deleted(o) => ("DELETED", codec::encode_shared(strategy, &o, output)),
        WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        } => (
            "BOOKMARK",
            codec::encode_bookmark(strategy, &resource_version, initial_events_end, output),
        ),
    };
    let (kind, object) = match object {
        Ok(object) => (kind, object),
        Err(e) => (
            "ERROR",
            Bytes::from(serde_json::to_vec(&e.to_status()).unwrap_or_default()),
        ),
    };
    let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(&object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// A decoded patch body.
#[derive(Debug)]
enum Patch {
    /// `application/json-patch+json`: applied within [`bounded_patch::Limits`].
    Json(json_patch::Patch),
    /// `application/merge-patch+json`: never larger than the object plus the body.
    Merge(Value),
}

/// A JSON Patch that would cost too much is too large (413, as kube answers
/// too many operations); one that does not apply is invalid (422, as kube
/// answers it).
fn json_patch_error<T: Object>(err: bounded_patch::PatchError, name: &str) -> ApiError {
    if err.is_too_large() {
        return ApiError::TooLarge(err.to_string());
    }
    ApiError::Invalid {
        group: api::GROUP.to_owned(),
        kind: T::resource().kind.to_owned(),
        name: name.to_owned(),
        causes: vec![crate::api::errors::FieldCause {
            reason: "FieldValueInvalid".to_owned(),
            field: String::new(),
            message: format!("the JSON patch could not be applied: {err}"),
        }],
    }
}

/// An apply body: YAML (or JSON) whose top level is an object, and what a
/// strict reading objects to (a key given twice), for `fieldValidation`.
///
/// One parse within `wire::yaml`'s bounds, which refuses a key given twice;
/// only then a second, where the last of them wins, as kube reads it.
pub(super) fn decode_apply_body(body: &[u8]) -> Result<(Value, Option<String>), ApiError> {
    use crate::wire::yaml::{self, DuplicateKeys, YamlError};
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((Value::Object(serde_json::Map::new()), None));
    }
    let refuse = |e: YamlError| {
        ApiError::BadRequest(match e {
            YamlError::TooDeep(_) | YamlError::TooManyElements => {
                format!("error decoding YAML: {e}")
            }
            YamlError::Expands | YamlError::DuplicateKey(_) | YamlError::Invalid(_) => {
                format!("error decoding YAML: error converting YAML to JSON: {e}")
            }
        })
    };
    let (config, duplicates) = match yaml::to_json(body, DuplicateKeys::Refuse) {
        Ok(config) => (config, None),
        Err(YamlError::DuplicateKey(dup)) => (
            yaml::to_json(body, DuplicateKeys::LastWins).map_err(refuse)?,
            Some(dup),
        ),
        Err(e) => return Err(refuse(e)),
    };
    // What the tree costs: a body can cost many times its size as JSON.
    crate::wire::json_cost::check_tree(&config, body.len())
        .map_err(|e| ApiError::TooLarge(e.to_string()))?;
    let go_type = match &config {
        Value::Null => return Ok((Value::Object(serde_json::Map::new()), duplicates)),
        Value::Object(_) => return Ok((config, duplicates)),
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
    };
    Err(ApiError::BadRequest(format!(
        "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {go_type} into Go value of type map[string]interface {{}}"
    )))
}

fn unreachable_apply<T>() -> Result<T, ApiError> {
    Err(ApiError::Internal(
        "apply is served by its own path".to_owned(),
    ))
}

/// kube's `Validate{Create,Update,Patch}Options` for the field manager:
/// required for apply, at most 128 bytes, printable; `force` only for apply.
fn validate_options(
    call: &Call,
    kind: &str,
    patch_type: Option<PatchType>,
) -> Result<(), ApiError> {
    let manager = call.query.get("fieldManager").unwrap_or_default();
    let mut causes = Vec::new();
    let cause = |reason: &str, field: &str, message: String| crate::api::errors::FieldCause {
        reason: reason.to_owned(),
        field: field.to_owned(),
        message,
    };
    match patch_type {
        Some(PatchType::Apply) if manager.is_empty() => causes.push(cause(
            "FieldValueRequired",
            "fieldManager",
            "Required value: is required for apply patch".to_owned(),
        )),
        Some(PatchType::Apply) | None => {}
        Some(_) if call.query.get("force").is_some() => causes.push(cause(
            "FieldValueForbidden",
            "force",
            "Forbidden: may not be specified for non-apply patch".to_owned(),
        )),
        Some(_) => {}
    }
    if manager.len() > crate::registry::fields::manager::MAX_MANAGER_LENGTH {
        causes.push(cause(
            "FieldValueTooLong",
            "fieldManager",
            format!(
                "Too long: may not be more than {} bytes",
                crate::registry::fields::manager::MAX_MANAGER_LENGTH
            ),
        ));
    }
    for (i, c) in manager.char_indices() {
        if !crate::registry::fields::manager::is_printable(c) {
            causes.push(cause(
                "FieldValueInvalid",
                "fieldManager",
                format!(
                    "Invalid value: {}: invalid character U+{:04X} (at position {i})",
                    serde_json::to_string(manager).unwrap_or_default(),
                    u32::from(c)
                ),
            ));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        group: "meta.k8s.io".to_owned(),
        kind: kind.to_owned(),
        name: String::new(),
        causes,
    })
}

/// The body's namespace and name must agree with the URL.
fn check_identity<T: Object>(obj: &T, call: &Call) -> Result<(), ApiError> {
    let meta = obj.metadata();
    if let Some(ns) = meta.namespace.as_deref().filter(|n| !n.is_empty()) {
        if Some(ns) != call.request.namespace.as_deref() {
            return Err(ApiError::BadRequest(format!(
                "the namespace of the provided object ({ns}) does not match the namespace sent on the request ({})",
                call.request.namespace.as_deref().unwrap_or_default()
            )));
        }
    }
    if let Some(url_name) = call.request.name.as_deref() {
        let body_name = meta.name.as_deref().unwrap_or_default();
        if body_name != url_name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
            )));
        }
    }
    Ok(())
}
