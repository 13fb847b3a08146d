use super::*;
use crate::api::meta::Object;
use crate::api::namespace_transfer::{NamespaceTransferPhase, NamespaceTransferStatus};
use serde_json::{json, Value};

fn transfer(ns: &str, name: &str, created: i64, spec: Value) -> NamespaceTransfer {
    let mut t: NamespaceTransfer = serde_json::from_value(json!({
        "metadata": {
            "namespace": ns,
            "name": name,
            "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created).unwrap().to_string(),
        },
        "spec": spec,
    }))
    .unwrap();
    t.apply_defaults();
    t.reset_status();
    t
}

fn offer(name: &str, created: i64) -> NamespaceTransfer {
    transfer(
        "prod",
        name,
        created,
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}}),
    )
}

fn request(ns: &str, name: &str, created: i64) -> NamespaceTransfer {
    transfer(
        ns,
        name,
        created,
        json!({"source": {"namespace": "prod", "name": "db"}}),
    )
}

fn with_phase(mut t: NamespaceTransfer, phase: NamespaceTransferPhase) -> NamespaceTransfer {
    t.status
        .get_or_insert_with(NamespaceTransferStatus::default)
        .phase = Some(phase);
    t
}

#[test]
fn an_offer_and_a_request_for_the_same_claim_are_peers() {
    assert!(are_peers(&offer("s", 1), &request("dev", "d", 2)));
}

#[test]
fn a_request_from_another_namespace_is_not_a_peer() {
    assert!(!are_peers(&offer("s", 1), &request("qa", "d", 2)));
}

#[test]
fn an_offer_naming_the_destination_claim_matches_only_that_name() {
    let s = transfer(
        "prod",
        "s",
        1,
        json!({"source": {"name": "db"}, "destination": {"namespace": "dev", "name": "db2"}}),
    );
    assert!(!are_peers(&s, &request("dev", "d", 2)));
    let d = transfer(
        "dev",
        "d",
        2,
        json!({"source": {"namespace": "prod", "name": "db"}, "destination": {"name": "db2"}}),
    );
    assert!(are_peers(&s, &d));
}

#[test]
fn different_modes_or_claims_do_not_match() {
    let d = transfer(
        "dev",
        "d",
        2,
        json!({"source": {"namespace": "prod", "name": "db"}, "mode": "Clone"}),
    );
    assert!(!are_peers(&offer("s", 1), &d));
    let other = transfer(
        "dev",
        "d",
        2,
        json!({"source": {"namespace": "prod", "name": "logs"}}),
    );
    assert!(!are_peers(&offer("s", 1), &other));
}

#[test]
fn the_oldest_request_wins_then_the_first_name() {
    let all = vec![
        offer("s", 1),
        request("dev", "b-late", 9),
        request("dev", "z", 5),
        request("dev", "a", 5),
    ];
    assert_eq!(
        peer_of(&all[0], &all).unwrap().metadata.name.as_deref(),
        Some("a")
    );
    assert_eq!(
        destination_view(&all[3], &all),
        DestinationView::Matched(&all[0])
    );
    match destination_view(&all[1], &all) {
        DestinationView::Taken { winner, .. } => {
            assert_eq!(winner.metadata.name.as_deref(), Some("a"))
        }
        other => panic!("expected Taken, got {other:?}"),
    }
}

#[test]
fn a_recorded_peer_keeps_the_match_even_against_an_older_request() {
    let mut s = offer("s", 1);
    s.status.as_mut().unwrap().peer = Some(PeerReference {
        namespace: "dev".to_owned(),
        name: "late".to_owned(),
        uid: None,
    });
    let all = vec![s, request("dev", "early", 0), request("dev", "late", 7)];
    assert_eq!(
        peer_of(&all[0], &all).unwrap().metadata.name.as_deref(),
        Some("late")
    );
    assert!(matches!(
        destination_view(&all[1], &all),
        DestinationView::Taken { .. }
    ));
}

#[test]
fn finished_transfers_take_no_part_in_matching() {
    let all = vec![
        offer("s", 1),
        with_phase(request("dev", "old", 0), NamespaceTransferPhase::Failed),
        request("dev", "new", 3),
    ];
    assert_eq!(
        peer_of(&all[0], &all).unwrap().metadata.name.as_deref(),
        Some("new")
    );
    let finished_offer = with_phase(offer("s", 1), NamespaceTransferPhase::Completed);
    let all = vec![finished_offer, request("dev", "d", 3)];
    assert_eq!(destination_view(&all[1], &all), DestinationView::Unmatched);
}

#[test]
fn a_request_that_lost_an_offer_stays_taken_after_the_offer_completes() {
    let mut s = with_phase(offer("s", 1), NamespaceTransferPhase::Completed);
    let st = s.status.as_mut().unwrap();
    st.peer = Some(PeerReference {
        namespace: "dev".to_owned(),
        name: "winner".to_owned(),
        uid: None,
    });
    st.conditions
        .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Ready".to_owned(),
            status: "True".to_owned(),
            reason: "Completed".to_owned(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(10).unwrap(),
            ),
            observed_generation: None,
        });
    let all = vec![
        s,
        request("dev", "winner", 2),
        request("dev", "loser", 3),
        request("dev", "later", 20),
    ];
    assert!(matches!(
        destination_view(&all[2], &all),
        DestinationView::Taken { .. }
    ));
    assert_eq!(
        destination_view(&all[3], &all),
        DestinationView::Unmatched,
        "a request made after the offer finished waits for a new offer"
    );
}

