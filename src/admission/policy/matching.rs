//! Whether a policy's `matchConstraints`, or a binding's `matchResources`,
//! select a request: k8s.io/apiserver's `policy/matching` with the webhook
//! predicates it reuses (`rules`, `namespace`, `object`), and the
//! `metav1.LabelSelector` semantics they rely on.
//!
//! Pure: namespaces come from the caller's [`Namespaces`] cache. Our API has
//! one version and no equivalent resources, so `matchPolicy: Equivalent`
//! matches exactly what `Exact` does.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{MatchResources, NamedRuleWithOperations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::admission::Namespaces;
use crate::registry::admission::Attributes;

/// Whether a policy's `matchConstraints` select the request. An error is a
/// configuration error of the policy, in kube's words.
pub(super) fn policy_matches(
    constraints: Option<&MatchResources>,
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
) -> Result<bool, String> {
    let Some(constraints) = constraints else {
        return Err("policy contained no match constraints, a required field".to_owned());
    };
    matches(constraints, attrs, namespaces)
}

/// Whether a binding's `matchResources` select the request; a binding
/// without them selects everything its policy does.
pub(super) fn binding_matches(
    resources: Option<&MatchResources>,
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
) -> Result<bool, String> {
    match resources {
        None => Ok(true),
        Some(resources) => matches(resources, attrs, namespaces),
    }
}

/// kube's `Matcher.Matches`: selectors first, but their errors count only
/// when the rules match. kube-apiserver defaults absent selectors to `{}`
/// (everything); we read an absent one the same way.
fn matches(
    criteria: &MatchResources,
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
) -> Result<bool, String> {
    let namespace = match_namespace(criteria.namespace_selector.as_ref(), attrs, namespaces);
    if let Ok(false) = namespace {
        return Ok(false);
    }
    let object = match_object(criteria.object_selector.as_ref(), attrs);
    if let Ok(false) = object {
        return Ok(false);
    }
    let excluded = criteria
        .exclude_resource_rules
        .as_deref()
        .unwrap_or_default();
    if excluded.iter().any(|rule| rule_matches(rule, attrs)) {
        return Ok(false);
    }
    let rules = criteria.resource_rules.as_deref().unwrap_or_default();
    if !rules.is_empty() && !rules.iter().any(|rule| rule_matches(rule, attrs)) {
        return Ok(false);
    }
    namespace?;
    object?;
    Ok(true)
}

/// kube's `rules.Matcher` plus `resourceNames`.
fn rule_matches(rule: &NamedRuleWithOperations, attrs: &Attributes) -> bool {
    let any = |items: &Option<Vec<String>>, wanted: &str| {
        items
            .iter()
            .flatten()
            .any(|item| item == "*" || item == wanted)
    };
    let scope = match rule.scope.as_deref() {
        None | Some("*") => true,
        Some("Namespaced") => !attrs.namespace.is_empty(),
        Some("Cluster") => attrs.namespace.is_empty(),
        Some(_) => false,
    };
    let resource = rule.resources.iter().flatten().any(|r| {
        let (resource, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (resource == "*" || resource == attrs.resource) && (sub == "*" || sub == attrs.subresource)
    });
    let named = match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => names.contains(&attrs.name),
    };
    scope
        && any(&rule.operations, attrs.operation.as_str())
        && any(&rule.api_groups, &attrs.group)
        && any(&rule.api_versions, &attrs.version)
        && resource
        && named
}

/// kube's namespace predicate: cluster-scoped requests always match; a
/// namespace missing from the cache is kube's NotFound.
fn match_namespace(
    selector: Option<&LabelSelector>,
    attrs: &Attributes,
    namespaces: &dyn Namespaces,
) -> Result<bool, String> {
    if attrs.namespace.is_empty() {
        return Ok(true);
    }
    let Some(selector) = selector.filter(|s| !selector_is_empty(s)) else {
        return Ok(true);
    };
    validate_selector(selector).map_err(|e| format!("Internal error occurred: {e}"))?;
    let Some(namespace) = namespaces.get(&attrs.namespace) else {
        return Err(namespace_not_found(&attrs.namespace));
    };
    selector_matches(selector, namespace.metadata.labels.as_ref())
}

/// kube's message for a namespace that does not exist.
pub(super) fn namespace_not_found(name: &str) -> String {
    format!("namespaces \"{name}\" not found")
}

/// kube's object predicate: the new or the old object's labels match.
fn match_object(selector: Option<&LabelSelector>, attrs: &Attributes) -> Result<bool, String> {
    let Some(selector) = selector.filter(|s| !selector_is_empty(s)) else {
        return Ok(true);
    };
    validate_selector(selector).map_err(|e| format!("Internal error occurred: {e}"))?;
    let labels_of = |object: Option<&serde_json::Value>| -> Option<BTreeMap<String, String>> {
        let labels = object?.pointer("/metadata/labels")?.as_object()?;
        Some(
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect(),
        )
    };
    for object in [attrs.object.as_ref(), attrs.old_object.as_ref()] {
        if object.is_some() && selector_matches(selector, labels_of(object).as_ref())? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `{}`: selects everything.
pub(super) fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// The errors `metav1.LabelSelectorAsSelector` reports for a malformed
/// selector (kube-apiserver validates policies, so these are rare).
fn validate_selector(selector: &LabelSelector) -> Result<(), String> {
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(
                    "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                        .to_owned(),
                )
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "values: Invalid value: {values:?}: values set must be empty for exists and does not exist"
                ))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(format!("\"{other}\" is not a valid label selector operator")),
        }
    }
    Ok(())
}

/// Whether `labels` satisfy `selector` (all `matchLabels` and every
/// requirement of `matchExpressions`).
pub(super) fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, String> {
    validate_selector(selector)?;
    let get = |key: &str| labels.and_then(|l| l.get(key));
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| get(k) == Some(v));
    let expressions_match = selector.match_expressions.iter().flatten().all(|req| {
        let values = req.values.as_deref().unwrap_or_default();
        let value = get(&req.key);
        match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            _ => value.is_none(),
        }
    });
    Ok(labels_match && expressions_match)
}

/// The selector in the query-string form a LIST request takes.
pub(super) fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default().join(",");
        parts.push(match req.operator.as_str() {
            "In" => format!("{} in ({values})", req.key),
            "NotIn" => format!("{} notin ({values})", req.key),
            "Exists" => req.key.clone(),
            _ => format!("!{}", req.key),
        });
    }
    parts.join(",")
}
