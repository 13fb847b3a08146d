//! How long a NamespaceTransfer takes end to end, and the kube-controller-manager
//! bind time it is compared with. Both run against a real control plane
//! (etcd, kube-apiserver, kube-controller-manager, our server behind its
//! APIService), as [`ControlPlane`] starts it.
//!
//! - [`transfer_latency`]: a statically provisioned volume bound to `<src>/db`,
//!   an offer from `<src>` (processed: phase `WaitingForPeer`), then the
//!   request from `<dst>` (the second consent). The clock runs from the
//!   request's `ADDED` event to the first event showing `<dst>/db` `Bound`.
//! - [`clone_latency`] and its baseline [`csi_clone_baseline`]: a Clone-mode
//!   transfer of a CSI volume against the driver's own same-namespace clone.
//! - [`snapshot_move_latency`] and its baseline [`snapshot_bind_baseline`]:
//!   a VolumeSnapshot moved to another namespace, from the second consent to
//!   the destination snapshot `readyToUse`, against the snapshot
//!   controller's own bind of a pre-provisioned snapshot (a content with the
//!   same handle, then a snapshot naming it, to `readyToUse`).
//! - [`kcm_bind_baseline`]: an `Available` volume whose `claimRef` names a claim
//!   that does not exist yet (no uid), then that claim, created with
//!   `spec.volumeName` = the volume. The clock runs from the claim's `ADDED`
//!   event to its first `Bound` event. This is the shape our protocol hands
//!   kube-controller-manager at its end, so the difference between the two
//!   figures is what the protocol itself costs.
//!
//! Method, the same for both so that both carry the same measurement error:
//! `kubectl get <resource> -w --output-watch-events -o json` on each object
//! (field selector on its name), known to be established (its watch request
//! has been answered, seen in its `-v=6` log) before the object is created;
//! a reader thread stamps every event as it arrives. Both ends of the
//! interval are watch deliveries, so the client's own cost (`kubectl apply`
//! starting, discovery, its GET and POST) is outside it, and what remains of
//! the error is the difference between two delivery delays (a few ms).
//!
//! Each run uses fresh namespaces and a fresh volume, and waits until its
//! transfer has completed before the next starts, so runs never overlap. A
//! benchmark fails by panicking: anything unexpected panics with what was seen.
//! Namespaces and volumes are deleted after the last run of each function.

use std::time::{Duration, Instant};

use crate::watch::{Ends, Event, Recording};
use crate::{ControlPlane, Kubectl, Namespace};
use serde_json::Value;

use crate::scenario::{self, ALLOWED_CLASS, STATIC_ALLOWED_CLASS};

/// How long any one step (a bind, a phase, a watch starting) may take.
const WAIT: Duration = Duration::from_secs(120);

/// The pause between provisioning a clone's source and cloning it. The
/// external-provisioner's client is rate-limited (5 requests per second,
/// bursts of 10: its defaults), and provisioning the source spends part of
/// the burst; without the pause each of the clone's API calls would wait up
/// to 200 ms for a token, and the figure would measure the bucket.
const SOURCE_SETTLE: Duration = Duration::from_secs(2);

/// The claim name used on both sides, and by the baseline.
const CLAIM: &str = "db";

/// Second consent → destination claim Bound, for each capacity, `runs` times each.
#[derive(Debug, Clone)]
pub struct TransferTiming {
    /// The volume's capacity, as given (e.g. "1Gi").
    pub capacity: String,
    /// One latency per run, in run order.
    pub runs: Vec<Duration>,
}

/// The median of `samples` (the mean of the middle two for an even count);
/// zero for none.
pub fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// Moves a volume of each of `capacities` from a fresh source namespace to a
/// fresh destination namespace, `runs` times per capacity, and returns the
/// time from the second consent (the request) to the destination claim being
/// `Bound`. Each run also checks that both transfers reached `Completed` and
/// that the destination claim is bound to the same PV (name and uid).
pub fn transfer_latency(
    cp: &ControlPlane,
    capacities: &[&str],
    runs: usize,
) -> Vec<TransferTiming> {
    each_capacity(cp, capacities, runs, one_transfer)
}

