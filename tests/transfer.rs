//! NamespaceTransfer end to end (DESIGN §2.1): two namespaces consent, our
//! controller rebinds a volume that the CSI stack provisioned under reclaim
//! policy Delete, and the real kube-controller-manager binds the destination
//! claim. Consent, RBAC at the moment of action, the preconditions, rollback,
//! cancellation, TTL and deadline. Every test checks with the CSI driver's
//! own call log that the volume was never deleted.
//!
//! The mock driver holds no data; its wrapper (hack/csi/mock-driver) lifts
//! the mock's 1 TiB ceiling, so the 1 TiB move is a CSI volume too.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::{Duration, Instant};

use sta_testenv::scenario;
use sta_testenv::scenario::*;
use sta_testenv::{shared, ControlPlane, Kubectl, Namespace};

const WAIT: Duration = Duration::from_secs(60);

fn cp() -> &'static ControlPlane {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    static CLASSES: std::sync::Once = std::sync::Once::new();
    CLASSES.call_once(|| ensure_classes(cp.kubectl()));
    cp
}

fn admin() -> &'static Kubectl {
    cp().kubectl()
}

/// A source and a destination namespace with a bound claim `db` in the source.
struct Setup {
    src: Namespace,
    dst: Namespace,
    pv: String,
    pv_uid: String,
    claim_uid: String,
    /// The CSI volume id, which a `DeleteVolume` would name.
    handle: String,
}

fn setup(capacity: &str, class: &str) -> Setup {
    let src = cp().namespace("src").unwrap();
    let dst = cp().namespace("dst").unwrap();
    let v = provisioned_volume(admin(), class, &src.name, "db", capacity);
    Setup {
        src,
        dst,
        pv: v.pv,
        pv_uid: v.pv_uid,
        claim_uid: v.claim_uid,
        handle: v.handle,
    }
}

impl Setup {
    fn consent(&self) {
        offer(admin(), &self.src.name, "give", "db", &self.dst.name);
        request(admin(), &self.dst.name, "take", &self.src.name, "db");
    }

    /// The source claim and its volume are exactly as before the transfer,
    /// once a rollback has run: a pair records Failed or Cancelled first and
    /// then undoes its lock and the volume's marks, so those may outlive the
    /// phase by a reconcile or two.
    #[track_caller]
    fn assert_source_untouched(&self) {
        eventually("the rollback to take its marks off", WAIT, || {
            let locked = claim_json(admin(), &self.src.name, "db").is_some_and(|c| {
                c["metadata"]["annotations"]
                    .get("storage.transfer.k8s.io/transfer")
                    .is_some()
            });
            let marked = volume_json(admin(), &self.pv).is_some_and(|v| {
                v["metadata"]["annotations"]
                    .get("storage.transfer.k8s.io/original-reclaim-policy")
                    .is_some()
            });
            !locked && !marked
        });
        let claim = claim_json(admin(), &self.src.name, "db").expect("the source claim exists");
        assert_eq!(claim["metadata"]["uid"], self.claim_uid.as_str());
        assert_eq!(claim["status"]["phase"], "Bound");
        assert!(
            claim["metadata"]["annotations"]
                .get("storage.transfer.k8s.io/transfer")
                .is_none(),
            "the lock is gone: {}",
            claim["metadata"]["annotations"]
        );
        let volume = volume_json(admin(), &self.pv).expect("the PV exists");
        assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(volume["spec"]["claimRef"]["uid"], self.claim_uid.as_str());
        assert!(volume["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/original-reclaim-policy")
            .is_none());
        self.assert_never_deleted_by_driver();
    }

    #[track_caller]
    fn assert_never_deleted_by_driver(&self) {
        cp().csi.assert_never_deleted(&self.handle);
    }

    /// The volume is bound to `dest_ns/claim` (see [`assert_moved`]), and the
    /// driver never deleted it.
    #[track_caller]
    fn assert_moved_to(&self, dest_ns: &str, claim: &str) {
        assert_moved(
            admin(),
            &self.pv,
            &self.pv_uid,
            &self.src.name,
            dest_ns,
            claim,
        );
        self.assert_never_deleted_by_driver();
    }
}

/// The CSI external-provisioner's finalizer on the volumes it would delete.
const PROVISIONER_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";

fn volume_finalizers(pv: &str) -> Vec<String> {
    volume_json(admin(), pv)
        .and_then(|v| serde_json::from_value(v["metadata"]["finalizers"].clone()).ok())
        .unwrap_or_default()
}

/// The writes kube-apiserver's audit log records to volume `pv` by the
/// CSI external-provisioner.
fn provisioner_writes_to(pv: &str) -> usize {
    let log = std::fs::read_to_string(cp().apiserver_audit_log()).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["objectRef"]["resource"] == "persistentvolumes"
                && e["objectRef"]["name"] == pv
                && ["patch", "update"].contains(&e["verb"].as_str().unwrap_or_default())
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("csi-provisioner"))
        })
        .count()
}

/// The writes that would make claim `namespace/name` Lost, by a client
/// whose User-Agent starts with `agent`, as kube-apiserver's audit log
/// records them (a claim's `/status` writes are audited at Request): each
/// one's response code and the status it sent.
fn lost_writes_to_claim(namespace: &str, name: &str, agent: &str) -> Vec<(i64, serde_json::Value)> {
    let log = std::fs::read_to_string(cp().apiserver_audit_log()).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["objectRef"]["resource"] == "persistentvolumeclaims"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["namespace"] == namespace
                && e["objectRef"]["name"] == name
                && e["requestObject"]["status"]["phase"] == "Lost"
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(agent))
        })
        .filter_map(|e| {
            let code = e["responseStatus"]["code"].as_i64()?;
            Some((code, e["requestObject"]["status"].clone()))
        })
        .collect()
}

