//! The controllers' view of the cluster they extend: the core objects they read
//! and change (PersistentVolumes, PersistentVolumeClaims, pods), through
//! kube-rs, with the server's own ServiceAccount.
//!
//! Owns the calls and the one mapping of their failures to [`ClusterError`].
//! Reads are live (a GET or LIST against kube-apiserver), except where a
//! [`ReadCache`] is attached ([`Cluster::with_cache`]): then a claim or a
//! volume is read from the reflectors' copies of [`super::watch`], and live
//! only where the copy may be behind what this controller knows: its own
//! writes (read-your-writes), and a write refused on a stale version. What
//! the copy can still lag behind is another writer's last change, which
//! every write here is conditional against (a resourceVersion or uid), so a
//! stale read costs a refused write and another look, never a wrong step.
//! Pods, SubjectAccessReviews and dry runs are always live; a transfer's
//! in-use check lists pods at a fence's revision where a [`PodFence`] is
//! attached (as fresh as a consistent LIST, without its wait).

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, VersionMatch,
};
use kube::runtime::reflector::{ObjectRef, Store as Reflector};
use kube::Api;
use serde_json::Value;

use super::pod_fence::PodFence;

/// Why a call to kube-apiserver failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("{message}")]
    NotFound { message: String },
    #[error("{message}")]
    AlreadyExists { message: String },
    /// A resourceVersion or uid precondition failed: someone else wrote first.
    #[error("{message}")]
    Conflict { message: String },
    /// The API refused the request for good: forbidden, invalid, over quota.
    /// Retrying the same request will not help.
    #[error("{message}")]
    Refused {
        code: u16,
        reason: String,
        message: String,
    },
    /// Anything that may pass: timeouts, 5xx, 429, transport errors.
    #[error("{0}")]
    Unavailable(String),
}

impl From<kube::Error> for ClusterError {
    fn from(err: kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => {
                let message = status.message.clone();
                match (status.code, status.reason.as_str()) {
                    (404, _) => ClusterError::NotFound { message },
                    (409, "AlreadyExists") => ClusterError::AlreadyExists { message },
                    (409, _) => ClusterError::Conflict { message },
                    (429, _) => ClusterError::Unavailable(message),
                    (403, _) if denied_by_authorizer(&message) => ClusterError::Unavailable(
                        format!("kube-apiserver does not authorize this server yet: {message}"),
                    ),
                    (code @ 400..=499, reason) => ClusterError::Refused {
                        code,
                        reason: reason.to_owned(),
                        message,
                    },
                    _ => ClusterError::Unavailable(format!("{} ({})", message, status.code)),
                }
            }
            other => ClusterError::Unavailable(other.to_string()),
        }
    }
}

/// Whether a 403 is the authorizer's (RBAC: `… is forbidden: User "…"
/// cannot …`), not an admission plugin's, a quota's or a namespace's.
/// The controllers ask with the server's own ServiceAccount, which the
/// deployment grants every right they use (tenants' rights are checked
/// with SubjectAccessReviews, not by asking as them). Such a 403 comes from
/// a kube-apiserver whose authorizer has not synced yet after a restart,
/// or from a broken installation: a refusal of who asks, not of the step,
/// so the step is retried (and logged) instead of failing a transfer.
fn denied_by_authorizer(message: &str) -> bool {
    message
        .split_once(" is forbidden: User \"")
        .is_some_and(|(_, rest)| rest.contains("\" cannot "))
}

