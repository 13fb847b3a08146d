//! The audit policy: which requests are recorded, at which [`Level`], and
//! which [`Stage`]s are left out, read from an `audit.k8s.io/v1` `Policy`
//! file in YAML or JSON, exactly as kube-apiserver reads `--audit-policy-file`.
//!
//! Owns the policy's file format, its validation (the same rules and the
//! same field paths as k8s.io/apiserver's `ValidatePolicy`) and its
//! evaluation: rules in order, the first that matches wins, and a request no
//! rule matches is not recorded. It does no I/O beyond reading the file,
//! and knows nothing of HTTP.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

use crate::authz::Attributes;

/// The API version a policy file must name.
pub const POLICY_API_VERSION: &str = "audit.k8s.io/v1";

/// How much of a request is recorded, from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Nothing.
    None,
    /// Who asked for what, when, and the answer's code: no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata and both bodies (the response's only for non-watch requests).
    RequestResponse,
}

impl Level {
    pub const ALL: [Level; 4] = [
        Level::None,
        Level::Metadata,
        Level::Request,
        Level::RequestResponse,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// When in a request's life an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// As soon as the request is authenticated, before it is handled.
    RequestReceived,
    /// When a long-running response (a watch) has sent its headers.
    ResponseStarted,
    /// When the response is done.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

impl Stage {
    pub const ALL: [Stage; 4] = [
        Stage::RequestReceived,
        Stage::ResponseStarted,
        Stage::ResponseComplete,
        Stage::Panic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// A validated policy. The policy's own `omitStages` are already merged into
/// every rule's, as kube merges them when it loads a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: bool,
}

/// One rule: every field that is set must match (an empty list matches
/// anything); `resources`/`namespaces` and `nonResourceURLs` exclude each
/// other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub level: Level,
    pub users: Vec<String>,
    pub user_groups: Vec<String>,
    pub verbs: Vec<String>,
    pub resources: Vec<GroupResources>,
    /// `""` names cluster-scoped resources.
    pub namespaces: Vec<String>,
    /// Exact paths, `*`, or prefixes ending in `*`.
    pub non_resource_urls: Vec<String>,
    pub omit_stages: Vec<Stage>,
    /// `None`: the policy's `omitManagedFields`.
    pub omit_managed_fields: Option<bool>,
}

/// The resources of one API group a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResources {
    /// `""` is the core group; `*` any group.
    pub group: String,
    /// `name`, `name/subresource`, `*`, `*/subresource` or `name/*`; empty:
    /// every resource of the group.
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
}

/// What the policy says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestConfig {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl RequestConfig {
    /// Whether events of `stage` are written.
    pub fn records(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit_stages.contains(&stage)
    }
}

/// Why a policy file was refused. Each message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read the file: {0}")]
    Read(String),
    #[error("failed decoding: {0}")]
    Decode(String),
    #[error("unknown apiVersion {0:?} in policy: it must be {POLICY_API_VERSION}")]
    ApiVersion(String),
    #[error("kind {0:?} in policy: it must be Policy")]
    Kind(String),
    /// Field errors, each with its path, as kube's validation words them.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("loaded illegal policy with 0 rules")]
    NoRules,
}

