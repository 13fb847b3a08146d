//! The `paths` of both OpenAPI documents: every operation this server serves on
//! each kind it is given, named, parameterized and answered as
//! kube-apiserver documents its own resources, in Swagger 2.0 or OpenAPI 3.0 shape.
//!
//! Only what the server actually serves is listed: no `/watch/` paths (watch is
//! `?watch=true` on a list), no server-side apply. kubectl reads these to decide
//! whether the server validates fields: it looks for a `fieldValidation` query
//! parameter on the `patch` operation whose `x-kubernetes-group-version-kind` is
//! the kind being sent. Schemas are referenced by name; they are built elsewhere.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Patch, Status, WatchEvent};
use serde_json::{json, Map, Value};

use super::Dialect;
use crate::api::schema::{self as schemas, definition_of, reference, KindSchema};
use crate::api::{self, ResourceInfo};

/// A query parameter, as kube-apiserver documents it.
#[derive(Debug, Clone, Copy)]
struct QueryParam {
    name: &'static str,
    /// The JSON type: `string`, `integer` or `boolean`.
    type_: &'static str,
    description: &'static str,
}

const ALLOW_WATCH_BOOKMARKS: QueryParam = QueryParam {
    name: "allowWatchBookmarks",
    type_: "boolean",
    description: "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
};
const CONTINUE: QueryParam = QueryParam {
    name: "continue",
    type_: "string",
    description: "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token.",
};
const DRY_RUN: QueryParam = QueryParam {
    name: "dryRun",
    type_: "string",
    description: "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
};
const FIELD_SELECTOR: QueryParam = QueryParam {
    name: "fieldSelector",
    type_: "string",
    description: "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
};
const FIELD_VALIDATION: QueryParam = QueryParam {
    name: "fieldValidation",
    type_: "string",
    description: "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default. - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
};
const LABEL_SELECTOR: QueryParam = QueryParam {
    name: "labelSelector",
    type_: "string",
    description: "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
};
const LIMIT: QueryParam = QueryParam {
    name: "limit",
    type_: "integer",
    description: "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
};
const RESOURCE_VERSION: QueryParam = QueryParam {
    name: "resourceVersion",
    type_: "string",
    description: "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
};
const RESOURCE_VERSION_MATCH: QueryParam = QueryParam {
    name: "resourceVersionMatch",
    type_: "string",
    description: "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
};
const SEND_INITIAL_EVENTS: QueryParam = QueryParam {
    name: "sendInitialEvents",
    type_: "boolean",
    description: "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.\n\nWhen `sendInitialEvents` option is set, we require `resourceVersionMatch` option to also be set.",
};
const TIMEOUT_SECONDS: QueryParam = QueryParam {
    name: "timeoutSeconds",
    type_: "integer",
    description: "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
};
const WATCH: QueryParam = QueryParam {
    name: "watch",
    type_: "boolean",
    description: "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
};

const LIST_PARAMS: &[QueryParam] = &[
    ALLOW_WATCH_BOOKMARKS,
    CONTINUE,
    FIELD_SELECTOR,
    LABEL_SELECTOR,
    LIMIT,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
    SEND_INITIAL_EVENTS,
    TIMEOUT_SECONDS,
    WATCH,
];
const WRITE_PARAMS: &[QueryParam] = &[DRY_RUN, FIELD_VALIDATION];
const DELETE_PARAMS: &[QueryParam] = &[DRY_RUN];
const DELETE_COLLECTION_PARAMS: &[QueryParam] = &[
    CONTINUE,
    DRY_RUN,
    FIELD_SELECTOR,
    LABEL_SELECTOR,
    LIMIT,
    RESOURCE_VERSION,
    RESOURCE_VERSION_MATCH,
];

const JSON: &str = "application/json";
const WATCH_STREAM: &str = "application/json;stream=watch";
/// The patch types the server applies; strategic merge and apply are refused.
const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
];

/// A request body.
#[derive(Debug)]
struct RequestBody {
    definition: String,
    media_types: &'static [&'static str],
    required: bool,
}

/// One documented response.
#[derive(Debug)]
struct Answer {
    code: &'static str,
    description: &'static str,
    definition: String,
}

