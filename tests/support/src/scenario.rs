//! Building blocks of the NamespaceTransfer scenarios: a claim whose volume
//! the CSI stack provisions (the mock driver behind the external-provisioner,
//! under reclaim policy Delete, so a Released PV would really be deleted), or
//! for shapes the driver cannot make a statically provisioned one; the two
//! consents; waiting on phases; and a recorder of everything that happens to a
//! PersistentVolume, for the "never released, never bound elsewhere, never
//! deleted" invariant, with the driver's own call log as the last word on
//! deletion.

#![allow(clippy::unwrap_used)] // Test helpers fail by panicking.

#[cfg(feature = "fault-injection")]
pub mod crash;
pub mod many;
pub mod snapshots;

use std::time::{Duration, Instant};

use crate::csi::storage_class_yaml;
use crate::watch::{Ends, Recording};
use crate::{ControlPlane, Csi, Kubectl};
use serde_json::Value;

/// The CSI mock driver's StorageClass that allows transfers (DESIGN §2.1.4).
pub const ALLOWED_CLASS: &str = "transfer-allowed";
/// The CSI mock driver's StorageClass without the annotation.
pub const PLAIN_CLASS: &str = "transfer-plain";
/// A class for statically provisioned volumes that allows transfers: only for
/// shapes the mock driver cannot provision (it refuses 1 TiB and more).
pub const STATIC_ALLOWED_CLASS: &str = "transfer-allowed-static";
/// A CSI mock driver class that allows transfers and provisions volumes but
/// refuses to clone them ([`CLONE_REFUSAL`]).
pub const CLONE_FAILS_CLASS: &str = "transfer-allowed-no-clones";
/// The mock driver's message when it refuses a clone in [`CLONE_FAILS_CLASS`].
pub const CLONE_REFUSAL: &str = "this backend has no room for clones";

const ALLOW: &str = "{storage.transfer.k8s.io/allow-namespace-transfer: \"true\"}";

/// Points the APIService at a local balancer on `port` (in front of several
/// replicas, as a Service's endpoints would be) and waits until our API
/// answers through it.
pub fn serve_through_balancer(k: &Kubectl, port: u16) {
    k.ok(&[
        "patch",
        "apiservice",
        "v1alpha1.storage.transfer.k8s.io",
        "--type=merge",
        &format!("--patch={{\"spec\":{{\"service\":{{\"port\":{port}}}}}}}"),
    ]);
    eventually(
        "the APIService to answer through the balancer",
        Duration::from_secs(90),
        || k.run(&["get", "namespacetransfers", "-A"]).success,
    );
}

/// Makes the test StorageClasses (idempotent).
pub fn ensure_classes(k: &Kubectl) {
    let yaml = format!(
        "{}---\n{}---\n{}---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {STATIC_ALLOWED_CLASS}\n  annotations: {ALLOW}\nprovisioner: kubernetes.io/no-provisioner\nreclaimPolicy: Delete\nvolumeBindingMode: Immediate\n",
        storage_class_yaml(ALLOWED_CLASS, ALLOW, "{}"),
        storage_class_yaml(PLAIN_CLASS, "{}", "{}"),
        storage_class_yaml(
            CLONE_FAILS_CLASS,
            ALLOW,
            &format!("{{fail-clone-volume: \"{CLONE_REFUSAL}\"}}")
        ),
    );
    k.apply(&yaml).unwrap();
}

/// A claim and the volume the CSI stack provisioned for it.
#[derive(Debug, Clone)]
pub struct Provisioned {
    pub claim_uid: String,
    pub pv: String,
    pub pv_uid: String,
    /// The CSI volume id (`spec.csi.volumeHandle`), which `DeleteVolume`
    /// names.
    pub handle: String,
}

/// Creates `namespace/claim` of `capacity` in `class` (a CSI class) and waits
/// until the external-provisioner has made its volume and kube-controller-
/// manager has bound it.
pub fn provisioned_volume(
    k: &Kubectl,
    class: &str,
    namespace: &str,
    claim: &str,
    capacity: &str,
) -> Provisioned {
    k.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: {namespace}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {class}\n  resources:\n    requests:\n      storage: {capacity}\n"
    ))
    .unwrap();
    wait_bound(k, namespace, claim);
    let pvc = claim_json(k, namespace, claim).unwrap();
    let pv = pvc["spec"]["volumeName"].as_str().unwrap().to_owned();
    let volume = volume_json(k, &pv).unwrap();
    Provisioned {
        claim_uid: pvc["metadata"]["uid"].as_str().unwrap().to_owned(),
        pv_uid: volume["metadata"]["uid"].as_str().unwrap().to_owned(),
        handle: volume["spec"]["csi"]["volumeHandle"]
            .as_str()
            .unwrap_or_else(|| panic!("PV {pv} is not a CSI volume: {}", volume["spec"]))
            .to_owned(),
        pv,
    }
}