/// kube-controller-manager's own bind time, the baseline our protocol is compared with:
/// an Available PV whose claimRef already names a claim (no uid), then that claim created with
/// spec.volumeName = the PV; time from the claim's create to its phase Bound. This is the shape
/// our protocol hands KCM at its end (R3 creates the destination claim with volumeName, R4 points
/// the PV's claimRef at it). `runs` times.
pub fn kcm_bind_baseline(cp: &ControlPlane, runs: usize) -> Vec<Duration> {
    scenario::ensure_classes(cp.kubectl());
    let mut leftovers = Leftovers::default();
    let timings = (0..runs).map(|_| one_bind(cp, &mut leftovers)).collect();
    leftovers.clean_up(cp.kubectl());
    timings
}

/// Clones a CSI volume of each of `capacities` into a fresh destination
/// namespace with a one-shot Clone-mode transfer, `runs` times per capacity,
/// and returns the time from the second consent (the request, created once
/// the offer waits for it) to the destination claim being `Bound`: C1's clone
/// claim, the driver's clone, C2, then R1–R6 and kube-controller-manager's
/// bind. Each run checks that both transfers completed, that the driver made
/// the destination's volume from the source's with the capacity asked, and
/// that the source claim keeps its volume.
pub fn clone_latency(cp: &ControlPlane, capacities: &[&str], runs: usize) -> Vec<TransferTiming> {
    each_capacity(cp, capacities, runs, one_clone)
}

/// The driver's own clone, the baseline [`clone_latency`] is compared with:
/// a claim whose `dataSource` is a Bound claim of `capacity` in the same
/// namespace, from its `ADDED` event to its first `Bound` event (the
/// external-provisioner's `CreateVolume` from the source volume, then
/// kube-controller-manager's bind). This is what C1–C2 cost at the least, so
/// the difference is what the rest of the protocol costs.
pub fn csi_clone_baseline(
    cp: &ControlPlane,
    capacities: &[&str],
    runs: usize,
) -> Vec<TransferTiming> {
    each_capacity(cp, capacities, runs, one_csi_clone)
}

/// Moves a VolumeSnapshot from a fresh source namespace to a fresh
/// destination namespace `runs` times, and returns the time from the second
/// consent (the request's `ADDED`) to the first event showing the
/// destination's snapshot `readyToUse`. Each run checks that the move
/// completed and that the driver never deleted the backend snapshot.
pub fn snapshot_move_latency(cp: &ControlPlane, runs: usize) -> Vec<Duration> {
    scenario::ensure_classes(cp.kubectl());
    scenario::snapshots::ensure_snapshot_classes(cp.kubectl());
    let mut leftovers = Leftovers::default();
    let timings = (0..runs)
        .map(|_| one_snapshot_move(cp, &mut leftovers))
        .collect();
    leftovers.clean_up(cp.kubectl());
    timings
}

/// The snapshot controller's own bind of a pre-provisioned snapshot, the
/// baseline [`snapshot_move_latency`] is compared with: a content naming
/// the backend snapshot of a ready snapshot (`Retain`, pre-bound to a
/// snapshot of another namespace), then that snapshot, created naming the
/// content; from its `ADDED` event to its first event showing it
/// `readyToUse`. This is the bind the move's R3 hands the snapshot
/// controller, so the difference is what the rest of the protocol costs.
pub fn snapshot_bind_baseline(cp: &ControlPlane, runs: usize) -> Vec<Duration> {
    scenario::ensure_classes(cp.kubectl());
    scenario::snapshots::ensure_snapshot_classes(cp.kubectl());
    let mut leftovers = Leftovers::default();
    let timings = (0..runs)
        .map(|_| one_snapshot_bind(cp, &mut leftovers))
        .collect();
    leftovers.clean_up(cp.kubectl());
    timings
}

fn is_ready(event: &Event) -> bool {
    event.object["status"]["readyToUse"] == true
}

