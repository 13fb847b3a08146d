//! The generic store: every verb of every resource, written once.
//!
//! The object a write starts from is read from etcd. Gets, lists without
//! `limit` and every watch are served by the watch cache, after waiting for
//! it to reach the revision the read demands (for the most recent, etcd's
//! current revision read after the request arrived); paged lists read etcd
//! at one revision so that every page is consistent.
//!
//! A create also takes the object's unique claims ([`UniqueClaim`]): one index
//! key per claim, naming the holder, written in the same transaction as the
//! object and guarded on the revision it was read at, so that of concurrent
//! creates on any number of replicas exactly one wins and the others get a 409
//! naming it. The write that finishes an object (its strategy says it no
//! longer holds its claims) or removes it deletes the index keys that still
//! name it, in the same transaction. An entry left behind all the same (its
//! holder is gone, was replaced by another uid, or no longer holds its
//! claims) is free, and the next create that wants it takes it over.
//!
//! A client's create is bounded twice: by `--max-objects-per-namespace`,
//! counted in the watch cache before admission, and by the namespace's
//! ResourceQuotas (the last admission plugin), charged before the write.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, Notify};

use crate::api::errors::{ApiError, FieldCause, GroupResource};
use crate::api::meta::{now, Object};
use crate::api::{self};
use crate::storage::cache::{CacheError, CacheEvent, EventKind, WatchCache, DEFAULT_CAPACITY};
use crate::storage::{
    self, index_key, resource_prefix, Guard, KeyValue, Release, Revision, Storage, StorageError,
};

use super::admission::{Chain, Operation};
use super::fields::{self, manager::Write, ApplyError, FieldManager};
use super::selectors::{FieldSelector, LabelSelector};
use super::shared::Shared;
use super::strategy::{Strategy, UniqueClaim, COMMON_FIELDS};
use super::{storage_error, Context, Writer};

/// How long a read waits for the watch cache to reach the revision it needs.
const FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);
/// How many times a patch or delete retries after losing a race.
const RETRIES: usize = 8;
/// The largest page a filtered list grows its etcd reads to (a client's own
/// larger `limit` is kept), as k8s.io/apiserver's etcd3 store caps it.
const MAX_PAGE_GROWTH: i64 = 10_000;

/// `?labelSelector=…&fieldSelector=…&limit=…&continue=…&resourceVersion=…`.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub limit: Option<i64>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// Whether a list with this `resourceVersion` and `continue` token returns
/// at most `limit` objects. Every list does but one from resourceVersion
/// "0" (without a continue token), which [`Store::list`] answers whole from
/// the watch cache, as kube-apiserver does. Flow control weighs a list by
/// this, so the two must agree (a test of `list` holds them to it).
pub fn list_honours_limit(resource_version: Option<&str>, continue_token: Option<&str>) -> bool {
    continue_token.is_some_and(|c| !c.is_empty())
        || resource_version.is_none_or(|rv| rv.parse::<i64>() != Ok(0))
}

/// A list response before encoding.
#[derive(Debug, Clone)]
pub struct ObjectList<T> {
    pub items: Vec<T>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
}

/// `?watch=true` options.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
}

/// `DeleteOptions` preconditions.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum DeleteOutcome<T> {
    /// The object is gone; this was its last state.
    Deleted(T),
    /// Finalizers hold it: it now carries a deletionTimestamp.
    Pending(T),
}

/// One watch event, before encoding.
#[derive(Debug, Clone)]
pub enum WatchEvent<T> {
    Added(T),
    Modified(T),
    Deleted(T),
    Bookmark {
        resource_version: String,
        /// The `k8s.io/initial-events-end` bookmark of `sendInitialEvents`.
        initial_events_end: bool,
    },
}

/// What every store of a server shares, from which the server's table of
/// kinds makes one store per kind ([`Store::configured`]).
#[derive(Debug, Clone)]
pub struct Config {
    pub storage: Arc<dyn Storage>,
    /// `--etcd-prefix`.
    pub etcd_prefix: String,
    /// Notified when the server stops: the watch caches stop with it.
    pub shutdown: Arc<Notify>,
    /// The admission plugins of client writes, in order.
    pub admission: Chain,
    /// `--max-objects-per-namespace`; 0 for no limit.
    pub max_objects_per_namespace: usize,
}

/// The generic store of one resource.
#[derive(Debug)]
pub struct Store<S: Strategy> {
    strategy: S,
    storage: Arc<dyn Storage>,
    cache: WatchCache,
    prefix: String,
    /// `--etcd-prefix`, under which the unique index keys sit.
    etcd_prefix: String,
    resource: GroupResource,
    bookmark_interval: Duration,
    /// The admission plugins, in order, for client writes.
    admission: Chain,
    /// `--max-objects-per-namespace`: the most objects of this resource a
    /// client's create may bring a namespace to; 0 for no limit.
    max_per_namespace: usize,
    /// Who owns which field: `managedFields`, and server-side apply.
    fields: Arc<FieldManager>,
}

/// Whether a write records its manager's fields, or already carries the
/// entries (an apply, which computed them with the merge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fields {
    Track,
    Keep,
}

/// An object as the field manager sees it: JSON, without its entries.
fn fields_view<T: Object>(obj: &T) -> Result<serde_json::Value, ApiError> {
    let mut v = serde_json::to_value(obj)
        .map_err(|e| ApiError::Internal(format!("encoding for field management: {e}")))?;
    if let Some(meta) = v
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    Ok(v)
}

/// How many bytes of `obj` count against [`CLIENT_OBJECT_BYTES`]: its
/// stored form without its status, which no client's write changes. Every
/// managedFields entry counts, the controllers' too: a client may send any
/// entries, so none can be told apart as the controllers' own, and the
/// controllers' later writes change theirs by at most what the headroom
/// keeps for them.
fn client_share<T: Object>(obj: &T) -> Result<usize, ApiError> {
    let mut v = serde_json::to_value(obj)
        .map_err(|e| ApiError::Internal(format!("encoding for the size limit: {e}")))?;
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
        if let Some(meta) = o
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.remove("resourceVersion");
        }
    }
    serde_json::to_vec(&v)
        .map(|b| b.len())
        .map_err(|e| ApiError::Internal(format!("encoding for the size limit: {e}")))
}

/// The largest object the store writes: etcd's default request limit, so
/// that no write (managedFields included) fails in etcd instead.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// The part of [`MAX_OBJECT_BYTES`] kept for the controllers: a client's
/// write never takes it, so a tenant who pads its own object to the limit
/// cannot make the status and finalizer writes of the protocol fail (413)
/// and so hold its peer's finalizer for ever. It holds a status at its
/// largest (every text cut by [`Object::bound_status`]; a standing offer
/// with the records of its most clones, about 190 KiB with every name at
/// its longest), the controllers' managedFields entries and the protocol's
/// finalizer.
pub const CONTROLLER_HEADROOM_BYTES: usize = 256 * 1024;

/// The most a client's write may make of an object, not counting its
/// status: what is left of [`MAX_OBJECT_BYTES`] after
/// [`CONTROLLER_HEADROOM_BYTES`].
pub const CLIENT_OBJECT_BYTES: usize = MAX_OBJECT_BYTES - CONTROLLER_HEADROOM_BYTES;

impl<S: Strategy> Store<S> {
    /// A store for `S`'s resource under `etcd_prefix`, with its watch cache
    /// started (and stopped when `shutdown` is notified).
    pub fn new(
        strategy: S,
        storage: Arc<dyn Storage>,
        etcd_prefix: &str,
        shutdown: Arc<Notify>,
    ) -> Self {
        let info = S::Object::resource();
        let prefix = resource_prefix(etcd_prefix, api::GROUP, info.plural);
        let cache = WatchCache::start(storage.clone(), prefix.clone(), DEFAULT_CAPACITY, shutdown);
        Self {
            strategy,
            storage,
            cache,
            prefix,
            etcd_prefix: etcd_prefix.to_owned(),
            resource: GroupResource::new(api::GROUP, info.plural),
            bookmark_interval: Duration::from_secs(30),
            admission: Chain::default(),
            max_per_namespace: 0,
            fields: Arc::new(fields::for_kind::<S::Object>()),
        }
    }