/// Moves one volume and returns the time from the second consent to the
/// destination claim being Bound.
fn move_volume(capacity: &str, class: &str) -> Duration {
    let s = setup(capacity, class);
    let recorder = VolumeRecorder::start(admin(), &s.pv);
    // The external-provisioner keeps its finalizer on the volumes it would
    // delete; once it is there, the provisioner has nothing more to write.
    eventually("the provisioner's finalizer on the volume", WAIT, || {
        volume_finalizers(&s.pv).contains(&PROVISIONER_FINALIZER.to_owned())
    });
    let provisioner_writes = provisioner_writes_to(&s.pv);
    offer(admin(), &s.src.name, "give", "db", &s.dst.name);
    let second_consent = Instant::now();
    request(admin(), &s.dst.name, "take", &s.src.name, "db");
    eventually("the destination claim to be Bound", WAIT, || {
        claim_json(admin(), &s.dst.name, "db").is_some_and(|c| c["status"]["phase"] == "Bound")
    });
    let latency = second_consent.elapsed();
    let give = wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    let take = wait_phase(admin(), &s.dst.name, "take", "Completed", WAIT);
    s.assert_moved_to(&s.dst.name, "db");
    assert_eq!(give["status"]["volumeName"], s.pv.as_str());
    assert_eq!(take["status"]["volumeName"], s.pv.as_str());
    assert_eq!(take["status"]["peer"]["namespace"], s.src.name.as_str());
    assert_eq!(give["status"]["peer"]["name"], "take");
    // Both sides show the six steps, once each, in order and in time.
    for t in [&give, &take] {
        let steps = t["status"]["steps"].as_array().unwrap();
        let names: Vec<_> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "Locked",
                "Retained",
                "Created",
                "Committed",
                "Released",
                "Settled"
            ],
            "{t}"
        );
        let times: Vec<_> = steps.iter().map(|s| s["time"].as_str().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    }
    eventually("the finalizers to be released", WAIT, || {
        [(&s.src.name, "give"), (&s.dst.name, "take")]
            .iter()
            .all(|(ns, name)| {
                transfer_json(admin(), ns, name)
                    .is_some_and(|t| t["metadata"]["finalizers"].is_null())
            })
    });
    let dest = claim_json(admin(), &s.dst.name, "db").unwrap();
    assert_eq!(
        dest["metadata"]["annotations"]["storage.transfer.k8s.io/transferred-from"],
        format!("{}/db", s.src.name)
    );
    assert!(dest["metadata"]["ownerReferences"].is_null());
    // The controller wrote the destination claim's status as kube-
    // controller-manager's binder would, and made the source claim Lost
    // before deleting it: the binder added bind-completed and nothing else.
    let pv = volume_json(admin(), &s.pv).unwrap();
    assert_eq!(
        dest["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    assert_eq!(
        dest["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    assert_eq!(dest["status"]["accessModes"], pv["spec"]["accessModes"]);
    assert_eq!(
        dest["status"]["capacity"]["storage"],
        pv["spec"]["capacity"]["storage"]
    );
    let binder_status = dest["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["manager"] == "kube-controller-manager")
        .find(|m| m["subresource"] == "status");
    assert!(
        binder_status.is_none(),
        "the binder wrote the destination claim's status: {binder_status:?}"
    );
    // The commit's plan made the source claim Lost right after the binding,
    // on `/status` at the version it decided on. The binder's periodic
    // resync can fall in the moment between the commit and that write:
    // then the binder makes the claim Lost first (its `ClaimMisbound`) and
    // ours is refused as a conflict. (A binder whose copy of the volume
    // lags may also write it Bound again, and R5 makes it Lost once more.)
    // So ours were made, and were accepted or refused as a conflict only;
    // one was accepted, or the binder's was; and each of ours that was
    // accepted cleared what the binder clears.
    let ours = lost_writes_to_claim(&s.src.name, "db", "storage-transfer-apiserver/");
    let binders = lost_writes_to_claim(&s.src.name, "db", "kube-controller-manager/");
    let accepted = |writes: &[(i64, serde_json::Value)]| {
        writes.iter().filter(|(code, _)| *code == 200).count()
    };
    assert!(!ours.is_empty(), "we never made the source claim Lost");
    assert!(
        ours.iter().all(|(code, _)| [200, 409].contains(code)),
        "{ours:?}"
    );
    assert!(
        accepted(&ours) > 0 || accepted(&binders) > 0,
        "neither we nor the binder made it Lost: ours {ours:?}, the binder's {binders:?}"
    );
    for (_, status) in ours.iter().filter(|(code, _)| *code == 200) {
        for cleared in [
            "accessModes",
            "capacity",
            "currentVolumeAttributesClassName",
        ] {
            assert_eq!(
                status.get(cleared),
                Some(&serde_json::Value::Null),
                "{cleared} in {status}"
            );
        }
    }
    // R2 took the provisioner's finalizer off with Retain and R6 put it
    // back with Delete, as the provisioner would have, in two writes of
    // its own: it made none.
    assert!(
        volume_finalizers(&s.pv).contains(&PROVISIONER_FINALIZER.to_owned()),
        "{:?}",
        volume_finalizers(&s.pv)
    );
    assert!(pv["metadata"]["annotations"]
        .get("storage.transfer.k8s.io/provisioner-finalizer")
        .is_none());
    assert_eq!(
        provisioner_writes_to(&s.pv),
        provisioner_writes,
        "the provisioner wrote the volume during the transfer"
    );
    let dest_uid = dest["metadata"]["uid"].as_str().unwrap().to_owned();
    recorder.assert_never_lost(&[&s.claim_uid, &dest_uid]);
    let metrics = cp().direct().ok(&["get", "--raw", "/metrics"]);
    assert!(metrics.contains("storage_transfer_leader 1"), "{metrics}");
    let completed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("storage_transfer_namespace_transfers{phase=\"Completed\"} "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_default();
    assert!(
        completed >= 2,
        "both sides of this transfer count: {metrics}"
    );
    let events = events_when(
        admin(),
        &s.src.name,
        "NamespaceTransfer",
        "give",
        |events| events.iter().any(|e| e.starts_with("Completed")),
    );
    assert!(
        events.iter().any(|e| e.starts_with("Completed")),
        "a Completed event: {events:?}"
    );
    // The moved volume is intact and the destination's own: deleting its new
    // claim reclaims it, once.
    assert_deleting_the_claim_deletes_the_volume_once(
        admin(),
        &cp().csi,
        &s.dst.name,
        "db",
        &s.handle,
    );
    latency
}

#[test]
fn a_1gib_and_a_1tib_volume_each_move_to_another_namespace_keeping_their_pv() {
    let small = move_volume("1Gi", ALLOWED_CLASS);
    let large = move_volume("1Ti", ALLOWED_CLASS);
    println!("transfer latency, second consent to destination Bound: 1Gi {small:?}, 1Ti {large:?}");
}

#[test]
fn an_offer_alone_does_nothing() {
    let s = setup("1Gi", ALLOWED_CLASS);
    offer(admin(), &s.src.name, "give", "db", &s.dst.name);
    wait_phase(admin(), &s.src.name, "give", "WaitingForPeer", WAIT);
    consistently("the offer waits", Duration::from_secs(3), || {
        phase(admin(), &s.src.name, "give") == "WaitingForPeer"
    });
    s.assert_source_untouched();
}

#[test]
fn a_request_alone_does_nothing() {
    let s = setup("1Gi", ALLOWED_CLASS);
    request(admin(), &s.dst.name, "take", &s.src.name, "db");
    wait_phase(admin(), &s.dst.name, "take", "WaitingForPeer", WAIT);
    consistently("the request waits", Duration::from_secs(3), || {
        phase(admin(), &s.dst.name, "take") == "WaitingForPeer"
    });
    s.assert_source_untouched();
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
}

#[test]
fn an_offer_to_one_namespace_is_not_taken_by_another() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let qa = cp().namespace("qa").unwrap();
    offer(admin(), &s.src.name, "give", "db", &s.dst.name);
    request(admin(), &qa.name, "take", &s.src.name, "db");
    wait_phase(admin(), &qa.name, "take", "WaitingForPeer", WAIT);
    consistently("neither side moves", Duration::from_secs(3), || {
        phase(admin(), &s.src.name, "give") == "WaitingForPeer"
            && phase(admin(), &qa.name, "take") == "WaitingForPeer"
    });
    s.assert_source_untouched();
    assert!(claim_json(admin(), &qa.name, "db").is_none());
}

#[test]
fn of_two_requests_for_one_offer_exactly_one_completes_and_the_other_reports_peer_taken() {
    let s = setup("1Gi", ALLOWED_CLASS);
    request(admin(), &s.dst.name, "first", &s.src.name, "db");
    std::thread::sleep(Duration::from_millis(1100));
    // The same claim name is taken by `first`'s index; the second request
    // asks for the claim under another name.
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: second\n  namespace: {}\nspec:\n  source:\n    namespace: {}\n    name: db\n  destination:\n    name: db-copy\n",
            s.dst.name, s.src.name
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    offer(admin(), &s.src.name, "give", "db", &s.dst.name);
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    let first = wait_phase(admin(), &s.dst.name, "first", "Completed", WAIT);
    assert_eq!(first["status"]["peer"]["name"], "give");
    let second = transfer_json(admin(), &s.dst.name, "second").unwrap();
    assert_ne!(second["status"]["phase"], "Completed");
    eventually("the second request to report PeerTaken", WAIT, || {
        transfer_json(admin(), &s.dst.name, "second")
            .is_some_and(|t| t["status"]["reason"] == "PeerTaken")
    });
    assert!(claim_json(admin(), &s.dst.name, "db-copy").is_none());
}

fn editor(name: &str, ns: &str) -> Kubectl {
    scenario::editor(cp(), name, ns)
}

fn revoke(ns: &str, user: &str) {
    scenario::revoke(admin(), ns, user);
}

#[test]
fn revoking_the_senders_right_to_delete_the_claim_after_the_offer_fails_with_forbidden() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let alice = editor(&unique("alice"), &s.src.name);
    let bob = editor(&unique("bob"), &s.dst.name);
    // Hold the pair before R2 with a running pod, revoke, then let it go.
    running_pod(admin(), &s.src.name, "app", "db");
    offer(&alice, &s.src.name, "give", "db", &s.dst.name);
    request(&bob, &s.dst.name, "take", &s.src.name, "db");
    wait_phase(admin(), &s.src.name, "give", "WaitingForRelease", WAIT);
    let alice_name = whoami(&alice);
    revoke(&s.src.name, &alice_name);
    std::thread::sleep(Duration::from_secs(1));
    set_pod_phase(admin(), &s.src.name, "app", "Succeeded");
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "Forbidden");
    let message = give["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("delete persistentvolumeclaims \"db\"") && message.contains(&alice_name),
        "{message}"
    );
    let take = wait_phase(admin(), &s.dst.name, "take", "Failed", WAIT);
    assert_eq!(take["status"]["reason"], "Forbidden");
    s.assert_source_untouched();
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
}

