//! The cluster's admission configuration, watched: informers on the six
//! admissionregistration.k8s.io/v1 kinds (webhook configurations, admission
//! policies and their bindings) and on namespaces, and the [`Snapshot`] a
//! request is admitted under.
//!
//! As k8s.io/apiserver's plugins do, a write waits (up to
//! [`SYNC_WAIT`]) until every informer has listed once, and is refused
//! ("not yet ready to handle request") if they have not: admitting before
//! the configuration is known would let a write bypass a policy. A kind the
//! cluster does not serve (404) counts as listed and empty, and is watched
//! again in case it appears.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use super::{Namespaces, Snapshot};

/// How long a write waits for the configuration to be listed.
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

/// One kind's informer: its cache, and whether it has listed once.
struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    synced: Arc<AtomicBool>,
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn start(client: kube::Client, changed: Arc<Notify>) -> Self {
        let (reader, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let api: kube::Api<K> = kube::Api::all(client);
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff();
        let flag = synced.clone();
        let waiter = reader.clone();
        let notify = changed.clone();
        tokio::spawn(async move {
            if waiter.wait_until_ready().await.is_ok() {
                flag.store(true, Ordering::Release);
                notify.notify_waiters();
            }
        });
        let flag = synced.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(_) => {}
                    // Not served by this cluster: nothing to admit with.
                    Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                        if status.code == 404 =>
                    {
                        if !flag.swap(true, Ordering::AcqRel) {
                            tracing::info!(
                                kind = %K::kind(&()),
                                "the cluster does not serve this admission kind"
                            );
                            changed.notify_waiters();
                        }
                    }
                    Err(e) => {
                        tracing::debug!(kind = %K::kind(&()), error = %e, "watching admission configuration");
                    }
                }
            }
        });
        Self {
            store: reader,
            synced,
        }
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The cached objects, sorted by name.
    fn sorted(&self) -> Vec<Arc<K>> {
        let mut all = self.store.state();
        all.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        all
    }

    fn is_empty(&self) -> bool {
        self.store.is_empty()
    }
}

/// The watched configuration. Cheap to share.
pub struct AdmissionConfig {
    mutating_policies: Informer<MutatingAdmissionPolicy>,
    mutating_bindings: Informer<MutatingAdmissionPolicyBinding>,
    mutating_webhooks: Informer<MutatingWebhookConfiguration>,
    validating_policies: Informer<ValidatingAdmissionPolicy>,
    validating_bindings: Informer<ValidatingAdmissionPolicyBinding>,
    validating_webhooks: Informer<ValidatingWebhookConfiguration>,
    namespaces: Informer<Namespace>,
    changed: Arc<Notify>,
    client: kube::Client,
}

impl Debug for AdmissionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionConfig")
            .field("synced", &self.synced())
            .finish_non_exhaustive()
    }
}

impl AdmissionConfig {
    /// Starts the informers.
    pub fn start(client: kube::Client) -> Self {
        let changed = Arc::new(Notify::new());
        Self {
            mutating_policies: Informer::start(client.clone(), changed.clone()),
            mutating_bindings: Informer::start(client.clone(), changed.clone()),
            mutating_webhooks: Informer::start(client.clone(), changed.clone()),
            validating_policies: Informer::start(client.clone(), changed.clone()),
            validating_bindings: Informer::start(client.clone(), changed.clone()),
            validating_webhooks: Informer::start(client.clone(), changed.clone()),
            namespaces: Informer::start(client.clone(), changed.clone()),
            changed,
            client,
        }
    }

    /// Whether every informer has listed once.
    pub fn synced(&self) -> bool {
        self.mutating_policies.synced()
            && self.mutating_bindings.synced()
            && self.mutating_webhooks.synced()
            && self.validating_policies.synced()
            && self.validating_bindings.synced()
            && self.validating_webhooks.synced()
            && self.namespaces.synced()
    }

    /// Waits up to `wait` for [`Self::synced`].
    pub async fn wait_synced(&self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            if self.synced() {
                return true;
            }
            // The flags are set without the notifier's help too (a 404
            // after a restart of the watch): look again now and then.
            let step = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .min(Duration::from_millis(100));
            if step.is_zero() {
                return self.synced();
            }
            let _ = tokio::time::timeout(step, notified).await;
        }
    }

    /// Whether any webhook configuration or policy binding exists: when
    /// none does (and the informers have synced), a write needs no
    /// admission at all.
    pub fn is_empty(&self) -> bool {
        self.synced()
            && self.mutating_bindings.is_empty()
            && self.mutating_webhooks.is_empty()
            && self.validating_bindings.is_empty()
            && self.validating_webhooks.is_empty()
    }

    /// The configuration now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            mutating_policies: self.mutating_policies.sorted(),
            mutating_bindings: self.mutating_bindings.sorted(),
            mutating_webhooks: self.mutating_webhooks.sorted(),
            validating_policies: self.validating_policies.sorted(),
            validating_bindings: self.validating_bindings.sorted(),
            validating_webhooks: self.validating_webhooks.sorted(),
        }
    }
}

impl AdmissionConfig {
    /// `name` read from kube-apiserver, for a namespace the informer has
    /// not seen yet; none if it does not exist or cannot be read.
    pub async fn read_namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        let api: kube::Api<Namespace> = kube::Api::all(self.client.clone());
        match api.get_opt(name).await {
            Ok(found) => found.map(Arc::new),
            Err(e) => {
                tracing::debug!(namespace = name, error = %e, "reading a namespace for admission");
                None
            }
        }
    }
}

impl Namespaces for AdmissionConfig {
    fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.store.get(&ObjectRef::new(name))
    }
}