/// One snapshot moved; see [`snapshot_move_latency`].
fn one_snapshot_move(cp: &ControlPlane, leftovers: &mut Leftovers) -> Duration {
    use scenario::snapshots::{give_snapshot, take_snapshot, SnapshotSetup, SNAP_ALLOWED};
    let k = cp.kubectl();
    let s = SnapshotSetup::new(cp, SNAP_ALLOWED);
    give_snapshot(k, &s.src.name, "give", "nightly", &s.dst.name);
    scenario::wait_phase(k, &s.src.name, "give", "WaitingForPeer", WAIT);
    let snapshot = EventWatch::start(cp, "volumesnapshots", &s.dst.name, "nightly");
    let request = EventWatch::start(cp, "namespacetransfers", &s.dst.name, "take");
    take_snapshot(k, &s.dst.name, "take", &s.src.name, "nightly");
    let second_consent = request.first("ADDED", WAIT, |e| e.kind == "ADDED");
    let ready = snapshot.first("readyToUse", WAIT, is_ready);
    let latency = ready.duration_since(second_consent);
    drop((snapshot, request));
    let content = s.assert_moved(k, &cp.csi, WAIT);
    leftovers.contents.push(content);
    leftovers.namespaces.extend([s.src, s.dst]);
    latency
}

/// One pre-provisioned bind by the snapshot controller; see
/// [`snapshot_bind_baseline`].
fn one_snapshot_bind(cp: &ControlPlane, leftovers: &mut Leftovers) -> Duration {
    use scenario::snapshots::{SnapshotSetup, SNAP_ALLOWED};
    let k = cp.kubectl();
    let s = SnapshotSetup::new(cp, SNAP_ALLOWED);
    let content = scenario::unique("bench-snapcontent");
    let dst = &s.dst.name;
    k.apply(&format!(
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotContent\nmetadata:\n  name: {content}\nspec:\n  deletionPolicy: Retain\n  driver: {driver}\n  source:\n    snapshotHandle: \"{handle}\"\n  volumeSnapshotClassName: {SNAP_ALLOWED}\n  volumeSnapshotRef:\n    apiVersion: snapshot.storage.k8s.io/v1\n    kind: VolumeSnapshot\n    namespace: {dst}\n    name: nightly\n",
        driver = crate::csi::DRIVER,
        handle = s.handle,
    ))
    .unwrap_or_else(|e| panic!("creating content {content}: {e}"));
    leftovers.contents.push(content.clone());
    let watch = EventWatch::start(cp, "volumesnapshots", dst, "nightly");
    k.apply(&format!(
        "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata:\n  name: nightly\n  namespace: {dst}\nspec:\n  volumeSnapshotClassName: {SNAP_ALLOWED}\n  source:\n    volumeSnapshotContentName: {content}\n"
    ))
    .unwrap_or_else(|e| panic!("creating snapshot {dst}/nightly: {e}"));
    let created = watch.first("ADDED", WAIT, |e| e.kind == "ADDED");
    let ready = watch.first("readyToUse", WAIT, is_ready);
    let latency = ready.duration_since(created);
    drop(watch);
    leftovers.namespaces.extend([s.src, s.dst]);
    latency
}

/// `one` run `runs` times for each of `capacities`, then the cleanup.
fn each_capacity(
    cp: &ControlPlane,
    capacities: &[&str],
    runs: usize,
    one: fn(&ControlPlane, &str, &mut Leftovers) -> Duration,
) -> Vec<TransferTiming> {
    scenario::ensure_classes(cp.kubectl());
    let mut leftovers = Leftovers::default();
    let timings = capacities
        .iter()
        .map(|capacity| TransferTiming {
            capacity: (*capacity).to_owned(),
            runs: (0..runs)
                .map(|_| one(cp, capacity, &mut leftovers))
                .collect(),
        })
        .collect();
    leftovers.clean_up(cp.kubectl());
    timings
}

