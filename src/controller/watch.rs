//! The triggers: which transfer to look at, and when. Our own objects come
//! from the registry's watch (the watch cache, not a second etcd watch); pods
//! and StorageClasses come from kube-rs reflectors, metadata only, since an
//! event only has to say *which* transfer to look at. PVCs and PVs come whole:
//! their reflectors' copies also serve the transfer controller's reads of
//! them ([`super::cluster::ReadCache`]), which stay live only where the copy
//! may be behind.
//!
//! Owns a local copy of every transfer, kept from the watch and indexed
//! ([`known`]), to map a PVC, pod or PV event to the transfers it concerns,
//! and a resync that queues every transfer now and then, so that a lost
//! event costs latency, never correctness.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store as Reflector};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use tokio::task::JoinHandle;

use super::object_key;
use super::queue::WorkQueue;
use super::transfer::matching::{are_peers, is_active, role_of};
use crate::api::meta::Object;
use crate::api::namespace_transfer::{NamespaceTransfer, Role, TransferMode};
use crate::reflect::reflected;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{ListOptions, Shared, Store, Strategy, WatchEvent, WatchOptions};

/// How often every transfer is queued even without an event (and every
/// EphemeralClaim but those that wait for an offer).
pub(super) const RESYNC: Duration = Duration::from_secs(30);
/// The pause before a failed watch is started again.
const RETRY: Duration = Duration::from_secs(1);

mod known;

pub(super) use known::{Index, Known};

/// The running triggers; dropping this stops them.
#[derive(Debug)]
pub struct Triggers {
    tasks: Vec<JoinHandle<()>>,
    classes: Reflector<StorageClass>,
    claims: Reflector<PersistentVolumeClaim>,
    named_keys: NamedKeys,
    volumes: Reflector<PersistentVolume>,
}

impl Drop for Triggers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Triggers {
    /// Starts watching and queueing keys on `queue`.
    pub fn start(
        transfers: Arc<Store<NamespaceTransferStrategy>>,
        client: kube::Client,
        queue: WorkQueue,
    ) -> Self {
        let known = Known::new(transfer_tags);
        let mut tasks = vec![
            tokio::spawn(watch_objects(
                transfers,
                known.clone(),
                queue.clone(),
                related,
            )),
            tokio::spawn(resync(
                known.clone(),
                queue.clone(),
                RESYNC,
                may_need_resync,
            )),
        ];

        let (claim_copy, claims) = reflected::<PersistentVolumeClaim>(&client);
        // A claim that names a transfer in dataSourceRef queues that key,
        // whether or not such a transfer exists (it is told why it waits),
        // and marks it as one whose claims are worth looking at.
        let named_keys = NamedKeys::default();
        let (marks, named) = (named_keys.clone(), queue.clone());
        let claims = claims.inspect(move |event| {
            if let Ok(claim) = event {
                if let Some(key) = populator_key(claim) {
                    marks.mark(&key);
                    named.add(&key);
                }
            }
        });
        tasks.push(tokio::spawn(forward(
            claims,
            known.clone(),
            queue.clone(),
            claim_event_tags,
            claim_concerns,
        )));
        let pods = metadata_events::<Pod>(&client);
        tasks.push(tokio::spawn(forward(
            pods,
            known.clone(),
            queue.clone(),
            pod_event_tags,
            pod_concerns,
        )));
        let (volume_copy, volumes) = reflected::<PersistentVolume>(&client);
        tasks.push(tokio::spawn(forward(
            volumes,
            known,
            queue,
            volume_event_tags,
            volume_concerns,
        )));

        let (classes, writer) = reflector::store();
        let class_events = watcher(Api::<StorageClass>::all(client), watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        tasks.push(tokio::spawn(async move {
            futures::pin_mut!(class_events);
            while class_events.next().await.is_some() {}
        }));
        Self {
            tasks,
            classes,
            claims: claim_copy,
            volumes: volume_copy,
            named_keys,
        }
    }

    /// The transfer keys that Pending claims have named in `dataSourceRef`.
    pub fn named_keys(&self) -> NamedKeys {
        self.named_keys.clone()
    }

    /// The StorageClasses (a few small objects: their annotations carry the
    /// transfer policy, their binding mode whether a clone can bind), as
    /// the reflector last saw them.
    pub fn storage_classes(&self) -> Reflector<StorageClass> {
        self.classes.clone()
    }

    /// The PersistentVolumeClaims, as the reflector last saw them.
    pub fn claims(&self) -> Reflector<PersistentVolumeClaim> {
        self.claims.clone()
    }

    /// The PersistentVolumes, as the reflector last saw them.
    pub fn volumes(&self) -> Reflector<PersistentVolume> {
        self.volumes.clone()
    }
}

/// The transfer keys (`namespace/name`) that a Pending claim has named in
/// `dataSourceRef` since the key was last found named by none: the only
/// keys whose reconcile looks through the claims for ones that wait on it,
/// so that the look costs nothing where no claim names a transfer. Each
/// mark is counted, so that a look that began before a claim's event never
/// forgets the mark that event made.
#[derive(Debug, Clone, Default)]
pub struct NamedKeys(Arc<std::sync::Mutex<HashMap<String, u64>>>);

impl NamedKeys {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A claim named `key`.
    pub fn mark(&self, key: &str) {
        *self.keys().entry(key.to_owned()).or_default() += 1;
    }