#[test]
fn revoking_the_receivers_right_to_create_claims_after_the_request_fails_with_forbidden() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let alice = editor(&unique("alice"), &s.src.name);
    let bob = editor(&unique("bob"), &s.dst.name);
    running_pod(admin(), &s.src.name, "app", "db");
    offer(&alice, &s.src.name, "give", "db", &s.dst.name);
    request(&bob, &s.dst.name, "take", &s.src.name, "db");
    wait_phase(admin(), &s.dst.name, "take", "WaitingForRelease", WAIT);
    let bob_name = whoami(&bob);
    revoke(&s.dst.name, &bob_name);
    std::thread::sleep(Duration::from_secs(1));
    set_pod_phase(admin(), &s.src.name, "app", "Succeeded");
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "Forbidden");
    let message = give["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("create persistentvolumeclaims") && message.contains(&bob_name),
        "{message}"
    );
    s.assert_source_untouched();
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
}

#[test]
fn a_user_who_may_create_transfers_but_not_delete_the_claim_gets_403_at_create() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let name = unique("carol");
    let carol = cp().user(&name, None).unwrap();
    admin().ok(&[
        "create",
        "rolebinding",
        &format!("{name}-transfers"),
        "--clusterrole=storage-transfer-edit",
        &format!("--user={name}"),
        "-n",
        &s.src.name,
    ]);
    let yaml = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  source:\n    name: db\n  destination:\n    namespace: {}\n",
        s.src.name, s.dst.name
    );
    let mut refusal = String::new();
    eventually("a 403 naming the missing right", WAIT, || {
        let run = carol.run_with_stdin(&["create", "-f", "-"], Some(&yaml));
        refusal = run.stderr;
        !run.success
            && refusal.contains("Forbidden")
            && refusal.contains("cannot delete persistentvolumeclaims")
    });
    assert!(transfer_json(admin(), &s.src.name, "give").is_none());
    s.assert_source_untouched();
}

#[test]
fn a_running_pod_holds_the_transfer_in_waiting_for_release_until_it_succeeds_checked_at_the_fences_revision(
) {
    let s = setup("1Gi", ALLOWED_CLASS);
    running_pod(admin(), &s.src.name, "app", "db");
    s.consent();
    eventually("the transfer to wait for the pod", WAIT, || {
        transfer_json(admin(), &s.src.name, "give").is_some_and(|t| {
            t["status"]["phase"] == "WaitingForRelease" && t["status"]["reason"] == "SourceInUse"
        })
    });
    consistently("the transfer waits", Duration::from_secs(3), || {
        phase(admin(), &s.src.name, "give") == "WaitingForRelease"
    });
    s.assert_source_untouched();
    let in_use = |events: &[String]| {
        events
            .iter()
            .any(|e| e.starts_with("SourceInUse") && e.contains("app"))
    };
    let events = events_when(admin(), &s.src.name, "PersistentVolumeClaim", "db", in_use);
    assert!(in_use(&events), "{events:?}");
    set_pod_phase(admin(), &s.src.name, "app", "Succeeded");
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    delete_pod(admin(), &s.src.name, "app");
    s.assert_moved_to(&s.dst.name, "db");

    // The checks listed pods at the fence's revision: the shipped fence pod
    // and its Role let the server write it.
    let stamp = admin().ok(&[
        "get",
        "pod",
        "storage-transfer-fence",
        "-n",
        "storage-transfer-system",
        "-o",
        "jsonpath={.metadata.annotations.storage\\.transfer\\.k8s\\.io/fence}",
    ]);
    assert!(!stamp.trim().is_empty(), "the fence was never written");
    let log = std::fs::read_to_string(cp().server_log()).unwrap_or_default();
    assert!(
        !log.contains("the pod fence cannot be written"),
        "the server fell back to consistent LISTs"
    );
}

#[test]
fn a_storage_class_without_the_annotation_fails_the_transfer_and_touches_nothing() {
    let s = setup("1Gi", PLAIN_CLASS);
    s.consent();
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "StorageClassNotAllowed");
    assert!(give["status"]["message"]
        .as_str()
        .unwrap()
        .contains("storage.transfer.k8s.io/allow-namespace-transfer"));
    wait_phase(admin(), &s.dst.name, "take", "Failed", WAIT);
    s.assert_source_untouched();
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
}

#[test]
fn an_existing_destination_claim_gives_destination_exists_and_both_claims_are_unchanged() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: db\n  namespace: {}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: unrelated\n  resources:\n    requests:\n      storage: 5Gi\n",
            s.dst.name
        ))
        .unwrap();
    let before = claim_json(admin(), &s.dst.name, "db").unwrap();
    s.consent();
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "DestinationExists");
    let after = claim_json(admin(), &s.dst.name, "db").unwrap();
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after["metadata"]["resourceVersion"]
    );
    s.assert_source_untouched();
}

#[test]
fn a_quota_too_small_in_the_destination_refuses_r3_and_the_rollback_restores_the_source() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: tiny\n  namespace: {}\nspec:\n  hard:\n    requests.storage: 100Mi\n",
            s.dst.name
        ))
        .unwrap();
    eventually("the quota to be counted", WAIT, || {
        admin()
            .ok(&[
                "get",
                "resourcequota",
                "tiny",
                "-n",
                &s.dst.name,
                "-o",
                "jsonpath={.status.hard}",
            ])
            .contains("requests.storage")
    });
    let claim_before = claim_json(admin(), &s.src.name, "db").unwrap();
    s.consent();
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "DestinationRefused");
    let message = give["status"]["message"].as_str().unwrap();
    assert!(message.contains("exceeded quota"), "{message}");
    eventually("the finalizers to be released", WAIT, || {
        transfer_json(admin(), &s.src.name, "give")
            .is_some_and(|t| t["metadata"]["finalizers"].is_null())
    });
    s.assert_source_untouched();
    let claim_after = claim_json(admin(), &s.src.name, "db").unwrap();
    assert_eq!(claim_before["spec"], claim_after["spec"]);
    assert_eq!(
        claim_before["metadata"]["annotations"],
        claim_after["metadata"]["annotations"]
    );
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
}

#[test]
fn deleting_either_side_before_the_volume_is_touched_cancels_the_peer() {
    for delete_source in [true, false] {
        let s = setup("1Gi", ALLOWED_CLASS);
        running_pod(admin(), &s.src.name, "app", "db");
        s.consent();
        wait_phase(admin(), &s.dst.name, "take", "WaitingForRelease", WAIT);
        let (gone, peer) = if delete_source {
            ((&s.src.name, "give"), (&s.dst.name, "take"))
        } else {
            ((&s.dst.name, "take"), (&s.src.name, "give"))
        };
        admin().ok(&[
            "delete",
            "namespacetransfer",
            gone.1,
            "-n",
            gone.0,
            "--wait=false",
        ]);
        let t = wait_phase(admin(), peer.0, peer.1, "Cancelled", WAIT);
        assert_eq!(t["status"]["reason"], "Deleted", "{}", t["status"]);
        eventually("the deleted side to be gone", WAIT, || {
            transfer_json(admin(), gone.0, gone.1).is_none()
        });
        s.assert_source_untouched();
    }
}