#[test]
fn a_request_without_an_offer_is_unmatched() {
    let all = vec![request("dev", "d", 1)];
    assert_eq!(destination_view(&all[0], &all), DestinationView::Unmatched);
}

fn clone_of(mut t: NamespaceTransfer) -> NamespaceTransfer {
    t.spec.mode = Some(crate::api::namespace_transfer::TransferMode::Clone);
    t
}

#[test]
fn a_standing_clone_offer_matches_every_clone_request_and_is_never_taken() {
    let s = clone_of(offer("give", 1));
    assert!(s.is_standing_offer());
    let a = clone_of(request("dev", "a", 2));
    let b = clone_of(request("dev", "b", 3));
    let all = vec![s.clone(), a.clone(), b.clone()];
    for d in [&a, &b] {
        assert!(
            matches!(destination_view(d, &all), DestinationView::Matched(m) if m.metadata.name == s.metadata.name)
        );
    }
    // A Move request is not a clone request; a finished offer matches none.
    let moving = request("dev", "m", 4);
    assert_eq!(destination_view(&moving, &all), DestinationView::Unmatched);
    let done = with_phase(s, NamespaceTransferPhase::Failed);
    assert_eq!(
        destination_view(&a, &[done, a.clone()]),
        DestinationView::Unmatched
    );
}

#[test]
fn a_clone_offer_that_names_its_destination_is_one_shot() {
    let mut s = clone_of(offer("give", 1));
    s.spec.destination.name = "db".to_owned();
    assert!(!s.is_standing_offer());
    let a = clone_of(request("dev", "a", 2));
    let b = clone_of(request("dev", "b", 3));
    let all = vec![s.clone(), a.clone(), b.clone()];
    assert!(matches!(
        destination_view(&a, &all),
        DestinationView::Matched(_)
    ));
    assert!(matches!(
        destination_view(&b, &all),
        DestinationView::Taken { .. }
    ));
}

fn with_uid(mut t: NamespaceTransfer, uid: &str) -> NamespaceTransfer {
    t.metadata.uid = Some(uid.to_owned());
    t
}

fn recording(mut t: NamespaceTransfer, peer: PeerReference) -> NamespaceTransfer {
    t.status
        .get_or_insert_with(NamespaceTransferStatus::default)
        .peer = Some(peer);
    t
}

const S_UID: &str = "5b0c1c3e-0b7a-4d52-9a44-6a2f4f0d7e11";
const D_UID: &str = "c2f1a0d4-8e53-4b1e-b6e7-0f9a7d3c2b45";
const D2_UID: &str = "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70";

#[test]
fn the_uid_a_transfer_records_for_its_peer_is_not_the_peers() {
    let s = with_uid(offer("s", 1), S_UID);
    let d = with_uid(request("dev", "d", 2), D_UID);
    let recorded = reference(&d, &s);
    assert_eq!(
        (recorded.namespace.as_str(), recorded.name.as_str()),
        ("dev", "d")
    );
    let uid = recorded.uid.unwrap();
    assert_ne!(uid, D_UID);
    assert!(!uid.contains(&D_UID[..8]), "{uid}");
    assert!(uuid::Uuid::parse_str(&uid).is_ok(), "{uid}");
}

#[test]
fn the_recorded_uid_is_the_same_on_every_replica_and_differs_by_holder() {
    assert_eq!(peer_uid(S_UID, D_UID), peer_uid(S_UID, D_UID));
    assert_ne!(peer_uid(S_UID, D_UID), peer_uid(D_UID, S_UID));
    assert_ne!(peer_uid(S_UID, D_UID), peer_uid(S_UID, D2_UID));
    // A holder whose uid is not a UUID still gets a namespace of its own.
    assert_ne!(peer_uid("uid-1", D_UID), peer_uid("uid-2", D_UID));
}

#[test]
fn a_recorded_peer_is_found_by_the_uid_its_holder_records() {
    let s = with_uid(offer("s", 1), S_UID);
    let d = with_uid(request("dev", "d", 2), D_UID);
    assert!(is_named(&d, &reference(&d, &s), &s));
    assert!(is_named(&s, &reference(&s, &d), &d));
}

#[test]
fn a_peer_recreated_under_the_same_name_is_not_the_matched_one() {
    let s = with_uid(offer("s", 1), S_UID);
    let d = with_uid(request("dev", "d", 2), D_UID);
    let again = with_uid(request("dev", "d", 3), D2_UID);
    let recorded = reference(&d, &s);
    assert!(!is_named(&again, &recorded, &s));
    let s = recording(s, recorded);
    let all = [again.clone()];
    assert_eq!(peer_of(&s, &all), None);
    let all = [again, d.clone()];
    assert_eq!(peer_of(&s, &all), Some(&d));
}