/// `Ok(None)` for a 404.
fn found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, ClusterError> {
    match result.map_err(ClusterError::from) {
        Ok(v) => Ok(Some(v)),
        Err(ClusterError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Typed calls on the core objects the controllers touch.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    cache: Option<Arc<ReadCache>>,
    fence: Option<Arc<PodFence>>,
}

/// What the copy of one object must show before it is trusted again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// This resourceVersion (written or read live by this controller).
    Version(String),
    /// No object (this controller saw it gone).
    Absent,
    /// Unknown: read live until a live read says what to expect.
    Live,
}

/// The reflectors' copies of claims and volumes, and per object what the
/// copy must show to be trusted (entries only for objects this controller
/// wrote, read live, or was refused on; every other object is read from the
/// copy).
#[derive(Debug)]
pub struct ReadCache {
    claims: Reflector<PersistentVolumeClaim>,
    volumes: Reflector<PersistentVolume>,
    expect: Mutex<Expectations>,
}

#[derive(Debug, Default)]
struct Expectations {
    /// Counts this controller's writes, so that a live read that began
    /// before a write never replaces what that write recorded.
    writes: u64,
    by_key: HashMap<String, Entry>,
}

#[derive(Debug)]
struct Entry {
    expect: Expect,
    /// The count of writes when this object was last written here.
    written: u64,
}

impl ReadCache {
    pub fn new(
        claims: Reflector<PersistentVolumeClaim>,
        volumes: Reflector<PersistentVolume>,
    ) -> Self {
        Self {
            claims,
            volumes,
            expect: Mutex::default(),
        }
    }

    fn expectations(&self) -> std::sync::MutexGuard<'_, Expectations> {
        self.expect.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The copy's answer for `key`, if it can be trusted: `Some(found)`;
    /// `None` means read live.
    fn lookup<K>(&self, key: &str, copy: &Reflector<K>, at: &ObjectRef<K>) -> Option<Option<K>>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        copy.wait_until_ready().now_or_never()?.ok()?;
        let found = copy.get(at);
        let mut expect = self.expectations();
        let trusted = match expect.by_key.get(key).map(|e| &e.expect) {
            None => true,
            Some(Expect::Live) => false,
            Some(Expect::Absent) => found.is_none(),
            Some(Expect::Version(v)) => found
                .as_ref()
                .is_some_and(|o| o.meta().resource_version.as_deref() == Some(v.as_str())),
        };
        if !trusted {
            return None;
        }
        // The copy has caught up: nothing to remember any more.
        expect.by_key.remove(key);
        Some(found.map(|o| K::clone(&o)))
    }

    /// Where a live read starts: pass it to [`ReadCache::read`].
    fn begin_read(&self) -> u64 {
        self.expectations().writes
    }

    /// Remembers what a live read that began at `began` found, unless this
    /// controller has written the object since (that write knows better).
    fn read(&self, key: String, began: u64, what: Expect) {
        let mut expect = self.expectations();
        let written = match expect.by_key.get(&key) {
            Some(e) if e.written > began => return,
            Some(e) => e.written,
            None => 0,
        };
        expect.by_key.insert(
            key,
            Entry {
                expect: what,
                written,
            },
        );
    }

    /// Remembers what this controller's write (or refused write) says.
    fn wrote(&self, key: String, what: Expect) {
        let mut expect = self.expectations();
        expect.writes += 1;
        let written = expect.writes;
        expect.by_key.insert(
            key,
            Entry {
                expect: what,
                written,
            },
        );
    }
}

fn claim_key(namespace: &str, name: &str) -> String {
    format!("pvc/{namespace}/{name}")
}

fn volume_key(name: &str) -> String {
    format!("pv/{name}")
}

/// What a write's answer says the copy must show next.
fn expect_after<K: kube::Resource>(result: &Result<K, ClusterError>) -> Expect {
    result.as_ref().map_or(Expect::Live, version_of)
}

/// What a live read says the copy must show next.
fn expect_read<K: kube::Resource>(found: &Option<K>) -> Expect {
    found.as_ref().map_or(Expect::Absent, version_of)
}

/// The version an object the controller holds says the copy must reach.
fn version_of<K: kube::Resource>(o: &K) -> Expect {
    o.meta()
        .resource_version
        .clone()
        .map_or(Expect::Live, Expect::Version)
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").finish_non_exhaustive()
    }
}