/// One operation, before it is shaped for a dialect.
#[derive(Debug)]
struct Operation {
    /// The path item key: `get`, `post`, `put`, `patch` or `delete`.
    method: &'static str,
    /// `x-kubernetes-action`.
    action: &'static str,
    id: String,
    description: String,
    query: &'static [QueryParam],
    body: Option<RequestBody>,
    answers: Vec<Answer>,
    produces: &'static [&'static str],
}

/// Which objects a path addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// `/namespaces/{namespace}/<plural>` (or the bare path of a cluster-scoped resource).
    Own,
    /// `/<plural>` of a namespaced resource: every namespace at once.
    AllNamespaces,
}

/// The paths of every served resource.
pub(super) fn paths(dialect: Dialect, kinds: &[KindSchema]) -> Map<String, Value> {
    let mut paths = Map::new();
    for kind in kinds {
        resource_paths(&mut paths, kind.resource, dialect);
    }
    paths
}

fn resource_paths(paths: &mut Map<String, Value>, r: &ResourceInfo, dialect: Dialect) {
    let object = schemas::kind_definition(r.kind);
    let list = schemas::list_definition(r.kind);
    let base = format!("/apis/{}", api::GROUP_VERSION);
    let (collection, mut path_params) = if r.namespaced {
        (
            format!("{base}/namespaces/{{namespace}}/{}", r.plural),
            vec![namespace_param()],
        )
    } else {
        (format!("{base}/{}", r.plural), vec![])
    };
    let id = |verb: &str, infix: &str, suffix: &str| operation_id(r, verb, infix, suffix);
    let kind = r.kind;
    let operations = vec![
        Operation {
            method: "get",
            action: "list",
            id: id("list", "", ""),
            description: format!("list or watch objects of kind {kind}"),
            query: LIST_PARAMS,
            body: None,
            answers: ok(&list),
            produces: &[JSON, WATCH_STREAM],
        },
        Operation {
            method: "post",
            action: "post",
            id: id("create", "", ""),
            description: format!("create a {kind}"),
            query: WRITE_PARAMS,
            body: Some(body(&object, &[JSON], true)),
            answers: vec![
                answer("200", "OK", &object),
                answer("201", "Created", &object),
                answer("202", "Accepted", &object),
            ],
            produces: &[JSON],
        },
        Operation {
            method: "delete",
            action: "deletecollection",
            id: id("delete", "Collection", ""),
            description: format!("delete collection of {kind}"),
            query: DELETE_COLLECTION_PARAMS,
            body: Some(body(&definition_of::<DeleteOptions>(), &[JSON], false)),
            answers: ok(&list),
            produces: &[JSON],
        },
    ];
    paths.insert(
        collection.clone(),
        path_item(dialect, r, &path_params, operations),
    );

    path_params.insert(0, name_param(r.kind));
    let item = format!("{collection}/{{name}}");
    let operations = vec![
        read(r, &object, "", ""),
        replace(r, &object, "", ""),
        patch(r, &object, "", ""),
        Operation {
            method: "delete",
            action: "delete",
            id: id("delete", "", ""),
            description: format!("delete a {kind}"),
            query: DELETE_PARAMS,
            body: Some(body(&definition_of::<DeleteOptions>(), &[JSON], false)),
            answers: vec![
                answer("200", "OK", &definition_of::<Status>()),
                answer("202", "Accepted", &definition_of::<Status>()),
            ],
            produces: &[JSON],
        },
    ];
    paths.insert(
        item.clone(),
        path_item(dialect, r, &path_params, operations),
    );

    if r.has_status {
        let operations = vec![
            read(r, &object, "status of ", "Status"),
            replace(r, &object, "status of ", "Status"),
            patch(r, &object, "status of ", "Status"),
        ];
        paths.insert(
            format!("{item}/status"),
            path_item(dialect, r, &path_params, operations),
        );
    }

    if r.namespaced {
        let operations = vec![Operation {
            method: "get",
            action: "list",
            id: operation_id_in(r, Scope::AllNamespaces, "list", "", "ForAllNamespaces"),
            description: format!("list or watch objects of kind {kind}"),
            query: LIST_PARAMS,
            body: None,
            answers: ok(&list),
            produces: &[JSON, WATCH_STREAM],
        }];
        paths.insert(
            format!("{base}/{}", r.plural),
            path_item(dialect, r, &[], operations),
        );
    }
}

