//! The index only narrows: every transfer a trigger's own test keeps is
//! found among the tagged, checked against a full scan over a corpus of
//! transfers of every role, mode and kind, each event kind in turn.

use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::api::meta::Object;
use crate::api::namespace_transfer::{PairRecord, SourceClaimSnapshot};

const NAMESPACES: [&str; 3] = ["a", "b", "c"];

fn corpus() -> Vec<NamespaceTransfer> {
    let mut all = Vec::new();
    let mut n = 0;
    for own in NAMESPACES {
        for (source_ns, dest_ns) in [("a", "b"), ("b", "c"), ("a", "a"), ("c", "a")] {
            for source in ["db", "logs"] {
                for dest in ["", "db", "copy"] {
                    for mode in ["Move", "Clone"] {
                        for kind in ["PersistentVolumeClaim", "VolumeSnapshot"] {
                            n += 1;
                            let mut t: NamespaceTransfer = serde_json::from_value(json!({
                                "metadata": {"namespace": own, "name": format!("t{n}"), "uid": format!("uid-{n}")},
                                "spec": {
                                    "source": {"namespace": source_ns, "name": source, "kind": kind},
                                    "destination": {"namespace": dest_ns, "name": dest},
                                    "mode": mode,
                                },
                            }))
                            .unwrap();
                            if t.role().is_err() {
                                continue;
                            }
                            t.apply_defaults();
                            t.reset_status();
                            let st = t.status.as_mut().unwrap();
                            match n % 4 {
                                0 => st.phase = Some(crate::api::namespace_transfer::NamespaceTransferPhase::Completed),
                                1 => st.source_claim = Some(snapshot(&format!("pv-{}", n % 5))),
                                2 => st.pairs = vec![PairRecord {
                                    source_claim: snapshot(&format!("pv-{}", n % 7)),
                                    ..PairRecord::default()
                                }],
                                _ => {}
                            }
                            all.push(t);
                        }
                    }
                }
            }
        }
    }
    all
}

fn snapshot(volume: &str) -> SourceClaimSnapshot {
    SourceClaimSnapshot {
        volume_name: volume.to_owned(),
        ..SourceClaimSnapshot::default()
    }
}

fn indexed(all: &[NamespaceTransfer]) -> Known<NamespaceTransfer> {
    let known = Known::new(transfer_tags);
    let mut index = known.write();
    for t in all {
        index.insert(object_key(t), crate::registry::Shared::new(t.clone()));
    }
    drop(index);
    known
}

/// The keys the index finds for `tags`, and those a full scan finds.
fn both<K>(
    known: &Known<NamespaceTransfer>,
    all: &[NamespaceTransfer],
    tags: &[String],
    concerns: impl Fn(&NamespaceTransfer, &K) -> bool,
    event: &K,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let found = known.read().concerned(tags, |t| concerns(t, event));
    let scanned = all.iter().filter(|t| concerns(t, event)).map(object_key);
    (found.into_iter().collect(), scanned.collect())
}

fn named<K: kube::Resource + Default>(namespace: Option<&str>, name: &str) -> K {
    let mut o = K::default();
    o.meta_mut().namespace = namespace.map(str::to_owned);
    o.meta_mut().name = Some(name.to_owned());
    o
}

#[test]
fn a_claim_event_finds_through_the_index_every_transfer_a_full_scan_finds() {
    let all = corpus();
    let known = indexed(&all);
    let mut names = vec![
        "db".to_owned(),
        "logs".to_owned(),
        "copy".to_owned(),
        "other".to_owned(),
    ];
    names.extend(all.iter().map(|t| t.clone_claim_name("abcde")));
    let mut hits = 0;
    for ns in NAMESPACES {
        for name in &names {
            let claim: PersistentVolumeClaim = named(Some(ns), name);
            let (found, scanned) = both(
                &known,
                &all,
                &claim_event_tags(&claim),
                claim_concerns,
                &claim,
            );
            assert_eq!(found, scanned, "claim {ns}/{name}");
            hits += scanned.len();
        }
    }
    assert!(
        hits > all.len(),
        "the corpus has claims that concern transfers: {hits}"
    );
}

#[test]
fn a_pod_event_finds_through_the_index_every_transfer_a_full_scan_finds() {
    let all = corpus();
    let known = indexed(&all);
    for ns in NAMESPACES {
        let pod: PartialObjectMeta<Pod> = named(Some(ns), "user");
        let (found, scanned) = both(&known, &all, &pod_event_tags(&pod), pod_concerns, &pod);
        assert_eq!(found, scanned, "a pod in {ns}");
        assert!(
            !scanned.is_empty() || ns == "c" && all.iter().all(|t| t.source_namespace() != "c")
        );
    }
}

#[test]
fn a_volume_event_finds_through_the_index_every_transfer_that_recorded_it() {
    let all = corpus();
    let known = indexed(&all);
    for v in 0..8 {
        let volume: PersistentVolume = named(None, &format!("pv-{v}"));
        let (found, scanned) = both(
            &known,
            &all,
            &volume_event_tags(&volume),
            volume_concerns,
            &volume,
        );
        assert_eq!(found, scanned, "volume pv-{v}");
        assert!(v == 7 || !scanned.is_empty(), "pv-{v} was recorded by some");
    }
}

#[test]
fn a_transfer_s_change_finds_through_the_index_every_peer_a_full_scan_finds() {
    let all = corpus();
    let known = indexed(&all);
    let mut peers = 0;
    for t in &all {
        let (found, scanned) = both(
            &known,
            &all,
            &[source_tag(t)],
            |o, t| are_peers(t, o) || are_peers(o, t),
            t,
        );
        assert_eq!(found, scanned, "the peers of {}", object_key(t));
        peers += scanned.len();
        let related: BTreeSet<String> = related(t, &known.read()).into_iter().collect();
        assert!(related.is_superset(&scanned));
    }
    assert!(peers > 0, "the corpus holds pairs");
}

#[test]
fn a_transfer_that_changes_its_volume_or_goes_is_filed_under_its_new_tags_only() {
    let all = corpus();
    let known = indexed(&all);
    let mut t = all
        .iter()
        .find(|t| {
            t.status
                .as_ref()
                .is_some_and(|st| st.source_claim.is_some())
        })
        .unwrap()
        .clone();
    let old = t
        .status
        .as_ref()
        .unwrap()
        .source_claim
        .as_ref()
        .unwrap()
        .volume_name
        .clone();
    t.status.as_mut().unwrap().source_claim = Some(snapshot("pv-new"));
    known
        .write()
        .insert(object_key(&t), crate::registry::Shared::new(t.clone()));
    let volume = |name: &str| -> PersistentVolume { named(None, name) };
    let finds = |name: &str| {
        let v = volume(name);
        known
            .read()
            .concerned(&volume_event_tags(&v), |o| volume_concerns(o, &v))
    };
    assert!(finds("pv-new").contains(&object_key(&t)));
    assert!(!finds(&old).contains(&object_key(&t)));
    known.write().remove(&object_key(&t));
    assert!(finds("pv-new").is_empty());
}