#[test]
fn a_rename_within_one_namespace_is_its_own_peer() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: rename\n  namespace: {}\nspec:\n  source:\n    name: db\n  destination:\n    name: db-renamed\n",
            s.src.name
        ))
        .unwrap();
    let t = wait_phase(admin(), &s.src.name, "rename", "Completed", WAIT);
    assert_eq!(t["status"]["role"], "Both");
    s.assert_moved_to(&s.src.name, "db-renamed");
}

#[test]
fn a_finished_transfer_is_deleted_after_its_ttl() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  source:\n    name: db\n  destination:\n    namespace: {}\n  ttlSecondsAfterFinished: 2\n",
            s.src.name, s.dst.name
        ))
        .unwrap();
    request(admin(), &s.dst.name, "take", &s.src.name, "db");
    wait_phase(admin(), &s.dst.name, "take", "Completed", WAIT);
    eventually("the transfer with a TTL to be deleted", WAIT, || {
        transfer_json(admin(), &s.src.name, "give").is_none()
    });
    assert!(
        transfer_json(admin(), &s.dst.name, "take").is_some(),
        "no TTL, kept"
    );
}

#[test]
fn an_unmatched_transfer_fails_when_its_active_deadline_passes() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  source:\n    name: db\n  destination:\n    namespace: {}\n  activeDeadlineSeconds: 2\n",
            s.src.name, s.dst.name
        ))
        .unwrap();
    let t = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(t["status"]["reason"], "DeadlineExceeded");
    s.assert_source_untouched();
}

fn clone_consent(s: &Setup) {
    scenario::clone_consent(admin(), &s.src.name, "db", &s.dst.name);
}

fn clone_name(s: &Setup) -> String {
    clone_claim_name(admin(), &s.src.name, &s.dst.name)
}

#[test]
fn a_clone_moves_to_the_destination_while_the_source_keeps_its_volume_and_its_pod() {
    let s = setup("1Gi", ALLOWED_CLASS);
    running_pod(admin(), &s.src.name, "app", "db");
    clone_consent(&s);
    let take = wait_phase(admin(), &s.dst.name, "take", "Completed", WAIT);
    let give = wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    // The destination holds a new volume, made by the driver as a clone of
    // the source's.
    let dest = claim_json(admin(), &s.dst.name, "db").expect("the destination claim");
    assert_eq!(dest["status"]["phase"], "Bound");
    let pv = dest["spec"]["volumeName"].as_str().unwrap().to_owned();
    assert_ne!(pv, s.pv, "a clone, not the source's own volume");
    assert_eq!(take["status"]["volumeName"], pv.as_str());
    assert_eq!(give["status"]["volumeName"], pv.as_str());
    let volume = volume_json(admin(), &pv).unwrap();
    assert_eq!(volume["spec"]["claimRef"]["namespace"], s.dst.name.as_str());
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    let handle = volume["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap()
        .to_owned();
    let created = cp()
        .csi
        .creation_of(&handle)
        .expect("the driver made the clone");
    let content = &created.request["volume_content_source"];
    assert_eq!(
        content["Type"]["Volume"]["volume_id"],
        s.handle.as_str(),
        "CreateVolume of the clone names the source volume as its content: {content}"
    );
    // The source claim, its volume and its pod are untouched, and the clone
    // claim is gone from the source namespace.
    s.assert_source_untouched();
    let clone = clone_name(&s);
    eventually(
        "the clone claim to leave the source namespace",
        WAIT,
        || claim_json(admin(), &s.src.name, &clone).is_none(),
    );
    // The destination's claim names what it asked for, not the clone.
    assert_eq!(
        dest["metadata"]["annotations"]["storage.transfer.k8s.io/transferred-from"],
        format!("{}/db", s.src.name)
    );
    let metrics = cp().direct().ok(&["get", "--raw", "/metrics"]);
    let completed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("storage_transfer_clones{phase=\"Completed\"} "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_default();
    assert!(completed >= 1, "the clone counts as Completed: {metrics}");
    let cloned = |events: &[String]| events.iter().any(|e| e.starts_with("CloneCreated"));
    let events = events_when(admin(), &s.src.name, "NamespaceTransfer", "give", cloned);
    assert!(
        cloned(&events),
        "a CloneCreated event on the offer: {events:?}"
    );
    let cloned = |events: &[String]| events.iter().any(|e| e.starts_with("CloneCreated"));
    let events = events_when(admin(), &s.dst.name, "NamespaceTransfer", "take", cloned);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("CloneCreated") && !e.contains("give")),
        "a CloneCreated event on the request, naming nothing of the offer: {events:?}"
    );
    let table = admin().ok(&["get", "nst", "-n", &s.dst.name]);
    assert!(
        table.contains("Clone"),
        "kubectl get nst shows the mode: {table}"
    );
    // The clone is the destination's own: deleting its claim deletes it.
    assert_deleting_the_claim_deletes_the_volume_once(
        admin(),
        &cp().csi,
        &s.dst.name,
        "db",
        &handle,
    );
    s.assert_source_untouched();
}

#[test]
fn a_clone_the_driver_cannot_make_fails_as_clone_failed_and_leaves_nothing_behind() {
    let s = setup("1Gi", CLONE_FAILS_CLASS);
    clone_consent(&s);
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "CloneFailed");
    let message = give["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(CLONE_REFUSAL),
        "the provisioner's message: {message}"
    );
    let take = wait_phase(admin(), &s.dst.name, "take", "Failed", WAIT);
    assert_eq!(take["status"]["reason"], "CloneFailed");
    assert!(
        !take["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&s.src.name),
        "the destination learns nothing of the source: {}",
        take["status"]["message"]
    );
    let clone = clone_name(&s);
    eventually("the clone claim to be deleted", WAIT, || {
        claim_json(admin(), &s.src.name, &clone).is_none()
    });
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
    let clones = clones_of(&cp().csi, &s.handle);
    assert!(clones.is_empty(), "no clone was made: {clones:?}");
    s.assert_source_untouched();
}

#[test]
fn a_clone_offer_by_a_user_who_may_read_the_claim_but_not_create_one_beside_it_gets_403() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let name = unique("dave");
    let dave = cp().user(&name, None).unwrap();
    for args in [
        vec![
            "create".to_owned(),
            "rolebinding".to_owned(),
            format!("{name}-transfers"),
            "--clusterrole=storage-transfer-edit".to_owned(),
            format!("--user={name}"),
        ],
        vec![
            "create".to_owned(),
            "role".to_owned(),
            format!("{name}-claim-reader"),
            "--verb=get".to_owned(),
            "--resource=persistentvolumeclaims".to_owned(),
        ],
        vec![
            "create".to_owned(),
            "rolebinding".to_owned(),
            format!("{name}-claim-reader"),
            format!("--role={name}-claim-reader"),
            format!("--user={name}"),
        ],
    ] {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend(["-n", &s.src.name]);
        admin().ok(&args);
    }
    let yaml = format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {}\nspec:\n  mode: Clone\n  source:\n    name: db\n  destination:\n    namespace: {}\n",
        s.src.name, s.dst.name
    );
    let mut refusal = String::new();
    eventually("a 403 naming the missing right", WAIT, || {
        let run = dave.run_with_stdin(&["create", "-f", "-"], Some(&yaml));
        refusal = run.stderr;
        !run.success
            && refusal.contains("Forbidden")
            && refusal.contains("cannot create persistentvolumeclaims")
    });
    assert!(
        !refusal.contains("delete"),
        "a clone needs no right to delete the source: {refusal}"
    );
    assert!(transfer_json(admin(), &s.src.name, "give").is_none());
    s.assert_source_untouched();
}

/// A Clone request in `s.dst` for `s.src/db`, received as `claim`.
fn clone_request(s: &Setup, name: &str, claim: &str) {
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n  mode: Clone\n  source:\n    namespace: {}\n    name: db\n  destination:\n    name: {claim}\n",
            s.dst.name, s.src.name
        ))
        .unwrap();
}