#[test]
fn a_reference_recorded_by_another_holder_names_nothing() {
    let s = with_uid(offer("s", 1), S_UID);
    let other = with_uid(offer("other", 1), D2_UID);
    let d = with_uid(request("dev", "d", 2), D_UID);
    assert!(!is_named(&d, &reference(&d, &other), &s));
}

#[test]
fn a_record_made_before_records_were_derived_still_names_its_peer() {
    // An older server recorded the peer's own uid.
    let s = with_uid(offer("s", 1), S_UID);
    let d = with_uid(request("dev", "d", 2), D_UID);
    let again = with_uid(request("dev", "d", 3), D2_UID);
    let raw = PeerReference {
        namespace: "dev".to_owned(),
        name: "d".to_owned(),
        uid: Some(D_UID.to_owned()),
    };
    assert!(is_named(&d, &raw, &s));
    assert!(!is_named(&again, &raw, &s));
}

#[test]
fn a_record_made_before_records_were_derived_keeps_its_form() {
    let s = with_uid(offer("s", 1), S_UID);
    let d = with_uid(request("dev", "d", 2), D_UID);
    let again = with_uid(request("dev", "d", 3), D2_UID);
    let raw = PeerReference {
        namespace: "dev".to_owned(),
        name: "d".to_owned(),
        uid: Some(D_UID.to_owned()),
    };
    assert_eq!(rerecord(Some(&raw), &d, &s), raw);
    // Not once it names another object, and never made anew.
    assert_eq!(rerecord(Some(&raw), &again, &s), reference(&again, &s));
    assert_eq!(rerecord(None, &d, &s), reference(&d, &s));
    let derived = reference(&d, &s);
    assert_eq!(rerecord(Some(&derived), &d, &s), derived);
}

#[test]
fn a_clone_is_made_for_the_uid_the_offer_records_and_an_older_pairs_for_the_raw_one() {
    let s = clone_of(with_uid(offer("s", 1), S_UID));
    let d = clone_of(with_uid(request("dev", "d", 2), D_UID));
    assert_eq!(receiver_uid(&s, &d), peer_uid(S_UID, D_UID));
    let recorded = recording(s.clone(), reference(&d, &s));
    assert_eq!(receiver_uid(&recorded, &d), peer_uid(S_UID, D_UID));
    // The clone's name carries nothing of the request's uid.
    assert!(!s
        .clone_claim_name(&receiver_uid(&s, &d))
        .contains(&D_UID[..5]));
    // A pair an older server matched: either side's record holds a raw uid.
    let raw_on_s = recording(
        s.clone(),
        PeerReference {
            namespace: "dev".to_owned(),
            name: "d".to_owned(),
            uid: Some(D_UID.to_owned()),
        },
    );
    assert_eq!(receiver_uid(&raw_on_s, &d), D_UID);
    let raw_on_d = recording(
        d.clone(),
        PeerReference {
            namespace: "prod".to_owned(),
            name: "s".to_owned(),
            uid: Some(S_UID.to_owned()),
        },
    );
    assert_eq!(receiver_uid(&s, &raw_on_d), D_UID);
}

#[test]
fn a_standing_offer_finds_its_requests_by_the_uid_they_record() {
    let s = clone_of(with_uid(offer("s", 1), S_UID));
    let d = recording(
        clone_of(with_uid(request("dev", "d", 2), D_UID)),
        reference(&s, &clone_of(with_uid(request("dev", "d", 2), D_UID))),
    );
    let stranger = recording(
        clone_of(with_uid(request("dev", "e", 2), D2_UID)),
        reference(&s, &d),
    );
    let all = [d.clone(), stranger];
    let pairs: Vec<_> = standing_pairs(&s, &all).collect();
    assert_eq!(pairs, vec![&d]);
}

#[test]
fn a_claim_locked_by_a_transfer_is_held_by_it_under_either_form_of_its_lock() {
    let s = with_uid(offer("give", 1), S_UID);
    let d = with_uid(request("dev", "take", 2), D_UID);
    let lock = destination_lock(&s, "dev", "db");
    assert!(
        holds_claim(&s, &lock, "dev", "db"),
        "the lock R3 puts on it"
    );
    assert!(
        holds_claim(&s, S_UID, "dev", "db"),
        "an older server's lock"
    );
    assert!(holds_claim(&s, S_UID, "prod", "db"), "the source's lock");
    // Read on another claim, or held by another transfer, it is not.
    assert!(!holds_claim(&s, &lock, "dev", "db2"));
    assert!(!holds_claim(&d, &lock, "dev", "db"));
    assert!(!holds_claim(&d, S_UID, "dev", "db"));
    // A transfer with no uid yet holds nothing.
    let unsaved = offer("new", 3);
    assert!(!holds_claim(&unsaved, "", "dev", "db"));
    assert!(!holds_claim(
        &unsaved,
        &destination_lock(&unsaved, "dev", "db"),
        "dev",
        "db"
    ));
}