impl Cluster {
    /// Every read live.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: None,
            fence: None,
        }
    }

    /// Pods listed at a revision from `fence` ([`super::pod_fence`]): as fresh
    /// as a consistent LIST, without the watch cache's progress wait.
    pub fn with_fence(self, fence: Option<Arc<PodFence>>) -> Self {
        Self { fence, ..self }
    }

    /// Claims and volumes read from `cache` where it can be trusted.
    pub fn with_cache(client: kube::Client, cache: ReadCache) -> Self {
        Self {
            client,
            cache: Some(Arc::new(cache)),
            fence: None,
        }
    }

    /// The same calls with every read live (the cache's bookkeeping is
    /// left to the caching one).
    pub fn uncached(&self) -> Self {
        Self::new(self.client.clone()).with_fence(self.fence.clone())
    }

    /// Records what this controller's write says of an object, when a cache
    /// is attached.
    fn wrote(&self, key: impl FnOnce() -> String, what: impl FnOnce() -> Expect) {
        if let Some(cache) = &self.cache {
            cache.wrote(key(), what());
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn claims(&self, namespace: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// The claim, from the copy where it can be trusted, else live.
    pub async fn claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PersistentVolumeClaim>, ClusterError> {
        let key = claim_key(namespace, name);
        if let Some(cache) = &self.cache {
            let at = ObjectRef::new(name).within(namespace);
            if let Some(found) = cache.lookup(&key, &cache.claims, &at) {
                return Ok(found);
            }
        }
        let began = self.cache.as_ref().map(|c| c.begin_read());
        let live = found(self.claims(namespace).get(name).await)?;
        if let (Some(cache), Some(began)) = (&self.cache, began) {
            cache.read(key, began, expect_read(&live));
        }
        Ok(live)
    }

    /// The claims of `namespace` whose `dataSourceRef` names a
    /// NamespaceTransfer: from the copy once it is ready, else live. What a
    /// populating request looks for its claims among (a decision that
    /// adopts one rests on live reads).
    pub async fn claims_naming_transfers(
        &self,
        namespace: &str,
    ) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        let names_transfer = |c: &PersistentVolumeClaim| {
            c.spec
                .as_ref()
                .and_then(|s| s.data_source_ref.as_ref())
                .is_some_and(crate::api::namespace_transfer::names_a_transfer)
        };
        if let Some(cache) = &self.cache {
            if let Some(Ok(())) = cache.claims.wait_until_ready().now_or_never() {
                return Ok(cache
                    .claims
                    .state()
                    .iter()
                    .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
                    .filter(|c| names_transfer(c))
                    .map(|c| PersistentVolumeClaim::clone(c))
                    .collect());
            }
        }
        let list = self.claims(namespace).list(&ListParams::default()).await?;
        Ok(list.items.into_iter().filter(names_transfer).collect())
    }

    /// The volume, from the copy where it can be trusted, else live.
    pub async fn volume(&self, name: &str) -> Result<Option<PersistentVolume>, ClusterError> {
        let key = volume_key(name);
        if let Some(cache) = &self.cache {
            if let Some(found) = cache.lookup(&key, &cache.volumes, &ObjectRef::new(name)) {
                return Ok(found);
            }
        }
        let began = self.cache.as_ref().map(|c| c.begin_read());
        let live = found(self.volumes().get(name).await)?;
        if let (Some(cache), Some(began)) = (&self.cache, began) {
            cache.read(key, began, expect_read(&live));
        }
        Ok(live)
    }

    /// The volumes labelled `key=value`, live.
    pub async fn volumes_labelled(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Vec<PersistentVolume>, ClusterError> {
        let params = ListParams::default().labels(&format!("{key}={value}"));
        Ok(self.volumes().list(&params).await?.items)
    }

    /// A StorageClass (its annotations carry the transfer policy, its
    /// binding mode whether a clone can bind).
    pub async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>, ClusterError> {
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        found(classes.get(name).await)
    }

    /// A JSON merge patch; put `metadata.resourceVersion` in it to make it
    /// conditional.
    pub async fn patch_claim(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        self.patch_claim_part(namespace, name, patch, false).await
    }

    /// [`Self::patch_claim`] of the claim's `/status`, whose strategy keeps
    /// changes to metadata too.
    pub async fn patch_claim_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        self.patch_claim_part(namespace, name, patch, true).await
    }

    async fn patch_claim_part(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        let (claims, params, patch) = (
            self.claims(namespace),
            PatchParams::default(),
            Patch::Merge(patch),
        );
        let result = if status {
            claims.patch_status(name, &params, &patch).await
        } else {
            claims.patch(name, &params, &patch).await
        }
        .map_err(ClusterError::from);
        self.wrote(|| claim_key(namespace, name), || expect_after(&result));
        result
    }

    /// A JSON merge patch; put `metadata.resourceVersion` in it to make it
    /// conditional.
    pub async fn patch_volume(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<PersistentVolume, ClusterError> {
        let result = self
            .volumes()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(ClusterError::from);
        self.wrote(|| volume_key(name), || expect_after(&result));
        result
    }

    pub async fn create_claim(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        let result = self
            .claims(namespace)
            .create(&PostParams::default(), claim)
            .await
            .map_err(ClusterError::from);
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        self.wrote(|| claim_key(namespace, name), || expect_after(&result));
        result
    }

    /// Whether kube-apiserver would create `claim` (`dryRun=All`): quota,
    /// admission and validation run, nothing is stored.
    pub async fn create_claim_dry_run(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<(), ClusterError> {
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.claims(namespace).create(&params, claim).await?;
        Ok(())
    }

    /// Whether kube-apiserver would delete the claim with `uid`
    /// (`dryRun=All`).
    pub async fn delete_claim_dry_run(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), ClusterError> {
        let params = DeleteParams {
            dry_run: true,
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.claims(namespace).delete(name, &params).await?;
        Ok(())
    }

    /// Deletes the claim if it is still the one with `uid`; a claim already
    /// gone is not an error.
    pub async fn delete_claim(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<(), ClusterError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let key = || claim_key(namespace, name);
        match self.claims(namespace).delete(name, &params).await {
            Ok(deleted) => {
                // Still there while a finalizer holds it, or gone.
                let still = deleted.left();
                self.wrote(key, || expect_read(&still));
                Ok(())
            }
            Err(e) => {
                self.wrote(key, || Expect::Live);
                match ClusterError::from(e) {
                    ClusterError::NotFound { .. } => Ok(()),
                    other => Err(other),
                }
            }
        }
    }

    /// The message of the latest `ProvisioningFailed` Event on the claim
    /// with `uid` (the external-provisioner's report of a failed
    /// `CreateVolume`), if any.
    pub async fn provisioning_failure(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Option<String>, ClusterError> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default()
            .fields(&format!(
                "involvedObject.uid={uid},reason=ProvisioningFailed"
            ))
            .limit(50);
        let list = events.list(&params).await?;
        let when = |e: &Event| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
        };
        Ok(list
            .items
            .iter()
            .max_by_key(|e| when(e))
            .and_then(|e| e.message.clone()))
    }

    /// Every pod in `namespace`, live (a consistent LIST): what the
    /// EphemeralClaim controller decides its owner's state and the claim's
    /// use on.
    pub async fn pods(&self, namespace: &str) -> Result<Vec<Pod>, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        Ok(pods.list(&ListParams::default()).await?.items)
    }

    /// Every pod in `namespace`, at least as fresh as a consistent LIST made
    /// now: at the revision of a fence write made after this call (see
    /// [`super::pod_fence`]), or consistent where there is no fence.
    async fn pods_fenced(&self, namespace: &str) -> Result<Vec<Pod>, ClusterError> {
        let revision = match &self.fence {
            Some(fence) => fence.revision().await?,
            None => None,
        };
        let Some(revision) = revision else {
            return self.pods(namespace).await;
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default()
            .at(&revision)
            .matching(VersionMatch::NotOlderThan);
        Ok(pods.list(&params).await?.items)
    }

    /// The pods in `namespace` that use claim `name` or may start to: not
    /// Succeeded or Failed, scheduled or not yet (a pod waiting for the
    /// scheduler may be placed any moment), naming the claim in a volume. A
    /// live LIST ([`Self::pods_fenced`]), never a stale cache: what a
    /// transfer must not move a volume from under.
    pub async fn pods_using_for_transfer(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<String>, ClusterError> {
        Ok(names_of_users(&self.pods_fenced(namespace).await?, name))
    }

    /// [`Self::pods_using_for_transfer`] from kube-apiserver's watch cache
    /// (`resourceVersion=0`): no wait for the cache, no fence write. Only
    /// for what is reported, never for what a step rests on.
    pub async fn pods_using_cached(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<String>, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let cached = pods.list(&ListParams::default().match_any()).await?;
        Ok(names_of_users(&cached.items, name))
    }
}

/// The names of the `pods` that use claim `name` or may start to.
fn names_of_users(pods: &[Pod], name: &str) -> Vec<String> {
    pods.iter()
        .filter(|pod| pod_may_use_claim(pod, name))
        .filter_map(|pod| pod.metadata.name.clone())
        .collect()
}

/// Whether `pod` uses `claim` or may start to: [`pod_uses_claim`] without
/// the requirement that it be scheduled yet.
pub fn pod_may_use_claim(pod: &Pod, claim: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    names_claim(pod, spec, claim)
}

fn names_claim(pod: &Pod, spec: &k8s_openapi::api::core::v1::PodSpec, claim: &str) -> bool {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    spec.volumes.iter().flatten().any(|v| {
        v.persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == claim)
            || (v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == claim)
    })
}

/// The pvc-protection rule for one pod.
pub fn pod_uses_claim(pod: &Pod, claim: &str) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    if spec.node_name.as_deref().unwrap_or_default().is_empty() {
        return false;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    names_claim(pod, spec, claim)
}

mod snapshots;

#[cfg(test)]
mod tests;