/// One clone moved; see [`clone_latency`].
fn one_clone(cp: &ControlPlane, capacity: &str, leftovers: &mut Leftovers) -> Duration {
    let k = cp.kubectl();
    let src = cp.namespace("bench-clone-src").expect("a source namespace");
    let dst = cp
        .namespace("bench-clone-dst")
        .expect("a destination namespace");
    let (src_ns, dst_ns) = (src.name.clone(), dst.name.clone());
    leftovers.namespaces.extend([src, dst]);
    let source = scenario::provisioned_volume(k, ALLOWED_CLASS, &src_ns, CLAIM, capacity);
    std::thread::sleep(SOURCE_SETTLE);

    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {src_ns}\nspec:\n  mode: Clone\n  source:\n    name: {CLAIM}\n  destination:\n    namespace: {dst_ns}\n    name: {CLAIM}\n"
    ))
    .unwrap_or_else(|e| panic!("clone offer {src_ns}/give: {e}"));
    scenario::wait_phase(k, &src_ns, "give", "WaitingForPeer", WAIT);

    let claim = EventWatch::start(cp, "pvc", &dst_ns, CLAIM);
    let request = EventWatch::start(cp, "namespacetransfers", &dst_ns, "take");
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: take\n  namespace: {dst_ns}\nspec:\n  mode: Clone\n  source:\n    namespace: {src_ns}\n    name: {CLAIM}\n"
    ))
    .unwrap_or_else(|e| panic!("clone request {dst_ns}/take: {e}"));
    let second_consent = request.first("ADDED", WAIT, |e| e.kind == "ADDED");
    let bound = claim.first("Bound", WAIT, is_bound);
    let latency = bound.duration_since(second_consent);
    drop((claim, request));

    scenario::wait_phase(k, &src_ns, "give", "Completed", WAIT);
    scenario::wait_phase(k, &dst_ns, "take", "Completed", WAIT);
    assert_cloned_from(cp, &dst_ns, CLAIM, &source.handle, capacity);
    let kept = scenario::claim_json(k, &src_ns, CLAIM).expect("the source claim exists");
    assert_eq!(
        (&kept["metadata"]["uid"], &kept["spec"]["volumeName"]),
        (
            &Value::from(source.claim_uid.as_str()),
            &Value::from(source.pv.as_str())
        ),
        "{src_ns}/{CLAIM} keeps its volume"
    );
    latency
}

/// One clone by the driver alone; see [`csi_clone_baseline`].
fn one_csi_clone(cp: &ControlPlane, capacity: &str, leftovers: &mut Leftovers) -> Duration {
    let k = cp.kubectl();
    let ns = cp.namespace("bench-csi-clone").expect("a namespace");
    let namespace = ns.name.clone();
    leftovers.namespaces.push(ns);
    let source = scenario::provisioned_volume(k, ALLOWED_CLASS, &namespace, CLAIM, capacity);
    std::thread::sleep(SOURCE_SETTLE);

    let watch = EventWatch::start(cp, "pvc", &namespace, "copy");
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: copy\n  namespace: {namespace}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {ALLOWED_CLASS}\n  dataSource:\n    kind: PersistentVolumeClaim\n    name: {CLAIM}\n  resources:\n    requests:\n      storage: {capacity}\n"
    ))
    .unwrap_or_else(|e| panic!("creating claim {namespace}/copy: {e}"));
    let created = watch.first("ADDED", WAIT, |e| e.kind == "ADDED");
    let bound = watch.first("Bound", WAIT, is_bound);
    let latency = bound.duration_since(created);
    drop(watch);

    assert_cloned_from(cp, &namespace, "copy", &source.handle, capacity);
    latency
}