/// Deletes `namespace/claim`, bound to the CSI volume `handle` under Delete,
/// and waits until the driver has deleted that volume, exactly once: it was
/// intact and still the cluster's to reclaim.
#[track_caller]
pub fn assert_deleting_the_claim_deletes_the_volume_once(
    k: &Kubectl,
    csi: &Csi,
    namespace: &str,
    claim: &str,
    handle: &str,
) {
    k.ok(&["delete", "pvc", claim, "-n", namespace, "--wait=false"]);
    csi.assert_deleted_once(handle, Duration::from_secs(60));
}

/// Waits until `namespace/claim` is Bound.
#[track_caller]
pub fn wait_bound(k: &Kubectl, namespace: &str, claim: &str) {
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Bound",
        &format!("pvc/{claim}"),
        "-n",
        namespace,
        "--timeout=60s",
    ]);
}

/// A statically provisioned (hostPath) PersistentVolume of `capacity` with
/// reclaim policy Delete, pre-bound to `namespace/claim`, and that claim;
/// waits until it is Bound. Returns the claim's uid. For the shapes the CSI
/// mock driver cannot provision; everything else uses
/// [`provisioned_volume`].
pub fn bound_volume(
    k: &Kubectl,
    pv: &str,
    capacity: &str,
    class: &str,
    namespace: &str,
    claim: &str,
) -> String {
    let yaml = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\n  labels:\n    test-volume: {pv}\nspec:\n  capacity:\n    storage: {capacity}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Delete\n  storageClassName: {class}\n  claimRef:\n    namespace: {namespace}\n    name: {claim}\n  hostPath:\n    path: /var/tmp/storage-transfer-tests/{pv}\n    type: DirectoryOrCreate\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {claim}\n  namespace: {namespace}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {class}\n  volumeName: {pv}\n  resources:\n    requests:\n      storage: {capacity}\n"
    );
    k.apply(&yaml).unwrap();
    wait_bound(k, namespace, claim);
    claim_json(k, namespace, claim).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The source side's consent: give `claim` in `namespace` to `destination`.
pub fn offer(k: &Kubectl, namespace: &str, name: &str, claim: &str, destination: &str) -> String {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  source:\n    name: {claim}\n  destination:\n    namespace: {destination}\n"
    ))
    .unwrap_or_else(|e| panic!("offer {namespace}/{name}: {e}"))
}

/// The destination side's consent: receive `source/claim` under the same name.
pub fn request(k: &Kubectl, namespace: &str, name: &str, source: &str, claim: &str) -> String {
    request_with(k, namespace, name, source, claim, "")
}

/// A request of `source/claim` in `namespace`, with `more` (YAML lines
/// under `spec`) added.
fn request_with(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    source: &str,
    claim: &str,
    more: &str,
) -> String {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  source:\n    namespace: {source}\n    name: {claim}\n{more}"
    ))
    .unwrap_or_else(|e| panic!("request {namespace}/{name}: {e}"))
}

/// Both consents of a one-shot Clone-mode transfer of `source/claim` to
/// `destination` under the same name: `source/give` and `destination/take`.
pub fn clone_consent(k: &Kubectl, source: &str, claim: &str, destination: &str) {
    for consent in clone_consents(source, claim, destination) {
        apply_clone_consent(k, consent);
    }
}

/// [`clone_consent`], the request applied first.
pub fn clone_consent_request_first(k: &Kubectl, source: &str, claim: &str, destination: &str) {
    for consent in clone_consents(source, claim, destination).into_iter().rev() {
        apply_clone_consent(k, consent);
    }
}

/// The offer and the request of [`clone_consent`]: namespace, name, and
/// the end of the spec.
fn clone_consents<'a>(
    source: &'a str,
    claim: &str,
    destination: &'a str,
) -> [(&'a str, &'static str, String); 2] {
    [
        (
            source,
            "give",
            // Naming the destination claim makes it one-shot; without a
            // name it would be a standing offer (DESIGN §2.1.5b).
            format!(
                "source:\n    name: {claim}\n  destination:\n    namespace: {destination}\n    name: {claim}"
            ),
        ),
        (
            destination,
            "take",
            format!("source:\n    namespace: {source}\n    name: {claim}"),
        ),
    ]
}

