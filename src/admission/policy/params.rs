//! A policy's parameters: resolving `paramKind` to a resource and a binding's
//! `paramRef` to the objects it names (kube's `generic.CollectParams`).
//!
//! [`ParamSource`] is the seam; [`KubeParams`] reads kube-apiserver with the
//! kube client as dynamic objects. It keeps a small TTL cache rather than an
//! informer per paramKind: a changed param counts within [`PARAM_TTL`]
//! (kube's informer: within milliseconds), and a request that misses the
//! cache waits for one discovery, GET or LIST, each bounded by
//! [`PARAM_TIMEOUT`]. Owns no policy logic.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{ParamKind, ParamRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use serde_json::Value;

use super::matching;

/// How long a looked-up param (or a resolved paramKind) is reused.
pub const PARAM_TTL: Duration = Duration::from_secs(5);
/// How long one lookup against kube-apiserver may take.
pub const PARAM_TIMEOUT: Duration = Duration::from_secs(5);
/// The most objects a `paramRef.selector` may select: each is one more
/// evaluation of every expression of the policy. More is a configuration
/// error of the binding (kube has no such cap).
pub const MAX_PARAMS: usize = 100;
/// The most cached lookups; beyond it the expired ones, then all, go.
const MAX_CACHED: usize = 1024;

/// A `paramKind`, parsed: kube's `GroupVersionKind`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParamKindRef {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl ParamKindRef {
    /// Parses `apiVersion` as kube's `schema.ParseGroupVersion` does.
    pub fn parse(kind: &ParamKind) -> Result<Self, String> {
        let api_version = kind.api_version.as_deref().unwrap_or_default();
        let (group, version) = match api_version.split('/').collect::<Vec<_>>()[..] {
            [""] => ("", ""),
            [version] => ("", version),
            [group, version] => (group, version),
            _ => return Err(format!("unexpected GroupVersion string: {api_version}")),
        };
        Ok(Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.kind.clone().unwrap_or_default(),
        })
    }

    /// `apiVersion` as objects carry it.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// kube's `GroupVersionKind.String()`, which its messages print.
impl fmt::Display for ParamKindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// Whether a param kind's objects live in namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamScope {
    Namespaced,
    Cluster,
}

/// Why params could not be looked up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// No resource serves the kind.
    #[error("failed to find resource referenced by paramKind: '{0}'")]
    UnknownKind(ParamKindRef),
    /// A selector matched more than [`MAX_PARAMS`] objects.
    #[error("paramRef.selector matched more than {0} objects")]
    TooMany(usize),
    /// kube-apiserver did not answer, or answered with an error.
    #[error("{0}")]
    Lookup(String),
}

/// Where params come from.
#[async_trait::async_trait]
pub trait ParamSource: Send + Sync + fmt::Debug {
    /// The scope of the resource serving `kind`.
    async fn scope(&self, kind: &ParamKindRef) -> Result<ParamScope, ParamError>;
    /// The object `name`, in `namespace` (empty for a cluster-scoped kind).
    async fn get(
        &self,
        kind: &ParamKindRef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ParamError>;
    /// The objects `selector` selects in `namespace` (empty: cluster-scoped),
    /// at most `limit` of them; more is [`ParamError::TooMany`].
    async fn list(
        &self,
        kind: &ParamKindRef,
        namespace: &str,
        selector: &LabelSelector,
        limit: usize,
    ) -> Result<Vec<Value>, ParamError>;
}

/// The params of one binding, as kube's `CollectParams` finds them: `[None]`
/// when the policy or binding takes none, empty when none was found and
/// `parameterNotFoundAction` allows it. The error is a configuration error
/// of the binding, in kube's words.
pub(super) async fn collect(
    kind: Option<&(ParamKindRef, ParamScope)>,
    param_ref: Option<&ParamRef>,
    request_namespace: &str,
    source: &dyn ParamSource,
) -> Result<Vec<Option<Value>>, String> {
    let (Some((kind, scope)), Some(param_ref)) = (kind, param_ref) else {
        return Ok(vec![None]);
    };
    let ref_namespace = param_ref.namespace.as_deref().unwrap_or_default();
    let namespace = match scope {
        ParamScope::Namespaced if !ref_namespace.is_empty() => ref_namespace,
        ParamScope::Namespaced if !request_namespace.is_empty() => request_namespace,
        ParamScope::Namespaced => {
            return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".to_owned())
        }
        ParamScope::Cluster if !ref_namespace.is_empty() => {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                    .to_owned(),
            )
        }
        ParamScope::Cluster => "",
    };
    let name = param_ref.name.as_deref().unwrap_or_default();
    let found = match (name, &param_ref.selector) {
        ("", None) => return Err("one of name or selector must be provided".to_owned()),
        ("", Some(selector)) => source
            .list(kind, namespace, selector, MAX_PARAMS)
            .await
            .map_err(|e| e.to_string())?,
        (_, Some(_)) => {
            return Err("paramRef.name and paramRef.selector are mutually exclusive".to_owned())
        }
        (name, None) => source
            .get(kind, namespace, name)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect(),
    };
    if found.is_empty() && param_ref.parameter_not_found_action.as_deref() == Some("Deny") {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".to_owned(),
        );
    }
    Ok(found
        .into_iter()
        .map(|param| Some(with_type_meta(param, kind)))
        .collect())
}

/// kube's `wrappedParam`: params carry their apiVersion and kind even when
/// the list they came from left them out.
fn with_type_meta(mut param: Value, kind: &ParamKindRef) -> Value {
    if let Some(object) = param.as_object_mut() {
        object
            .entry("apiVersion")
            .or_insert_with(|| Value::String(kind.api_version()));
        object
            .entry("kind")
            .or_insert_with(|| Value::String(kind.kind.clone()));
    }
    param
}

