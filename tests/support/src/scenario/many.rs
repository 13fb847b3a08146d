//! Many transfers at once: a fleet of pairs, each a statically provisioned
//! CSI volume (the mock driver's, annotated as the external-provisioner's
//! own and carrying its finalizer, as a volume it provisioned does from its
//! creation, so that a volume released under `Delete` would really get a
//! `DeleteVolume`) pre-bound to a claim in a source namespace, offered to a
//! destination namespace and requested there under the same name.
//!
//! [`Fleet::prepare`] makes the volumes and claims and files the offers;
//! [`Fleet::request_all`] files every request at once, from several
//! `kubectl` processes side by side, while one watch on all transfers stamps
//! each request's `ADDED` and each source's `Completed` as they arrive;
//! [`Fleet::assert_intact`] checks every volume against what it was. What
//! the run wrote to etcd is the scale benchmark's own measure
//! (`bench::writes`, with the `bench` feature).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::csi::DRIVER;
use crate::watch::{Ends, Event, Recording};
use crate::{ControlPlane, Csi, Kubectl, Namespace};
use serde_json::Value;

use super::STATIC_ALLOWED_CLASS;

/// Claims per namespace pair: tenants move several claims at a time, and
/// matching must not weigh the whole cluster's transfers for each.
const CLAIMS_PER_NAMESPACE: usize = 10;
/// `kubectl` processes that file the requests side by side.
const FILERS: usize = 8;

/// One pair: `src/claim` moves to `dst/claim` with volume `pv`.
#[derive(Debug, Clone)]
pub struct Pair {
    pub src: String,
    pub dst: String,
    pub claim: String,
    pub pv: String,
    pub pv_uid: String,
    pub handle: String,
}

/// The pairs and their namespaces (deleted when the fleet drops).
#[derive(Debug)]
pub struct Fleet {
    pub pairs: Vec<Pair>,
    namespaces: Vec<Namespace>,
}

/// When each request was seen created and each pair seen completed, by the
/// watch; and how the run went.
#[derive(Debug, Clone)]
pub struct Run {
    /// From the first request filed to the last pair completed.
    pub elapsed: Duration,
    /// Request `ADDED` → source `Completed`, one per pair.
    pub latencies: Vec<Duration>,
    /// etcd writes (revisions) per pair from the first request to the end:
    /// ours, kube-apiserver's, kube-controller-manager's, Events, leases.
    pub writes_per_pair: f64,
    /// The etcd revision before the first request, and at the last
    /// completion.
    pub revisions: (u64, u64),
}

impl Fleet {
    /// Makes `count` pairs over `count / CLAIMS_PER_NAMESPACE` namespace
    /// pairs (prefix `prefix`), every claim Bound, and files every offer;
    /// returns once each offer waits for its peer.
    pub fn prepare(cp: &ControlPlane, prefix: &str, count: usize) -> Fleet {
        let k = cp.kubectl();
        let mut namespaces = Vec::new();
        let mut pairs = Vec::new();
        let groups = count.div_ceil(CLAIMS_PER_NAMESPACE);
        for g in 0..groups {
            let src = cp.namespace(&format!("{prefix}-src")).unwrap();
            let dst = cp.namespace(&format!("{prefix}-dst")).unwrap();
            for c in 0..CLAIMS_PER_NAMESPACE.min(count - g * CLAIMS_PER_NAMESPACE) {
                let claim = format!("c{c}");
                let pv = format!("{}-{claim}", src.name);
                pairs.push(Pair {
                    src: src.name.clone(),
                    dst: dst.name.clone(),
                    handle: format!("static-{pv}"),
                    claim,
                    pv,
                    pv_uid: String::new(),
                });
            }
            namespaces.push(src);
            namespaces.push(dst);
        }
        let mut fleet = Fleet { pairs, namespaces };
        create_all(k, fleet.pairs.iter().map(volume_yaml));
        wait_all_bound(k, &fleet.pairs);
        let uids = volume_uids(k);
        for p in &mut fleet.pairs {
            p.pv_uid = uids[&p.pv].clone();
        }
        create_all(k, fleet.pairs.iter().map(offer_yaml));
        fleet.wait_offers_waiting(k);
        fleet
    }

    fn wait_offers_waiting(&self, k: &Kubectl) {
        self.wait_sources_in_phase(k, "WaitingForPeer", Duration::from_secs(300));
    }

