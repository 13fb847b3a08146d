use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::api::namespace_transfer::FINALIZER_TRANSFER_PROTECTION;

const NOW: i64 = 1_800_000_000;

/// `dev/clones`, a standing populating request for clones of `prod/db`.
fn standing() -> NamespaceTransfer {
    serde_json::from_value(json!({
        "metadata": {"namespace": "dev", "name": "clones", "uid": "uid-clones",
                     "creationTimestamp": "2027-01-15T08:00:00Z"},
        "spec": {"mode": "Clone", "source": {"namespace": "prod", "name": "db"},
                 "destination": {"namespace": "dev", "populate": true}},
        "status": {"phase": "WaitingForPeer"}
    }))
    .unwrap()
}

/// A claim `name` of `dev` naming `clones`, made at `created`, in `phase`.
fn claim(name: &str, created: i64, phase: &str) -> Claim {
    let created = Timestamp::from_second(created).unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"namespace": "dev", "name": name, "uid": format!("uid-{name}"),
                     "creationTimestamp": created.to_string()},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "resources": {"requests": {"storage": "1Gi"}},
                 "dataSourceRef": {"apiGroup": "storage.transfer.k8s.io",
                                   "kind": "NamespaceTransfer", "name": "clones"}},
        "status": {"phase": phase}
    }))
    .unwrap();
    Claim::from(&pvc)
}

/// The request `r` made for `claim`, in `phase`.
fn made(r: &NamespaceTransfer, claim: &Claim, phase: Option<Phase>) -> NamespaceTransfer {
    let mut t = request_for(r, claim);
    t.metadata.uid = Some(format!("uid-for-{}", claim.name));
    t.status = phase.map(|phase| NamespaceTransferStatus {
        phase: Some(phase),
        reason: Some("Because".to_owned()),
        ..NamespaceTransferStatus::default()
    });
    t
}

#[test]
fn every_pending_claim_that_names_a_standing_request_gets_a_request_of_its_own() {
    let r = standing();
    let claims = [
        claim("data-web-0", NOW - 30, "Pending"),
        claim("data-web-1", NOW - 20, "Pending"),
    ];
    let turn = serving_turn(&r, &claims, &[], NOW);
    assert!(turn.protect, "the finalizer goes on before any request");
    assert_eq!(turn.make.len(), 2);
    for (t, c) in turn.make.iter().zip(&claims) {
        assert_eq!(t.served_claim_uid(), Some(c.uid.as_str()));
        assert!(made_for(t, &r), "{t:?}");
        assert_eq!(t.populated_name(), "clones");
        assert!(!t.is_standing_request());
        assert_eq!(t.mode(), TransferMode::Clone);
        assert_eq!(t.spec.source, r.spec.source);
        assert!(c.asks(t), "the request asks for its claim");
    }
    assert_ne!(turn.make[0].metadata.name, turn.make[1].metadata.name);
    // Another claim that names the standing request is not the request's.
    assert!(!claims[1].asks(&turn.make[0]));
    assert_eq!(turn.then, ServingNext::After(SERVING_RECOUNT));
}

#[test]
fn a_claim_with_a_request_bound_or_deleting_gets_no_other() {
    let mut r = standing();
    r.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
    let served = claim("served", NOW - 50, "Pending");
    let bound = claim("bound", NOW - 40, "Bound");
    let mut deleting = claim("deleting", NOW - 30, "Pending");
    deleting.deleting = true;
    let mut named = claim("named", NOW - 20, "Pending");
    named.volume_name = Some("pv-elsewhere".to_owned());
    let under_way = made(&r, &served, Some(Phase::WaitingForRelease));
    let claims = [served, bound, deleting, named];
    let turn = serving_turn(&r, &claims, &[&under_way], NOW);
    assert!(turn.make.is_empty(), "{:?}", turn.make);
    assert!(!turn.protect);
    assert!(turn.delete.is_empty());
}