    /// A store for `S`'s resource as `config` says every store is made.
    pub fn configured(strategy: S, config: &Config) -> Self {
        Self::new(
            strategy,
            config.storage.clone(),
            &config.etcd_prefix,
            config.shutdown.clone(),
        )
        .with_admission(config.admission.clone())
        .with_max_objects_per_namespace(config.max_objects_per_namespace)
    }

    /// Sets the admission plugins client writes pass, in their order.
    pub fn with_admission(mut self, chain: Chain) -> Self {
        self.admission = chain;
        self
    }

    /// Sets the most objects of this resource a client's create may bring
    /// one namespace to (`--max-objects-per-namespace`); 0 for no limit.
    pub fn with_max_objects_per_namespace(mut self, max: usize) -> Self {
        self.max_per_namespace = max;
        self
    }

    /// Refuses a client's create in a namespace that already holds
    /// [`Self::max_per_namespace`] objects, as the watch cache counts them
    /// (so concurrent creates may pass it by the few in flight): the
    /// server's own bound on what one tenant can make it hold in memory,
    /// whatever the cluster's quotas say.
    fn check_namespace_room(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let max = self.max_per_namespace;
        if max == 0 || ctx.writer != Writer::Client || self.count_in(Some(namespace), max) < max {
            return Ok(());
        }
        let what = if name.is_empty() {
            self.resource.to_string()
        } else {
            format!("{} \"{name}\"", self.resource)
        };
        Err(ApiError::Forbidden {
            message: format!(
                "{what} is forbidden: namespace \"{namespace}\" already holds {max} {}, the most this server allows in one namespace (--max-objects-per-namespace={max})",
                self.resource.resource
            ),
        })
    }

    /// Sets how often an idle watch with `allowWatchBookmarks` gets a bookmark.
    pub fn with_bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    pub fn strategy(&self) -> &S {
        &self.strategy
    }

    /// How many objects a list of `namespace` (all namespaces for `None`)
    /// may return, as the watch cache holds them, counted no further than
    /// `at_most`: what flow control weighs a list by.
    pub fn count_in(&self, namespace: Option<&str>, at_most: usize) -> usize {
        self.cache.count(&self.scope_prefix(namespace), at_most)
    }

    /// Whether the watch cache has synced.
    pub fn is_ready(&self) -> bool {
        self.cache.is_ready()
    }

    fn key(&self, namespace: &str, name: &str) -> String {
        format!("{}/{namespace}/{name}", self.prefix)
    }