fn apply_clone_consent(k: &Kubectl, (ns, name, ends): (&str, &str, String)) {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  mode: Clone\n  {ends}\n"
    ))
    .unwrap_or_else(|e| panic!("clone consent {ns}/{name}: {e}"));
}

/// The clone C1 makes for `source/give` and `destination/take`: `give-clone-`
/// and the first five characters of the uid the offer records for the
/// request, a UUIDv5 of the request's uid in the offer's (the source
/// namespace never learns the request's own).
pub fn clone_claim_name(k: &Kubectl, source: &str, destination: &str) -> String {
    let uid_of = |namespace: &str, name: &str| {
        let t = transfer_json(k, namespace, name).expect("the transfer exists");
        t["metadata"]["uid"].as_str().unwrap_or_default().to_owned()
    };
    let give = uuid::Uuid::parse_str(&uid_of(source, "give")).expect("a uid");
    let receiver = uuid::Uuid::new_v5(&give, uid_of(destination, "take").as_bytes());
    let uid: String = receiver
        .to_string()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(5)
        .collect();
    format!("give-clone-{uid}")
}

/// A ResourceQuota `tiny` in `namespace` with `hard` (a YAML flow mapping),
/// once kube-controller-manager has counted it (within `timeout`).
pub fn quota(k: &Kubectl, namespace: &str, hard: &str, timeout: Duration) {
    k.apply(&format!(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: tiny\n  namespace: {namespace}\nspec:\n  hard: {hard}\n"
    ))
    .unwrap();
    eventually("the quota to be counted", timeout, || {
        k.ok(&[
            "get",
            "resourcequota",
            "tiny",
            "-n",
            namespace,
            "-o",
            "jsonpath={.status.used}",
        ])
        .contains("persistentvolumeclaims")
    });
}

/// The successful `CreateVolume` calls that cloned the volume `handle`.
pub fn clones_of(csi: &Csi, handle: &str) -> Vec<crate::CsiCall> {
    csi.calls("CreateVolume")
        .into_iter()
        .filter(|c| {
            // Volume ids are counters: "1" must not match "12".
            c.succeeded()
                && c.request["volume_content_source"]["Type"]["Volume"]["volume_id"] == handle
        })
        .collect()
}

/// A transfer as JSON, or `None` once it is gone.
pub fn transfer_json(k: &Kubectl, namespace: &str, name: &str) -> Option<Value> {
    get_json(k, &["get", "namespacetransfer", name, "-n", namespace])
}

pub fn claim_json(k: &Kubectl, namespace: &str, name: &str) -> Option<Value> {
    get_json(k, &["get", "pvc", name, "-n", namespace])
}

pub fn volume_json(k: &Kubectl, name: &str) -> Option<Value> {
    get_json(k, &["get", "pv", name])
}

