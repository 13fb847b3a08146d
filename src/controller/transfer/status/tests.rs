use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::namespace_transfer::ClaimReference;
use crate::controller::transfer::decide::tests::committed;
use crate::controller::transfer::facts::Peer;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_800_000_000 + second).unwrap())
}

fn change(edit: Edit) -> StatusChange {
    StatusChange {
        say: Some(("Step", "a step".to_owned())),
        edit,
        peer_of: None,
        peer_phase: None,
    }
}

#[test]
fn the_peers_completed_write_copies_the_steps_and_conditions_it_was_not_told_with_their_times() {
    let f = committed();
    let Peer::Found(peer) = &f.peer else {
        panic!("a pair")
    };
    let (mut source, mut peer) = (f.source.clone(), (**peer).clone());
    let mut st = source.status.clone().unwrap_or_default();
    let mut dst = peer.status.clone().unwrap_or_default();
    // R1 reached both; R2, R4 (and the steps between) the source alone.
    let locked = change(Edit::Locked {
        snapshot: None,
        released: "free".to_owned(),
    });
    let pair = (&source, Some(&peer));
    apply_change(&mut st, &locked, &source, pair, None, &at(1));
    apply_change(&mut dst, &locked, &peer, pair, None, &at(1));
    let rebound = Edit::Committed {
        rebound: "the volume now names dev/db".to_owned(),
    };
    let source_alone = [
        (Edit::Retained, 2),
        (Edit::Step(StepName::Created), 3),
        (rebound, 4),
        (Edit::Step(StepName::Released), 5),
    ];
    for (edit, second) in source_alone {
        apply_change(&mut st, &change(edit), &source, pair, None, &at(second));
    }
    source.status = Some(st.clone());
    peer.status = Some(dst.clone());

    let completed = change(Edit::Completed {
        volume: "pv-db".to_owned(),
        served: None,
        release: true,
    });
    let pair = (&source, Some(&peer));
    apply_change(&mut dst, &completed, &peer, pair, None, &at(6));
    let steps: Vec<(StepName, Time)> = dst.steps.iter().map(|x| (x.name, x.time.clone())).collect();
    assert_eq!(
        steps,
        [
            (StepName::Locked, at(1)),
            (StepName::Retained, at(2)),
            (StepName::Created, at(3)),
            (StepName::Committed, at(4)),
            (StepName::Released, at(5)),
            (StepName::Settled, at(6)),
        ],
        "each step at the time it was done"
    );
    for kind in [CONDITION_AUTHORIZED, CONDITION_REBOUND] {
        let theirs = apimeta::find_condition(&st.conditions, kind).unwrap();
        let ours = apimeta::find_condition(&dst.conditions, kind).unwrap();
        assert_eq!(ours.status, CONDITION_TRUE);
        assert_eq!(ours.message, theirs.message);
        assert_eq!(ours.last_transition_time, theirs.last_transition_time);
    }
    // The source's own Completed write copies nothing onto itself.
    let before = st.steps.len();
    apply_change(&mut st, &completed, &source, pair, None, &at(6));
    assert_eq!(st.steps.len(), before + 1);
}

#[test]
fn r3s_record_carries_r2s_step_and_the_confirmed_rights_as_r2_writes_no_record_of_its_own() {
    let f = committed();
    let source = f.source.clone();
    let mut st = NamespaceTransferStatus::default();
    let locked = change(Edit::Locked {
        snapshot: None,
        released: "free".to_owned(),
    });
    apply_change(&mut st, &locked, &source, (&source, None), None, &at(1));
    st.reason = Some("Waiting".to_owned());
    let created = change(Edit::Destination(ClaimReference {
        namespace: "dev".to_owned(),
        name: "db".to_owned(),
        uid: "uid-dest".to_owned(),
    }));
    apply_change(&mut st, &created, &source, (&source, None), None, &at(3));
    let steps: Vec<(StepName, Time)> = st.steps.iter().map(|x| (x.name, x.time.clone())).collect();
    assert_eq!(
        steps,
        [
            (StepName::Locked, at(1)),
            (StepName::Retained, at(3)),
            (StepName::Created, at(3)),
        ]
    );
    let authorized = apimeta::find_condition(&st.conditions, CONDITION_AUTHORIZED).unwrap();
    assert_eq!(authorized.status, CONDITION_TRUE);
    assert_eq!(authorized.reason, "RightsConfirmed");
    assert_eq!(st.reason, None);
}