#[test]
fn a_turn_makes_a_bounded_number_of_requests() {
    let r = standing();
    let claims: Vec<Claim> = (0..(MADE_PER_TURN + 5))
        .map(|i| {
            claim(
                &format!("c{i}"),
                NOW - 100 + i64::try_from(i).unwrap(),
                "Pending",
            )
        })
        .collect();
    let turn = serving_turn(&r, &claims, &[], NOW);
    assert_eq!(turn.make.len(), MADE_PER_TURN);
    assert_eq!(
        turn.make[0].served_claim_uid(),
        Some("uid-c0"),
        "oldest first"
    );
}

#[test]
fn a_finished_request_whose_claim_went_is_deleted_and_one_whose_claim_stays_is_kept() {
    let r = standing();
    let stays = claim("stays", NOW - 50, "Pending");
    let gone = claim("gone", NOW - 40, "Pending");
    let failed = made(&r, &stays, Some(Phase::Failed));
    let completed = made(&r, &gone, Some(Phase::Completed));
    let gone_active = {
        let mut t = made(
            &r,
            &claim("went", NOW - 30, "Pending"),
            Some(Phase::Rebinding),
        );
        t.metadata.name = Some("active".to_owned());
        t
    };
    let turn = serving_turn(&r, &[stays], &[&failed, &completed, &gone_active], NOW);
    let deleted: Vec<&str> = turn.delete.iter().map(name_of).collect();
    assert_eq!(deleted, vec![name_of(&completed)]);
    let Some(ServingWrite::Serving { served, message }) = &turn.write else {
        panic!("{:?}", turn.write);
    };
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].name, "stays");
    assert_eq!(served[0].transfer, name_of(&failed));
    assert_eq!(served[0].phase, Some(Phase::Failed));
    assert!(
        message.contains("0 served, 0 under way, 1 failed"),
        "{message}"
    );
}

#[test]
fn a_status_that_already_says_it_all_is_not_written_again() {
    let mut r = standing();
    let c = claim("data", NOW - 10, "Pending");
    let t = made(&r, &c, Some(Phase::WaitingForRelease));
    let turn = serving_turn(&r, std::slice::from_ref(&c), &[&t], NOW);
    let Some(ServingWrite::Serving { served, message }) = turn.write else {
        panic!("a first status");
    };
    serving(
        r.status.get_or_insert_with(Default::default),
        &served,
        &message,
    );
    let again = serving_turn(&r, &[c], &[&t], NOW);
    assert_eq!(again.write, None);
}

#[test]
fn a_deleted_standing_request_deletes_its_requests_and_lets_go_once_none_is_left() {
    let mut r = standing();
    r.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(NOW).unwrap()));
    r.metadata.finalizers = Some(vec![FINALIZER_TRANSFER_PROTECTION.to_owned()]);
    let a = made(&r, &claim("a", NOW - 10, "Pending"), Some(Phase::Completed));
    let mut b = made(&r, &claim("b", NOW - 5, "Pending"), Some(Phase::Rebinding));
    b.metadata.deletion_timestamp = r.metadata.deletion_timestamp.clone();
    let turn = serving_turn(&r, &[claim("a", NOW - 10, "Pending")], &[&a, &b], NOW);
    assert!(turn.make.is_empty(), "no new request once deleted");
    let deleted: Vec<&str> = turn.delete.iter().map(name_of).collect();
    assert_eq!(deleted, vec![name_of(&a)], "b is already going");
    assert_eq!(turn.then, ServingNext::After(DELETING_POLL));
    let last = serving_turn(&r, &[], &[], NOW);
    assert_eq!(last.then, ServingNext::LetGo);
    assert!(matches!(
        last.write,
        Some(ServingWrite::Finish {
            phase: Phase::Cancelled,
            ..
        })
    ));
}

