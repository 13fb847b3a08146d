use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::namespace_transfer::{
    ClaimReference, NamespaceTransferPhase as Phase, NamespaceTransferSpec,
    NamespaceTransferStatus, TransferDestination, TransferSource,
};

/// `dev/take`, requesting `prod/db`; `populate` as given.
fn request(populate: Option<bool>) -> NamespaceTransfer {
    NamespaceTransfer {
        metadata: ObjectMeta {
            namespace: Some("dev".to_owned()),
            name: Some("take".to_owned()),
            uid: Some("uid-take".to_owned()),
            ..ObjectMeta::default()
        },
        spec: NamespaceTransferSpec {
            source: TransferSource {
                namespace: "prod".to_owned(),
                name: "db".to_owned(),
                ..TransferSource::default()
            },
            destination: TransferDestination {
                namespace: "dev".to_owned(),
                name: if populate == Some(true) { "" } else { "db" }.to_owned(),
                populate,
            },
            ..NamespaceTransferSpec::default()
        },
        status: Some(NamespaceTransferStatus {
            phase: Some(Phase::WaitingForPeer),
            ..NamespaceTransferStatus::default()
        }),
        ..NamespaceTransfer::default()
    }
}

fn told(t: Option<&NamespaceTransfer>, uid: &str) -> Option<(&'static str, String)> {
    unserved(t, "dev", "take", uid)
}

#[test]
fn a_claim_naming_a_request_that_does_not_exist_is_told_what_to_create() {
    let (reason, note) = told(None, "uid-data").unwrap();
    assert_eq!(reason, REASON_TRANSFER_NOT_FOUND);
    assert!(note.contains("spec.destination.populate: true"), "{note}");
}

#[test]
fn a_claim_naming_an_offer_or_a_request_that_makes_its_own_claim_is_told_it_fills_none() {
    let mut offer = request(None);
    offer.metadata.namespace = Some("prod".to_owned());
    offer.spec.source.namespace = "prod".to_owned();
    let (reason, note) = told(Some(&offer), "uid-data").unwrap();
    assert_eq!(reason, REASON_TRANSFER_NOT_POPULATING);
    assert!(note.contains("gives a volume away"), "{note}");
    let (reason, note) = told(Some(&request(None)), "uid-data").unwrap();
    assert_eq!(reason, REASON_TRANSFER_NOT_POPULATING);
    assert!(note.contains("creates its own claim \"db\""), "{note}");
}

#[test]
fn a_populating_request_still_waiting_tells_its_claims_nothing_here() {
    assert_eq!(told(Some(&request(Some(true))), "uid-data"), None);
}

#[test]
fn a_deleting_or_finished_request_tells_every_claim_but_the_one_it_served() {
    let mut t = request(Some(true));
    t.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    assert!(told(Some(&t), "uid-data")
        .unwrap()
        .1
        .contains("being deleted"));
    let mut t = request(Some(true));
    let st = t.status.as_mut().unwrap();
    st.phase = Some(Phase::Completed);
    st.destination_claim = Some(ClaimReference {
        namespace: "dev".to_owned(),
        name: "data".to_owned(),
        uid: "uid-data".to_owned(),
    });
    assert_eq!(told(Some(&t), "uid-data"), None);
    let (reason, note) = told(Some(&t), "uid-late").unwrap();
    assert_eq!(reason, REASON_NOT_ADOPTED);
    assert!(
        note.contains("adopted PersistentVolumeClaim data"),
        "{note}"
    );
    t.status.as_mut().unwrap().phase = Some(Phase::Failed);
    let (reason, note) = told(Some(&t), "uid-late").unwrap();
    assert_eq!(reason, REASON_TRANSFER_NOT_POPULATING);
    assert!(note.contains("is Failed"), "{note}");
}