/// `namespace/claim` is bound to a volume that the driver made as a clone of
/// the volume `source`, with `capacity`.
#[track_caller]
fn assert_cloned_from(
    cp: &ControlPlane,
    namespace: &str,
    claim: &str,
    source: &str,
    capacity: &str,
) {
    let k = cp.kubectl();
    let pvc = scenario::claim_json(k, namespace, claim).expect("the clone's claim exists");
    let pv = pvc["spec"]["volumeName"].as_str().unwrap_or_default();
    let volume = scenario::volume_json(k, pv).expect("the clone's volume exists");
    assert_eq!(
        volume["spec"]["capacity"]["storage"], capacity,
        "{namespace}/{claim}'s volume {pv} has the capacity asked: {}",
        volume["spec"]
    );
    let handle = volume["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap_or_default();
    let made = cp
        .csi
        .creation_of(handle)
        .unwrap_or_else(|| panic!("the driver never made {namespace}/{claim}'s volume {handle}"));
    assert_eq!(
        made.request["volume_content_source"]["Type"]["Volume"]["volume_id"], source,
        "{namespace}/{claim}'s volume {handle} is a clone of {source}: {}",
        made.request
    );
}

/// One transfer of a fresh `capacity` volume; see [`transfer_latency`].
fn one_transfer(cp: &ControlPlane, capacity: &str, leftovers: &mut Leftovers) -> Duration {
    let k = cp.kubectl();
    let src = cp.namespace("bench-src").expect("a source namespace");
    let dst = cp.namespace("bench-dst").expect("a destination namespace");
    let pv = scenario::unique("bench-pv");
    leftovers.volumes.push(pv.clone());
    let (src_ns, dst_ns) = (src.name.clone(), dst.name.clone());
    leftovers.namespaces.extend([src, dst]);

    let claim_uid = scenario::bound_volume(k, &pv, capacity, STATIC_ALLOWED_CLASS, &src_ns, CLAIM);
    let pv_uid = uid(&scenario::volume_json(k, &pv).expect("the PV exists"));
    scenario::offer(k, &src_ns, "give", CLAIM, &dst_ns);
    scenario::wait_phase(k, &src_ns, "give", "WaitingForPeer", WAIT);

    let claim = EventWatch::start(cp, "pvc", &dst_ns, CLAIM);
    let request = EventWatch::start(cp, "namespacetransfers", &dst_ns, "take");
    scenario::request(k, &dst_ns, "take", &src_ns, CLAIM);
    let second_consent = request.first("ADDED", WAIT, |e| e.kind == "ADDED");
    let bound = claim.first("Bound", WAIT, is_bound);
    let latency = bound.duration_since(second_consent);
    drop((claim, request));

    let give = scenario::wait_phase(k, &src_ns, "give", "Completed", WAIT);
    let take = scenario::wait_phase(k, &dst_ns, "take", "Completed", WAIT);
    for (side, t) in [("offer", &give), ("request", &take)] {
        assert_eq!(
            t["status"]["volumeName"],
            pv.as_str(),
            "the {side} reports another volume than {pv}: {}",
            t["status"]
        );
    }
    let dest = scenario::claim_json(k, &dst_ns, CLAIM).expect("the destination claim exists");
    assert_eq!(
        dest["spec"]["volumeName"],
        pv.as_str(),
        "{dst_ns}/{CLAIM} is bound to another volume than {pv}: {}",
        dest["spec"]
    );
    scenario::assert_moved(k, &pv, &pv_uid, &src_ns, &dst_ns, CLAIM);
    assert_ne!(
        uid(&dest),
        claim_uid,
        "the destination claim is a new object"
    );
    latency
}

/// One bind by kube-controller-manager alone; see [`kcm_bind_baseline`].
fn one_bind(cp: &ControlPlane, leftovers: &mut Leftovers) -> Duration {
    let k = cp.kubectl();
    let ns = cp.namespace("bench-kcm").expect("a namespace");
    let pv = scenario::unique("bench-kcm-pv");
    leftovers.volumes.push(pv.clone());
    let namespace = ns.name.clone();
    leftovers.namespaces.push(ns);

    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity:\n    storage: 1Gi\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Delete\n  storageClassName: {STATIC_ALLOWED_CLASS}\n  claimRef:\n    namespace: {namespace}\n    name: {CLAIM}\n  hostPath:\n    path: /var/tmp/storage-transfer-tests/{pv}\n    type: DirectoryOrCreate\n"
    ))
    .unwrap_or_else(|e| panic!("creating PV {pv}: {e}"));
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Available",
        &format!("pv/{pv}"),
        "--timeout=60s",
    ]);

    let watch = EventWatch::start(cp, "pvc", &namespace, CLAIM);
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {CLAIM}\n  namespace: {namespace}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {STATIC_ALLOWED_CLASS}\n  volumeName: {pv}\n  resources:\n    requests:\n      storage: 1Gi\n"
    ))
    .unwrap_or_else(|e| panic!("creating claim {namespace}/{CLAIM}: {e}"));
    let created = watch.first("ADDED", WAIT, |e| e.kind == "ADDED");
    let bound = watch.first("Bound", WAIT, is_bound);
    let latency = bound.duration_since(created);
    drop(watch);

    let claim = scenario::claim_json(k, &namespace, CLAIM).expect("the claim exists");
    let volume = scenario::volume_json(k, &pv).expect("the PV exists");
    assert_eq!(
        volume["spec"]["claimRef"]["uid"], claim["metadata"]["uid"],
        "PV {pv} is bound to {namespace}/{CLAIM}: {}",
        volume["spec"]["claimRef"]
    );
    latency
}