    /// The count of `key`'s marks, if a claim named it since it was last
    /// forgotten: pass it to [`NamedKeys::forget`].
    pub fn marked(&self, key: &str) -> Option<u64> {
        self.keys().get(key).copied()
    }

    /// A look that began at `seen` marks found no Pending claim naming
    /// `key`: forget it, unless a claim named it since.
    pub fn forget(&self, key: &str, seen: u64) {
        let mut keys = self.keys();
        if keys.get(key) == Some(&seen) {
            keys.remove(key);
        }
    }
}

/// The queue key of the transfer a Pending claim names in `dataSourceRef`,
/// in its own namespace (a reference to another namespace is never
/// served, and not looked at).
fn populator_key(claim: &PersistentVolumeClaim) -> Option<String> {
    let spec = claim.spec.as_ref()?;
    let r = spec.data_source_ref.as_ref()?;
    let ns = namespace(claim);
    let ours = crate::api::namespace_transfer::names_a_transfer(r)
        && r.namespace
            .as_deref()
            .is_none_or(|n| n.is_empty() || n == ns);
    let pending = spec.volume_name.as_deref().is_none_or(str::is_empty);
    (ours && pending).then(|| format!("{ns}/{}", r.name))
}

pub(super) fn namespace<K: kube::Resource>(obj: &K) -> &str {
    obj.meta().namespace.as_deref().unwrap_or_default()
}

pub(super) fn name<K: kube::Resource>(obj: &K) -> &str {
    obj.meta().name.as_deref().unwrap_or_default()
}

/// The objects of kind `K` that were added, changed or deleted, metadata only.
/// The EphemeralClaim triggers use it too.
pub(super) fn metadata_events<K>(
    client: &kube::Client,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    PartialObjectMeta<K>: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    watcher(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
}

/// The objects of kind `K` that were added, changed or deleted, whole but
/// kept nowhere: for a trigger that needs a field metadata does not carry
/// (a pod's volumes). The EphemeralClaim triggers use it.
pub(super) fn object_events<K>(
    client: &kube::Client,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .touched_objects()
}

/// Queues every known object that `concerns` an object of the stream,
/// among those filed under the tags `tags` gives that object.
pub(super) async fn forward<K, O: Object>(
    events: impl Stream<Item = Result<K, watcher::Error>>,
    known: Known<O>,
    queue: WorkQueue,
    tags: impl Fn(&K) -> Vec<String>,
    concerns: impl Fn(&O, &K) -> bool,
) {
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(obj) => queue_concerned(&known, &queue, &tags(&obj), &concerns, &obj),
            Err(err) => {
                tracing::debug!(error = %err, "watch of a core resource failed; retrying");
            }
        }
    }
}