fn read(r: &ResourceInfo, object: &str, what: &str, suffix: &str) -> Operation {
    Operation {
        method: "get",
        action: "get",
        id: operation_id(r, "read", "", suffix),
        description: format!("read {what}the specified {}", r.kind),
        query: &[],
        body: None,
        answers: ok(object),
        produces: &[JSON],
    }
}

fn replace(r: &ResourceInfo, object: &str, what: &str, suffix: &str) -> Operation {
    Operation {
        method: "put",
        action: "put",
        id: operation_id(r, "replace", "", suffix),
        description: format!("replace {what}the specified {}", r.kind),
        query: WRITE_PARAMS,
        body: Some(body(object, &[JSON], true)),
        answers: vec![
            answer("200", "OK", object),
            answer("201", "Created", object),
        ],
        produces: &[JSON],
    }
}

fn patch(r: &ResourceInfo, object: &str, what: &str, suffix: &str) -> Operation {
    Operation {
        method: "patch",
        action: "patch",
        id: operation_id(r, "patch", "", suffix),
        description: format!("partially update {what}the specified {}", r.kind),
        query: WRITE_PARAMS,
        body: Some(body(&definition_of::<Patch>(), PATCH_TYPES, true)),
        answers: vec![
            answer("200", "OK", object),
            answer("201", "Created", object),
        ],
        produces: &[JSON],
    }
}

fn body(definition: &str, media_types: &'static [&'static str], required: bool) -> RequestBody {
    RequestBody {
        definition: definition.to_owned(),
        media_types,
        required,
    }
}

fn answer(code: &'static str, description: &'static str, definition: &str) -> Answer {
    Answer {
        code,
        description,
        definition: definition.to_owned(),
    }
}

fn ok(definition: &str) -> Vec<Answer> {
    vec![answer("200", "OK", definition)]
}

/// kube's operation id, e.g. `listStorageTransferV1alpha1NamespacedNamespaceTransfer`,
/// `deleteStorageTransferV1alpha1CollectionNamespacedNamespaceTransfer`,
/// `readStorageTransferV1alpha1NamespacedNamespaceTransferStatus`.
fn operation_id(r: &ResourceInfo, verb: &str, infix: &str, suffix: &str) -> String {
    operation_id_in(r, Scope::Own, verb, infix, suffix)
}

fn operation_id_in(
    r: &ResourceInfo,
    scope: Scope,
    verb: &str,
    infix: &str,
    suffix: &str,
) -> String {
    let namespaced = if r.namespaced && scope == Scope::Own {
        "Namespaced"
    } else {
        ""
    };
    format!(
        "{verb}{}{infix}{namespaced}{}{suffix}",
        group_version_name(),
        r.kind
    )
}

/// `StorageTransferV1alpha1`: the group without `.k8s.io`, camel-cased, then the
/// version, as kube names operations.
fn group_version_name() -> String {
    let group = api::GROUP.strip_suffix(".k8s.io").unwrap_or(api::GROUP);
    let mut name: String = group.split(['.', '-']).map(capitalize).collect();
    name.push_str(&capitalize(api::VERSION));
    name
}

/// The operations' tag, `storageTransfer_v1alpha1`.
fn tag() -> String {
    let name = group_version_name();
    let group = name
        .strip_suffix(&capitalize(api::VERSION))
        .unwrap_or(&name);
    let mut chars = group.chars();
    let lowered: String = chars
        .next()
        .map(|c| c.to_ascii_lowercase())
        .into_iter()
        .chain(chars)
        .collect();
    format!("{lowered}_{}", api::VERSION)
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase())
        .into_iter()
        .chain(chars)
        .collect()
}

/// A path parameter.
#[derive(Debug, Clone)]
struct PathParam {
    name: &'static str,
    description: String,
}

fn name_param(kind: &str) -> PathParam {
    PathParam {
        name: "name",
        description: format!("name of the {kind}"),
    }
}