/// Params read from kube-apiserver with the kube client, through a TTL cache.
pub struct KubeParams {
    client: kube::Client,
    resources: Ttl<ParamKindRef, Result<(ApiResource, ParamScope), ParamError>>,
    lookups: Ttl<String, Result<Vec<Value>, ParamError>>,
}

/// A map whose entries are fresh for [`PARAM_TTL`].
type Ttl<K, T> = Mutex<HashMap<K, Cached<T>>>;

impl fmt::Debug for KubeParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeParams").finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Cached<T> {
    at: Instant,
    value: T,
}

/// The fresh value of `key`, if any.
fn cached<K: std::hash::Hash + Eq, T: Clone>(cache: &Ttl<K, T>, key: &K) -> Option<T> {
    let cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .get(key)
        .filter(|c| c.at.elapsed() < PARAM_TTL)
        .map(|c| c.value.clone())
}

fn remember<K: std::hash::Hash + Eq, T>(cache: &Ttl<K, T>, key: K, value: T) {
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= MAX_CACHED {
        cache.retain(|_, c| c.at.elapsed() < PARAM_TTL);
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
    }
    cache.insert(
        key,
        Cached {
            at: Instant::now(),
            value,
        },
    );
}

impl KubeParams {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            resources: Mutex::new(HashMap::new()),
            lookups: Mutex::new(HashMap::new()),
        }
    }

    /// The resource serving `kind`, by discovery.
    async fn resource(&self, kind: &ParamKindRef) -> Result<(ApiResource, ParamScope), ParamError> {
        if let Some(found) = cached(&self.resources, kind) {
            return found;
        }
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let found = match tokio::time::timeout(
            PARAM_TIMEOUT,
            kube::discovery::pinned_kind(&self.client, &gvk),
        )
        .await
        {
            Ok(Ok((resource, caps))) => Ok((
                resource,
                match caps.scope {
                    Scope::Namespaced => ParamScope::Namespaced,
                    Scope::Cluster => ParamScope::Cluster,
                },
            )),
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                Err(ParamError::UnknownKind(kind.clone()))
            }
            Ok(Err(kube::Error::Discovery(_))) => Err(ParamError::UnknownKind(kind.clone())),
            Ok(Err(e)) => Err(ParamError::Lookup(format!(
                "paramKind kind `{kind}` not yet synced to use for admission: {e}"
            ))),
            Err(_) => Err(ParamError::Lookup(format!(
                "paramKind kind `{kind}` not yet synced to use for admission"
            ))),
        };
        remember(&self.resources, kind.clone(), found.clone());
        found
    }

    async fn api(
        &self,
        kind: &ParamKindRef,
        namespace: &str,
    ) -> Result<Api<DynamicObject>, ParamError> {
        let (resource, _) = self.resource(kind).await?;
        Ok(if namespace.is_empty() {
            Api::all_with(self.client.clone(), &resource)
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &resource)
        })
    }

    /// One lookup through the cache.
    async fn lookup<F>(&self, key: String, fetch: F) -> Result<Vec<Value>, ParamError>
    where
        F: std::future::Future<Output = Result<Vec<Value>, ParamError>>,
    {
        if let Some(found) = cached(&self.lookups, &key) {
            return found;
        }
        let found = match tokio::time::timeout(PARAM_TIMEOUT, fetch).await {
            Ok(found) => found,
            Err(_) => Err(ParamError::Lookup("timed out looking up params".to_owned())),
        };
        remember(&self.lookups, key, found.clone());
        found
    }
}

fn to_json(object: DynamicObject) -> Result<Value, ParamError> {
    serde_json::to_value(object).map_err(|e| ParamError::Lookup(e.to_string()))
}

fn lookup_error(e: kube::Error) -> ParamError {
    ParamError::Lookup(e.to_string())
}

#[async_trait::async_trait]
impl ParamSource for KubeParams {
    async fn scope(&self, kind: &ParamKindRef) -> Result<ParamScope, ParamError> {
        self.resource(kind).await.map(|(_, scope)| scope)
    }

    async fn get(
        &self,
        kind: &ParamKindRef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ParamError> {
        let api = self.api(kind, namespace).await?;
        let key = format!("get\0{kind}\0{namespace}\0{name}");
        let found = self
            .lookup(key, async {
                match api.get_opt(name).await.map_err(lookup_error)? {
                    Some(object) => Ok(vec![to_json(object)?]),
                    None => Ok(Vec::new()),
                }
            })
            .await?;
        Ok(found.into_iter().next())
    }

    async fn list(
        &self,
        kind: &ParamKindRef,
        namespace: &str,
        selector: &LabelSelector,
        limit: usize,
    ) -> Result<Vec<Value>, ParamError> {
        let api = self.api(kind, namespace).await?;
        let selector = matching::selector_string(selector);
        let key = format!("list\0{kind}\0{namespace}\0{selector}\0{limit}");
        self.lookup(key, async {
            let params = ListParams::default()
                .labels(&selector)
                .limit(u32::try_from(limit).unwrap_or(u32::MAX));
            let list = api.list(&params).await.map_err(lookup_error)?;
            let more = list
                .metadata
                .continue_
                .as_deref()
                .is_some_and(|c| !c.is_empty());
            if more || list.items.len() > limit {
                return Err(ParamError::TooMany(limit));
            }
            list.items.into_iter().map(to_json).collect()
        })
        .await
    }
}