/// Queues every known object filed under one of `tags` that `concerns`
/// `obj`.
pub(super) fn queue_concerned<K, O: Object>(
    known: &Known<O>,
    queue: &WorkQueue,
    tags: &[String],
    concerns: &impl Fn(&O, &K) -> bool,
    obj: &K,
) {
    let keys = known.read().concerned(tags, |o| concerns(o, obj));
    for key in keys {
        queue.add(&key);
    }
}

/// Our objects of one kind: every change (deletions too: the reconciler
/// reads what is left) queues the object and the keys `related` names.
pub(super) async fn watch_objects<S: Strategy>(
    store: Arc<Store<S>>,
    known: Known<S::Object>,
    queue: WorkQueue,
    related: impl Fn(&S::Object, &Index<S::Object>) -> Vec<String>,
) {
    follow_objects(
        store,
        |objects| {
            let keys = {
                let mut index = known.write();
                index.clear();
                for o in objects {
                    index.insert(object_key(&*o), o);
                }
                index.keys()
            };
            for key in keys {
                queue.add(&key);
            }
        },
        |o, deleted| {
            let key = object_key(&*o);
            let others = related(&o, &known.read());
            {
                let mut index = known.write();
                if deleted {
                    index.remove(&key);
                } else {
                    index.insert(key.clone(), o);
                }
            }
            queue.add(&key);
            for other in others {
                queue.add(&other);
            }
        },
    )
    .await
}