    /// Waits until every offer is in `phase`.
    #[track_caller]
    pub fn wait_sources_in_phase(&self, k: &Kubectl, phase: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let phases = transfer_phases(k);
            let there = self
                .pairs
                .iter()
                .filter(|p| {
                    phases
                        .get(&(p.src.clone(), offer_name(p)))
                        .map(String::as_str)
                        == Some(phase)
                })
                .count();
            if there == self.pairs.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{there} of {} offers are {phase} after {timeout:?}",
                self.pairs.len()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Files every request at once, from several `kubectl` processes.
    pub fn file_requests(&self, cp: &ControlPlane) {
        let k = cp.kubectl();
        let chunks: Vec<Vec<String>> = (0..FILERS)
            .map(|i| {
                self.pairs
                    .iter()
                    .skip(i)
                    .step_by(FILERS)
                    .map(request_yaml)
                    .collect()
            })
            .collect();
        std::thread::scope(|scope| {
            for chunk in &chunks {
                scope.spawn(move || create_all(k, chunk.iter().cloned()));
            }
        });
    }

    /// Files every request at once and waits until every pair is Completed
    /// (or `timeout` passes, which panics with how many did).
    pub fn request_all(&self, cp: &ControlPlane, timeout: Duration) -> Run {
        let k = cp.kubectl();
        let watch = Watch::start(k);
        let first_revision = revision(k);
        let started = Instant::now();
        self.file_requests(cp);
        let deadline = started + timeout;
        let wanted: Vec<(String, String)> = self
            .pairs
            .iter()
            .map(|p| (p.src.clone(), offer_name(p)))
            .collect();
        loop {
            let done = {
                let seen = watch.seen();
                wanted
                    .iter()
                    .filter(|key| seen.completed.contains_key(*key))
                    .count()
            };
            if done == wanted.len() {
                break;
            }
            if Instant::now() > deadline {
                let phases = transfer_phases(k);
                let mut stuck: Vec<String> = wanted
                    .iter()
                    .filter(|key| phases.get(*key).map(String::as_str) != Some("Completed"))
                    .take(5)
                    .map(|key| format!("{}/{}: {:?}", key.0, key.1, phases.get(key)))
                    .collect();
                stuck.sort();
                panic!(
                    "{done} of {} pairs completed within {timeout:?}; some that did not: {stuck:?}",
                    wanted.len()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let seen = watch.seen();
        let last = seen.completed.values().max().copied().unwrap_or(started);
        let latencies = self
            .pairs
            .iter()
            .map(|p| {
                let added = seen
                    .added
                    .get(&(p.dst.clone(), request_name(p)))
                    .copied()
                    .unwrap_or(started);
                let completed = seen.completed[&(p.src.clone(), offer_name(p))];
                completed.saturating_duration_since(added)
            })
            .collect();
        let last_revision = revision(k);
        let writes = last_revision.saturating_sub(first_revision);
        Run {
            elapsed: last.saturating_duration_since(started),
            latencies,
            writes_per_pair: writes as f64 / self.pairs.len() as f64,
            revisions: (first_revision, last_revision),
        }
    }

    /// Every volume kept its uid, is Bound to its destination claim with
    /// the policy it had (`Delete`), and the CSI driver was never asked to
    /// delete it. The source claims, deleted at R5, go once
    /// kube-controller-manager's pvc-protection lets them (a live pod LIST
    /// and a write each, through its own client's rate limit): waited for,
    /// up to two minutes.
    #[track_caller]
    pub fn assert_intact(&self, k: &Kubectl, csi: &Csi) {
        let sources: std::collections::HashSet<(String, String)> = self
            .pairs
            .iter()
            .map(|p| (p.src.clone(), p.claim.clone()))
            .collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let names = k.ok(&[
                "get",
                "pvc",
                "-A",
                "-o",
                "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}",
            ]);
            let left = names
                .lines()
                .filter_map(|l| l.split_once('/'))
                .any(|(ns, name)| sources.contains(&(ns.to_owned(), name.to_owned())));
            if !left || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let volumes: Value = serde_json::from_str(&k.ok(&["get", "pv", "-o", "json"])).unwrap();
        let by_name: HashMap<&str, &Value> = volumes["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["metadata"]["name"].as_str().unwrap(), v))
            .collect();
        let claims: Value =
            serde_json::from_str(&k.ok(&["get", "pvc", "-A", "-o", "json"])).unwrap();
        let claim_uids: HashMap<(&str, &str), &str> = claims["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    (
                        c["metadata"]["namespace"].as_str().unwrap(),
                        c["metadata"]["name"].as_str().unwrap(),
                    ),
                    c["metadata"]["uid"].as_str().unwrap(),
                )
            })
            .collect();
        for p in &self.pairs {
            let v = by_name
                .get(p.pv.as_str())
                .unwrap_or_else(|| panic!("PV {} is gone", p.pv));
            let what = format!("PV {} ({}/{} → {})", p.pv, p.src, p.claim, p.dst);
            assert_eq!(v["metadata"]["uid"], p.pv_uid.as_str(), "{what}: a new PV");
            let claim_ref = &v["spec"]["claimRef"];
            assert_eq!(
                claim_ref["namespace"],
                p.dst.as_str(),
                "{what}: {claim_ref}"
            );
            assert_eq!(claim_ref["name"], p.claim.as_str(), "{what}: {claim_ref}");
            assert_eq!(
                claim_ref["uid"].as_str(),
                claim_uids.get(&(p.dst.as_str(), p.claim.as_str())).copied(),
                "{what}: bound to a claim that is not the destination's"
            );
            assert_eq!(v["status"]["phase"], "Bound", "{what}");
            assert_eq!(
                v["spec"]["persistentVolumeReclaimPolicy"], "Delete",
                "{what}: policy not restored"
            );
            assert!(
                !claim_uids.contains_key(&(p.src.as_str(), p.claim.as_str())),
                "{what}: the source claim is still there"
            );
            csi.assert_never_deleted(&p.handle);
        }
    }

    /// The namespaces, for callers that clean up early.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.namespaces.iter().map(|n| n.name.as_str())
    }
}

fn offer_name(p: &Pair) -> String {
    format!("{}-to-dst", p.claim)
}

fn request_name(p: &Pair) -> String {
    format!("{}-from-src", p.claim)
}

fn volume_yaml(p: &Pair) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\n  annotations:\n    pv.kubernetes.io/provisioned-by: {DRIVER}\n  finalizers: [external-provisioner.volume.kubernetes.io/finalizer]\nspec:\n  capacity:\n    storage: 1Gi\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Delete\n  storageClassName: {STATIC_ALLOWED_CLASS}\n  claimRef:\n    namespace: {src}\n    name: {claim}\n  csi:\n    driver: {DRIVER}\n    volumeHandle: {handle}\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: {src}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {STATIC_ALLOWED_CLASS}\n  volumeName: {pv}\n  resources:\n    requests:\n      storage: 1Gi\n",
        pv = p.pv,
        src = p.src,
        claim = p.claim,
        handle = p.handle,
    )
}