/// `metadata.uid` of an object.
fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_else(|| panic!("an object without a uid: {object}"))
        .to_owned()
}

/// Whether a watch event shows a claim `Bound`.
fn is_bound(event: &Event) -> bool {
    event.object["status"]["phase"] == "Bound"
}

/// A `kubectl get -w` on one object, with every event stamped on arrival.
struct EventWatch(Recording);

impl EventWatch {
    /// Starts watching `resource` `namespace/name` (which need not exist
    /// yet), and returns once the watch request has been answered, so that
    /// every later change arrives through it.
    fn start(cp: &ControlPlane, resource: &str, namespace: &str, name: &str) -> Self {
        let selector = format!("--field-selector=metadata.name={name}");
        let cache = format!("--cache-dir={}", cp.dir.join("kube-cache").display());
        let watch = Recording::start(
            cp.kubectl(),
            &[resource, "-n", namespace, &selector, &cache],
            Ends::Once,
        );
        watch.wait_started(WAIT).unwrap_or_else(|e| panic!("{e}"));
        Self(watch)
    }

    /// The arrival of the first event (not yet taken) that `wanted`
    /// accepts; `what` names it in a failure.
    fn first(&self, what: &str, timeout: Duration, wanted: impl Fn(&Event) -> bool) -> Instant {
        self.0
            .next(what, timeout, wanted)
            .unwrap_or_else(|e| panic!("{e}"))
            .at
    }
}

/// What the runs of one function leave behind, deleted after its last run.
#[derive(Default)]
struct Leftovers {
    namespaces: Vec<Namespace>,
    volumes: Vec<String>,
    /// VolumeSnapshotContents under Retain, which no namespace takes along.
    contents: Vec<String>,
}

impl Leftovers {
    /// Deletes the volumes (pv-protection holds each until its claim is gone)
    /// and the namespaces, and waits for both, so that the deletions do not
    /// load the cluster during whatever is measured next. A cleanup that does
    /// not finish in time is reported, not fatal.
    fn clean_up(self, k: &Kubectl) {
        let volumes: Vec<String> = self.volumes.iter().map(|v| format!("pv/{v}")).collect();
        let volumes: Vec<&str> = volumes.iter().map(String::as_str).collect();
        let namespaces: Vec<String> = self
            .namespaces
            .iter()
            .map(|n| format!("namespace/{}", n.name))
            .collect();
        let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        let contents: Vec<String> = self
            .contents
            .iter()
            .map(|c| format!("volumesnapshotcontent/{c}"))
            .collect();
        let contents: Vec<&str> = contents.iter().map(String::as_str).collect();
        let steps: [(&[&str], &[&str]); 4] = [
            (&["delete", "--wait=false", "--ignore-not-found"], &volumes),
            (
                &["delete", "--timeout=120s", "--ignore-not-found"],
                &namespaces,
            ),
            (&["wait", "--for=delete", "--timeout=60s"], &volumes),
            (&["delete", "--wait=false", "--ignore-not-found"], &contents),
        ];
        for (verb, objects) in steps {
            if objects.is_empty() {
                continue;
            }
            let args = [verb, objects].concat();
            let run = k.run(&args);
            if !run.success {
                eprintln!(
                    "transfer bench: cleanup `kubectl {}` failed: {}",
                    args.join(" "),
                    run.stderr.trim()
                );
            }
        }
    }
}