/// Follows our objects of one kind through the registry's watch, for ever:
/// `listed` gets every object at each (re)list, which may follow missed
/// events; then `changed` gets each object added, changed or deleted (and
/// whether it was deleted), in order.
pub(super) async fn follow_objects<S: Strategy>(
    store: Arc<Store<S>>,
    mut listed: impl FnMut(Vec<Shared<S::Object>>),
    mut changed: impl FnMut(Shared<S::Object>, bool),
) {
    let kind = <S::Object as Object>::resource().kind;
    loop {
        let list = match store.list(None, &ListOptions::default()).await {
            Ok(list) => list,
            Err(err) => {
                tracing::warn!(kind, error = %err, "listing failed; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let opts = WatchOptions {
            resource_version: Some(list.resource_version.clone()),
            allow_bookmarks: true,
            ..WatchOptions::default()
        };
        listed(list.items);
        let mut watch = match store.watch(None, opts).await {
            Ok(w) => w,
            Err(err) => {
                tracing::warn!(kind, error = %err, "watching failed; relisting");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        while let Some(event) = watch.next().await {
            match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => changed(o, false),
                Ok(WatchEvent::Deleted(o)) => changed(o, true),
                Ok(WatchEvent::Bookmark { .. }) => continue,
                Err(err) => {
                    tracing::info!(kind, error = %err, "watch ended; relisting");
                    break;
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The transfers a change to `t` may concern: its recorded peer, and the
/// transfers of the other side that match it (peers share their source,
/// so only those filed under `t`'s source are tested).
fn related(t: &NamespaceTransfer, known: &Index<NamespaceTransfer>) -> Vec<String> {
    let mut keys: Vec<String> = t
        .status
        .as_ref()
        .and_then(|st| st.peer.as_ref())
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .into_iter()
        .collect();
    keys.extend(known.concerned(&[source_tag(t)], |o| are_peers(t, o) || are_peers(o, t)));
    // A request made for one claim: the standing request that made it
    // lists how it stands.
    if let (Some(_), Some(parent)) = (t.served_claim_uid(), t.populating_parent()) {
        keys.push(format!("{}/{}", t.own_namespace(), parent.name));
    }
    keys
}

/// Every known object that `wanted` keeps, `every` so often, paced by the
/// queue's bucket and skipping keys already scheduled (so a resync of many
/// waiting objects is spread out, never a burst of requests).
pub(super) async fn resync<O>(
    known: Known<O>,
    queue: WorkQueue,
    every: Duration,
    wanted: fn(&O) -> bool,
) {
    loop {
        tokio::time::sleep(every).await;
        let keys: Vec<String> = known
            .read()
            .iter()
            .filter(|(_, o)| wanted(o))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            queue.add_resync(&key, every);
        }
    }
}

/// Whether a transfer may still have something to do without an event: it
/// is active, or holds a finalizer, or is being deleted. A finished one
/// without either only waits for its TTL, which its own timer keeps (and
/// every transfer is looked at once when the controllers start).
fn may_need_resync(t: &NamespaceTransfer) -> bool {
    is_active(t)
        || !t
            .metadata
            .finalizers
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        || t.metadata.deletion_timestamp.is_some()
}

/// The tags a transfer is filed under: each names one kind of event that
/// may concern it, and the event tags below look them up. Each pair of
/// `*_tags` functions must keep every transfer its `*_concerns` keeps.
fn transfer_tags(t: &NamespaceTransfer) -> Vec<String> {
    let mut tags = vec![
        source_tag(t),
        claim_tag(t.destination_namespace(), &t.spec.destination.name),
        format!("pods:{}", t.source_namespace()),
    ];
    if role_of(t) == Some(Role::Destination) {
        tags.push(format!("receives:{}", t.own_namespace()));
    }
    if t.mode() == TransferMode::Clone && t.own_namespace() == t.source_namespace() {
        tags.push(format!("clones:{}", t.own_namespace()));
    }
    tags.extend(recorded_volumes(t).map(|v| format!("volume:{v}")));
    tags
}

/// The claim (or snapshot) `t` gives: its peers share it.
fn source_tag(t: &NamespaceTransfer) -> String {
    claim_tag(t.source_namespace(), &t.spec.source.name)
}

fn claim_tag(namespace: &str, name: &str) -> String {
    format!("claim:{namespace}/{name}")
}

fn claim_event_tags(claim: &PersistentVolumeClaim) -> Vec<String> {
    let ns = namespace(claim);
    vec![
        claim_tag(ns, name(claim)),
        format!("receives:{ns}"),
        format!("clones:{ns}"),
    ]
}

/// Whether a change to `claim` concerns `t`: it is `t`'s source or
/// destination claim, or may be a clone `t` makes, or lies in the
/// namespace a Destination-role `t` receives into.
fn claim_concerns(t: &NamespaceTransfer, claim: &PersistentVolumeClaim) -> bool {
    let (ns, name) = (namespace(claim), name(claim));
    (t.source_namespace() == ns && t.spec.source.name == name)
        || t.may_be_clone(ns, name)
        || (t.destination_namespace() == ns && t.spec.destination.name == name)
        || (role_of(t) == Some(Role::Destination) && t.own_namespace() == ns)
}

fn pod_event_tags(pod: &PartialObjectMeta<Pod>) -> Vec<String> {
    vec![format!("pods:{}", namespace(pod))]
}

/// Whether a change to `pod` concerns `t`: `t` is active and gives a claim
/// of the pod's namespace (whose users it checks).
fn pod_concerns(t: &NamespaceTransfer, pod: &PartialObjectMeta<Pod>) -> bool {
    is_active(t) && t.source_namespace() == namespace(pod)
}

fn volume_event_tags(volume: &PersistentVolume) -> Vec<String> {
    vec![format!("volume:{}", name(volume))]
}

/// Whether a change to `volume` concerns `t`: `t` recorded it as its
/// source claim's volume, or as a pair's (a standing offer keeps its
/// pairs' records: woken, it wakes them).
fn volume_concerns(t: &NamespaceTransfer, volume: &PersistentVolume) -> bool {
    recorded_volumes(t).any(|v| v == name(volume))
}

fn recorded_volumes(t: &NamespaceTransfer) -> impl Iterator<Item = &str> {
    t.status.iter().flat_map(|st| {
        st.source_claim
            .iter()
            .chain(st.pairs.iter().map(|p| &p.source_claim))
            .map(|snap| snap.volume_name.as_str())
    })
}

#[cfg(test)]
mod tests;