fn offer_yaml(p: &Pair) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  source:\n    name: {}\n  destination:\n    namespace: {}\n",
        offer_name(p),
        p.src,
        p.claim,
        p.dst
    )
}

fn request_yaml(p: &Pair) -> String {
    format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  source:\n    namespace: {}\n    name: {}\n",
        request_name(p),
        p.dst,
        p.src,
        p.claim
    )
}

/// `kubectl create -f -` of every document, 200 at a time.
fn create_all(k: &Kubectl, documents: impl Iterator<Item = String>) {
    let documents: Vec<String> = documents.collect();
    for chunk in documents.chunks(200) {
        let yaml = chunk.join("---\n");
        let run = k.run_with_stdin(&["create", "-f", "-"], Some(&yaml));
        assert!(run.success, "kubectl create: {}", run.stderr);
    }
}

fn wait_all_bound(k: &Kubectl, pairs: &[Pair]) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let claims: Value =
            serde_json::from_str(&k.ok(&["get", "pvc", "-A", "-o", "json"])).unwrap();
        let bound: std::collections::HashSet<(String, String)> = claims["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["status"]["phase"] == "Bound")
            .map(|c| {
                (
                    c["metadata"]["namespace"].as_str().unwrap().to_owned(),
                    c["metadata"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let waiting = pairs
            .iter()
            .filter(|p| !bound.contains(&(p.src.clone(), p.claim.clone())))
            .count();
        if waiting == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} claims are not Bound after 300 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn volume_uids(k: &Kubectl) -> HashMap<String, String> {
    let volumes: Value = serde_json::from_str(&k.ok(&["get", "pv", "-o", "json"])).unwrap();
    volumes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["metadata"]["name"].as_str().unwrap().to_owned(),
                v["metadata"]["uid"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Every transfer's phase, by (namespace, name).
fn transfer_phases(k: &Kubectl) -> HashMap<(String, String), String> {
    let list: Value =
        serde_json::from_str(&k.ok(&["get", "namespacetransfers", "-A", "-o", "json"])).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                (
                    t["metadata"]["namespace"].as_str().unwrap().to_owned(),
                    t["metadata"]["name"].as_str().unwrap().to_owned(),
                ),
                t["status"]["phase"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// etcd's revision now, as kube-apiserver's resourceVersion of a list (one
/// etcd serves both kube-apiserver and our server).
pub(crate) fn revision(k: &Kubectl) -> u64 {
    let list: Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/api/v1/namespaces?limit=1"])).unwrap();
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {list}"))
}

#[derive(Default)]
struct Seen {
    /// (namespace, name) → when its ADDED event arrived.
    added: HashMap<(String, String), Instant>,
    /// (namespace, name) → when an event first showed it Completed.
    completed: HashMap<(String, String), Instant>,
}

impl Seen {
    fn of(events: &[Event]) -> Self {
        let mut seen = Self::default();
        for event in events {
            let key = (event.namespace().to_owned(), event.name().to_owned());
            if event.kind == "ADDED" {
                seen.added.entry(key.clone()).or_insert(event.at);
            }
            if event.object["status"]["phase"] == "Completed" {
                seen.completed.entry(key).or_insert(event.at);
            }
        }
        seen
    }
}

/// `kubectl get namespacetransfers -A -w`, each event stamped on arrival.
struct Watch(Recording);

impl Watch {
    fn start(k: &Kubectl) -> Watch {
        let watch = Recording::start(k, &["namespacetransfers", "-A"], Ends::Once);
        watch
            .wait_started(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        Watch(watch)
    }

    /// What the events so far show.
    fn seen(&self) -> Seen {
        self.0.read(Seen::of)
    }
}
