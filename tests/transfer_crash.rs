//! The rebind protocol under failure (DESIGN §2.1.5 invariants): the server
//! dies once right after every write of the transfer controller (every
//! boundary of every action's plan on a transfer's path, R1…R6 among them)
//! and is restarted; a Clone pair dies after each of C1, C2, R1…R6; it is
//! killed at random
//! moments; the leader of two replicas dies mid-transfer; the world changes
//! between the last check and the commit. Throughout, a recorder watches each
//! PV: it is never deleted, never Released or Failed, and never bound to any
//! claim but the source and the destination. The volumes are the CSI mock
//! driver's under reclaim policy Delete, and the driver's call log shows no
//! `DeleteVolume` of any of them.
//!
//! These tests restart the server, so they share one private control plane
//! and take turns. They need the `fault-injection` feature (`make test`).

#![cfg(feature = "fault-injection")]
#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use sta_testenv::ephemeral;
use sta_testenv::scenario::crash::{
    self, crash_each_new_boundary_of, env, every_new_boundary, restart, FAULT_EXIT_CODE,
};
use sta_testenv::scenario::*;
use sta_testenv::{ControlPlane, Kubectl, Namespace};

const BIN: &str = env!("CARGO_BIN_EXE_storage-transfer-apiserver");
const WAIT: Duration = Duration::from_secs(90);

static CP: OnceLock<ControlPlane> = OnceLock::new();
static TURN: Mutex<()> = Mutex::new(());

/// The control plane, and the right to restart its server.
fn turn() -> (&'static ControlPlane, MutexGuard<'static, ()>) {
    let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let cp = CP.get_or_init(|| crash::private_control_plane(BIN));
    (cp, guard)
}

struct Setup {
    src: Namespace,
    dst: Namespace,
    pv: String,
    pv_uid: String,
    claim_uid: String,
    /// The CSI volume id, which a `DeleteVolume` would name.
    handle: String,
}