/// The CSI volume id of the volume `namespace/claim` is bound to.
fn handle_of(namespace: &str, claim: &str) -> String {
    let pvc = claim_json(admin(), namespace, claim).unwrap();
    let pv = volume_json(admin(), pvc["spec"]["volumeName"].as_str().unwrap()).unwrap();
    pv["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_standing_offer_clones_for_every_request_up_to_max_clones_and_stops_when_deleted() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: fixtures\n  namespace: {}\nspec:\n  mode: Clone\n  maxClones: 2\n  source:\n    name: db\n  destination:\n    namespace: {}\n",
            s.src.name, s.dst.name
        ))
        .unwrap();
    clone_request(&s, "one", "db-1");
    clone_request(&s, "two", "db-2");
    wait_phase(admin(), &s.dst.name, "one", "Completed", WAIT);
    wait_phase(admin(), &s.dst.name, "two", "Completed", WAIT);
    // The third waits: two clones are alive.
    clone_request(&s, "three", "db-3");
    eventually("the third to wait for capacity", WAIT, || {
        transfer_json(admin(), &s.dst.name, "three")
            .is_some_and(|t| t["status"]["reason"] == "WaitingForCapacity")
    });
    consistently("the third keeps waiting", Duration::from_secs(3), || {
        claim_json(admin(), &s.dst.name, "db-3").is_none()
    });
    let counted = || {
        wait_status(
            admin(),
            &s.src.name,
            "fixtures",
            "count its clones",
            WAIT,
            |t| {
                t["status"]["clones"] == serde_json::json!({"made": 2, "alive": 2})
                    && t["status"]["phase"] == "WaitingForPeer"
                    && t["status"]["reason"] == "Offering"
            },
        )
    };
    counted();
    // The destination deleting its Completed requests frees no slot: their
    // clones are still there.
    for done in ["one", "two"] {
        admin().ok(&["delete", "nst", done, "-n", &s.dst.name]);
    }
    consistently(
        "the third still waits with the requests gone",
        Duration::from_secs(12),
        || claim_json(admin(), &s.dst.name, "db-3").is_none(),
    );
    counted();
    // Releasing one clone destroys exactly it, and makes room for the third.
    let first = handle_of(&s.dst.name, "db-1");
    let second = handle_of(&s.dst.name, "db-2");
    assert_ne!(first, second);
    assert_deleting_the_claim_deletes_the_volume_once(
        admin(),
        &cp().csi,
        &s.dst.name,
        "db-1",
        &first,
    );
    wait_phase(admin(), &s.dst.name, "three", "Completed", WAIT);
    let third = handle_of(&s.dst.name, "db-3");
    assert!(third != first && third != second);
    // Three made, though two of their requests are gone; two alive.
    eventually("the offer to count three made, two alive", WAIT, || {
        transfer_json(admin(), &s.src.name, "fixtures")
            .is_some_and(|t| t["status"]["clones"] == serde_json::json!({"made": 3, "alive": 2}))
    });
    cp().csi.assert_never_deleted(&second);
    let clones = clones_of(&cp().csi, &s.handle);
    assert_eq!(clones.len(), 3, "three clones, each made once: {clones:?}");
    // Deleting the offer stops new clones and leaves the made ones alone.
    admin().ok(&[
        "delete",
        "namespacetransfer",
        "fixtures",
        "-n",
        &s.src.name,
        "--wait=false",
    ]);
    eventually("the offer to be gone", WAIT, || {
        transfer_json(admin(), &s.src.name, "fixtures").is_none()
    });
    clone_request(&s, "four", "db-4");
    consistently(
        "no clone for a request after the offer",
        Duration::from_secs(3),
        || claim_json(admin(), &s.dst.name, "db-4").is_none(),
    );
    assert_eq!(phase(admin(), &s.dst.name, "four"), "WaitingForPeer");
    for claim in ["db-2", "db-3"] {
        let c = claim_json(admin(), &s.dst.name, claim).unwrap();
        assert_eq!(c["status"]["phase"], "Bound", "{claim}");
    }
    cp().csi.assert_never_deleted(&second);
    cp().csi.assert_never_deleted(&third);
    s.assert_source_untouched();
}

/// A ResourceQuota `tiny` in `namespace` with `hard`, once counted.
fn quota(namespace: &str, hard: &str) {
    scenario::quota(admin(), namespace, hard, WAIT);
}

#[test]
fn a_clone_the_source_namespaces_quota_refuses_fails_with_its_message_before_anything_is_made() {
    let s = setup("1Gi", ALLOWED_CLASS);
    // `db` already uses the one claim the quota allows.
    quota(&s.src.name, "{persistentvolumeclaims: \"1\"}");
    clone_consent(&s);
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "CloneFailed");
    let message = give["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exceeded quota"), "{message}");
    assert!(claim_json(admin(), &s.src.name, &clone_name(&s)).is_none());
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
    assert!(clones_of(&cp().csi, &s.handle).is_empty());
    s.assert_source_untouched();
}

#[test]
fn a_clone_the_destination_namespaces_quota_refuses_is_deleted_and_its_volume_with_it() {
    let s = setup("1Gi", ALLOWED_CLASS);
    quota(
        &s.dst.name,
        "{persistentvolumeclaims: \"5\", requests.storage: 100Mi}",
    );
    clone_consent(&s);
    let give = wait_phase(admin(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "DestinationRefused");
    let message = give["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exceeded quota"), "{message}");
    // The clone was made, found refused before it was touched, and deleted:
    // the driver deletes its volume once.
    let clones = clones_of(&cp().csi, &s.handle);
    assert_eq!(clones.len(), 1, "{clones:?}");
    let clone_volume = clones[0].volume_id().unwrap().to_owned();
    eventually("the clone claim to be deleted", WAIT, || {
        claim_json(admin(), &s.src.name, &clone_name(&s)).is_none()
    });
    cp().csi.assert_deleted_once(&clone_volume, WAIT);
    assert!(claim_json(admin(), &s.dst.name, "db").is_none());
    s.assert_source_untouched();
}

/// The one-active-transfer index keys in etcd that name one of `namespaces`,
/// as `key = holder`.
fn index_keys_naming(namespaces: &[&str]) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut etcd = etcd_client::Client::connect([cp().etcd_url.as_str()], None)
            .await
            .unwrap();
        let entries = etcd
            .get(
                "/registry/storage.transfer.k8s.io/_index/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        entries
            .kvs()
            .iter()
            .map(|kv| {
                format!(
                    "{} = {}",
                    kv.key_str().unwrap(),
                    kv.value_str().unwrap_or_default()
                )
            })
            .filter(|entry| {
                namespaces
                    .iter()
                    .any(|ns| entry.contains(&format!("/{ns}/")))
            })
            .collect()
    })
}

#[test]
fn a_completed_transfer_and_its_deletion_leave_no_index_key_in_etcd() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let namespaces = [s.src.name.as_str(), s.dst.name.as_str()];
    offer(admin(), &s.src.name, "give", "db", &s.dst.name);
    let held = index_keys_naming(&namespaces);
    assert_eq!(held.len(), 1, "the offer holds its source claim: {held:?}");
    request(admin(), &s.dst.name, "take", &s.src.name, "db");
    wait_phase(admin(), &s.src.name, "give", "Completed", WAIT);
    wait_phase(admin(), &s.dst.name, "take", "Completed", WAIT);
    assert_eq!(
        index_keys_naming(&namespaces),
        Vec::<String>::new(),
        "a finished transfer gives its index keys up"
    );
    for (ns, name) in [(&s.src.name, "give"), (&s.dst.name, "take")] {
        admin().ok(&["delete", "namespacetransfer", name, "-n", ns]);
    }
    eventually("both transfers to be gone", WAIT, || {
        transfer_json(admin(), &s.src.name, "give").is_none()
            && transfer_json(admin(), &s.dst.name, "take").is_none()
    });
    assert_eq!(index_keys_naming(&namespaces), Vec::<String>::new());
    s.assert_moved_to(&s.dst.name, "db");
}