fn namespace_param() -> PathParam {
    PathParam {
        name: "namespace",
        description: "object name and auth scope, such as for teams and projects".to_owned(),
    }
}

fn path_item(
    dialect: Dialect,
    r: &ResourceInfo,
    path_params: &[PathParam],
    operations: Vec<Operation>,
) -> Value {
    let mut item = Map::new();
    if !path_params.is_empty() {
        let params = path_params
            .iter()
            .map(|p| parameter(dialect, p.name, "path", "string", &p.description, true))
            .collect();
        item.insert("parameters".to_owned(), Value::Array(params));
    }
    for op in operations {
        item.insert(op.method.to_owned(), operation(dialect, r, op));
    }
    Value::Object(item)
}

fn parameter(
    dialect: Dialect,
    name: &str,
    location: &str,
    type_: &str,
    description: &str,
    required: bool,
) -> Value {
    let mut param = match dialect {
        Dialect::Swagger2 => json!({
            "name": name,
            "in": location,
            "description": description,
            "type": type_,
            "uniqueItems": true,
        }),
        Dialect::OpenApi3 => json!({
            "name": name,
            "in": location,
            "description": description,
            "schema": { "type": type_, "uniqueItems": true },
        }),
    };
    if required {
        param["required"] = json!(true);
    }
    param
}

fn operation(dialect: Dialect, r: &ResourceInfo, op: Operation) -> Value {
    let mut out = Map::new();
    out.insert("description".to_owned(), json!(op.description));
    out.insert("operationId".to_owned(), json!(op.id));
    out.insert("tags".to_owned(), json!([tag()]));
    out.insert("x-kubernetes-action".to_owned(), json!(op.action));
    out.insert(
        "x-kubernetes-group-version-kind".to_owned(),
        json!({ "group": api::GROUP, "kind": r.kind, "version": api::VERSION }),
    );
    let mut params: Vec<Value> = op
        .query
        .iter()
        .map(|p| parameter(dialect, p.name, "query", p.type_, p.description, false))
        .collect();
    let mut responses = Map::new();
    match dialect {
        Dialect::Swagger2 => {
            out.insert("schemes".to_owned(), json!(["https"]));
            let consumes = op.body.as_ref().map_or(&[JSON][..], |b| b.media_types);
            out.insert("consumes".to_owned(), json!(consumes));
            out.insert("produces".to_owned(), json!(op.produces));
            if let Some(body) = &op.body {
                let mut param = json!({
                    "name": "body",
                    "in": "body",
                    "schema": reference(&body.definition),
                });
                if body.required {
                    param["required"] = json!(true);
                }
                params.insert(0, param);
            }
            for a in &op.answers {
                responses.insert(
                    a.code.to_owned(),
                    json!({ "description": a.description, "schema": reference(&a.definition) }),
                );
            }
        }
        Dialect::OpenApi3 => {
            if let Some(body) = &op.body {
                let content: Map<String, Value> = body
                    .media_types
                    .iter()
                    .map(|m| {
                        (
                            (*m).to_owned(),
                            json!({ "schema": reference(&body.definition) }),
                        )
                    })
                    .collect();
                out.insert(
                    "requestBody".to_owned(),
                    json!({ "content": content, "required": body.required }),
                );
            }
            for a in &op.answers {
                let content: Map<String, Value> = op
                    .produces
                    .iter()
                    .map(|m| {
                        // A watch streams events, not the list itself.
                        let definition = if *m == WATCH_STREAM {
                            definition_of::<WatchEvent<Value>>()
                        } else {
                            a.definition.clone()
                        };
                        ((*m).to_owned(), json!({ "schema": reference(&definition) }))
                    })
                    .collect();
                responses.insert(
                    a.code.to_owned(),
                    json!({ "description": a.description, "content": content }),
                );
            }
        }
    }
    responses.insert("401".to_owned(), json!({ "description": "Unauthorized" }));
    if !params.is_empty() {
        out.insert("parameters".to_owned(), Value::Array(params));
    }
    out.insert("responses".to_owned(), Value::Object(responses));
    Value::Object(out)
}

#[cfg(test)]
mod tests;