/// A GET through kubectl, retried for a while: a server that was just
/// restarted takes a moment to be reachable again through the aggregator.
fn get_json(k: &Kubectl, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["-o", "json", "--ignore-not-found"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let run = k.run(&args);
        if run.success {
            break run.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?} kept failing: {}",
            run.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    if out.trim().is_empty() {
        None
    } else {
        Some(serde_json::from_str(&out).unwrap())
    }
}

/// `status.phase` of a transfer (`""` while unset, `"<gone>"` once deleted).
pub fn phase(k: &Kubectl, namespace: &str, name: &str) -> String {
    match transfer_json(k, namespace, name) {
        None => "<gone>".to_owned(),
        Some(t) => t["status"]["phase"].as_str().unwrap_or_default().to_owned(),
    }
}

/// Waits until the transfer's phase is `want`; panics with its status if not.
#[track_caller]
pub fn wait_phase(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    want: &str,
    timeout: Duration,
) -> Value {
    wait_status(
        k,
        namespace,
        name,
        &format!("reach phase {want}"),
        timeout,
        |t| t["status"]["phase"] == want,
    )
}

/// Waits until the transfer satisfies `holds` (`what` it then does); panics
/// with the status it last had if not.
#[track_caller]
pub fn wait_status(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    holds: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let t = transfer_json(k, namespace, name);
        if let Some(t) = &t {
            if holds(t) {
                return t.clone();
            }
        }
        if Instant::now() > deadline {
            panic!(
                "{namespace}/{name} did not {what} in {timeout:?}; it is:\n{}",
                t.map(|t| serde_json::to_string_pretty(&t["status"]).unwrap())
                    .unwrap_or_else(|| "<gone>".to_owned())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `f` holds.
#[track_caller]
pub fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asserts that `f` keeps holding for `period`.
#[track_caller]
pub fn consistently(what: &str, period: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        assert!(f(), "{what} stopped holding");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The events recorded about an object, as "Reason: note" lines.
pub fn events_about(k: &Kubectl, namespace: &str, kind: &str, name: &str) -> Vec<String> {
    let out = k.ok(&["get", "events.events.k8s.io", "-n", namespace, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or_default(),
                e["note"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The events recorded about an object once `seen` holds of them (the
/// controllers write Events after the writes they report, from a queue),
/// or after 30 s whatever they are, for the caller's assertion to name.
pub fn events_when(
    k: &Kubectl,
    namespace: &str,
    kind: &str,
    name: &str,
    seen: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = events_about(k, namespace, kind, name);
        if seen(&events) || Instant::now() > deadline {
            return events;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running pod (nodeName set, phase patched to Running, as there is no
/// kubelet) that mounts `claim`.
pub fn running_pod(k: &Kubectl, namespace: &str, name: &str, claim: &str) {
    k.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  nodeName: test-node\n  containers:\n  - name: app\n    image: registry.invalid/app\n    volumeMounts:\n    - name: data\n      mountPath: /data\n  volumes:\n  - name: data\n    persistentVolumeClaim:\n      claimName: {claim}\n"
    ))
    .unwrap();
    set_pod_phase(k, namespace, name, "Running");
}

/// Deletes a pod at once (there is no kubelet to confirm a graceful end).
/// KCM's pvc-protection keeps a deleted claim while any scheduled pod names
/// it, finished or not; a finished pod must go before its claim can.
pub fn delete_pod(k: &Kubectl, namespace: &str, name: &str) {
    k.ok(&[
        "delete",
        "pod",
        name,
        "-n",
        namespace,
        "--grace-period=0",
        "--force",
    ]);
}

pub fn set_pod_phase(k: &Kubectl, namespace: &str, name: &str, phase: &str) {
    k.ok(&[
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        &format!("--patch={{\"status\":{{\"phase\":\"{phase}\"}}}}"),
    ]);
}

/// What a finished, successful transfer leaves: the same PV (name and uid)
/// bound to `dest_ns/claim`, reclaim policy Delete again, no transfer
/// annotation left on it, and the source claim `src_ns/db` gone.
#[track_caller]
pub fn assert_moved(k: &Kubectl, pv: &str, pv_uid: &str, src_ns: &str, dest_ns: &str, claim: &str) {
    let source_claim = "db";
    let volume = volume_json(k, pv).expect("the PV still exists");
    assert_eq!(
        volume["metadata"]["uid"], pv_uid,
        "the PV is the same object"
    );
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    assert_eq!(volume["spec"]["claimRef"]["namespace"], dest_ns);
    assert_eq!(volume["spec"]["claimRef"]["name"], claim);
    assert!(
        volume["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/original-reclaim-policy")
            .is_none(),
        "the reclaim-policy annotation is removed: {}",
        volume["metadata"]["annotations"]
    );
    eventually(
        "the destination claim to be Bound",
        Duration::from_secs(30),
        || {
            claim_json(k, dest_ns, claim)
                .is_some_and(|c| c["status"]["phase"] == "Bound" && c["spec"]["volumeName"] == pv)
        },
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(source) = claim_json(k, src_ns, source_claim) {
        assert!(
            Instant::now() < deadline,
            "the source claim is still there: {}",
            serde_json::to_string_pretty(&source).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Watches one PV with `kubectl get -w` and keeps every version seen.
#[derive(Debug)]
pub struct VolumeRecorder {
    watch: Recording,
    pv: String,
}

impl VolumeRecorder {
    pub fn start(k: &Kubectl, pv: &str) -> Self {
        Self {
            watch: Recording::start(k, &["pv", pv], Ends::Once),
            pv: pv.to_owned(),
        }
    }

    /// Stops watching and checks every version seen: never deleted, never
    /// Released or Failed, and never bound to any claim but `allowed` (uids).
    #[track_caller]
    pub fn assert_never_lost(self, allowed: &[&str]) -> usize {
        let (events, _) = self.watch.finish();
        for event in &events {
            let pv = &event.object;
            assert_ne!(event.kind, "DELETED", "PV {} was deleted", self.pv);
            let phase = pv["status"]["phase"].as_str().unwrap_or_default();
            assert!(
                phase != "Released" && phase != "Failed",
                "PV {} went {phase}: {}",
                self.pv,
                pv["status"]
            );
            if let Some(uid) = pv["spec"]["claimRef"]["uid"].as_str() {
                assert!(
                    allowed.contains(&uid),
                    "PV {} was bound to an unexpected claim: {}",
                    self.pv,
                    pv["spec"]["claimRef"]
                );
            }
        }
        assert!(!events.is_empty(), "the recorder saw PV {}", self.pv);
        events.len()
    }
}

/// A user holding the roles a party needs: the built-in `edit` role in
/// `ns`, which covers PVCs and (aggregated) our kinds.
pub fn editor(cp: &ControlPlane, name: &str, ns: &str) -> Kubectl {
    let k = cp.user(name, None).unwrap();
    grant_edit(cp.kubectl(), name, ns);
    k
}

/// Binds the built-in `edit` role to `user` in `ns` (the RoleBinding
/// `<user>-edit`, which [`revoke`] deletes) and waits until RBAC applies it.
pub fn grant_edit(admin: &Kubectl, user: &str, ns: &str) {
    admin.ok(&[
        "create",
        "rolebinding",
        &format!("{user}-edit"),
        "--clusterrole=edit",
        &format!("--user={user}"),
        "-n",
        ns,
    ]);
    wait_may_create_transfers(admin, user, ns);
}

/// Waits until `user` may create NamespaceTransfers in `ns`: RBAC applies a
/// new binding a moment after it is written.
pub fn wait_may_create_transfers(admin: &Kubectl, user: &str, ns: &str) {
    eventually("the role to apply", Duration::from_secs(60), || {
        admin
            .run(&[
                "auth",
                "can-i",
                "create",
                "namespacetransfers.storage.transfer.k8s.io",
                "-n",
                ns,
                &format!("--as={user}"),
            ])
            .success
    });
}

/// Takes back what [`editor`] granted.
pub fn revoke(admin: &Kubectl, ns: &str, user: &str) {
    admin.ok(&["delete", "rolebinding", &format!("{user}-edit"), "-n", ns]);
}

/// The user name a per-user kubectl authenticates as.
pub fn whoami(k: &Kubectl) -> String {
    k.ok(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ])
    .trim()
    .to_owned()
}

/// A name unique to this process and call.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id() % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A claim of the destination's own that names the populating request
/// `request` in `dataSourceRef` (DESIGN §2.3), as a StatefulSet or a chart
/// writes it.
pub fn populated_claim_yaml(
    namespace: &str,
    name: &str,
    request: &str,
    class: &str,
    mode: &str,
    size: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  accessModes: [{mode}]\n  storageClassName: {class}\n  dataSourceRef:\n    apiGroup: storage.transfer.k8s.io\n    kind: NamespaceTransfer\n    name: {request}\n  resources:\n    requests:\n      storage: {size}\n"
    )
}

/// The destination side's consent as a volume populator: receive
/// `source/claim` into the claims of `namespace` that name `name`.
pub fn populating_request(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    source: &str,
    claim: &str,
) -> String {
    let populate = "  destination:\n    populate: true\n";
    request_with(k, namespace, name, source, claim, populate)
}

/// A standing populating Clone request `namespace/name` for clones of
/// `source/claim`: every claim naming it gets a clone of its own.
pub fn populating_clone_request(
    k: &Kubectl,
    namespace: &str,
    name: &str,
    source: &str,
    claim: &str,
) -> String {
    let populate = "  mode: Clone\n  destination:\n    populate: true\n";
    request_with(k, namespace, name, source, claim, populate)
}

/// A standing clone offer `source/name` of `claim` to `destination`, at
/// most `max` alive.
pub fn standing_offer(
    k: &Kubectl,
    source: &str,
    name: &str,
    claim: &str,
    destination: &str,
    max: u32,
) -> String {
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {source}\nspec:\n  mode: Clone\n  maxClones: {max}\n  source:\n    name: {claim}\n  destination:\n    namespace: {destination}\n"
    ))
    .unwrap_or_else(|e| panic!("standing offer {source}/{name}: {e}"))
}