#[test]
fn a_move_that_adopted_a_claim_tells_the_others_which() {
    let mut t = request(Some(true));
    t.status.as_mut().unwrap().destination_claim = Some(ClaimReference {
        namespace: "dev".to_owned(),
        name: "data".to_owned(),
        uid: "uid-data".to_owned(),
    });
    assert_eq!(told(Some(&t), "uid-data"), None);
    let (reason, note) = told(Some(&t), "uid-racer").unwrap();
    assert_eq!(reason, REASON_NOT_ADOPTED);
    assert!(
        note.contains("adopted PersistentVolumeClaim data"),
        "{note}"
    );
}

#[test]
fn a_waiting_claim_is_told_once_per_poll_however_often_its_transfer_is_reconciled() {
    let mut t = Told::default();
    let start = Instant::now();
    assert!(t.due("a", start));
    assert!(!t.due("a", start + CLAIM_POLL / 2));
    assert!(t.due("b", start + CLAIM_POLL / 2));
    assert!(t.due("a", start + CLAIM_POLL));
    // Claims no longer told are forgotten.
    t.due("c", start + CLAIM_POLL * 5);
    assert_eq!(t.0.len(), 1);
}

#[test]
fn a_key_is_forgotten_only_if_no_claim_named_it_since_the_look_began() {
    use crate::controller::watch::NamedKeys;
    let keys = NamedKeys::default();
    assert_eq!(
        keys.marked("dev/take"),
        None,
        "never named: never looked at"
    );
    keys.mark("dev/take");
    let seen = keys.marked("dev/take").unwrap();
    // A claim's event lands while a look that found none is under way.
    keys.mark("dev/take");
    keys.forget("dev/take", seen);
    let seen = keys.marked("dev/take").expect("the later mark is kept");
    keys.forget("dev/take", seen);
    assert_eq!(keys.marked("dev/take"), None);
}

#[test]
fn a_claim_whose_request_from_a_standing_request_failed_is_told_so_and_how_to_ask_again() {
    let mut standing = request(Some(true));
    standing.spec.mode = Some(crate::api::namespace_transfer::TransferMode::Clone);
    assert!(standing.is_standing_request());
    // Under way, or not reached yet: the request made for it speaks.
    assert_eq!(told(Some(&standing), "uid-data"), None);
    standing.status.as_mut().unwrap().served = vec![crate::api::namespace_transfer::ServedClaim {
        name: "data".to_owned(),
        uid: "uid-data".to_owned(),
        transfer: "take-1a2b3c4d".to_owned(),
        phase: Some(Phase::Failed),
        reason: Some("ClaimMismatch".to_owned()),
    }];
    let (reason, note) = told(Some(&standing), "uid-data").unwrap();
    assert_eq!(reason, REASON_CLAIM_NOT_SERVED);
    assert!(note.contains("take-1a2b3c4d"), "{note}");
    assert!(note.contains("ClaimMismatch"), "{note}");
    assert_eq!(told(Some(&standing), "uid-other"), None);
    standing.status.as_mut().unwrap().phase = Some(Phase::Cancelled);
    assert_eq!(
        told(Some(&standing), "uid-other").map(|(r, _)| r),
        Some(REASON_TRANSFER_NOT_POPULATING)
    );
}

#[test]
fn a_claim_naming_a_request_made_for_another_claim_is_told_which_to_name() {
    let mut made = request(Some(true));
    made.spec.mode = Some(crate::api::namespace_transfer::TransferMode::Clone);
    made.metadata.annotations = Some(
        [(
            crate::api::namespace_transfer::ANNOTATION_SERVES_CLAIM.to_owned(),
            "uid-data".to_owned(),
        )]
        .into_iter()
        .collect(),
    );
    made.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: crate::api::GROUP_VERSION.to_owned(),
            kind: "NamespaceTransfer".to_owned(),
            name: "clones".to_owned(),
            uid: "uid-clones".to_owned(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    assert_eq!(told(Some(&made), "uid-data"), None);
    let (reason, note) = told(Some(&made), "uid-intruder").unwrap();
    assert_eq!(reason, REASON_TRANSFER_NOT_POPULATING);
    assert!(note.contains("dev/clones"), "{note}");
}