    fn scope_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!("{}/{ns}/", self.prefix),
            None => format!("{}/", self.prefix),
        }
    }

    fn err(&self, name: &str) -> impl Fn(StorageError) -> ApiError + '_ {
        let name = name.to_owned();
        move |e| storage_error(e, &self.resource, &name)
    }

    fn decode(&self, kv: &KeyValue) -> Result<S::Object, ApiError> {
        decode_object(kv)
    }

    /// The stored form, refused past [`MAX_OBJECT_BYTES`].
    fn encode(&self, obj: &S::Object) -> Result<Bytes, ApiError> {
        let mut obj = obj.clone();
        obj.metadata_mut().resource_version = None;
        let bytes = serde_json::to_vec(&obj)
            .map_err(|e| ApiError::Internal(format!("encoding for storage: {e}")))?;
        if bytes.len() > MAX_OBJECT_BYTES {
            return Err(ApiError::TooLarge(format!(
                "the object would be {} bytes, more than the {MAX_OBJECT_BYTES} bytes an object may take",
                bytes.len()
            )));
        }
        Ok(Bytes::from(bytes))
    }

    /// As [`Store::encode`], within what `writer` may take (see
    /// [`CLIENT_OBJECT_BYTES`]); a write that only records its fields (not
    /// an apply) drops the entries when they would make the object too
    /// large, as kube does, rather than fail.
    fn encode_tracked(
        &self,
        writer: Writer,
        obj: &mut S::Object,
        fields: Fields,
    ) -> Result<Bytes, ApiError> {
        match self.encode_for(writer, obj) {
            Err(ApiError::TooLarge(_))
                if fields == Fields::Track && obj.metadata().managed_fields.is_some() =>
            {
                obj.metadata_mut().managed_fields = None;
                self.encode_for(writer, obj)
            }
            other => other,
        }
    }

    /// [`Store::encode`], and for a client also at most
    /// [`CLIENT_OBJECT_BYTES`] without the status (see [`client_share`]).
    fn encode_for(&self, writer: Writer, obj: &S::Object) -> Result<Bytes, ApiError> {
        let bytes = self.encode(obj)?;
        if writer == Writer::Controller || bytes.len() <= CLIENT_OBJECT_BYTES {
            return Ok(bytes);
        }
        let share = client_share(obj)?;
        if share > CLIENT_OBJECT_BYTES {
            return Err(ApiError::TooLarge(format!(
                "the object would be {share} bytes without its status, more than the \
                 {CLIENT_OBJECT_BYTES} bytes a client's write may take (the last \
                 {CONTROLLER_HEADROOM_BYTES} of the {MAX_OBJECT_BYTES} bytes an object may \
                 take are kept for the server's own status and finalizer writes)"
            )));
        }
        Ok(bytes)
    }

    fn invalid(&self, obj: &S::Object, causes: Vec<FieldCause>) -> ApiError {
        ApiError::Invalid {
            group: api::GROUP.to_owned(),
            kind: S::Object::resource().kind.to_owned(),
            name: obj.metadata().name.clone().unwrap_or_default(),
            causes,
        }
    }

    fn matches(&self, obj: &S::Object, labels: &LabelSelector, fields: &FieldSelector) -> bool {
        labels.matches(obj.metadata().labels.as_ref())
            && fields.matches(|f| self.strategy.field_value(obj, f))
    }

    /// Parses a field selector against the fields this resource supports.
    pub fn parse_field_selector(&self, text: &str) -> Result<FieldSelector, ApiError> {
        let mut supported: Vec<&str> = COMMON_FIELDS.to_vec();
        supported.extend_from_slice(self.strategy.selectable_fields());
        FieldSelector::parse(text, &supported)
    }

    /// `POST`: creates `obj` in `namespace`.
    pub async fn create(
        &self,
        ctx: &Context,
        namespace: &str,
        obj: S::Object,
    ) -> Result<S::Object, ApiError> {
        self.create_with(ctx, namespace, obj, Fields::Track).await
    }

    async fn create_with(
        &self,
        ctx: &Context,
        namespace: &str,
        mut obj: S::Object,
        fields: Fields,
    ) -> Result<S::Object, ApiError> {
        obj.set_type_meta();
        // As kube: who set what is decided on the object as sent, before
        // the server fills in identity, defaults and status.
        let managed_fields = match fields {
            Fields::Keep => obj.metadata().managed_fields.clone(),
            Fields::Track => {
                let sent = obj.metadata().managed_fields.clone();
                self.fields.update(
                    &self.fields.empty_object(),
                    None,
                    &fields_view(&obj)?,
                    sent.as_ref(),
                    true,
                    Write {
                        manager: ctx.field_manager(),
                        subresource: "",
                        now: &now(),
                    },
                )
            }
        };
        obj.metadata_mut().namespace = Some(namespace.to_owned());
        self.check_namespace_room(
            ctx,
            namespace,
            obj.metadata().name.as_deref().unwrap_or_default(),
        )?;
        let mut obj = self
            .admit_mutating(ctx, Operation::Create, namespace, obj, None, false)
            .await?;
        let generate = obj
            .metadata()
            .name
            .as_deref()
            .unwrap_or_default()
            .is_empty()
            && obj
                .metadata()
                .generate_name
                .as_deref()
                .is_some_and(|g| !g.is_empty());
        {
            let m = obj.metadata_mut();
            m.namespace = Some(namespace.to_owned());
            m.uid = Some(uuid::Uuid::new_v4().to_string());
            m.creation_timestamp = Some(now());
            m.generation = Some(1);
            m.resource_version = None;
            m.deletion_timestamp = None;
            m.deletion_grace_period_seconds = None;
            m.self_link = None;
            m.managed_fields = managed_fields;
        }
        obj.set_requester(ctx.user.clone());
        obj.apply_defaults();
        obj.reset_status();

        for attempt in 0..RETRIES {
            if generate {
                let base = obj.metadata().generate_name.clone().unwrap_or_default();
                obj.metadata_mut().name = Some(format!("{base}{}", random_suffix()));
            }
            let causes = obj.validate_create();
            if !causes.is_empty() {
                return Err(self.invalid(&obj, causes));
            }
            // The size before validating admission: a create that is too
            // large only because of its entries loses them, as kube's does,
            // and one too large all the same is refused before the tenant's
            // rights are reviewed or its quota charged (ResourceQuota is the
            // last plugin, so a create refused for any other reason is not
            // charged). A generated name that is taken draws another and is
            // admitted again, charged again as in kube, until the quota
            // controller counts again.
            self.encode_tracked(ctx.writer, &mut obj, fields)?;
            let name = obj.metadata().name.clone().unwrap_or_default();
            self.admit_validating(
                ctx,
                Operation::Create,
                namespace,
                &name,
                Some(&obj),
                None,
                false,
            )
            .await?;
            match self.create_claiming(ctx, namespace, &name, &obj).await {
                Ok(written) => {
                    if let Some(kv) = written {
                        obj.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
                    }
                    return Ok(obj);
                }
                // A generated name that is taken: draw another.
                Err(ApiError::AlreadyExists { .. }) if generate && attempt + 1 < RETRIES => {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::Internal(
            "could not generate a unique name".to_owned(),
        ))
    }

    /// Writes a new object and takes its unique claims in the same
    /// transaction. A dry run checks the claims but writes nothing (`None`).
    async fn create_claiming(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        obj: &S::Object,
    ) -> Result<Option<KeyValue>, ApiError> {
        let key = self.key(namespace, name);
        let value = self.encode(obj)?;
        let claims = self.strategy.unique_claims(obj);
        for _ in 0..RETRIES {
            let guards = self.take_claims(namespace, name, obj, &claims).await?;
            if ctx.dry_run {
                return Ok(None);
            }
            match self
                .storage
                .create_guarded(&key, value.clone(), &guards, ctx.fence.as_ref())
                .await
            {
                Ok(kv) => return Ok(Some(kv)),
                // A concurrent create moved an index key: look again, so that
                // the loser of a race names the winner.
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(storage_error(e, &self.resource, name)),
            }
        }
        Err(self.conflict(name))
    }

    /// Reads each claim's index key (a linearizable read): a 409 naming the
    /// holder when an active object holds it, otherwise a guard that takes
    /// it over, provided nobody moves the key before the write.
    async fn take_claims(
        &self,
        namespace: &str,
        name: &str,
        obj: &S::Object,
        claims: &[UniqueClaim],
    ) -> Result<Vec<Guard>, ApiError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let holder = ClaimHolder {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: obj.metadata().uid.clone().unwrap_or_default(),
        };
        let value = serde_json::to_vec(&holder)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(format!("encoding an index entry: {e}")))?;
        let mut guards = Vec::with_capacity(claims.len());
        for claim in claims {
            let key = index_key(
                &self.etcd_prefix,
                &self.resource.group,
                &self.resource.resource,
                &claim.index,
            );
            let expected = match self.storage.get(&key).await {
                Ok(entry) => {
                    if let Some(active) = self.active_holder(&entry, &holder).await? {
                        return Err(ApiError::Conflict {
                            resource: self.resource.clone(),
                            name: name.to_owned(),
                            message: format!(
                                "{} already has an active {}: {}/{}",
                                claim.what,
                                S::Object::resource().kind,
                                active.namespace,
                                active.name
                            ),
                        });
                    }
                    Some(entry.mod_revision)
                }
                Err(StorageError::NotFound { .. }) => None,
                Err(e) => return Err(storage_error(e, &self.resource, name)),
            };
            guards.push(Guard {
                key,
                expected,
                value: value.clone(),
            });
        }
        Ok(guards)
    }

    /// The object an index entry names, if it still exists (same uid) and
    /// still holds its claims. An entry naming the object being created
    /// (same name) is left to the create, which answers AlreadyExists.
    async fn active_holder(
        &self,
        entry: &KeyValue,
        creating: &ClaimHolder,
    ) -> Result<Option<ClaimHolder>, ApiError> {
        // An entry that does not parse names nobody: take it over.
        let Ok(holder) = serde_json::from_slice::<ClaimHolder>(&entry.value) else {
            return Ok(None);
        };
        if holder.namespace == creating.namespace && holder.name == creating.name {
            return Ok(None);
        }
        let current = match self
            .storage
            .get(&self.key(&holder.namespace, &holder.name))
            .await
        {
            Ok(kv) => self.decode(&kv)?,
            Err(StorageError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(storage_error(e, &self.resource, &creating.name)),
        };
        let same = current.metadata().uid.as_deref() == Some(holder.uid.as_str());
        Ok((same && self.strategy.holds_claims(&current)).then_some(holder))
    }

    /// The index entries `obj` still holds: each of its claims' keys that
    /// names it (namespace, name and uid), at the revision it was read at.
    /// A key that names another object was taken over and is not `obj`'s to
    /// give up.
    async fn held_entries(&self, obj: &S::Object) -> Result<Vec<Release>, ApiError> {
        let meta = obj.metadata();
        let name = meta.name.clone().unwrap_or_default();
        let mine = ClaimHolder {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: name.clone(),
            uid: meta.uid.clone().unwrap_or_default(),
        };
        let mut held = Vec::new();
        for claim in self.strategy.unique_claims(obj) {
            let key = index_key(
                &self.etcd_prefix,
                &self.resource.group,
                &self.resource.resource,
                &claim.index,
            );
            let entry = match self.storage.get(&key).await {
                Ok(entry) => entry,
                Err(StorageError::NotFound { .. }) => continue,
                Err(e) => return Err(storage_error(e, &self.resource, &name)),
            };
            let names_me = serde_json::from_slice::<ClaimHolder>(&entry.value)
                .is_ok_and(|holder| holder == mine);
            if names_me {
                held.push(Release {
                    key,
                    revision: entry.mod_revision,
                });
            }
        }
        Ok(held)
    }

    /// `GET` one object for a client, with kube's `resourceVersion`
    /// semantics: none, the most recent (a linearizable read); `"0"`, any
    /// the server has; `N`, not older than `N`. Served from the watch cache
    /// once it has reached the revision the read demands: for the most
    /// recent, the current revision etcd answers after the request arrived
    /// (concurrent gets share that read). While the cache cannot serve
    /// (not ready, not caught up in time, or that read failed), the most
    /// recent and "any" are read from etcd instead.
    pub async fn read(
        &self,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<Shared<S::Object>, ApiError> {
        let key = self.key(namespace, name);
        let asked = parse_resource_version(resource_version)?;
        // While the cache starts or relists, the most recent (and "any") is
        // read from etcd at once, as kube-apiserver's cacher delegates.
        if !self.cache.is_ready() && matches!(asked, None | Some(0)) {
            return self.get(namespace, name).await.map(Shared::new);
        }
        let ready = match asked {
            Some(0) => true,
            Some(r) => {
                self.wait_for_requested(r).await?;
                true
            }
            None => self.catch_up().await.is_ok(),
        };
        match self.cache.get(&key) {
            Ok((Some(kv), _)) if ready => decode_shared(&kv),
            Ok((None, _)) if ready => Err(self.err(name)(StorageError::NotFound { key })),
            _ => self.get(namespace, name).await.map(Shared::new),
        }
    }

    /// One object as it is now: a linearizable read from etcd, for the
    /// reads a write starts from.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<S::Object, ApiError> {
        let (obj, _) = self.get_with_revision(namespace, name).await?;
        Ok(obj)
    }

    async fn get_with_revision(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(S::Object, Revision), ApiError> {
        let kv = self
            .storage
            .get(&self.key(namespace, name))
            .await
            .map_err(self.err(name))?;
        Ok((self.decode(&kv)?, kv.mod_revision))
    }

    /// The watch cache's copy of an object and its revision, for a write
    /// to be tried on before the object is read from etcd, as kube's cacher
    /// hands its copy to `GuaranteedUpdate`. The write's transaction is
    /// conditional on that revision, so a copy that is no longer current
    /// costs one refused transaction; and a write takes only a success from
    /// a copy: a refusal, a conflict or a no-op there is decided again on
    /// the object as read. None while the cache is not ready, for a dry run
    /// (whose answer no transaction checks), and when the cache has no such
    /// object (only etcd may say that it is gone).
    fn cached_copy(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
    ) -> Option<(S::Object, Revision)> {
        if ctx.dry_run || !self.cache.is_ready() {
            return None;
        }
        let (kv, _) = self.cache.get(&self.key(namespace, name)).ok()?;
        let kv = kv?;
        let shared = decode_shared::<S::Object>(&kv).ok()?;
        Some((shared.into_owned(), kv.mod_revision))
    }

    /// `GET` a collection, in one namespace or (None) all.
    pub async fn list(
        &self,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ObjectList<Shared<S::Object>>, ApiError> {
        let rv = parse_resource_version(opts.resource_version.as_deref())?;
        let exact = match opts.resource_version_match.as_deref().unwrap_or_default() {
            "" => false,
            "NotOlderThan" => false,
            "Exact" => true,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "invalid resourceVersionMatch {other:?}: supported values are \"Exact\" and \"NotOlderThan\""
                )))
            }
        };
        if opts.resource_version_match.is_some() && rv.is_none() {
            return Err(ApiError::BadRequest(
                "resourceVersionMatch is forbidden unless resourceVersion is provided".to_owned(),
            ));
        }
        if exact && rv == Some(0) {
            return Err(ApiError::BadRequest(
                "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"".to_owned(),
            ));
        }
        if let Some(limit) = opts.limit {
            if limit < 0 {
                return Err(ApiError::BadRequest(format!(
                    "limit must not be negative, got {limit}"
                )));
            }
        }
        let scope = self.scope_prefix(namespace);
        let limit = opts.limit.filter(|l| *l > 0);

        if let Some(token) = &opts.continue_token {
            if rv.is_some() {
                return Err(ApiError::BadRequest(
                    "specifying resource version is not allowed when using continue".to_owned(),
                ));
            }
            let (revision, start_after) = decode_continue(token, &self.prefix, &scope)?;
            return self
                .list_from_etcd(&scope, revision, Some(start_after), limit, opts)
                .await;
        }
        match (rv, limit, exact) {
            // An exact revision, or a page: read etcd at one revision. One
            // etcd has not reached gets the time the cache would get.
            (Some(r), _, true) => {
                match self
                    .list_from_etcd(&scope, Some(r), None, limit, opts)
                    .await
                {
                    Err(ApiError::TooLargeResourceVersion { .. }) => {
                        self.wait_for_requested(r).await?;
                        self.list_from_etcd(&scope, Some(r), None, limit, opts)
                            .await
                    }
                    answer => answer,
                }
            }
            (None, Some(_), _) => self.list_from_etcd(&scope, None, None, limit, opts).await,
            (Some(r), Some(_), false) if r > 0 => {
                self.wait_for_requested(r).await?;
                self.list_from_etcd(&scope, None, None, limit, opts).await
            }
            // Everything else from the cache: "0" as it is, otherwise once it
            // has caught up with what the read demands.
            (rv, _, _) => {
                match rv {
                    Some(0) => {}
                    Some(r) => self.wait_for_requested(r).await?,
                    // While the cache cannot serve the most recent (it
                    // starts, re-lists, or does not catch up in time, as when
                    // its etcd watch hangs on a member that stopped), etcd
                    // does, as kube-apiserver's cacher delegates it.
                    None => {
                        if !self.cache.is_ready() || self.catch_up().await.is_err() {
                            return self.list_from_etcd(&scope, None, None, limit, opts).await;
                        }
                    }
                }
                let (kvs, revision) = self.cache.snapshot(&scope).map_err(cache_error)?;
                let mut items = Vec::with_capacity(kvs.len());
                for kv in &kvs {
                    let obj = decode_shared(kv)?;
                    if self.matches(&obj, &opts.label_selector, &opts.field_selector) {
                        items.push(obj);
                    }
                }
                Ok(ObjectList {
                    items,
                    resource_version: revision.to_string(),
                    continue_token: None,
                    remaining_item_count: None,
                })
            }
        }
    }

    /// Waits until the cache has reached etcd's current revision, read after
    /// this call began (what a read of the most recent needs), and returns
    /// that revision.
    async fn catch_up(&self) -> Result<Revision, ApiError> {
        let current = self
            .storage
            .current_revision()
            .await
            .map_err(self.err(""))?;
        self.wait_for(current).await?;
        Ok(current)
    }

    async fn wait_for(&self, revision: Revision) -> Result<(), ApiError> {
        self.cache
            .wait_for_revision(revision, FRESHNESS_TIMEOUT)
            .await
            .map_err(cache_error)
    }

    /// Waits for a resourceVersion the client asked for. One the store has
    /// not reached within [`FRESHNESS_TIMEOUT`] is too large, as
    /// kube-apiserver's watch cache answers it (the client retries).
    async fn wait_for_requested(&self, revision: Revision) -> Result<(), ApiError> {
        match self
            .cache
            .wait_for_revision(revision, FRESHNESS_TIMEOUT)
            .await
        {
            Ok(()) => Ok(()),
            // Not that the revision is too large: the cache is re-listing.
            Err(CacheError::Stale(_)) if !self.cache.is_ready() => {
                Err(cache_error(CacheError::NotReady))
            }
            Err(CacheError::Stale(requested)) => Err(ApiError::TooLargeResourceVersion {
                requested,
                current: self.cache.revision(),
            }),
            Err(other) => Err(cache_error(other)),
        }
    }

    async fn list_from_etcd(
        &self,
        scope: &str,
        revision: Option<Revision>,
        mut start_after: Option<String>,
        limit: Option<i64>,
        opts: &ListOptions,
    ) -> Result<ObjectList<Shared<S::Object>>, ApiError> {
        let filtering = !opts.label_selector.is_empty() || !opts.field_selector.is_empty();
        let mut items = Vec::new();
        let mut read_at = revision;
        // The first read asks for `limit` keys. A page that the selectors
        // mostly filtered out means the rest will be sparse too, so each
        // further read asks for twice as many, up to a cap, as
        // k8s.io/apiserver's etcd3 store does: a page of one out of 10,000
        // costs 14 reads, not 10,000. What the client gets is unchanged: at
        // most `limit` items, continuing after the last one returned.
        let mut page_size = limit;
        loop {
            let page = self
                .storage
                .list(
                    scope,
                    storage::ListOptions {
                        revision: read_at,
                        start_after: start_after.clone(),
                        limit: page_size,
                    },
                )
                .await
                .map_err(|e| match e {
                    StorageError::Compacted { .. } if revision.is_some() => ApiError::Expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".to_owned(),
                    ),
                    other => storage_error(other, &self.resource, ""),
                })?;
            read_at = Some(page.revision);
            let mut last_key = page.items.last().map(|kv| kv.key.clone());
            let mut more = page.more;
            for (i, kv) in page.items.iter().enumerate() {
                let obj = self.decode(kv)?;
                if self.matches(&obj, &opts.label_selector, &opts.field_selector) {
                    items.push(Shared::new(obj));
                    // Never more than `limit`: continue after the last item
                    // returned, even in the middle of a page.
                    if limit.is_some_and(|l| items.len() as i64 >= l) {
                        if i + 1 < page.items.len() {
                            last_key = Some(kv.key.clone());
                            more = true;
                        }
                        break;
                    }
                }
            }
            let full = limit.is_some_and(|l| items.len() as i64 >= l);
            if !more || full || last_key.is_none() {
                let continue_token = match (&last_key, more) {
                    (Some(last), true) => Some(encode_continue(page.revision, &self.prefix, last)),
                    _ => None,
                };
                return Ok(ObjectList {
                    items,
                    resource_version: page.revision.to_string(),
                    // Unfiltered pages are never cut short, so this is exact.
                    remaining_item_count: (page.more && !filtering).then_some(page.remaining),
                    continue_token,
                });
            }
            start_after = last_key;
            page_size = page_size.map(|size| {
                if size < MAX_PAGE_GROWTH {
                    (size * 2).min(MAX_PAGE_GROWTH)
                } else {
                    size
                }
            });
        }
    }

    /// `PUT`: replaces the object (or, with `status`, only its status). The
    /// body must carry the resourceVersion it was read at.
    pub async fn update(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        obj: S::Object,
        status: bool,
    ) -> Result<S::Object, ApiError> {
        if obj
            .metadata()
            .resource_version
            .as_deref()
            .is_none_or(str::is_empty)
        {
            return Err(self.invalid(
                &obj,
                vec![FieldCause {
                    reason: "FieldValueInvalid".to_owned(),
                    field: "metadata.resourceVersion".to_owned(),
                    message: "Invalid value: 0x0: must be specified for an update".to_owned(),
                }],
            ));
        }
        // The body pins its resourceVersion: the store's read-modify-write,
        // whose mutation is the body, answers a conflict for any other. It
        // starts from the watch cache's copy.
        let copy = self.cached_copy(ctx, namespace, name).map(|(copy, _)| copy);
        self.guaranteed_update_from(ctx, namespace, name, status.into(), copy.as_ref(), |_| {
            Ok(obj.clone())
        })
        .await
    }

    /// Read-modify-write: `mutate` turns the current object into the desired
    /// one (a patch). Retries when another writer wins the race, unless the
    /// desired object pins a resourceVersion. It reads the object from
    /// etcd: from the watch cache's copy, a patch's retries after a refused
    /// transaction kept a hundred patches of a fat object from staying
    /// within the server's memory bound (`tests/api_bad_input.rs`).
    pub async fn guaranteed_update(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        status: bool,
        mutate: impl Fn(&S::Object) -> Result<S::Object, ApiError>,
    ) -> Result<S::Object, ApiError> {
        self.guaranteed_update_from(ctx, namespace, name, status.into(), None, mutate)
            .await
    }

    /// [`Self::guaranteed_update`], trying first on `cached`, a copy this
    /// store returned, instead of reading the object (as kube's
    /// `GuaranteedUpdate` takes a `cachedExistingObject`). The write is
    /// conditional on the copy's resourceVersion, so a copy that is no
    /// longer current costs one refused transaction, then the object is
    /// read and the write tried on it as usual. Nothing is concluded from
    /// the copy alone: a refusal by `mutate` or by the write (validation,
    /// admission), a resourceVersion it pins that the copy lacks, and a
    /// write that would change nothing in the copy are each tried again on
    /// the object as read, as kube's `GuaranteedUpdate` does with its
    /// cached object. `part` is what the write may change.
    pub async fn guaranteed_update_from(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        part: Part,
        cached: Option<&S::Object>,
        mutate: impl Fn(&S::Object) -> Result<S::Object, ApiError>,
    ) -> Result<S::Object, ApiError> {
        let mut cached = cached.and_then(|c| {
            let revision = c.metadata().resource_version.as_deref()?.parse().ok()?;
            Some((c.clone(), revision))
        });
        for _ in 0..RETRIES {
            let (from_copy, (current, revision)) = match cached.take() {
                Some(copy) => (true, copy),
                None => (false, self.get_with_revision(namespace, name).await?),
            };
            let desired = match mutate(&current) {
                Ok(desired) => desired,
                Err(_) if from_copy => continue,
                Err(e) => return Err(e),
            };
            let pinned = desired
                .metadata()
                .resource_version
                .clone()
                .filter(|v| !v.is_empty());
            if let Some(pinned) = &pinned {
                if *pinned != revision.to_string() {
                    if from_copy {
                        continue;
                    }
                    return Err(self.conflict(name));
                }
            }
            // A no-op answers the object it was tried on, unchanged.
            let copy = from_copy.then(|| current.clone());
            let result = self
                .write_update(
                    ctx,
                    namespace,
                    name,
                    current,
                    revision,
                    desired,
                    part,
                    Fields::Track,
                )
                .await;
            match result {
                // Nothing to write to the copy: the object as read must say
                // so too.
                Ok(obj) if copy.as_ref() == Some(&obj) => continue,
                Ok(obj) => return Ok(obj),
                // Validation and admission judged the copy, not the object.
                Err(UpdateError::Api(_)) if from_copy => continue,
                Err(UpdateError::Api(e)) => return Err(e),
                Err(UpdateError::Raced) if from_copy => continue,
                Err(UpdateError::Raced) if pinned.is_some() => return Err(self.conflict(name)),
                Err(UpdateError::Raced) => continue,
            }
        }
        Err(self.conflict(name))
    }

    /// Server-side apply (`application/apply-patch+yaml`): merges `config`
    /// into the object, or creates it from `config` when there is none (not
    /// through `/status`). `decode` turns the merged JSON into an object,
    /// with the request's field validation. Returns the object and whether
    /// it was created.
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        status: bool,
        config: &serde_json::Value,
        force: bool,
        decode: impl Fn(serde_json::Value) -> Result<S::Object, ApiError>,
    ) -> Result<(S::Object, bool), ApiError> {
        let subresource = if status { "status" } else { "" };
        // The first try is on the watch cache's copy, when it has one; any
        // answer but a write is decided again on the object as read.
        let mut copy = self.cached_copy(ctx, namespace, name);
        for _ in 0..RETRIES {
            let now = now();
            let write = Write {
                manager: ctx.field_manager(),
                subresource,
                now: &now,
            };
            let from_copy = copy.is_some();
            let read = match copy.take() {
                Some(copy) => Ok(copy),
                None => self.get_with_revision(namespace, name).await,
            };
            match read {
                Err(ApiError::NotFound { .. }) if !status => {
                    let (merged, entries) = self
                        .fields
                        .apply(&self.fields.empty_object(), None, config, force, write)
                        .map_err(apply_error)?;
                    let mut obj = decode(merged)?;
                    obj.metadata_mut().managed_fields = entries;
                    match self.create_with(ctx, namespace, obj, Fields::Keep).await {
                        Ok(created) => return Ok((created, true)),
                        // Someone created it meanwhile: apply to theirs.
                        Err(ApiError::AlreadyExists { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
                Ok((current, revision)) => {
                    // A configuration may pin the version it was made for,
                    // as any patch may.
                    let pinned = config["metadata"]["resourceVersion"]
                        .as_str()
                        .filter(|v| !v.is_empty());
                    let copied = from_copy.then(|| current.clone());
                    let attempt = self
                        .apply_to(
                            ctx,
                            namespace,
                            name,
                            status,
                            (current, revision),
                            config,
                            force,
                            write,
                            &decode,
                        )
                        .await;
                    match attempt {
                        Err(UpdateError::Raced) if pinned.is_some() && !from_copy => {
                            return Err(self.conflict(name))
                        }
                        Err(UpdateError::Raced) => continue,
                        // A copy's refusal or no-op is not the object's.
                        Err(UpdateError::Api(_)) if from_copy => continue,
                        // A no-op answers the copy unchanged.
                        Ok(obj) if copied.as_ref() == Some(&obj) => continue,
                        Err(UpdateError::Api(e)) => return Err(e),
                        Ok(obj) => return Ok((obj, false)),
                    }
                }
            }
        }
        Err(self.conflict(name))
    }

    /// One try of an apply on an existing object as `from` shows it:
    /// merged, decoded and written conditionally on `from`'s revision.
    #[allow(clippy::too_many_arguments)]
    async fn apply_to(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        status: bool,
        from: (S::Object, Revision),
        config: &serde_json::Value,
        force: bool,
        write: Write<'_>,
        decode: &impl Fn(serde_json::Value) -> Result<S::Object, ApiError>,
    ) -> Result<S::Object, UpdateError> {
        let (current, revision) = from;
        let pinned = config["metadata"]["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty());
        if pinned.is_some_and(|v| v != revision.to_string()) {
            return Err(UpdateError::Api(self.conflict(name)));
        }
        let live = fields_view(&current).map_err(UpdateError::Api)?;
        let (merged, entries) = self
            .fields
            .apply(
                &live,
                current.metadata().managed_fields.as_ref(),
                config,
                force,
                write,
            )
            .map_err(|e| UpdateError::Api(apply_error(e)))?;
        let mut obj = decode(merged).map_err(UpdateError::Api)?;
        obj.metadata_mut().managed_fields = entries;
        self.write_update(
            ctx,
            namespace,
            name,
            current,
            revision,
            obj,
            status.into(),
            Fields::Keep,
        )
        .await
    }

    fn conflict(&self, name: &str) -> ApiError {
        storage_error(
            StorageError::Conflict {
                key: String::new(),
                expected: 0,
                actual: 0,
            },
            &self.resource,
            name,
        )
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_update(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        old: S::Object,
        revision: Revision,
        mut new: S::Object,
        part: Part,
        fields: Fields,
    ) -> Result<S::Object, UpdateError> {
        let status = part != Part::Main;
        new.set_type_meta();
        // Before the no-op check, so that a text the store would cut again
        // is the same text.
        new.bound_status();
        if let Some(uid) = new.metadata().uid.as_deref().filter(|u| !u.is_empty()) {
            if Some(uid) != old.metadata().uid.as_deref() {
                return Err(UpdateError::Api(ApiError::Conflict {
                    resource: self.resource.clone(),
                    name: name.to_owned(),
                    message: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        old.metadata().uid.as_deref().unwrap_or_default()
                    ),
                }));
            }
        }
        let old_meta = old.metadata().clone();
        if fields == Fields::Track {
            // On the object as sent, before status or spec is reset, as kube.
            let entries = self.fields.update(
                &fields_view(&old).map_err(UpdateError::Api)?,
                old_meta.managed_fields.as_ref(),
                &fields_view(&new).map_err(UpdateError::Api)?,
                new.metadata().managed_fields.as_ref(),
                false,
                Write {
                    manager: ctx.field_manager(),
                    subresource: if status { "status" } else { "" },
                    now: &now(),
                },
            );
            new.metadata_mut().managed_fields = entries;
        }
        let mut new = self
            .admit_mutating(ctx, Operation::Update, namespace, new, Some(&old), status)
            .await
            .map_err(UpdateError::Api)?;
        let managed_fields = new.metadata().managed_fields.clone();
        if status {
            // A status write changes status and nothing else (but the
            // finalizers, where the controller's write may change them;
            // none is added to an object being deleted).
            new.set_spec_from(&old);
            let finalizers = new.metadata().finalizers.clone();
            *new.metadata_mut() = old_meta.clone();
            new.metadata_mut().managed_fields = managed_fields;
            if part == Part::StatusAndFinalizers && old_meta.deletion_timestamp.is_none() {
                new.metadata_mut().finalizers = finalizers;
            }
            if !ctx.may_write_controller_fields() {
                let causes = status_changes(&old, &new);
                if !causes.is_empty() {
                    return Err(UpdateError::Api(self.invalid(&new, causes)));
                }
            }
        } else {
            new.set_status_from(&old);
            if let Some(requester) = old.requester() {
                new.set_requester(requester.clone());
            }
            new.apply_defaults();
            let m = new.metadata_mut();
            m.name = old_meta.name.clone();
            m.namespace = old_meta.namespace.clone();
            m.uid = old_meta.uid.clone();
            m.creation_timestamp = old_meta.creation_timestamp.clone();
            m.deletion_timestamp = old_meta.deletion_timestamp.clone();
            m.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
            m.generation = old_meta.generation;
            m.generate_name = old_meta.generate_name.clone().or(m.generate_name.take());
            m.self_link = None;
            if !new.same_spec(&old) {
                new.metadata_mut().generation = Some(old_meta.generation.unwrap_or(1) + 1);
            }
            if !ctx.may_write_controller_fields() {
                let causes = controller_finalizer_changes(
                    self.strategy.controller_finalizers(),
                    &old_meta,
                    new.metadata(),
                );
                if !causes.is_empty() {
                    return Err(UpdateError::Api(self.invalid(&new, causes)));
                }
            }
            if old_meta.deletion_timestamp.is_some() {
                let old_finalizers = old_meta.finalizers.clone().unwrap_or_default();
                let added: Vec<String> = new
                    .metadata()
                    .finalizers
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|f| !old_finalizers.contains(f))
                    .collect();
                if !added.is_empty() {
                    let cause = FieldCause {
                        reason: "FieldValueForbidden".to_owned(),
                        field: "metadata.finalizers".to_owned(),
                        message: format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {}",
                            go_string_slice(&added)
                        ),
                    };
                    // Twice, as kube-apiserver checks a custom resource's
                    // metadata twice (generic and CRD validation).
                    return Err(UpdateError::Api(
                        self.invalid(&new, vec![cause.clone(), cause]),
                    ));
                }
            }
        }
        new.metadata_mut().resource_version = old_meta.resource_version.clone();
        let causes = new.validate_update(&old);
        if !causes.is_empty() {
            return Err(UpdateError::Api(self.invalid(&new, causes)));
        }
        self.admit_validating(
            ctx,
            Operation::Update,
            namespace,
            name,
            Some(&new),
            Some(&old),
            status,
        )
        .await
        .map_err(UpdateError::Api)?;
        // A write that changes nothing but its entries' times changes
        // nothing (kube's IgnoreManagedFieldsTimestampsTransformer).
        if only_times_differ(old.metadata(), new.metadata()) {
            let mut same = new.clone();
            same.metadata_mut().managed_fields = old_meta.managed_fields.clone();
            if same == old {
                new = same;
            }
        }
        // A no-op writes nothing and keeps the resourceVersion, as in kube.
        if new == old {
            return Ok(new);
        }
        if ctx.dry_run {
            // What the write would store, size limit included.
            self.encode_tracked(ctx.writer, &mut new, fields)
                .map_err(UpdateError::Api)?;
            return Ok(new);
        }
        let key = self.key(namespace, name);
        let finalized = new.metadata().deletion_timestamp.is_some()
            && new.metadata().finalizers.as_ref().is_none_or(Vec::is_empty);
        // The write that removes the object, or that finishes it, gives up
        // its index entries in the same transaction.
        let releases = if finalized
            || (self.strategy.holds_claims(&old) && !self.strategy.holds_claims(&new))
        {
            self.held_entries(&old).await.map_err(UpdateError::Api)?
        } else {
            Vec::new()
        };
        if finalized {
            return match self
                .storage
                .delete_releasing(&key, revision, &releases, ctx.fence.as_ref())
                .await
            {
                // The answer is the object as last stored, as kube answers
                // the write that finishes an object.
                Ok(_) => Ok(new),
                Err(StorageError::Conflict { .. }) => Err(UpdateError::Raced),
                Err(e) => Err(UpdateError::Api(storage_error(e, &self.resource, name))),
            };
        }
        match self
            .storage
            .update_releasing(
                &key,
                revision,
                self.encode_tracked(ctx.writer, &mut new, fields)
                    .map_err(UpdateError::Api)?,
                &releases,
                ctx.fence.as_ref(),
            )
            .await
        {
            Ok(kv) => {
                new.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
                Ok(new)
            }
            Err(StorageError::Conflict { .. }) => Err(UpdateError::Raced),
            Err(e) => Err(UpdateError::Api(storage_error(e, &self.resource, name))),
        }
    }

    /// `DELETE`: removes the object, or marks it for deletion while finalizers
    /// remain.
    pub async fn delete(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<DeleteOutcome<S::Object>, ApiError> {
        let key = self.key(namespace, name);
        for _ in 0..RETRIES {
            let (mut current, revision) = self.get_with_revision(namespace, name).await?;
            self.check_preconditions(&current, name, opts)?;
            self.admit_delete(ctx, namespace, name, &current, opts)
                .await?;
            let finalizers = current.metadata().finalizers.clone().unwrap_or_default();
            if !finalizers.is_empty() {
                if current.metadata().deletion_timestamp.is_some() {
                    return Ok(DeleteOutcome::Pending(current));
                }
                let m = current.metadata_mut();
                m.deletion_timestamp = Some(now());
                m.deletion_grace_period_seconds = Some(0);
                m.generation = Some(m.generation.unwrap_or(1) + 1);
                if ctx.dry_run {
                    return Ok(DeleteOutcome::Pending(current));
                }
                match self
                    .storage
                    .update_releasing(
                        &key,
                        revision,
                        self.encode(&current)?,
                        &[],
                        ctx.fence.as_ref(),
                    )
                    .await
                {
                    Ok(kv) => {
                        current.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
                        return Ok(DeleteOutcome::Pending(current));
                    }
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(e) => return Err(storage_error(e, &self.resource, name)),
                }
            }
            if ctx.dry_run {
                return Ok(DeleteOutcome::Deleted(current));
            }
            let releases = self.held_entries(&current).await?;
            match self
                .storage
                .delete_releasing(&key, revision, &releases, ctx.fence.as_ref())
                .await
            {
                Ok((_, at)) => {
                    current.metadata_mut().resource_version = Some(at.to_string());
                    return Ok(DeleteOutcome::Deleted(current));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(storage_error(e, &self.resource, name)),
            }
        }
        Err(self.conflict(name))
    }

    fn check_preconditions(
        &self,
        current: &S::Object,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let meta = current.metadata();
        let failed = |what: &str, wanted: &str, actual: &str| {
            ApiError::Conflict {
            resource: self.resource.clone(),
            name: name.to_owned(),
            message: format!("Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"),
        }
        };
        if let Some(uid) = &opts.precondition_uid {
            let actual = meta.uid.as_deref().unwrap_or_default();
            if uid != actual {
                return Err(failed("UID", uid, actual));
            }
        }
        if let Some(rv) = &opts.precondition_resource_version {
            let actual = meta.resource_version.as_deref().unwrap_or_default();
            if rv != actual {
                return Err(failed("ResourceVersion", rv, actual));
            }
        }
        Ok(())
    }

    /// `DELETE` on a collection: deletes every object the selectors match and
    /// returns them.
    pub async fn delete_collection(
        &self,
        ctx: &Context,
        namespace: Option<&str>,
        list: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<ObjectList<Shared<S::Object>>, ApiError> {
        let mut listed = self.list(namespace, list).await?;
        let mut deleted = Vec::with_capacity(listed.items.len());
        for obj in listed.items.drain(..) {
            let ns = obj.metadata().namespace.clone().unwrap_or_default();
            let name = obj.metadata().name.clone().unwrap_or_default();
            match self.delete(ctx, &ns, &name, opts).await {
                Ok(DeleteOutcome::Deleted(o) | DeleteOutcome::Pending(o)) => {
                    deleted.push(Shared::new(o))
                }
                // Gone in the meantime: someone else deleted it.
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        listed.items = deleted;
        Ok(listed)
    }

    /// `?watch=true`.
    pub async fn watch(
        &self,
        namespace: Option<&str>,
        opts: WatchOptions,
    ) -> Result<Watch<S>, ApiError> {
        let rv = parse_resource_version(opts.resource_version.as_deref())?;
        let scope = self.scope_prefix(namespace);
        if opts.send_initial_events.is_some() {
            if opts.resource_version_match.as_deref() != Some("NotOlderThan") {
                return Err(ApiError::BadRequest(
                    "sendInitialEvents requires resourceVersionMatch=NotOlderThan".to_owned(),
                ));
            }
            if opts.send_initial_events == Some(true) && !opts.allow_bookmarks {
                return Err(ApiError::BadRequest(
                    "sendInitialEvents requires allowWatchBookmarks=true".to_owned(),
                ));
            }
        } else if let Some(m) = opts.resource_version_match.as_deref() {
            return Err(ApiError::BadRequest(format!(
                "resourceVersionMatch {m:?} is not supported for watch without sendInitialEvents"
            )));
        }
        let initial = match opts.send_initial_events {
            Some(send) => send,
            // Legacy: a watch without a resourceVersion (or "0") starts with
            // the current state as ADDED events.
            None => matches!(rv, None | Some(0)),
        };
        let filter = WatchFilter {
            scope: scope.clone(),
            labels: opts.label_selector.clone(),
            fields: opts.field_selector.clone(),
        };
        // A resourceVersion the store does not reach in time ends the watch
        // with one ERROR event, as kube-apiserver's watch cache ends it,
        // rather than leave it open waiting for a revision that may never
        // come (one from another cluster, or from before a restore).
        if let Some(r) = rv.filter(|r| *r > 0) {
            if let Err(e) = self.wait_for_requested(r).await {
                return match e {
                    ApiError::TooLargeResourceVersion { .. } => Ok(self.failed_watch(e, filter)),
                    other => Err(other),
                };
            }
        }
        let mut queue = VecDeque::new();
        let (live, after) = if initial {
            if rv.is_none() {
                self.catch_up().await?;
            }
            let snap = self.cache.snapshot_and_watch(&scope).map_err(cache_error)?;
            for kv in &snap.objects {
                let obj = decode_shared(kv)?;
                if self.matches(&obj, &filter.labels, &filter.fields) {
                    queue.push_back(WatchEvent::Added(obj));
                }
            }
            // The end of the initial events, for a watch-list and (as
            // kube-apiserver's watch cache marks its first bookmark) for a
            // legacy watch that takes bookmarks.
            if opts.send_initial_events == Some(true)
                || (opts.send_initial_events.is_none() && opts.allow_bookmarks)
            {
                queue.push_back(WatchEvent::Bookmark {
                    resource_version: snap.revision.to_string(),
                    initial_events_end: true,
                });
            }
            (snap.live, snap.revision)
        } else {
            // Without a resourceVersion (or "0") and without initial
            // events, the watch starts from now.
            let after = match rv {
                // Reached above.
                Some(r) if r > 0 => r,
                _ => self.catch_up().await?,
            };
            let watch = match self.cache.watch_from(after).await {
                Ok(watch) => watch,
                // As kube-apiserver's watch cache: a watch that was allowed
                // and parsed fails in its stream, with one ERROR event.
                Err(CacheError::TooOld { requested, oldest }) => {
                    return Ok(self.failed_watch(
                        ApiError::Expired(format!(
                            "too old resource version: {requested} ({oldest})"
                        )),
                        filter,
                    ))
                }
                Err(other) => return Err(cache_error(other)),
            };
            let mut pending = VecDeque::from(watch.backlog);
            while let Some(event) = pending.pop_front() {
                if let Some(e) = self.translate(&filter, &event)? {
                    queue.push_back(e);
                }
            }
            (watch.live, after)
        };
        Ok(Watch {
            queue,
            live,
            after,
            filter,
            strategy: self.strategy.clone(),
            cache: self.cache.clone(),
            bookmarks: opts.allow_bookmarks.then_some(self.bookmark_interval),
            failure: None,
        })
    }

    /// A watch whose one event is `error`, and which then ends.
    fn failed_watch(&self, error: ApiError, filter: WatchFilter) -> Watch<S> {
        // A channel whose sender is gone: the watch ends after the error.
        let (_, live) = broadcast::channel(1);
        Watch {
            queue: VecDeque::new(),
            live,
            after: 0,
            filter,
            strategy: self.strategy.clone(),
            cache: self.cache.clone(),
            bookmarks: None,
            failure: Some(error),
        }
    }

    fn translate(
        &self,
        filter: &WatchFilter,
        event: &CacheEvent,
    ) -> Result<Option<WatchEvent<Shared<S::Object>>>, ApiError> {
        translate(&self.strategy, filter, event)
    }
}

/// The value of an index key: the object that took the claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ClaimHolder {
    namespace: String,
    name: String,
    uid: String,
}

/// What a write may change of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Spec and metadata; status is kept (a write to the object itself).
    Main,
    /// Status alone (`/status`).
    Status,
    /// Status and the finalizers, in one write: the controller's write
    /// that records a match also protects the object. No request makes
    /// it: a status request changes status alone, as in kube.
    StatusAndFinalizers,
}

impl From<bool> for Part {
    /// A request's write: `/status` (`true`) or the object itself.
    fn from(status: bool) -> Self {
        if status {
            Self::Status
        } else {
            Self::Main
        }
    }
}

enum UpdateError {
    Api(ApiError),
    /// Another writer changed the object between our read and our write.
    Raced,
}

#[derive(Debug, Clone)]
struct WatchFilter {
    scope: String,
    labels: LabelSelector,
    fields: FieldSelector,
}

/// A stored value as an object, with its resourceVersion from etcd.
/// The status fields a client's `/status` write would change, one cause each:
/// status is the controllers' output, and the protocols decide on it.
fn status_changes<O: Object>(old: &O, new: &O) -> Vec<FieldCause> {
    let field = |o: &O| {
        serde_json::to_value(o)
            .ok()
            .and_then(|v| v.get("status").cloned())
            .and_then(|v| match v {
                serde_json::Value::Object(map) => Some(map),
                _ => None,
            })
            .unwrap_or_default()
    };
    let (before, after) = (field(old), field(new));
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| FieldCause {
            reason: "FieldValueForbidden".to_owned(),
            field: format!("status.{k}"),
            message: "Forbidden: status is written by the storage-transfer controllers only"
                .to_owned(),
        })
        .collect()
}

/// The controller-only finalizers a client's write would add or remove.
fn controller_finalizer_changes(
    owned: &[&str],
    old: &ObjectMeta,
    new: &ObjectMeta,
) -> Vec<FieldCause> {
    let has = |m: &ObjectMeta, f: &str| m.finalizers.iter().flatten().any(|x| x == f);
    owned
        .iter()
        .filter(|f| has(old, f) != has(new, f))
        .map(|f| FieldCause {
            reason: "FieldValueForbidden".to_owned(),
            field: "metadata.finalizers".to_owned(),
            message: format!(
                "Forbidden: the finalizer {f} is added and removed by the storage-transfer controllers only"
            ),
        })
        .collect()
}

fn decode_object<O: Object>(kv: &KeyValue) -> Result<O, ApiError> {
    let mut obj: O = serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::Internal(format!("decoding {} from storage: {e}", kv.key)))?;
    obj.set_type_meta();
    obj.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
    Ok(obj)
}

/// What an apply's merge refusal answers.
fn apply_error(e: ApplyError) -> ApiError {
    match e {
        ApplyError::Conflicts { message, causes } => ApiError::ApplyConflict { message, causes },
        ApplyError::BadRequest(m) => ApiError::BadRequest(m),
        // kube answers 500 here; a config that does not fit the schema is
        // the client's error, so it is a 400.
        ApplyError::Internal(m) => ApiError::BadRequest(m),
    }
}

/// A cached value as a [`Shared`] object: decoded by its first reader, then
/// shared by every list and watch that reads the same revision.
fn decode_shared<O: Object>(kv: &KeyValue) -> Result<Shared<O>, ApiError> {
    kv.memo
        .get_or_try_init(|| decode_object(kv).map(Shared::new))
}

/// Turns a cache event into what this watcher should see: selector
/// transitions become ADDED or DELETED, as kube-apiserver's cacher does.
fn translate<S: Strategy>(
    strategy: &S,
    filter: &WatchFilter,
    event: &CacheEvent,
) -> Result<Option<WatchEvent<Shared<S::Object>>>, ApiError> {
    let decode = decode_shared::<S::Object>;
    if !event.object.key.starts_with(&filter.scope) {
        return Ok(None);
    }
    let matches = |o: &S::Object| {
        filter.labels.matches(o.metadata().labels.as_ref())
            && filter.fields.matches(|f| strategy.field_value(o, f))
    };
    let filtering = !filter.labels.is_empty() || !filter.fields.is_empty();
    let object = decode(&event.object)?;
    Ok(match event.kind {
        EventKind::Added => matches(&object).then_some(WatchEvent::Added(object)),
        EventKind::Deleted => matches(&object).then_some(WatchEvent::Deleted(object)),
        EventKind::Modified => {
            let now = matches(&object);
            let before = match (&event.prev, filtering) {
                (Some(prev), true) => matches(&*decode(prev)?),
                _ => now,
            };
            match (before, now) {
                (true, true) => Some(WatchEvent::Modified(object)),
                (false, true) => Some(WatchEvent::Added(object)),
                (true, false) => Some(WatchEvent::Deleted(object)),
                (false, false) => None,
            }
        }
    })
}

/// A running watch: queued events first, then live ones from the cache.
#[derive(Debug)]
pub struct Watch<S: Strategy> {
    queue: VecDeque<WatchEvent<Shared<S::Object>>>,
    live: broadcast::Receiver<Arc<CacheEvent>>,
    /// The revision of the last event delivered (or the starting point).
    after: Revision,
    filter: WatchFilter,
    strategy: S,
    cache: WatchCache,
    bookmarks: Option<Duration>,
    /// Why the watch could not start: its only event.
    failure: Option<ApiError>,
}

impl<S: Strategy> Watch<S> {
    /// The next event; `None` when the watch is over (the client should
    /// watch again from the last resourceVersion it saw, or re-list).
    pub async fn next(&mut self) -> Option<Result<WatchEvent<Shared<S::Object>>, ApiError>> {
        if let Some(error) = self.failure.take() {
            return Some(Err(error));
        }
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(Ok(event));
            }
            let received = match self.bookmarks {
                None => self.live.recv().await,
                Some(interval) => tokio::select! {
                    r = self.live.recv() => r,
                    () = tokio::time::sleep(interval) => {
                        // Every event up to the cache's revision has been sent
                        // to the channel before the revision moved; if the
                        // channel is empty now, that revision is safe to report.
                        let revision = self.cache.revision();
                        match self.live.try_recv() {
                            Err(broadcast::error::TryRecvError::Empty) => {
                                self.after = self.after.max(revision);
                                return Some(Ok(WatchEvent::Bookmark {
                                    resource_version: self.after.to_string(),
                                    initial_events_end: false,
                                }));
                            }
                            Ok(event) => Ok(event),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                Err(broadcast::error::RecvError::Lagged(n))
                            }
                            Err(broadcast::error::TryRecvError::Closed) => {
                                Err(broadcast::error::RecvError::Closed)
                            }
                        }
                    }
                },
            };
            let event = match received {
                Ok(event) => event,
                // Too slow to keep up, or the cache re-listed: end the watch so
                // that the client resumes or re-lists, rather than miss events.
                Err(_) => return None,
            };
            if event.revision <= self.after {
                continue;
            }
            self.after = event.revision;
            match translate(&self.strategy, &self.filter, &event) {
                Ok(Some(e)) => return Some(Ok(e)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Whether two objects' entries are the same but for their times.
fn only_times_differ(old: &ObjectMeta, new: &ObjectMeta) -> bool {
    let untimed = |m: &ObjectMeta| {
        m.managed_fields.clone().map(|entries| {
            entries
                .into_iter()
                .map(|mut e| {
                    e.time = None;
                    e
                })
                .collect::<Vec<_>>()
        })
    };
    old.managed_fields != new.managed_fields && untimed(old) == untimed(new)
}

/// A list of strings as Go's `%#v` prints a `[]string`.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|i| serde_json::to_string(i).unwrap_or_default())
        .collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Five characters from kube's generateName alphabet (no vowels, no look-alikes).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

fn parse_resource_version(rv: Option<&str>) -> Result<Option<Revision>, ApiError> {
    match rv {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse::<Revision>()
            .ok()
            .filter(|r| *r >= 0)
            .map(Some)
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "invalid resource version {text:?}: must be a non-negative integer"
                ))
            }),
    }
}

fn cache_error(e: CacheError) -> ApiError {
    match e {
        CacheError::TooOld { requested, oldest } => {
            ApiError::Expired(format!("too old resource version: {requested} ({oldest})"))
        }
        CacheError::NotReady => {
            ApiError::ServiceUnavailable("the watch cache is not ready yet; try again".to_owned())
        }
        CacheError::Stale(revision) => ApiError::Timeout(format!(
            "Too large resource version: {revision}: the server has not caught up with it yet"
        )),
    }
}

/// The continue token, in kube's format: unpadded URL-safe base64 of
/// `{"v":"meta.k8s.io/v1","rv":N,"start":"<key after the prefix>\u0000"}`.
#[derive(Debug, Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: Revision,
    start: String,
}