#[test]
fn a_clone_nobody_provisions_fails_after_the_clone_timeout_and_is_deleted() {
    // A class whose provisioner nobody runs: the clone waits for it with no
    // ProvisioningFailed Event ever, as a clone of a class nobody serves
    // would, holding the source namespace's quota all the while.
    let class = unique("unserved");
    let src = cp().namespace("src").unwrap();
    let dst = cp().namespace("dst").unwrap();
    let pv = unique("pv-unserved");
    admin()
        .apply(&format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {class}\n  annotations:\n    storage.transfer.k8s.io/allow-namespace-transfer: \"true\"\nprovisioner: unserved.storage-transfer.test\nreclaimPolicy: Delete\nvolumeBindingMode: Immediate\n---\napiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity:\n    storage: 1Gi\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: {class}\n  claimRef:\n    namespace: {ns}\n    name: db\n  hostPath:\n    path: /var/tmp/storage-transfer-tests/{pv}\n    type: DirectoryOrCreate\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: db\n  namespace: {ns}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: {class}\n  volumeName: {pv}\n  resources:\n    requests:\n      storage: 1Gi\n",
            ns = src.name
        ))
        .unwrap();
    wait_bound(admin(), &src.name, "db");
    scenario::clone_consent(admin(), &src.name, "db", &dst.name);
    let give = wait_phase(admin(), &src.name, "give", "Failed", WAIT);
    assert_eq!(
        give["status"]["reason"], "CloneFailed",
        "{}",
        give["status"]
    );
    let message = give["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("was not bound within"), "{message}");
    let take = wait_phase(admin(), &dst.name, "take", "Failed", WAIT);
    assert_eq!(take["status"]["reason"], "CloneFailed");
    eventually("the clone to be deleted", WAIT, || {
        admin()
            .ok(&["get", "pvc", "-n", &src.name, "-o", "name"])
            .trim()
            == "persistentvolumeclaim/db"
    });
    assert!(claim_json(admin(), &dst.name, "db").is_none());
    admin().ok(&["delete", "pv", &pv, "--wait=false"]);
    admin().ok(&["delete", "storageclass", &class, "--wait=false"]);
}

#[test]
fn thirty_requests_against_an_offer_without_max_clones_make_at_most_ten_clones() {
    let s = setup("1Gi", ALLOWED_CLASS);
    admin()
        .apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: fixtures\n  namespace: {}\nspec:\n  mode: Clone\n  source:\n    name: db\n  destination:\n    namespace: {}\n",
            s.src.name, s.dst.name
        ))
        .unwrap();
    let requests: String = (0..30)
        .map(|i| {
            format!(
                "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: r{i}\n  namespace: {}\nspec:\n  mode: Clone\n  source:\n    namespace: {}\n    name: db\n  destination:\n    name: db-{i}\n---\n",
                s.dst.name, s.src.name
            )
        })
        .collect();
    admin().apply(&requests).unwrap();
    // The clones alive: the volumes of the claims beside the source (but
    // `db`'s) and of those handed over, counted once (from R3 to R5 a
    // clone's volume is named by its claim and by the destination claim),
    // and the clones not provisioned yet. Never more than ten at once.
    let claims = || {
        let mut alive = std::collections::HashSet::new();
        for ns in [&s.src.name, &s.dst.name] {
            let list = admin().ok(&[
                "get",
                "pvc",
                "-n",
                ns,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.spec.volumeName}{\"\\n\"}{end}",
            ]);
            for line in list.lines() {
                let (name, volume) = line.split_once(' ').unwrap_or((line, ""));
                if ns == &s.src.name && name == "db" {
                    continue;
                }
                alive.insert(if volume.is_empty() {
                    format!("{ns}/{name}")
                } else {
                    volume.to_owned()
                });
            }
        }
        alive.len()
    };
    let phases = || {
        let list = admin().ok(&[
            "get",
            "nst",
            "-n",
            &s.dst.name,
            "-o",
            "jsonpath={range .items[*]}{.status.phase}/{.status.reason}{\"\\n\"}{end}",
        ]);
        let completed = list.lines().filter(|l| l.starts_with("Completed/")).count();
        let waiting = list
            .lines()
            .filter(|l| l.ends_with("/WaitingForCapacity"))
            .count();
        (completed, waiting)
    };
    // Each request's phase, reason and message, for a failure's message.
    let requests = || {
        admin().ok(&[
            "get",
            "nst",
            "-n",
            &s.dst.name,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.phase}/{.status.reason}: {.status.message}{\"\\n\"}{end}",
        ])
    };
    let deadline = std::time::Instant::now() + WAIT * 3;
    loop {
        let made = claims();
        assert!(made <= 10, "{made} clones exist at once");
        let seen = phases();
        if seen == (10, 20) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {:?} waiting for ten requests to complete and twenty to wait; (completed, waiting) = {seen:?}, {made} clones alive; the requests:\n{}",
            WAIT * 3,
            requests()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    consistently("the twenty keep waiting", Duration::from_secs(5), || {
        claims() == 10 && phases() == (10, 20)
    });
    let offer = transfer_json(admin(), &s.src.name, "fixtures").unwrap();
    assert_eq!(
        offer["status"]["clones"],
        serde_json::json!({"made": 10, "alive": 10})
    );
}

// ----- claims the tenant wrote (DESIGN §2.3) ---------------------------------------

fn uid(v: &serde_json::Value) -> String {
    v["metadata"]["uid"].as_str().unwrap().to_owned()
}

#[test]
fn a_claim_the_tenant_wrote_naming_a_populating_request_receives_the_moved_volume() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let (dst, src) = (&s.dst.name, &s.src.name);
    admin()
        .apply(&populated_claim_yaml(
            dst,
            "data",
            "db-from-src",
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "1Gi",
        ))
        .unwrap();
    let data_uid = uid(&claim_json(admin(), dst, "data").unwrap());
    populating_request(admin(), dst, "db-from-src", src, "db");
    // The provisioner leaves the claim to its populator: nothing is made
    // for it while nobody has offered a volume.
    consistently(
        "the claim to stay Pending with no volume",
        Duration::from_secs(3),
        || {
            claim_json(admin(), dst, "data").is_some_and(|c| {
                c["status"]["phase"] == "Pending" && c["spec"]["volumeName"].is_null()
            })
        },
    );
    offer(admin(), src, "give", "db", dst);
    wait_phase(admin(), src, "give", "Completed", WAIT);
    let take = wait_phase(admin(), dst, "db-from-src", "Completed", WAIT);
    s.assert_moved_to(dst, "data");
    let data = claim_json(admin(), dst, "data").unwrap();
    assert_eq!(
        uid(&data),
        data_uid,
        "the tenant's own claim, not a new one"
    );
    assert_eq!(take["status"]["destinationClaim"]["name"], "data");
    assert_eq!(take["status"]["destinationClaim"]["uid"], data_uid.as_str());
    eventually("our finalizer to leave the claim", WAIT, || {
        claim_json(admin(), dst, "data").is_some_and(|c| {
            !c["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|f| f == "storage.transfer.k8s.io/transfer-protection")
        })
    });
    let adopted = |events: &[String]| {
        events
            .iter()
            .any(|e| e.starts_with("Adopted: NamespaceTransfer"))
    };
    let events = events_when(admin(), dst, "PersistentVolumeClaim", "data", adopted);
    assert!(adopted(&events), "{events:?}");
    assert_deleting_the_claim_deletes_the_volume_once(admin(), &cp().csi, dst, "data", &s.handle);
}

