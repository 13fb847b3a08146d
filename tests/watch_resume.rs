//! Watch resumption across restarts (issue 18, part 3): a client that resumes
//! its watch from a resourceVersion etcd still has gets every event after it,
//! in order and with no 410, after our server restarted and from a replica
//! that started after that resourceVersion, as if nothing had restarted. A
//! resourceVersion etcd has compacted still ends the watch with one ERROR
//! event, a Status of 410 Expired, as before.
//!
//! The tests restart the server and compact etcd, so they share one private
//! control plane and take turns. Our controllers are off: the events in a
//! test's namespace are exactly the test's writes.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::Status;
use serde_json::json;
use sta_testenv::{ControlPlane, Options};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
/// How long a watch may take to deliver what the test waits for before the
/// test gives up; not a measure of speed.
const PATIENCE: Duration = Duration::from_secs(90);

static CP: OnceLock<ControlPlane> = OnceLock::new();
static TURN: Mutex<()> = Mutex::new(());

/// The control plane, and the right to restart its server and compact etcd.
fn turn() -> (&'static ControlPlane, MutexGuard<'static, ()>) {
    let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let cp = CP.get_or_init(|| {
        let mut opts = Options::for_tests(BIN);
        opts.server_args
            .push("--controllers=-namespacetransfer,-ephemeralclaim".into());
        ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"))
    });
    (cp, guard)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// NamespaceTransfers in one namespace, through the server a kubeconfig
/// names (kube-apiserver's aggregator, or one of our replicas directly).
struct Transfers {
    api: kube::Api<DynamicObject>,
    ns: String,
}

impl Transfers {
    async fn new(kubeconfig: &Path, ns: &str) -> Self {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let resource = ApiResource {
            group: "storage.transfer.k8s.io".to_owned(),
            version: "v1alpha1".to_owned(),
            api_version: "storage.transfer.k8s.io/v1alpha1".to_owned(),
            kind: "NamespaceTransfer".to_owned(),
            plural: "namespacetransfers".to_owned(),
        };
        let client = kube::Client::try_from(config).unwrap();
        Self {
            api: kube::Api::namespaced_with(client, ns, &resource),
            ns: ns.to_owned(),
        }
    }

    /// Creates `name` at step 1; returns its resourceVersion.
    async fn create(&self, name: &str) -> u64 {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "storage.transfer.k8s.io/v1alpha1",
            "kind": "NamespaceTransfer",
            "metadata": {"name": name, "labels": {"step": "1"}},
            "spec": {"mode": "Move",
                     "source": {"kind": "PersistentVolumeClaim", "name": name, "namespace": self.ns},
                     "destination": {"name": name, "namespace": "dev"}},
        }))
        .unwrap();
        let created = self
            .api
            .create(&PostParams::default(), &body)
            .await
            .unwrap();
        resource_version(&created)
    }

    async fn set_step(&self, name: &str, step: u32) {
        let patch = json!({"metadata": {"labels": {"step": step.to_string()}}});
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    async fn delete(&self, name: &str) {
        self.api
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// The events of a watch from `resource_version`, bookmarks aside: the
    /// first `want` of them, or fewer if the watch ends first (an ERROR
    /// event ends it). A watch refused outright (the server still coming up
    /// behind the aggregator) is started again.
    async fn watch_from(
        &self,
        resource_version: u64,
        want: usize,
    ) -> Vec<WatchEvent<DynamicObject>> {
        let rv = resource_version.to_string();
        let params = WatchParams::default().timeout(30);
        let deadline = Instant::now() + PATIENCE;
        let stream = loop {
            match self.api.watch(&params, &rv).await {
                Ok(stream) => break stream,
                Err(e) => {
                    assert!(Instant::now() < deadline, "the watch was never served: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        let events = stream
            .filter_map(|e| async move {
                match e {
                    Ok(WatchEvent::Bookmark(_)) => None,
                    other => Some(other.unwrap()),
                }
            })
            .take(want);
        tokio::time::timeout(PATIENCE, events.collect::<Vec<_>>())
            .await
            .expect("the watch ended by its timeout")
    }
}

fn resource_version(o: &DynamicObject) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// An event as the test checks it: type, name and the `step` label.
fn seen(event: &WatchEvent<DynamicObject>) -> (String, String, String) {
    let (kind, o) = match event {
        WatchEvent::Added(o) => ("ADDED", o),
        WatchEvent::Modified(o) => ("MODIFIED", o),
        WatchEvent::Deleted(o) => ("DELETED", o),
        WatchEvent::Bookmark(_) => unreachable!("bookmarks are filtered out"),
        WatchEvent::Error(status) => panic!("the watch failed: {status:?}"),
    };
    let step = o
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("step"))
        .cloned()
        .unwrap_or_default();
    (
        kind.to_owned(),
        o.metadata.name.clone().unwrap_or_default(),
        step,
    )
}

fn event(kind: &str, name: &str, step: u32) -> (String, String, String) {
    (kind.to_owned(), name.to_owned(), step.to_string())
}

/// Every event is one of `expected`, in order, each after the last, and
/// all after `after`.
#[track_caller]
fn assert_resumed(
    events: &[WatchEvent<DynamicObject>],
    after: u64,
    expected: &[(String, String, String)],
) {
    let got: Vec<_> = events.iter().map(seen).collect();
    assert_eq!(got, expected, "after {after}: {events:?}");
    let mut last = after;
    for e in events {
        let rv = match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                resource_version(o)
            }
            _ => unreachable!(),
        };
        assert!(rv > last, "resourceVersion {rv} after {last}: {events:?}");
        last = rv;
    }
}

#[test]
fn a_watch_from_before_a_restart_resumes_with_every_event_since() {
    let (cp, _turn) = turn();
    let ns = cp.namespace("resume-restart").unwrap();
    let rt = runtime();
    // Writes go straight to our server; the client watches through the
    // aggregator, as any client does.
    let direct = rt.block_on(Transfers::new(cp.direct().kubeconfig(), &ns.name));
    let resumed = rt.block_on(async {
        direct.create("a").await;
        let noted = direct.create("b").await;
        direct.set_step("a", 2).await;
        direct.delete("b").await;
        noted
    });

    cp.restart_server(&[], &[])
        .unwrap_or_else(|e| panic!("restarting the server: {e}"));

    let events = rt.block_on(async {
        // A new client: the old one's connections died with the server.
        let direct = Transfers::new(cp.direct().kubeconfig(), &ns.name).await;
        direct.create("c").await;
        direct.set_step("c", 2).await;
        direct.delete("a").await;
        let client = Transfers::new(&cp.kubeconfig(), &ns.name).await;
        client.watch_from(resumed, 5).await
    });
    assert_resumed(
        &events,
        resumed,
        &[
            event("MODIFIED", "a", 2),
            event("DELETED", "b", 1),
            event("ADDED", "c", 1),
            event("MODIFIED", "c", 2),
            event("DELETED", "a", 2),
        ],
    );
}

#[test]
fn a_replica_started_after_the_resource_version_resumes_a_watch_from_it() {
    let (cp, _turn) = turn();
    let ns = cp.namespace("resume-replica").unwrap();
    let rt = runtime();
    let main = rt.block_on(Transfers::new(cp.direct().kubeconfig(), &ns.name));
    let resumed = rt.block_on(async {
        main.create("a").await;
        let noted = main.create("b").await;
        main.set_step("a", 2).await;
        main.delete("b").await;
        noted
    });

    let replica = cp
        .start_replica("late-replica", &[], &[])
        .unwrap_or_else(|e| panic!("starting a replica: {e}"));

    let events = rt.block_on(async {
        main.create("c").await;
        main.delete("a").await;
        let client = Transfers::new(replica.direct.kubeconfig(), &ns.name).await;
        client.watch_from(resumed, 4).await
    });
    assert_resumed(
        &events,
        resumed,
        &[
            event("MODIFIED", "a", 2),
            event("DELETED", "b", 1),
            event("ADDED", "c", 1),
            event("DELETED", "a", 2),
        ],
    );
}

#[test]
fn a_watch_from_a_compacted_resource_version_still_ends_with_410_expired() {
    let (cp, _turn) = turn();
    let ns = cp.namespace("resume-compacted").unwrap();
    let rt = runtime();
    let direct = rt.block_on(Transfers::new(cp.direct().kubeconfig(), &ns.name));
    let compacted = rt.block_on(async {
        let old = direct.create("a").await;
        direct.set_step("a", 2).await;
        let mut etcd = etcd_client::Client::connect([cp.etcd_url.as_str()], None)
            .await
            .unwrap();
        let now = etcd
            .get("x", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        etcd.compact(now, None).await.unwrap();
        (old, u64::try_from(now).unwrap())
    });
    let (old, compacted_at) = compacted;

    // A fresh server: its buffer starts after the compaction.
    cp.restart_server(&[], &[])
        .unwrap_or_else(|e| panic!("restarting the server: {e}"));

    rt.block_on(async {
        let direct = Transfers::new(cp.direct().kubeconfig(), &ns.name).await;
        direct.create("b").await;
        let client = Transfers::new(&cp.kubeconfig(), &ns.name).await;

        let events = client.watch_from(old, 2).await;
        let status: Vec<&Status> = events
            .iter()
            .map(|e| match e {
                WatchEvent::Error(status) => &**status,
                other => panic!("an event from a compacted revision: {other:?}"),
            })
            .collect();
        let [status] = status.as_slice() else {
            panic!("one ERROR event: {events:?}");
        };
        assert_eq!(
            (status.code, status.reason.as_str()),
            (410, "Expired"),
            "{status:?}"
        );
        assert!(
            status
                .message
                .starts_with(&format!("too old resource version: {old} (")),
            "{status:?}"
        );

        // From the compaction on, etcd still has every event.
        let events = client.watch_from(compacted_at, 1).await;
        assert_resumed(&events, compacted_at, &[event("ADDED", "b", 1)]);
    });
}