impl Policy {
    /// Reads and validates a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let bytes = std::fs::read(path).map_err(|e| PolicyError::Read(e.to_string()))?;
        Self::from_slice(&bytes)
    }

    /// Parses and validates a policy in YAML or JSON, within the bounds
    /// every YAML document is read in (`wire::yaml`), a key given twice
    /// refused. Unknown fields are ignored with a warning, as kube falls
    /// back to lenient decoding.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, PolicyError> {
        use crate::wire::yaml::{self, DuplicateKeys};
        let mut unknown = Vec::new();
        let options = yaml::options(bytes.len(), DuplicateKeys::Refuse);
        let file: PolicyFile =
            serde_saphyr::with_deserializer_from_slice_with_options(bytes, options, |d| {
                serde_ignored::deserialize(d, |path| unknown.push(path.to_string()))
            })
            .map_err(|e| PolicyError::Decode(yaml::explain(&e).to_string()))?;
        if !unknown.is_empty() {
            tracing::warn!(
                fields = %unknown.join(", "),
                "the audit policy has unknown fields; they are ignored"
            );
        }
        file.validate()
    }

    /// A policy of the given rules and policy-wide settings, validated as a
    /// file would be (for tests and embedders).
    pub fn new(
        rules: Vec<Rule>,
        omit_stages: Vec<Stage>,
        omit_managed_fields: bool,
    ) -> Result<Self, PolicyError> {
        let mut errors = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            validate_rule_shape(rule, &format!("rules[{i}]"), &mut errors);
        }
        if !errors.is_empty() {
            return Err(PolicyError::Invalid(errors));
        }
        if rules.is_empty() {
            return Err(PolicyError::NoRules);
        }
        Ok(Self::merged(rules, omit_stages, omit_managed_fields))
    }

    fn merged(mut rules: Vec<Rule>, omit_stages: Vec<Stage>, omit_managed_fields: bool) -> Self {
        for rule in &mut rules {
            for stage in &omit_stages {
                if !rule.omit_stages.contains(stage) {
                    rule.omit_stages.push(*stage);
                }
            }
        }
        Self {
            rules,
            omit_stages,
            omit_managed_fields,
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first matching rule's level and stages; `None` if no rule matches.
    pub fn evaluate(&self, attributes: &Attributes) -> RequestConfig {
        match self.rules.iter().find(|r| r.matches(attributes)) {
            Some(rule) => RequestConfig {
                level: rule.level,
                omit_stages: rule.omit_stages.clone(),
                omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
            },
            None => RequestConfig {
                level: Level::None,
                omit_stages: self.omit_stages.clone(),
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

impl Rule {
    /// A rule at `level` that matches every request.
    pub fn at(level: Level) -> Self {
        Self {
            level,
            users: Vec::new(),
            user_groups: Vec::new(),
            verbs: Vec::new(),
            resources: Vec::new(),
            namespaces: Vec::new(),
            non_resource_urls: Vec::new(),
            omit_stages: Vec::new(),
            omit_managed_fields: None,
        }
    }

    /// Whether the rule applies to the request. An unauthenticated request
    /// has an empty username, which no `users` or `userGroups` rule matches.
    pub fn matches(&self, a: &Attributes) -> bool {
        let user = Some(&a.user).filter(|u| !u.username.is_empty());
        if !self.users.is_empty() && !user.is_some_and(|u| self.users.contains(&u.username)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !user.is_some_and(|u| u.groups.iter().any(|g| self.user_groups.contains(g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&a.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(a);
        }
        if !self.non_resource_urls.is_empty() {
            return a.resource.is_none()
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&a.path, spec));
        }
        true
    }

    fn matches_resource(&self, a: &Attributes) -> bool {
        let Some(r) = &a.resource else {
            return false;
        };
        if !self.namespaces.is_empty() && !self.namespaces.contains(&r.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        self.resources
            .iter()
            .filter(|gr| gr.group == r.group || gr.group == "*")
            .any(|gr| {
                if gr.resources.is_empty() {
                    return true;
                }
                if !gr.resource_names.is_empty() && !gr.resource_names.contains(&r.name) {
                    return false;
                }
                gr.resources.iter().any(|res| {
                    res == &combined
                        || res == "*"
                        || (!r.subresource.is_empty()
                            && res.strip_prefix("*/") == Some(r.subresource.as_str()))
                        || res.strip_suffix("/*") == Some(r.resource.as_str())
                })
            })
    }
}

/// `*` matches every path; `/x*` every path starting with `/x`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

// ----- the file format -------------------------------------------------------------

/// `null` reads as the empty value, as Go reads it.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "nullable")]
    rules: Vec<RuleFile>,
    #[serde(default, deserialize_with = "nullable")]
    omit_stages: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    omit_managed_fields: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    #[serde(default)]
    level: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    users: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    user_groups: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    verbs: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    resources: Vec<GroupResourcesFile>,
    #[serde(default, deserialize_with = "nullable")]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs", deserialize_with = "nullable")]
    non_resource_urls: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResourcesFile {
    #[serde(default, deserialize_with = "nullable")]
    group: String,
    #[serde(default, deserialize_with = "nullable")]
    resources: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    resource_names: Vec<String>,
}

impl PolicyFile {
    fn validate(self) -> Result<Policy, PolicyError> {
        let api_version = self.api_version.unwrap_or_default();
        if api_version != POLICY_API_VERSION {
            return Err(PolicyError::ApiVersion(api_version));
        }
        let kind = self.kind.unwrap_or_default();
        if kind != "Policy" {
            return Err(PolicyError::Kind(kind));
        }
        let mut errors = Vec::new();
        let omit_stages = stages(&self.omit_stages, "omitStages", &mut errors);
        let mut rules = Vec::with_capacity(self.rules.len());
        for (i, r) in self.rules.into_iter().enumerate() {
            let at = format!("rules[{i}]");
            let level = match r.level.as_deref() {
                None | Some("") => {
                    errors.push(format!("{at}.level: Required value"));
                    Level::None
                }
                Some(l) => Level::parse(l).unwrap_or_else(|| {
                    errors.push(format!(
                        "{at}.level: Unsupported value: {l:?}: supported values: {}",
                        quoted(Level::ALL.iter().map(|l| l.as_str()))
                    ));
                    Level::None
                }),
            };
            let omit = stages(&r.omit_stages, &format!("{at}.omitStages"), &mut errors);
            let rule = Rule {
                level,
                users: r.users,
                user_groups: r.user_groups,
                verbs: r.verbs,
                resources: r
                    .resources
                    .into_iter()
                    .map(|g| GroupResources {
                        group: g.group,
                        resources: g.resources,
                        resource_names: g.resource_names,
                    })
                    .collect(),
                namespaces: r.namespaces,
                non_resource_urls: r.non_resource_urls,
                omit_stages: omit,
                omit_managed_fields: r.omit_managed_fields,
            };
            validate_rule_shape(&rule, &at, &mut errors);
            rules.push(rule);
        }
        if !errors.is_empty() {
            return Err(PolicyError::Invalid(errors));
        }
        if rules.is_empty() {
            return Err(PolicyError::NoRules);
        }
        Ok(Policy::merged(rules, omit_stages, self.omit_managed_fields))
    }
}

fn quoted<'a>(values: impl Iterator<Item = &'a str>) -> String {
    values
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stages(names: &[String], at: &str, errors: &mut Vec<String>) -> Vec<Stage> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match Stage::parse(name) {
            Some(stage) if !out.contains(&stage) => out.push(stage),
            Some(_) => {}
            None => errors.push(format!(
                "{at}[{i}]: Invalid value: {name:?}: allowed stages are {}",
                Stage::ALL.map(Stage::as_str).join(",")
            )),
        }
    }
    out
}

/// kube's checks of a rule beyond its enums.
fn validate_rule_shape(rule: &Rule, at: &str, errors: &mut Vec<String>) {
    for (i, url) in rule.non_resource_urls.iter().enumerate() {
        if url == "*" {
            continue;
        }
        if !url.starts_with('/') {
            errors.push(format!(
                "{at}.nonResourceURLs[{i}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"
            ));
        }
        if url.len() > 1 && url[..url.len() - 1].contains('*') {
            errors.push(format!(
                "{at}.nonResourceURLs[{i}]: Invalid value: {url:?}: non-resource URL wildcards '*' must be the final character of the rule"
            ));
        }
    }
    for gr in &rule.resources {
        if !gr.group.is_empty() && gr.group != "*" && !is_dns_subdomain(&gr.group) {
            errors.push(format!(
                "{at}.resources.group: Invalid value: {:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                gr.group
            ));
        }
        if !gr.resource_names.is_empty() && gr.resources.is_empty() {
            errors.push(format!(
                "{at}.resources.resourceNames: Invalid value: {:?}: using resourceNames requires at least one resource",
                gr.resource_names
            ));
        }
    }
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        errors.push(format!(
            "{at}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both regular resources and non-resource URLs",
            rule.non_resource_urls
        ));
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
                && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

#[cfg(test)]
mod tests;
