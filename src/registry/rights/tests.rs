use super::*;
use crate::api::ephemeral_claim::EphemeralClaim;
use crate::api::meta::Object;
use crate::api::namespace_transfer::NamespaceTransfer;
use crate::registry::ephemeral_claim::claim_rights;
use crate::registry::namespace_transfer::transfer_rights;

fn transfer(ns: &str, spec: serde_json::Value) -> NamespaceTransfer {
    let mut obj: NamespaceTransfer = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t", "namespace": ns},
        "spec": spec,
    }))
    .unwrap();
    obj.apply_defaults();
    obj
}

#[test]
fn each_role_needs_the_rights_of_its_side() {
    let source = transfer(
        "prod",
        serde_json::json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}}),
    );
    assert_eq!(
        transfer_rights(&source),
        [Right::pvcs("delete", "prod", "db", "giving a claim away")]
    );
    let destination = transfer(
        "dev",
        serde_json::json!({"source": {"namespace": "prod", "name": "db"}}),
    );
    assert_eq!(
        transfer_rights(&destination),
        [Right::pvcs("create", "dev", "", "receiving a claim")]
    );
    let both = transfer(
        "prod",
        serde_json::json!({"source": {"name": "db"}, "destination": {"name": "db2"}}),
    );
    assert_eq!(transfer_rights(&both).len(), 2);
}

#[test]
fn a_clone_offer_needs_to_read_the_source_and_create_a_claim_beside_it_not_to_delete_it() {
    let offer = transfer(
        "prod",
        serde_json::json!({"source": {"name": "db"}, "destination": {"namespace": "dev"}, "mode": "Clone"}),
    );
    assert_eq!(
        transfer_rights(&offer),
        [
            Right::pvcs("get", "prod", "db", "giving a clone of it"),
            Right::pvcs("create", "prod", "", "making the clone"),
        ]
    );
    let request = transfer(
        "dev",
        serde_json::json!({"source": {"namespace": "prod", "name": "db"}, "mode": "Clone"}),
    );
    assert_eq!(
        transfer_rights(&request),
        [Right::pvcs("create", "dev", "", "receiving a claim")]
    );
    let rename = transfer(
        "prod",
        serde_json::json!({"source": {"name": "db"}, "destination": {"name": "db2"}, "mode": "Clone"}),
    );
    assert_eq!(transfer_rights(&rename).len(), 3);
}

#[test]
fn a_cloning_claim_needs_to_read_its_source() {
    let obj: EphemeralClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "EphemeralClaim",
        "metadata": {"name": "c", "namespace": "ci"},
        "spec": {
            "owner": {"apiVersion": "v1", "kind": "Pod", "name": "p"},
            "claimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "fixture"}
            }}
        }
    }))
    .unwrap();
    let rights = claim_rights(&obj);
    assert_eq!(
        rights[0],
        Right::pvcs("create", "ci", "", "creating the claim")
    );
    assert_eq!(rights[1].verb, "get");
    assert_eq!(rights[1].resource, "volumesnapshots");
    assert_eq!(rights[1].group, "snapshot.storage.k8s.io");
    assert_eq!(rights[1].name, "fixture");
    assert_eq!(
        rights[1].describe(),
        "get volumesnapshots.snapshot.storage.k8s.io \"fixture\" in namespace \"ci\""
    );
}

#[test]
fn a_claim_cloned_from_another_namespace_needs_only_to_create_its_claim() {
    let obj: EphemeralClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "EphemeralClaim",
        "metadata": {"name": "c", "namespace": "ci"},
        "spec": {
            "owner": {"apiVersion": "v1", "kind": "Pod", "name": "p"},
            "claimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "dataSourceRef": {"kind": "PersistentVolumeClaim", "namespace": "prod", "name": "db"}
            }}
        }
    }))
    .unwrap();
    assert_eq!(
        claim_rights(&obj),
        [Right::pvcs("create", "ci", "", "creating the claim")],
        "the consent is prod's standing offer, not the requester's right to read prod"
    );
}

#[test]
fn a_snapshot_is_given_by_deleting_it_and_received_by_creating_one() {
    let source = transfer(
        "prod",
        serde_json::json!({"source": {"kind": "VolumeSnapshot", "name": "nightly"},
                           "destination": {"namespace": "dev"}}),
    );
    let give = transfer_rights(&source);
    assert_eq!(
        give,
        [Right::snapshots(
            "delete",
            "prod",
            "nightly",
            "giving a snapshot away"
        )]
    );
    assert_eq!(
        give[0].describe(),
        "delete volumesnapshots.snapshot.storage.k8s.io \"nightly\" in namespace \"prod\""
    );
    let destination = transfer(
        "dev",
        serde_json::json!({"source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"}}),
    );
    assert_eq!(
        transfer_rights(&destination),
        [Right::snapshots(
            "create",
            "dev",
            "",
            "receiving a snapshot"
        )]
    );
}

#[test]
fn a_clone_of_a_snapshot_is_given_by_reading_it_and_restoring_a_claim_and_received_as_a_claim() {
    let source = transfer(
        "prod",
        serde_json::json!({"source": {"kind": "VolumeSnapshot", "name": "nightly"},
                           "mode": "Clone", "destination": {"namespace": "dev"}}),
    );
    assert_eq!(
        transfer_rights(&source),
        [
            Right::snapshots("get", "prod", "nightly", "giving a clone of it"),
            Right::pvcs("create", "prod", "", "restoring the clone"),
        ]
    );
    let destination = transfer(
        "dev",
        serde_json::json!({"source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"},
                           "mode": "Clone"}),
    );
    assert_eq!(
        transfer_rights(&destination),
        [Right::pvcs("create", "dev", "", "receiving a claim")]
    );
}