fn encode_continue(revision: Revision, prefix: &str, last_key: &str) -> String {
    let relative = last_key
        .strip_prefix(prefix)
        .unwrap_or(last_key)
        .trim_start_matches('/');
    let token = ContinueToken {
        v: "meta.k8s.io/v1".to_owned(),
        rv: revision,
        start: format!("{relative}\u{0}"),
    };
    let json = serde_json::to_vec(&token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// Decodes a continue token into the revision to read at and the key to read
/// after, refusing tokens that are malformed or point outside `scope`.
fn decode_continue(
    token: &str,
    prefix: &str,
    scope: &str,
) -> Result<(Option<Revision>, String), ApiError> {
    let bad = |why: &str| ApiError::BadRequest(format!("continue key is not valid: {why}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|_| bad("not base64"))?;
    let token: ContinueToken =
        serde_json::from_slice(&raw).map_err(|_| bad("not a continue token"))?;
    if token.v != "meta.k8s.io/v1" {
        return Err(bad("unsupported version"));
    }
    if token.rv <= 0 {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    let Some(relative) = token.start.strip_suffix('\u{0}') else {
        return Err(bad("malformed start key"));
    };
    if relative.is_empty() || relative.split('/').any(|seg| seg == ".." || seg == ".") {
        return Err(bad("malformed start key"));
    }
    let key = format!("{}/{relative}", prefix.trim_end_matches('/'));
    if !key.starts_with(scope) {
        return Err(bad("the token belongs to another namespace"));
    }
    Ok((Some(token.rv), key))
}

mod admit;

#[cfg(test)]
mod tests;