fn setup(cp: &ControlPlane) -> Setup {
    let src = cp.namespace("src").unwrap();
    let dst = cp.namespace("dst").unwrap();
    let v = provisioned_volume(cp.kubectl(), ALLOWED_CLASS, &src.name, "db", "1Gi");
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
    /// The source claim and its volume exactly as before (a Clone pair only
    /// reads them): same claim, Bound, unlocked; the volume bound to it under
    /// Delete, never lost and never deleted by the driver.
    #[track_caller]
    fn assert_source_untouched(&self, cp: &ControlPlane, recorder: VolumeRecorder) {
        let admin = cp.kubectl();
        let source = claim_json(admin, &self.src.name, "db").unwrap();
        assert_eq!(source["metadata"]["uid"], self.claim_uid.as_str());
        assert_eq!(source["status"]["phase"], "Bound");
        assert!(source["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none());
        let pv = volume_json(admin, &self.pv).unwrap();
        assert_eq!(pv["spec"]["claimRef"]["uid"], self.claim_uid.as_str());
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        recorder.assert_never_lost(&[&self.claim_uid]);
        cp.csi.assert_never_deleted(&self.handle);
    }

    fn consent(&self, k: &Kubectl) {
        offer(k, &self.src.name, "give", "db", &self.dst.name);
        request(k, &self.dst.name, "take", &self.src.name, "db");
    }

    /// Both sides Completed, the volume moved, and the recorder saw nothing
    /// but the two claims.
    #[track_caller]
    fn assert_completed(&self, cp: &ControlPlane, k: &Kubectl, recorder: VolumeRecorder) {
        wait_phase(k, &self.src.name, "give", "Completed", WAIT);
        wait_phase(k, &self.dst.name, "take", "Completed", WAIT);
        assert_moved(
            cp.kubectl(),
            &self.pv,
            &self.pv_uid,
            &self.src.name,
            &self.dst.name,
            "db",
        );
        let dest_uid = claim_json(cp.kubectl(), &self.dst.name, "db").unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        recorder.assert_never_lost(&[&self.claim_uid, &dest_uid]);
        cp.csi.assert_never_deleted(&self.handle);
    }
}

/// The server, started with `STA_FAULT_EXIT_AFTER=<step>`, exits with the
/// injected crash's code.
#[track_caller]
fn assert_crashed_after(cp: &ControlPlane, step: &str) {
    let code = cp.wait_for_server_exit(WAIT);
    assert_eq!(
        code,
        Some(FAULT_EXIT_CODE),
        "the server crashed right after {step}"
    );
}

/// The server exits once right after every write of the transfer
/// controller, in turn: each restart runs until a boundary between two
/// writes that it has not crashed at yet, and dies there
/// (`STA_FAULT_EXIT_AFTER=*:FILE`); an Event is no boundary, as a crash
/// right after it leaves the cluster as a crash right before it. Move
/// transfers first; then Move transfers into a claim the tenant wrote,
/// which cross R3's adoption (the claim recorded on both objects) and the
/// finalizer put on it; then Clone transfers, which crash only at the
/// boundaries a Move does not cross (C1's create); then Clone transfers
/// that the destination's quota refuses, which crash at the rollback's
/// boundaries (the failure, the clone's deletion, the finalizers); then
/// Move transfers whose destination loses its rights after R3, which crash
/// at a Move's rollback (the volume unmarked, the destination claim
/// deleted, the source unlocked); then Move transfers whose destination
/// claim is deleted after R4 (the volume held again, the loss reported).
/// So a crash falls on every boundary of every action on those paths, R1
/// to R6 among them, and still each transfer completes or rolls back, and
/// no volume was at risk.
#[test]
fn a_server_that_crashes_once_after_every_write_still_completes_or_rolls_back_each_transfer() {
    let (cp, _turn) = turn();
    let crossed = cp.logs_dir().join("every-write-crossed.txt");
    let _ = std::fs::remove_file(&crossed);
    let started = Instant::now();
    // The request first: its own reconcile makes no plan write, so the
    // server lives until the offer is made, and the first crash comes after
    // both consents are in (an offer alone would crash the server at its
    // first Wait, under the second apply).
    let (moves, move_transfers) = crash_at_every_new_boundary(
        cp,
        &crossed,
        |k, s| {
            request(k, &s.dst.name, "take", &s.src.name, "db");
            offer(k, &s.src.name, "give", "db", &s.dst.name);
        },
        |s, recorder| s.assert_completed(cp, cp.direct(), recorder),
    );
    // A populating request adopts the claim its tenant wrote (DESIGN §2.3):
    // R3 records the claim on both objects instead of creating one.
    let (adopted, adopted_transfers) = crash_at_every_new_boundary(
        cp,
        &crossed,
        |k, s| drop(adopt_consent(cp, k, s)),
        |s, recorder| s.assert_adopted(cp, recorder),
    );
    let (clones, clone_transfers) = crash_at_every_new_boundary(
        cp,
        &crossed,
        |k, s| clone_consent_request_first(k, &s.src.name, "db", &s.dst.name),
        |s, recorder| {
            let clone = clone_claim_name(cp.direct(), &s.src.name, &s.dst.name);
            assert_clone_completed(cp, s, &clone, recorder);
        },
    );
    // A Clone pair whose destination's quota refuses R3 rolls back: the
    // failure's status writes, the clone's deletion, the finalizers let go.
    let (rollbacks, rollback_transfers) = crash_at_every_new_boundary(
        cp,
        &crossed,
        |k, s| {
            // kube-apiserver's own resource: through the aggregator.
            let hard = "{persistentvolumeclaims: \"5\", requests.storage: 100Mi}";
            quota(cp.kubectl(), &s.dst.name, hard, WAIT);
            clone_consent_request_first(k, &s.src.name, "db", &s.dst.name);
        },
        |s, recorder| assert_clone_refused(cp, s, recorder),
    );
    // A Move pair whose destination loses its rights after R3 rolls back at
    // R4: the volume unmarked and under Delete again, the destination claim
    // deleted, the source claim unlocked. The server dies once right after
    // R3, the rights go, and then every new boundary follows.
    let (revoked, revoked_transfers) = crash_at_every_new_boundary(
        cp,
        &crossed,
        |_, s| {
            let alice = editor(cp, &unique("alice"), &s.src.name);
            let bob = editor(cp, &unique("bob"), &s.dst.name);
            let consent = || {
                request(&bob, &s.dst.name, "take", &s.src.name, "db");
                offer(&alice, &s.src.name, "give", "db", &s.dst.name);
            };
            let take_rights = || revoke(cp.kubectl(), &s.dst.name, &whoami(&bob));
            change_the_world_after(cp, &crossed, "R3", consent, take_rights);
        },
        |s, recorder| assert_move_revoked(cp, s, recorder),
    );
    // A Move pair whose destination claim its owner deletes after R4: the
    // volume held again under Retain, the claim let go, the loss reported.
    let (lost, lost_transfers) = crash_at_every_new_boundary(
        cp,
        &crossed,
        |k, s| {
            let delete = || {
                cp.kubectl()
                    .ok(&["delete", "pvc", "db", "-n", &s.dst.name, "--wait=false"]);
            };
            change_the_world_after(cp, &crossed, "R4", || s.consent(k), delete);
        },
        |s, _| assert_destination_lost(cp, s),
    );
    let lines = std::fs::read_to_string(&crossed).unwrap();
    let boundaries: Vec<&str> = lines.lines().collect();
    assert_eq!(
        boundaries.len(),
        moves + adopted + clones + rollbacks + revoked + lost,
        "{lines}"
    );
    for action in [
        "Adopt#1",
        "Adopt#2",
        "Finish#1",
        "DeleteClone#1",
        "DropFinalizers#1",
        "Unmark#1",
        "DeleteDestination#1",
        "Unlock#1",
        "Rehold#1",
        "DestinationLost#1",
    ] {
        assert!(
            boundaries.iter().any(|b| b.starts_with(action)),
            "no crash right after {action}: {lines}"
        );
    }
    for step in ["C1", "R1", "R2", "R3", "R4", "R5", "R6"] {
        assert!(
            boundaries
                .iter()
                .any(|b| b.split(' ').skip(1).any(|name| name == step)),
            "no crash right after {step}: {lines}"
        );
    }
    assert!(clones > 0, "a clone crosses boundaries a move does not");
    println!(
        "{} crashes, one at each boundary: {moves} over {move_transfers} Move transfers, \
         {adopted} over {adopted_transfers} Move transfers into an adopted claim, {clones} over {clone_transfers} Clone transfers, {rollbacks} over \
         {rollback_transfers} refused Clone transfers, {revoked} over \
         {revoked_transfers} Move transfers revoked after R3, then {lost} over \
         {lost_transfers} Move transfers that lost their destination after R4, \
         in {:?}:\n{lines}",
        moves + adopted + clones + rollbacks + revoked + lost,
        started.elapsed()
    );
}

/// A claim `dst/data` that names the populating request `dst/take`, the
/// request, then the offer: its uid.
fn adopt_consent(cp: &ControlPlane, k: &Kubectl, s: &Setup) -> String {
    let (src, dst) = (&s.src.name, &s.dst.name);
    let claim = populated_claim_yaml(dst, "data", "take", ALLOWED_CLASS, "ReadWriteOnce", "1Gi");
    cp.kubectl().apply(&claim).unwrap();
    let uid = claim_json(cp.kubectl(), dst, "data").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    populating_request(k, dst, "take", src, "db");
    offer(k, src, "give", "db", dst);
    uid
}

/// Waits until R3 has adopted `dst/data` (the pair is between R3 and R4,
/// in the pause).
fn wait_for_adoption(cp: &ControlPlane, s: &Setup) {
    eventually("R3 to adopt the claim", WAIT, || {
        transfer_json(cp.direct(), &s.src.name, "give")
            .is_some_and(|t| t["status"]["destinationClaim"]["name"] == "data")
    });
}

/// Where the pair stands once the source is as it was after a rollback:
/// unlocked, the volume unmarked under Delete and bound to the source.
#[track_caller]
fn wait_rolled_back(cp: &ControlPlane, s: &Setup) {
    eventually("the rollback to take its marks off", WAIT, || {
        let locked = claim_json(cp.kubectl(), &s.src.name, "db").is_some_and(|c| {
            c["metadata"]["annotations"]
                .get("storage.transfer.k8s.io/transfer")
                .is_some()
        });
        let marked = volume_json(cp.kubectl(), &s.pv).is_some_and(|v| {
            v["spec"]["persistentVolumeReclaimPolicy"] != "Delete"
                || v["metadata"]["annotations"]
                    .get("storage.transfer.k8s.io/original-reclaim-policy")
                    .is_some()
        });
        !locked && !marked
    });
}

impl Setup {
    /// Both sides Completed, the volume moved into the tenant's own claim
    /// `dst/data` (the same uid), and the recorder saw nothing but the two
    /// claims.
    #[track_caller]
    fn assert_adopted(&self, cp: &ControlPlane, recorder: VolumeRecorder) {
        let (src, dst) = (&self.src.name, &self.dst.name);
        wait_phase(cp.direct(), src, "give", "Completed", WAIT);
        let take = wait_phase(cp.direct(), dst, "take", "Completed", WAIT);
        assert_moved(cp.kubectl(), &self.pv, &self.pv_uid, src, dst, "data");
        let data = claim_json(cp.kubectl(), dst, "data").unwrap();
        let uid = data["metadata"]["uid"].as_str().unwrap();
        assert_eq!(take["status"]["destinationClaim"]["uid"], uid, "{take}");
        recorder.assert_never_lost(&[&self.claim_uid, uid]);
        cp.csi.assert_never_deleted(&self.handle);
    }
}

#[test]
fn an_adopted_claim_deleted_or_its_pair_cancelled_between_r3_and_r4_is_let_go_never_deleted() {
    let (cp, _turn) = turn();
    pause_before(cp, "R4");
    for delete_claim in [true, false] {
        let s = setup(cp);
        let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
        let data_uid = adopt_consent(cp, cp.direct(), &s);
        wait_for_adoption(cp, &s);
        if delete_claim {
            // Its owner deletes it: our finalizer holds it until the pair
            // has failed and put the source back, then lets it go.
            cp.kubectl()
                .ok(&["delete", "pvc", "data", "-n", &s.dst.name, "--wait=false"]);
            let give = wait_phase(cp.direct(), &s.src.name, "give", "Failed", WAIT);
            assert_eq!(give["status"]["reason"], "VolumeChanged", "{give}");
            eventually("the deleted claim to go", WAIT, || {
                claim_json(cp.kubectl(), &s.dst.name, "data").is_none()
            });
        } else {
            cp.direct().ok(&[
                "delete",
                "namespacetransfer",
                "give",
                "-n",
                &s.src.name,
                "--wait=false",
            ]);
            wait_phase(cp.direct(), &s.dst.name, "take", "Cancelled", WAIT);
            eventually("our finalizer to leave the adopted claim", WAIT, || {
                claim_json(cp.kubectl(), &s.dst.name, "data").is_some_and(|c| {
                    !c["metadata"]["finalizers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|f| f == "storage.transfer.k8s.io/transfer-protection")
                })
            });
            let data = claim_json(cp.kubectl(), &s.dst.name, "data").unwrap();
            assert_eq!(data["metadata"]["uid"], data_uid.as_str(), "never replaced");
            assert!(data["metadata"]["deletionTimestamp"].is_null(), "{data}");
            assert_eq!(data["status"]["phase"], "Pending", "{data}");
        }
        wait_rolled_back(cp, &s);
        s.assert_source_untouched(cp, recorder);
    }
    restart(cp, &[]);
}

/// Where a Move pair stands once the destination's rights went after R3:
/// the offer Failed as Forbidden, no destination claim, and the source
/// claim and its volume exactly as before.
#[track_caller]
fn assert_move_revoked(cp: &ControlPlane, s: &Setup, recorder: VolumeRecorder) {
    let give = wait_phase(cp.direct(), &s.src.name, "give", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "Forbidden", "{}", give["status"]);
    eventually("the destination claim to be gone", WAIT, || {
        claim_json(cp.kubectl(), &s.dst.name, "db").is_none()
    });
    s.assert_source_untouched(cp, recorder);
}

/// Where a Move pair stands once its destination claim was deleted after
/// R4: the loss reported, the pair neither finished nor rolled back, and
/// the volume kept under Retain for an administrator, never deleted.
#[track_caller]
fn assert_destination_lost(cp: &ControlPlane, s: &Setup) {
    eventually("the transfer to say the destination is gone", WAIT, || {
        transfer_json(cp.direct(), &s.src.name, "give")
            .is_some_and(|t| t["status"]["reason"] == "DestinationLost")
    });
    // Released: the PV controller has seen the claim gone, and acted on
    // the volume's policy then (under Delete, the provisioner would delete
    // it).
    eventually("the volume to be Released", WAIT, || {
        volume_json(cp.kubectl(), &s.pv).is_none_or(|pv| pv["status"]["phase"] == "Released")
    });
    let pv = volume_json(cp.kubectl(), &s.pv).expect("the volume is kept");
    assert_eq!(pv["metadata"]["uid"], s.pv_uid.as_str());
    assert_eq!(
        pv["spec"]["persistentVolumeReclaimPolicy"], "Retain",
        "Delete is never restored on a volume whose claim is gone"
    );
    cp.csi.assert_never_deleted(&s.handle);
    for (ns, name) in [(&s.src.name, "give"), (&s.dst.name, "take")] {
        let t = transfer_json(cp.direct(), ns, name).unwrap();
        let phase = t["status"]["phase"].as_str().unwrap_or_default();
        assert!(
            !["Failed", "Cancelled", "Completed"].contains(&phase),
            "{}",
            t["status"]
        );
    }
}

/// Begins a transfer with `consent` on a server that dies right after
/// `step`, makes `change` while it is down, and restarts it to crash at
/// every boundary `crossed` does not list yet.
fn change_the_world_after(
    cp: &ControlPlane,
    crossed: &std::path::Path,
    step: &str,
    consent: impl FnOnce(),
    change: impl FnOnce(),
) {
    restart(cp, &[("STA_FAULT_EXIT_AFTER", step)]);
    consent();
    assert_crashed_after(cp, step);
    change();
    let spec = every_new_boundary(crossed);
    restart(cp, &[("STA_FAULT_EXIT_AFTER", &spec)]);
}

/// Where a Clone pair stands once the destination's quota refused it: both
/// sides Failed with the quota's message, the clone made once and deleted,
/// no destination claim, and the source as it was.
#[track_caller]
fn assert_clone_refused(cp: &ControlPlane, s: &Setup, recorder: VolumeRecorder) {
    let admin = cp.kubectl();
    let give = wait_phase(admin, &s.src.name, "give", "Failed", WAIT);
    wait_phase(admin, &s.dst.name, "take", "Failed", WAIT);
    assert_eq!(give["status"]["reason"], "DestinationRefused", "{give}");
    let clones = clones_of(&cp.csi, &s.handle);
    assert_eq!(clones.len(), 1, "one clone, made once: {clones:?}");
    let clone = clone_claim_name(cp.direct(), &s.src.name, &s.dst.name);
    eventually("the refused clone to be deleted", WAIT, || {
        claim_json(admin, &s.src.name, &clone).is_none()
    });
    cp.csi
        .assert_deleted_once(clones[0].volume_id().unwrap_or_default(), WAIT);
    assert!(claim_json(admin, &s.dst.name, "db").is_none());
    s.assert_source_untouched(cp, recorder);
}

/// Transfers, each begun by `begin` and checked by `done` once it settled,
/// with the server crashing once at each boundary `crossed` does not list
/// yet, until one transfer crosses no new boundary (a crash may keep a
/// later boundary of the same action from being reached: the next
/// decision goes on from the first write). The crashes and the transfers.
fn crash_at_every_new_boundary(
    cp: &ControlPlane,
    crossed: &std::path::Path,
    begin: impl Fn(&Kubectl, &Setup),
    done: impl Fn(&Setup, VolumeRecorder),
) -> (usize, usize) {
    crash_each_new_boundary_of(
        cp,
        crossed,
        || {
            let s = setup(cp);
            let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
            (s, recorder)
        },
        |k, (s, _)| begin(k, s),
        |(s, recorder)| done(&s, recorder),
    )
}

/// Where a Clone pair stands once it completed: the source claim and its
/// volume exactly as before, one clone made by the driver and now bound in
/// the destination, and no clone claim left in the source namespace.
#[track_caller]
fn assert_clone_completed(cp: &ControlPlane, s: &Setup, clone: &str, recorder: VolumeRecorder) {
    let k = cp.direct();
    wait_phase(k, &s.src.name, "give", "Completed", WAIT);
    wait_phase(k, &s.dst.name, "take", "Completed", WAIT);
    let admin = cp.kubectl();
    s.assert_source_untouched(cp, recorder);
    let clones = clones_of(&cp.csi, &s.handle);
    assert_eq!(clones.len(), 1, "one clone, made once: {clones:?}");
    let dest = claim_json(admin, &s.dst.name, "db").unwrap();
    assert_eq!(dest["status"]["phase"], "Bound");
    let moved = volume_json(admin, dest["spec"]["volumeName"].as_str().unwrap()).unwrap();
    assert_eq!(
        moved["spec"]["csi"]["volumeHandle"].as_str(),
        clones[0].volume_id(),
        "the destination holds the clone"
    );
    assert_eq!(moved["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    eventually(
        "the clone claim to leave the source namespace",
        WAIT,
        || claim_json(admin, &s.src.name, clone).is_none(),
    );
}

#[test]
fn a_clone_pair_crashed_right_after_c1_c2_or_any_of_r1_to_r6_completes_with_one_clone_and_an_untouched_source(
) {
    let (cp, _turn) = turn();
    for step in CLONE_STEPS {
        restart(cp, &[("STA_FAULT_EXIT_AFTER", step)]);
        let s = setup(cp);
        let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
        clone_consent(cp.direct(), &s.src.name, "db", &s.dst.name);
        assert_crashed_after(cp, step);
        restart(cp, &[]);
        let clone = clone_claim_name(cp.direct(), &s.src.name, &s.dst.name);
        assert_clone_completed(cp, &s, &clone, recorder);
        println!("clone, crash after {step}: completed with one clone");
    }
}

/// Every step of a Clone pair a crash can follow.
const CLONE_STEPS: [&str; 8] = ["C1", "C2", "R1", "R2", "R3", "R4", "R5", "R6"];

#[test]
fn a_standing_offers_clones_crashed_after_any_step_each_arrive_once_to_a_request_and_an_ephemeral_claim(
) {
    let (cp, _turn) = turn();
    ephemeral::ensure_class(cp.kubectl());
    for step in CLONE_STEPS {
        restart(cp, &[("STA_FAULT_EXIT_AFTER", step)]);
        let s = setup(cp);
        let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
        let (src, dst) = (&s.src.name, &s.dst.name);
        let k = cp.kubectl();
        // A standing offer, a Clone request and an EphemeralClaim of a pod:
        // the offer's pairs run one at a time, so the crash comes in one of
        // them and the other may be anywhere. The offer comes last: until
        // it exists nothing can start, so the crash cannot come before every
        // object is in.
        k.apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: take\n  namespace: {dst}\nspec:\n  mode: Clone\n  source:\n    namespace: {src}\n    name: db\n"
        ))
        .unwrap();
        ephemeral::create_pod(
            k,
            dst,
            "runner",
            "runner-scratch",
            ephemeral::Scheduling::Scheduled,
        );
        k.apply(&ephemeral::ephemeral_claim_yaml(
            dst,
            "scratch",
            "runner",
            ephemeral::Policy::Delete,
            &format!("dataSourceRef: {{kind: PersistentVolumeClaim, namespace: {src}, name: db}}"),
        ))
        .unwrap();
        k.apply(&format!(
            "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {src}\nspec:\n  mode: Clone\n  source:\n    name: db\n  destination:\n    namespace: {dst}\n"
        ))
        .unwrap();
        assert_crashed_after(cp, step);
        restart(cp, &[]);
        wait_phase(k, dst, "take", "Completed", WAIT);
        ephemeral::wait_phase(k, dst, "scratch", "Bound");
        // Two clones, each made once, each in its claim; nothing left over.
        let admin = k;
        let clones: Vec<String> = clones_of(&cp.csi, &s.handle)
            .iter()
            .map(|c| c.volume_id().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(clones.len(), 2, "after {step}: {clones:?}");
        let mut held: Vec<String> = ["db", "runner-scratch"]
            .iter()
            .map(|claim| ephemeral::bound_volume_of(admin, dst, claim).1)
            .collect();
        held.sort();
        let mut made = clones.clone();
        made.sort();
        assert_eq!(held, made, "after {step}: each clone is in its claim");
        eventually("no clone claim left in the source namespace", WAIT, || {
            admin.ok(&["get", "pvc", "-n", src, "-o", "name"]).trim() == "persistentvolumeclaim/db"
        });
        wait_status(admin, src, "give", "count its clones", WAIT, |t| {
            t["status"]["clones"] == serde_json::json!({"made": 2, "alive": 2})
                && t["status"]["phase"] == "WaitingForPeer"
        });
        s.assert_source_untouched(cp, recorder);
        for clone in &clones {
            cp.csi.assert_never_deleted(clone);
        }
        println!("standing offer, crash after {step}: two clones, each once");
    }
}

/// Where a clone for a claim that names a populating Clone request can be
/// crashed that a standing offer's other pairs do not cross: right after
/// the request for the claim is made, and at the adoption (R3, the claim
/// held and pinned); then the commit and the end.
const POPULATE_POINTS: [&str; 6] = ["Populate", "C1", "R3", "ProtectDestination#1", "R4", "R6"];

#[test]
fn a_clone_for_a_claim_naming_a_populating_request_crashed_at_any_of_its_own_points_arrives_once_in_that_claim(
) {
    let (cp, _turn) = turn();
    for point in POPULATE_POINTS {
        restart(cp, &[("STA_FAULT_EXIT_AFTER", point)]);
        let s = setup(cp);
        let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
        let (src, dst) = (&s.src.name, &s.dst.name);
        let k = cp.kubectl();
        k.apply(&populated_claim_yaml(
            dst,
            "data",
            "clones",
            ALLOWED_CLASS,
            "ReadWriteOnce",
            "1Gi",
        ))
        .unwrap();
        let uid = claim_json(k, dst, "data").unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        // The request last: a claim naming it gets its child request at
        // once (the point Populate), so the offer must already be in.
        standing_offer(cp.direct(), src, "give", "db", dst, 2);
        populating_clone_request(cp.direct(), dst, "clones", src, "db");
        assert_crashed_after(cp, point);
        restart(cp, &[]);
        eventually(&format!("after {point}: data to be Bound"), WAIT, || {
            claim_json(k, dst, "data").is_some_and(|c| c["status"]["phase"] == "Bound")
        });
        let data = claim_json(k, dst, "data").unwrap();
        assert_eq!(
            data["metadata"]["uid"],
            uid.as_str(),
            "after {point}: the tenant's claim"
        );
        let clones: Vec<String> = clones_of(&cp.csi, &s.handle)
            .iter()
            .map(|c| c.volume_id().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            clones.len(),
            1,
            "after {point}: one clone, made once: {clones:?}"
        );
        let (_, held) = ephemeral::bound_volume_of(k, dst, "data");
        assert_eq!(held, clones[0], "after {point}: the clone is in the claim");
        eventually("no clone claim left in the source namespace", WAIT, || {
            k.ok(&["get", "pvc", "-n", src, "-o", "name"]).trim() == "persistentvolumeclaim/db"
        });
        wait_status(
            cp.direct(),
            dst,
            "clones",
            "list the claim served",
            WAIT,
            |t| {
                t["status"]["served"][0]["uid"] == uid.as_str()
                    && t["status"]["served"][0]["phase"] == "Completed"
                    && t["status"]["served"]
                        .as_array()
                        .is_some_and(|a| a.len() == 1)
            },
        );
        s.assert_source_untouched(cp, recorder);
        cp.csi.assert_never_deleted(&clones[0]);
        println!("populating clone, crash after {point}: one clone, in the claim");
    }
}

#[test]
fn a_standing_offer_that_recounts_between_a_pairs_two_r1_writes_counts_its_clone_once() {
    let (cp, _turn) = turn();
    // Every pair pauses between R1's two writes (the offer's record and
    // count, then the request's state): the write wakes the offer, which
    // counts again in the pause.
    restart(cp, &[("STA_FAULT_PAUSE_BEFORE", "R1-count:6000")]);
    let s = setup(cp);
    let (src, dst) = (&s.src.name, &s.dst.name);
    let k = cp.kubectl();
    k.apply(&format!(
        "apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: give\n  namespace: {src}\nspec:\n  mode: Clone\n  source:\n    name: db\n  destination:\n    namespace: {dst}\n---\napiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: take\n  namespace: {dst}\nspec:\n  mode: Clone\n  source:\n    namespace: {src}\n    name: db\n"
    ))
    .unwrap();
    wait_phase(k, dst, "take", "Completed", WAIT);
    let offer = wait_status(k, src, "give", "count its clone alive", WAIT, |t| {
        t["status"]["clones"]["alive"] == 1
    });
    assert_eq!(
        offer["status"]["clones"],
        serde_json::json!({"made": 1, "alive": 1}),
        "one clone, counted once"
    );
    restart(cp, &[]);
}

#[test]
fn cancelling_a_clone_pair_before_the_commit_deletes_the_clone_and_its_volume_only() {
    let (cp, _turn) = turn();
    pause_before(cp, "R4");
    let s = setup(cp);
    let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
    clone_consent(cp.direct(), &s.src.name, "db", &s.dst.name);
    wait_for_r3(cp, &s);
    let clone = clone_claim_name(cp.kubectl(), &s.src.name, &s.dst.name);
    let clone_pv = claim_json(cp.kubectl(), &s.src.name, &clone).unwrap()["spec"]["volumeName"]
        .as_str()
        .unwrap()
        .to_owned();
    let handle = volume_json(cp.kubectl(), &clone_pv).unwrap()["spec"]["csi"]["volumeHandle"]
        .as_str()
        .unwrap()
        .to_owned();
    cp.direct().ok(&[
        "delete",
        "namespacetransfer",
        "take",
        "-n",
        &s.dst.name,
        "--wait=false",
    ]);
    let give = wait_phase(cp.direct(), &s.src.name, "give", "Cancelled", WAIT);
    assert_eq!(give["status"]["reason"], "Deleted");
    eventually(
        "the clone claim and the destination claim to be gone",
        WAIT,
        || {
            claim_json(cp.kubectl(), &s.src.name, &clone).is_none()
                && claim_json(cp.kubectl(), &s.dst.name, "db").is_none()
        },
    );
    // The clone was ours: its volume goes, once. The source's never.
    cp.csi.assert_deleted_once(&handle, WAIT);
    s.assert_source_untouched(cp, recorder);
    restart(cp, &[]);
}

/// A small xorshift, seeded from the clock and printed, so that a failing
/// soak can be replayed by reading its seed.
struct Random(u64);

impl Random {
    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        println!("soak seed {seed}");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn transfers_killed_at_random_moments_all_complete_and_every_pv_is_accounted_for() {
    let (cp, _turn) = turn();
    restart(cp, &[]);
    let mut random = Random::new();
    let setups: Vec<Setup> = (0..5).map(|_| setup(cp)).collect();
    let recorders: Vec<VolumeRecorder> = setups
        .iter()
        .map(|s| VolumeRecorder::start(cp.kubectl(), &s.pv))
        .collect();
    for s in &setups {
        s.consent(cp.direct());
    }
    let mut kills = Vec::new();
    for _ in 0..4 {
        let after = Duration::from_millis(100 + random.below(1200));
        std::thread::sleep(after);
        cp.kill_server();
        kills.push(after);
        restart(cp, &[]);
    }
    for (s, recorder) in setups.iter().zip(recorders) {
        s.assert_completed(cp, cp.direct(), recorder);
    }
    println!("soak: 5 transfers, SIGKILLs after {kills:?}; all completed, every PV bound to its destination");
}

#[test]
fn when_the_leader_of_two_replicas_dies_mid_transfer_the_other_completes_it() {
    let (cp, _turn) = turn();
    let fault = [("STA_FAULT_EXIT_AFTER", "R2")];
    restart(cp, &fault);
    let replica = cp.start_replica("replica-b", &[], &env(&fault)).unwrap();
    let s = setup(cp);
    let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
    s.consent(&replica.direct);
    // Whichever replica leads dies right after R2; the other must finish.
    let deadline = Instant::now() + WAIT;
    let main_died = loop {
        if !cp.server_is_running() {
            break true;
        }
        if !replica.is_running() {
            break false;
        }
        assert!(Instant::now() < deadline, "no replica reached R2");
        std::thread::sleep(Duration::from_millis(50));
    };
    let survivor = if main_died {
        replica.direct.clone()
    } else {
        cp.direct().clone()
    };
    s.assert_completed(cp, &survivor, recorder);
    let dead_is_down = if main_died {
        !cp.server_is_running()
    } else {
        !replica.is_running()
    };
    assert!(
        dead_is_down,
        "the survivor completed while the dead replica stayed down"
    );
    println!(
        "HA: the {} replica led and died after R2; the {} replica completed the transfer",
        if main_died { "main" } else { "second" },
        if main_died { "second" } else { "main" }
    );
    drop(replica);
    restart(cp, &[]);
}

/// Pauses every reconcile that reaches `step` for 4 s.
fn pause_before(cp: &ControlPlane, step: &str) {
    restart(cp, &[("STA_FAULT_PAUSE_BEFORE", &format!("{step}:4000"))]);
}

/// Waits until R3 has made the destination claim (the pair is between R3
/// and R4, in the pause).
fn wait_for_r3(cp: &ControlPlane, s: &Setup) {
    eventually("R3 to create the destination claim", WAIT, || {
        claim_json(cp.kubectl(), &s.dst.name, "db").is_some()
    });
}

#[test]
fn deleting_either_side_between_r3_and_r4_cancels_and_restores_the_source() {
    let (cp, _turn) = turn();
    pause_before(cp, "R4");
    for delete_source in [true, false] {
        let s = setup(cp);
        let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
        s.consent(cp.direct());
        wait_for_r3(cp, &s);
        let (gone, peer) = if delete_source {
            ((&s.src.name, "give"), (&s.dst.name, "take"))
        } else {
            ((&s.dst.name, "take"), (&s.src.name, "give"))
        };
        cp.direct().ok(&[
            "delete",
            "namespacetransfer",
            gone.1,
            "-n",
            gone.0,
            "--wait=false",
        ]);
        let t = wait_phase(cp.direct(), peer.0, peer.1, "Cancelled", WAIT);
        assert_eq!(t["status"]["reason"], "Deleted");
        eventually("the deleted side to be gone", WAIT, || {
            transfer_json(cp.direct(), gone.0, gone.1).is_none()
        });
        eventually("the destination claim to be gone", WAIT, || {
            claim_json(cp.kubectl(), &s.dst.name, "db").is_none()
        });
        let pv = volume_json(cp.kubectl(), &s.pv).unwrap();
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(pv["spec"]["claimRef"]["uid"], s.claim_uid.as_str());
        let claim = claim_json(cp.kubectl(), &s.src.name, "db").unwrap();
        assert_eq!(claim["status"]["phase"], "Bound");
        assert!(claim["metadata"]["annotations"]
            .get("storage.transfer.k8s.io/transfer")
            .is_none());
        recorder.assert_never_lost(&[&s.claim_uid]);
        cp.csi.assert_never_deleted(&s.handle);
    }
    restart(cp, &[]);
}

#[test]
fn deleting_both_sides_after_the_commit_completes_the_transfer_first() {
    let (cp, _turn) = turn();
    pause_before(cp, "R5");
    let s = setup(cp);
    let recorder = VolumeRecorder::start(cp.kubectl(), &s.pv);
    s.consent(cp.direct());
    eventually("R4 to point the PV at the destination", WAIT, || {
        volume_json(cp.kubectl(), &s.pv)
            .is_some_and(|pv| pv["spec"]["claimRef"]["namespace"] == s.dst.name.as_str())
    });
    cp.direct().ok(&[
        "delete",
        "namespacetransfer",
        "give",
        "-n",
        &s.src.name,
        "--wait=false",
    ]);
    cp.direct().ok(&[
        "delete",
        "namespacetransfer",
        "take",
        "-n",
        &s.dst.name,
        "--wait=false",
    ]);
    let held = transfer_json(cp.direct(), &s.src.name, "give").expect("the finalizer holds it");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    eventually("both transfers to complete and go", WAIT, || {
        transfer_json(cp.direct(), &s.src.name, "give").is_none()
            && transfer_json(cp.direct(), &s.dst.name, "take").is_none()
    });
    assert_moved(
        cp.kubectl(),
        &s.pv,
        &s.pv_uid,
        &s.src.name,
        &s.dst.name,
        "db",
    );
    let dest_uid = claim_json(cp.kubectl(), &s.dst.name, "db").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    recorder.assert_never_lost(&[&s.claim_uid, &dest_uid]);
    cp.csi.assert_never_deleted(&s.handle);
    restart(cp, &[]);
}

#[test]
fn a_pod_that_starts_using_the_source_before_the_commit_is_reported_and_waited_for() {
    let (cp, _turn) = turn();
    a_late_pod_is_seen_before_the_commit(cp);
}

/// Puts the fence pod back when dropped, however the test ends.
struct FenceBack<'a>(&'a ControlPlane);

impl Drop for FenceBack<'_> {
    fn drop(&mut self) {
        let fence = sta_testenv::repo_root().join("deploy/rbac/fence.yaml");
        self.0
            .kubectl()
            .ok(&["apply", "-f", &fence.display().to_string()]);
    }
}

#[test]
fn without_its_fence_pod_the_server_still_sees_a_pod_that_starts_using_the_source_before_the_commit(
) {
    let (cp, _turn) = turn();
    let _back = FenceBack(cp);
    cp.kubectl().ok(&[
        "delete",
        "pod",
        "storage-transfer-fence",
        "-n",
        "storage-transfer-system",
        "--wait=true",
    ]);
    a_late_pod_is_seen_before_the_commit(cp);
    let log = std::fs::read_to_string(cp.server_log()).unwrap_or_default();
    assert!(
        log.contains("the pod fence cannot be written"),
        "the consistent LIST stood in for the missing fence"
    );
}

/// A pod made while the pair waits between R3 and R4 holds the commit
/// back (SourceInUse) until it finishes; then the transfer completes.
fn a_late_pod_is_seen_before_the_commit(cp: &ControlPlane) {
    pause_before(cp, "R4");
    let s = setup(cp);
    s.consent(cp.direct());
    wait_for_r3(cp, &s);
    running_pod(cp.kubectl(), &s.src.name, "late", "db");
    eventually("the transfer to wait for the late pod", WAIT, || {
        transfer_json(cp.direct(), &s.src.name, "give")
            .is_some_and(|t| t["status"]["reason"] == "SourceInUse")
    });
    let told = |events: &[String]| {
        events
            .iter()
            .any(|e| e.contains("late") && e.contains("started after the claim was checked"))
    };
    let events = events_when(cp.kubectl(), &s.src.name, "NamespaceTransfer", "give", told);
    assert!(told(&events), "{events:?}");
    let pv = volume_json(cp.kubectl(), &s.pv).unwrap();
    assert_eq!(
        pv["spec"]["claimRef"]["uid"],
        s.claim_uid.as_str(),
        "not committed"
    );
    set_pod_phase(cp.kubectl(), &s.src.name, "late", "Succeeded");
    restart(cp, &[]);
    wait_phase(cp.direct(), &s.src.name, "give", "Completed", WAIT);
    delete_pod(cp.kubectl(), &s.src.name, "late");
    assert_moved(
        cp.kubectl(),
        &s.pv,
        &s.pv_uid,
        &s.src.name,
        &s.dst.name,
        "db",
    );
    cp.csi.assert_never_deleted(&s.handle);
}

#[test]
fn the_source_claim_deleted_by_its_owner_between_r2_and_r4_does_not_lose_the_pv() {
    let (cp, _turn) = turn();
    pause_before(cp, "R4");
    let s = setup(cp);
    s.consent(cp.direct());
    wait_for_r3(cp, &s);
    cp.kubectl()
        .ok(&["delete", "pvc", "db", "-n", &s.src.name, "--wait=false"]);
    restart(cp, &[]);
    wait_phase(cp.direct(), &s.src.name, "give", "Completed", WAIT);
    assert_moved(
        cp.kubectl(),
        &s.pv,
        &s.pv_uid,
        &s.src.name,
        &s.dst.name,
        "db",
    );
    let pv = volume_json(cp.kubectl(), &s.pv).unwrap();
    assert_eq!(pv["status"]["phase"], "Bound");
    cp.csi.assert_never_deleted(&s.handle);
}

#[test]
fn a_tenant_cannot_remove_the_transfer_protection_finalizer_mid_protocol() {
    let (cp, _turn) = turn();
    pause_before(cp, "R4");
    let s = setup(cp);
    let bob = editor(cp, &unique("bob"), &s.dst.name);
    offer(cp.direct(), &s.src.name, "give", "db", &s.dst.name);
    request(&bob, &s.dst.name, "take", &s.src.name, "db");
    wait_for_r3(cp, &s);
    eventually("the finalizer on the request", WAIT, || {
        transfer_json(cp.direct(), &s.dst.name, "take").is_some_and(|t| {
            t["metadata"]["finalizers"]
                .to_string()
                .contains("storage.transfer.k8s.io/transfer-protection")
        })
    });
    let stripped = bob.run(&[
        "patch",
        "namespacetransfer",
        "take",
        "-n",
        &s.dst.name,
        "--type=json",
        "--patch=[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]",
    ]);
    assert!(!stripped.success, "the finalizer was removed");
    assert!(
        stripped
            .stderr
            .contains("storage.transfer.k8s.io/transfer-protection"),
        "{}",
        stripped.stderr
    );
    restart(cp, &[]);
    wait_phase(cp.direct(), &s.src.name, "give", "Completed", WAIT);
    cp.csi.assert_never_deleted(&s.handle);
}