#[test]
fn claims_made_to_grab_a_populating_move_are_told_why_and_only_the_oldest_that_fits_gets_it() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let (dst, src) = (&s.dst.name, &s.src.name);
    let request = "db-from-src";
    // Claims shaped to grab the volume, each refused for one thing.
    let grabs = [
        (
            "grab-class",
            PLAIN_CLASS,
            "ReadWriteOnce",
            "1Gi",
            "storageClassName",
        ),
        (
            "grab-size",
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "5Gi",
            "more than the volume",
        ),
        (
            "grab-rwx",
            ALLOWED_CLASS,
            "ReadWriteMany",
            "1Gi",
            "access mode ReadWriteMany",
        ),
        // Quota counts a claim by its request: one smaller than the
        // source's would hold the volume for less than was charged for it.
        (
            "grab-small",
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "1Mi",
            "less than the 1Gi the volume's claim requests",
        ),
    ];
    for (name, class, mode, size, _) in grabs {
        admin()
            .apply(&populated_claim_yaml(dst, name, request, class, mode, size))
            .unwrap();
    }
    let versions: Vec<String> = grabs
        .iter()
        .map(|(name, ..)| {
            claim_json(admin(), dst, name).unwrap()["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    populating_request(admin(), dst, request, src, "db");
    offer(admin(), src, "give", "db", dst);
    // Only misfits: the pair waits, the source untouched, each claim told why.
    eventually("the request to wait for a claim", WAIT, || {
        transfer_json(admin(), dst, request)
            .is_some_and(|t| t["status"]["reason"] == "WaitingForClaim")
    });
    for (name, .., why) in grabs {
        eventually(&format!("{name} to be told why"), WAIT, || {
            events_about(admin(), dst, "PersistentVolumeClaim", name)
                .iter()
                .any(|e| e.starts_with("ClaimMismatch") && e.contains(why))
        });
    }
    let give = transfer_json(admin(), src, "give").unwrap();
    assert!(
        give["status"]["sourceClaim"].is_null(),
        "R1 not taken: {give}"
    );
    let source = claim_json(admin(), src, "db").unwrap();
    assert!(
        source["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none(),
        "the source is not locked: {source}"
    );
    // Then two claims that fit race for the one volume: the older wins.
    admin()
        .apply(&populated_claim_yaml(
            dst,
            "data",
            request,
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "1Gi",
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    admin()
        .apply(&populated_claim_yaml(
            dst,
            "racer",
            request,
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "1Gi",
        ))
        .unwrap();
    wait_phase(admin(), dst, request, "Completed", WAIT);
    s.assert_moved_to(dst, "data");
    eventually("the racer to be told it lost", WAIT, || {
        events_about(admin(), dst, "PersistentVolumeClaim", "racer")
            .iter()
            .any(|e| e.starts_with("NotAdopted"))
    });
    let racer = claim_json(admin(), dst, "racer").unwrap();
    assert_eq!(racer["status"]["phase"], "Pending");
    assert!(racer["spec"]["volumeName"].is_null(), "{racer}");
    for ((name, ..), before) in grabs.iter().zip(&versions) {
        let claim = claim_json(admin(), dst, name).unwrap();
        assert_eq!(claim["status"]["phase"], "Pending", "{name}");
        assert_eq!(
            claim["metadata"]["resourceVersion"].as_str(),
            Some(before.as_str()),
            "{name} was never written: {claim}"
        );
    }
}

#[test]
fn a_claim_naming_no_request_or_one_that_fills_no_claims_is_told_why_it_waits() {
    let dst = cp().namespace("dst").unwrap();
    let dst = &dst.name;
    admin()
        .apply(&populated_claim_yaml(
            dst,
            "orphan",
            "nope",
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "1Gi",
        ))
        .unwrap();
    let told = |reason: &str| {
        eventually(&format!("the claim to be told {reason}"), WAIT, || {
            events_about(admin(), dst, "PersistentVolumeClaim", "orphan")
                .iter()
                .any(|e| e.starts_with(reason))
        });
    };
    told("TransferNotFound: NamespaceTransfer");
    // A request that makes its own claim fills none: the claim is told so.
    request(admin(), dst, "nope", "elsewhere", "db");
    told("TransferNotPopulating");
    let claim = claim_json(admin(), dst, "orphan").unwrap();
    assert_eq!(claim["status"]["phase"], "Pending");
}

/// The uid of `namespace/name` once it exists (kube's own controllers make
/// it a moment after the workload).
fn uid_once_made(namespace: &str, claim: &str) -> String {
    eventually(&format!("{namespace}/{claim} to be made"), WAIT, || {
        claim_json(admin(), namespace, claim).is_some()
    });
    uid(&claim_json(admin(), namespace, claim).unwrap())
}

#[test]
fn a_statefulsets_claim_template_naming_a_populating_request_receives_the_moved_volume() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let (dst, src) = (&s.dst.name, &s.src.name);
    populating_request(admin(), dst, "db-from-src", src, "db");
    // The StatefulSet controller makes data-web-0 from the template.
    admin()
        .apply(&format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\n  namespace: {dst}\nspec:\n  replicas: 1\n  serviceName: web\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: app\n        image: registry.invalid/app\n        volumeMounts:\n        - {{name: data, mountPath: /data}}\n  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes: [ReadWriteOnce]\n      storageClassName: {ALLOWED_CLASS}\n      resources:\n        requests:\n          storage: 1Gi\n      dataSourceRef:\n        apiGroup: storage.transfer.k8s.io\n        kind: NamespaceTransfer\n        name: db-from-src\n"
        ))
        .unwrap();
    let made = uid_once_made(dst, "data-web-0");
    offer(admin(), src, "give", "db", dst);
    wait_phase(admin(), dst, "db-from-src", "Completed", WAIT);
    s.assert_moved_to(dst, "data-web-0");
    assert_eq!(uid(&claim_json(admin(), dst, "data-web-0").unwrap()), made);
}

#[test]
fn a_pods_generic_ephemeral_volume_receives_the_moved_volume_and_goes_with_the_pod() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let (dst, src) = (&s.dst.name, &s.src.name);
    populating_request(admin(), dst, "db-from-src", src, "db");
    // The ephemeral-volume controller makes app-scratch, owned by the pod.
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\n  namespace: {dst}\nspec:\n  containers:\n  - name: app\n    image: registry.invalid/app\n    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n  volumes:\n  - name: scratch\n    ephemeral:\n      volumeClaimTemplate:\n        spec:\n          accessModes: [ReadWriteOnce]\n          storageClassName: {ALLOWED_CLASS}\n          resources:\n            requests:\n              storage: 1Gi\n          dataSourceRef:\n            apiGroup: storage.transfer.k8s.io\n            kind: NamespaceTransfer\n            name: db-from-src\n"
        ))
        .unwrap();
    let made = uid_once_made(dst, "app-scratch");
    offer(admin(), src, "give", "db", dst);
    wait_phase(admin(), dst, "db-from-src", "Completed", WAIT);
    s.assert_moved_to(dst, "app-scratch");
    let claim = claim_json(admin(), dst, "app-scratch").unwrap();
    assert_eq!(uid(&claim), made);
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["kind"], "Pod",
        "{claim}"
    );
    // The pod goes; kube's garbage collector takes its claim, and the
    // volume (Delete again since R6) is deleted once.
    delete_pod(admin(), dst, "app");
    cp().csi.assert_deleted_once(&s.handle, WAIT);
    eventually("the pod's claim to go", WAIT, || {
        claim_json(admin(), dst, "app-scratch").is_none()
    });
}

/// The NamespaceTransfers of `namespace` that `parent` made for its claims.
fn made_by(namespace: &str, parent: &str) -> Vec<serde_json::Value> {
    let list: serde_json::Value =
        serde_json::from_str(&admin().ok(&["get", "nst", "-n", namespace, "-o", "json"])).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == "NamespaceTransfer" && o["name"] == parent)
        })
        .cloned()
        .collect()
}

/// The volume handles bound to `claims` of `namespace`, once each is Bound.
fn bound_handles(namespace: &str, claims: &[&str]) -> Vec<String> {
    claims
        .iter()
        .map(|claim| {
            eventually(&format!("{namespace}/{claim} to be Bound"), WAIT, || {
                claim_json(admin(), namespace, claim)
                    .is_some_and(|c| c["status"]["phase"] == "Bound")
            });
            handle_of(namespace, claim)
        })
        .collect()
}

