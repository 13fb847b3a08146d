//! Whether a webhook applies to a request, before its matchConditions:
//! `rules` (kube's `predicates/rules`), `objectSelector`
//! (`predicates/object`) and `namespaceSelector` (`predicates/namespace`).
//!
//! `matchPolicy` needs nothing here: we serve one version of each kind, so
//! `Equivalent` finds no other resource than `Exact` does.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::errors::{ApiError, GroupResource};
use crate::registry::admission::Attributes;

use super::hook::Hook;
use crate::admission::Namespaces;

/// Whether any of the webhook's rules matches the request.
pub(super) fn rules_match(hook: &Hook<'_>, attrs: &Attributes) -> bool {
    hook.rules.iter().any(|rule| {
        scope_matches(rule.scope.as_deref(), attrs)
            && operation_matches(rule.operations.as_deref().unwrap_or_default(), attrs)
            && exact_or_wildcard(rule.api_groups.as_deref().unwrap_or_default(), &attrs.group)
            && exact_or_wildcard(
                rule.api_versions.as_deref().unwrap_or_default(),
                &attrs.version,
            )
            && resource_matches(rule.resources.as_deref().unwrap_or_default(), attrs)
    })
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|item| item == "*" || item == requested)
}

fn is_namespace_object(attrs: &Attributes) -> bool {
    attrs.group.is_empty() && attrs.version == "v1" && attrs.resource == "namespaces"
}

fn scope_matches(scope: Option<&str>, attrs: &Attributes) -> bool {
    match scope {
        None | Some("*") => true,
        Some("Namespaced") => !is_namespace_object(attrs) && !attrs.namespace.is_empty(),
        Some("Cluster") => is_namespace_object(attrs) || attrs.namespace.is_empty(),
        Some(_) => false,
    }
}

fn operation_matches(operations: &[String], attrs: &Attributes) -> bool {
    let requested = attrs.operation.as_str();
    operations.iter().any(|op| op == "*" || op == requested)
}

/// `resource`, `resource/subresource`, with `*` for either part: `*` alone
/// matches only main resources, `*/*` everything.
fn resource_matches(resources: &[String], attrs: &Attributes) -> bool {
    resources.iter().any(|entry| {
        let (res, sub) = entry.split_once('/').unwrap_or((entry.as_str(), ""));
        (res == "*" || res == attrs.resource) && (sub == "*" || sub == attrs.subresource)
    })
}

/// A `metav1.LabelSelector` as requirements (kube's
/// `LabelSelectorAsSelector`). An unset selector is the empty one: the API
/// server defaults both webhook selectors to `{}`.
#[derive(Debug)]
struct Requirements(Vec<Requirement>);

#[derive(Debug)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirements {
    fn parse(selector: Option<&LabelSelector>) -> Result<Self, String> {
        let mut out = Vec::new();
        let Some(selector) = selector else {
            return Ok(Self(out));
        };
        for (key, value) in selector.match_labels.iter().flatten() {
            out.push(Requirement::In(key.clone(), vec![value.clone()]));
        }
        for expr in selector.match_expressions.iter().flatten() {
            let values = expr.values.clone().unwrap_or_default();
            let key = expr.key.clone();
            let requirement = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err("values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty".to_owned());
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!(
                        "values: Invalid value: {}: values set must be empty for exists and does not exist",
                        go_strings(&values)
                    ));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            out.push(requirement);
        }
        Ok(Self(out))
    }

    /// kube's `selector.Empty()`: matches everything without looking.
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

/// Go's `%#v` of a `[]string`, as kube's field errors print it.
fn go_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// The labels of a JSON object; `None` when it is no object.
fn object_labels(object: &serde_json::Value) -> Option<BTreeMap<String, String>> {
    let object = object.as_object()?;
    let labels = object
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.as_object())
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    Some(labels)
}

/// `objectSelector`: the new or the old object's labels match.
pub(super) fn object_selector_matches(
    hook: &Hook<'_>,
    attrs: &Attributes,
) -> Result<bool, ApiError> {
    let selector = Requirements::parse(hook.object_selector).map_err(ApiError::Internal)?;
    if selector.is_empty() {
        return Ok(true);
    }
    let matches = |object: Option<&serde_json::Value>| {
        object
            .and_then(object_labels)
            .is_some_and(|labels| selector.matches(&labels))
    };
    Ok(matches(attrs.object.as_ref()) || matches(attrs.old_object.as_ref()))
}

/// `namespaceSelector`: the labels of the request's namespace match. A
/// namespace the cache does not have is asked of kube-apiserver (`client`),
/// and one that does not exist refuses the request with kube's 404.
pub(super) async fn namespace_selector_matches(
    hook: &Hook<'_>,
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
    client: Option<&kube::Client>,
) -> Result<bool, ApiError> {
    if attrs.namespace.is_empty() && attrs.resource != "namespaces" {
        // A cluster-scoped object other than a namespace is never exempted.
        return Ok(true);
    }
    let selector = Requirements::parse(hook.namespace_selector).map_err(ApiError::Internal)?;
    if selector.is_empty() {
        return Ok(true);
    }
    let labels = if attrs.resource == "namespaces"
        && attrs.subresource.is_empty()
        && attrs.operation != crate::registry::admission::Operation::Delete
    {
        attrs
            .object
            .as_ref()
            .and_then(object_labels)
            .unwrap_or_default()
    } else {
        namespace_labels(&attrs.namespace, namespaces, client).await?
    };
    Ok(selector.matches(&labels))
}

async fn namespace_labels(
    name: &str,
    namespaces: &dyn Namespaces,
    client: Option<&kube::Client>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let labels = |ns: &Namespace| ns.metadata.labels.clone().unwrap_or_default();
    if let Some(ns) = namespaces.get(name) {
        return Ok(labels(&ns));
    }
    let not_found = || ApiError::NotFound {
        resource: GroupResource::new("", "namespaces"),
        name: name.to_owned(),
    };
    let Some(client) = client.filter(|_| !name.is_empty()) else {
        return Err(not_found());
    };
    // The cache may lag behind a namespace created a moment ago.
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    match api.get_opt(name).await {
        Ok(Some(ns)) => Ok(labels(&ns)),
        Ok(None) => Err(not_found()),
        Err(e) => Err(ApiError::Internal(e.to_string())),
    }
}
