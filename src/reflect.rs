//! A watch of every object of one kind in the cluster, kept in a kube-rs
//! reflector store: what the server reads instead of asking kube-apiserver
//! on every request (the ServiceAccounts that tokens name, the
//! ResourceQuotas that creates are charged to).
//!
//! Owns starting the watch (retried with backoff for as long as the process
//! runs) and telling whether it has listed everything once; never what the
//! objects mean to their reader.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde::de::DeserializeOwned;

/// The cluster's objects of kind `K`, as the watch last saw them.
pub struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    ready: Arc<AtomicBool>,
}

impl<K: kube::Resource + 'static> Debug for Watched<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("ready", &self.ready())
            .finish_non_exhaustive()
    }
}

impl<K> Watched<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// Starts watching every `K` of the cluster behind `client`.
    pub fn start(client: kube::Client) -> Self {
        let (store, writer) = reflector::store();
        let ready = Arc::new(AtomicBool::new(false));
        let api: kube::Api<K> = kube::Api::all(client);
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .touched_objects();
        let (flag, waiter) = (ready.clone(), store.clone());
        tokio::spawn(async move {
            if waiter.wait_until_ready().await.is_ok() {
                flag.store(true, Ordering::Relaxed);
            }
        });
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::debug!(error = %e, kind = %K::kind(&Default::default()), "watching");
                }
            }
        });
        Self { store, ready }
    }
}

impl<K: kube::Resource + 'static> Watched<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// Whether the watch has listed every object once: before, an object
    /// missing from the store may still exist.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}