#[test]
fn past_its_deadline_a_standing_request_makes_no_more_requests() {
    let mut r = standing();
    r.spec.active_deadline_seconds = Some(20);
    let created = r
        .metadata
        .creation_timestamp
        .as_ref()
        .unwrap()
        .0
        .as_second();
    let turn = serving_turn(
        &r,
        &[claim("late", created + 21, "Pending")],
        &[],
        created + 21,
    );
    assert!(turn.make.is_empty());
    assert!(matches!(
        turn.write,
        Some(ServingWrite::Finish {
            phase: Phase::Failed,
            ..
        })
    ));
    let early = serving_turn(
        &r,
        &[claim("early", created + 1, "Pending")],
        &[],
        created + 1,
    );
    assert_eq!(early.make.len(), 1);
    assert_eq!(early.then, ServingNext::After(Duration::from_secs(19)));
}

#[test]
fn a_request_name_is_valid_and_distinct_per_claim_even_for_the_longest_standing_name() {
    let mut r = standing();
    r.metadata.name = Some("x".repeat(253));
    let a = request_name(&r, "uid-a");
    let b = request_name(&r, "uid-b");
    assert!(a.len() <= 253, "{}", a.len());
    assert_ne!(a, b);
    assert_eq!(request_name(&r, "uid-a"), a, "every replica names it alike");
}

#[test]
fn a_request_someone_else_controls_or_for_no_claim_is_not_the_standing_requests() {
    let r = standing();
    let c = claim("data", NOW, "Pending");
    let mut t = made(&r, &c, None);
    assert!(made_for(&t, &r));
    if let Some(owners) = t.metadata.owner_references.as_mut() {
        owners[0].uid = "uid-other".to_owned();
    }
    assert!(!made_for(&t, &r));
    let mut unannotated = made(&r, &c, None);
    unannotated.metadata.annotations = None;
    assert!(!made_for(&unannotated, &r));
    let mut elsewhere = made(&r, &c, None);
    elsewhere.metadata.namespace = Some("prod".to_owned());
    assert!(!made_for(&elsewhere, &r));
}

#[test]
fn past_the_listing_bound_the_claims_whose_request_failed_are_listed_first() {
    let r = standing();
    let total = MAX_SERVED_LISTED + 5;
    let claims: Vec<Claim> = (0..total)
        .map(|i| claim(&format!("c{i:03}"), NOW - 1_000 + i as i64, "Bound"))
        .collect();
    // The oldest are served; the newest two failed.
    let made_for: Vec<NamespaceTransfer> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let phase = if i + 2 >= total {
                Phase::Failed
            } else {
                Phase::Completed
            };
            made(&r, c, Some(phase))
        })
        .collect();
    let refs: Vec<&NamespaceTransfer> = made_for.iter().collect();
    let turn = serving_turn(&r, &claims, &refs, NOW);
    let Some(ServingWrite::Serving { served, message }) = &turn.write else {
        panic!("{:?}", turn.write);
    };
    assert_eq!(served.len(), MAX_SERVED_LISTED);
    let names: Vec<&str> = served.iter().take(3).map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        vec!["c103", "c104", "c000"],
        "failed first, then oldest"
    );
    assert!(
        message.contains(&format!("{} served", total - 2)) && message.contains("2 failed"),
        "{message}"
    );
}

#[test]
fn a_finished_standing_request_still_deletes_the_finished_requests_whose_claim_went() {
    let mut r = standing();
    r.status.as_mut().unwrap().phase = Some(Phase::Failed);
    let went = made(
        &r,
        &claim("went", NOW - 30, "Pending"),
        Some(Phase::Completed),
    );
    let stays_claim = claim("stays", NOW - 20, "Bound");
    let stays = made(&r, &stays_claim, Some(Phase::Completed));
    let turn = serving_turn(&r, &[stays_claim], &[&went, &stays], NOW);
    let deleted: Vec<&str> = turn.delete.iter().map(name_of).collect();
    assert_eq!(deleted, vec![name_of(&went)]);
    assert!(turn.make.is_empty() && turn.write.is_none(), "{turn:?}");
}