#[test]
fn a_statefulsets_claims_naming_a_populating_clone_request_each_get_their_own_clone() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let (dst, src) = (&s.dst.name, &s.src.name);
    standing_offer(admin(), src, "fixtures", "db", dst, 3);
    populating_clone_request(admin(), dst, "db-clones", src, "db");
    // A claim that asks for more than the source holds: refused before
    // anything is cloned for it, and told why.
    admin()
        .apply(&populated_claim_yaml(
            dst,
            "too-big",
            "db-clones",
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "5Gi",
        ))
        .unwrap();
    // Three replicas at once (no kubelet runs their pods here), each with
    // its own claim from the template.
    admin()
        .apply(&format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\n  namespace: {dst}\nspec:\n  replicas: 3\n  podManagementPolicy: Parallel\n  serviceName: web\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: app\n        image: registry.invalid/app\n        volumeMounts:\n        - {{name: data, mountPath: /data}}\n  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes: [ReadWriteOnce]\n      storageClassName: {ALLOWED_CLASS}\n      resources:\n        requests:\n          storage: 1Gi\n      dataSourceRef:\n        apiGroup: storage.transfer.k8s.io\n        kind: NamespaceTransfer\n        name: db-clones\n"
        ))
        .unwrap();
    let claims = ["data-web-0", "data-web-1", "data-web-2"];
    let uids: Vec<String> = claims.iter().map(|c| uid_once_made(dst, c)).collect();
    let handles = bound_handles(dst, &claims);
    // Three distinct clones of the source, each made once, none the source.
    let clones = clones_of(&cp().csi, &s.handle);
    assert_eq!(clones.len(), 3, "three clones, each made once: {clones:?}");
    for (claim, handle) in claims.iter().zip(&handles) {
        assert_ne!(handle, &s.handle, "{claim} got the source's own volume");
    }
    assert_eq!(
        handles
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3,
        "{handles:?}"
    );
    for (claim, made) in claims.iter().zip(&uids) {
        let c = claim_json(admin(), dst, claim).unwrap();
        assert_eq!(&uid(&c), made, "{claim} is the StatefulSet's own claim");
        let adopted = |events: &[String]| {
            events
                .iter()
                .any(|e| e.starts_with("Adopted: NamespaceTransfer"))
        };
        let events = events_when(admin(), dst, "PersistentVolumeClaim", claim, adopted);
        assert!(adopted(&events), "{claim}: {events:?}");
    }
    // The standing request lists the claims it serves.
    let standing = wait_status(admin(), dst, "db-clones", "list three served", WAIT, |t| {
        t["status"]["served"]
            .as_array()
            .is_some_and(|s| s.iter().filter(|c| c["phase"] == "Completed").count() == 3)
    });
    assert_eq!(standing["status"]["reason"], "Serving", "{standing}");
    let served: Vec<&str> = standing["status"]["served"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["phase"] == "Completed")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for claim in claims {
        assert!(served.contains(&claim), "{claim} not in {served:?}");
    }
    // The misfit: its request failed before C1, and it is told why.
    eventually("too-big to be told why it gets no clone", WAIT, || {
        let events = events_about(admin(), dst, "PersistentVolumeClaim", "too-big");
        events
            .iter()
            .any(|e| e.starts_with("ClaimNotServed") && e.contains("ClaimMismatch"))
    });
    let big = claim_json(admin(), dst, "too-big").unwrap();
    assert_eq!(big["status"]["phase"], "Pending");
    assert_eq!(
        clones_of(&cp().csi, &s.handle).len(),
        3,
        "no clone for the misfit"
    );
    let children = made_by(dst, "db-clones");
    assert_eq!(children.len(), 4, "one request per claim");
    // Which claim a request serves is set at create or never: removing it
    // would turn a request under way into a standing one.
    let child = children[0]["metadata"]["name"].as_str().unwrap();
    let refused = admin().run(&[
        "annotate",
        "nst",
        child,
        "-n",
        dst,
        "storage.transfer.k8s.io/serves-claim-",
    ]);
    assert!(
        !refused.success
            && refused.stderr.contains(
                "metadata.annotations[storage.transfer.k8s.io/serves-claim]: Invalid value"
            )
            && refused.stderr.contains("field is immutable"),
        "{refused:?}"
    );
    // Scaled to 0 and its claims deleted: each clone destroyed once, the
    // source never; the requests for the claims that went go too.
    admin().ok(&["scale", "statefulset", "web", "-n", dst, "--replicas=0"]);
    for (claim, handle) in claims.iter().zip(&handles) {
        assert_deleting_the_claim_deletes_the_volume_once(admin(), &cp().csi, dst, claim, handle);
    }
    s.assert_never_deleted_by_driver();
    s.assert_source_untouched();
    eventually("the requests of the deleted claims to go", WAIT, || {
        made_by(dst, "db-clones").len() == 1
    });
    // Deleting the standing request deletes what it made, then itself.
    admin().ok(&["delete", "nst", "db-clones", "-n", dst, "--wait=false"]);
    eventually("the standing request and its requests to go", WAIT, || {
        transfer_json(admin(), dst, "db-clones").is_none() && made_by(dst, "db-clones").is_empty()
    });
}

#[test]
fn a_pods_generic_ephemeral_volume_gets_a_clone_that_is_destroyed_with_the_pod() {
    let s = setup("1Gi", ALLOWED_CLASS);
    let (dst, src) = (&s.dst.name, &s.src.name);
    standing_offer(admin(), src, "fixtures", "db", dst, 2);
    populating_clone_request(admin(), dst, "db-clones", src, "db");
    admin()
        .apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\n  namespace: {dst}\nspec:\n  containers:\n  - name: app\n    image: registry.invalid/app\n    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n  volumes:\n  - name: scratch\n    ephemeral:\n      volumeClaimTemplate:\n        spec:\n          accessModes: [ReadWriteOnce]\n          storageClassName: {ALLOWED_CLASS}\n          resources:\n            requests:\n              storage: 1Gi\n          dataSourceRef:\n            apiGroup: storage.transfer.k8s.io\n            kind: NamespaceTransfer\n            name: db-clones\n"
        ))
        .unwrap();
    let made = uid_once_made(dst, "app-scratch");
    let handle = bound_handles(dst, &["app-scratch"]).remove(0);
    assert_ne!(handle, s.handle);
    assert_eq!(clones_of(&cp().csi, &s.handle).len(), 1);
    let claim = claim_json(admin(), dst, "app-scratch").unwrap();
    assert_eq!(uid(&claim), made);
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["kind"], "Pod",
        "{claim}"
    );
    // The pod goes: kube's garbage collector takes its claim, and the clone
    // is destroyed exactly once; the source never.
    delete_pod(admin(), dst, "app");
    cp().csi.assert_deleted_once(&handle, WAIT);
    eventually("the pod's claim to go", WAIT, || {
        claim_json(admin(), dst, "app-scratch").is_none()
    });
    s.assert_never_deleted_by_driver();
    s.assert_source_untouched();
}

#[test]
fn a_repeated_event_is_one_event_whose_series_kube_apiserver_counts() {
    use k8s_openapi::api::events::v1::Event;
    use storage_transfer_apiserver::controller::events::{claim_reference, Events, Severity};

    let ns = cp().namespace("series").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let events: Vec<Event> = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(cp().kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let recorder = Events::new(client.clone(), "series-test");
        let regarding = claim_reference(&ns.name, "data", Some("u1"));
        for _ in 0..3 {
            recorder
                .publish(
                    &regarding,
                    Severity::Warning,
                    "InUse",
                    "Reconcile",
                    "a pod uses it",
                )
                .await;
        }
        let api: kube::Api<Event> = kube::Api::namespaced(client, &ns.name);
        let deadline = Instant::now() + WAIT;
        loop {
            let listed = api.list(&Default::default()).await.unwrap().items;
            let counted = listed
                .iter()
                .any(|e| e.series.as_ref().is_some_and(|s| s.count >= 3));
            if counted || Instant::now() > deadline {
                return listed;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(
        events.len(),
        1,
        "one Event, its repeats counted on it: {events:?}"
    );
    let event = &events[0];
    assert_eq!(event.reason.as_deref(), Some("InUse"));
    assert_eq!(event.note.as_deref(), Some("a pod uses it"));
    let series = event.series.as_ref().expect("a series");
    assert_eq!(series.count, 3);
    assert!(series.last_observed_time.0 >= event.event_time.as_ref().unwrap().0);
}
