//! A watch of every object of one kind in the cluster, kept in a kube-rs
//! reflector store: what the server reads instead of asking kube-apiserver
//! on every request (the ServiceAccounts that tokens name, the
//! ResourceQuotas that creates are charged to).
//!
//! Owns starting the watch (retried with backoff for as long as the process
//! runs) and telling whether it has listed everything once; never what the
//! objects mean to their reader.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde::de::DeserializeOwned;

/// Every `K` of the cluster behind `client`, kept in the returned store,
/// and the stream of objects the watch touched, which the caller must drive
/// (nothing is kept until it is polled). The watch is retried with backoff.
pub fn reflected<K>(
    client: &kube::Client,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(
        kube::Api::<K>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    (store, events)
}

/// The cluster's objects of kind `K`, as the watch last saw them.
pub struct Watched<K: kube::Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    ready: Arc<AtomicBool>,
}

impl<K: kube::Resource<DynamicType = ()> + 'static> Debug for Watched<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("ready", &self.ready())
            .finish_non_exhaustive()
    }
}

impl<K> Watched<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts watching every `K` of the cluster behind `client`, driven by
    /// a task of its own.
    pub fn start(client: kube::Client) -> Self {
        let (store, stream) = reflected::<K>(&client);
        let ready = Arc::new(AtomicBool::new(false));
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
                    tracing::debug!(error = %e, kind = %K::kind(&()), "watching");
                }
            }
        });
        Self { store, ready }
    }
}

impl<K: kube::Resource<DynamicType = ()> + 'static> Watched<K> {
    /// Whether the watch has listed every object once: before, an object
    /// missing from the store may still exist.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}
