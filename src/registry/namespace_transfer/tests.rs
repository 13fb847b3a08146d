use serde_json::json;

use super::*;

fn destination_cell(t: serde_json::Value) -> Value {
    let t: NamespaceTransfer = serde_json::from_value(t).unwrap();
    NamespaceTransferStrategy.table_cells(&t)[4].clone()
}

#[test]
fn the_destination_column_shows_what_a_populating_request_serves() {
    let request = |status: serde_json::Value| {
        json!({
            "metadata": {"name": "take", "namespace": "dev"},
            "spec": {"source": {"namespace": "prod", "name": "db"}, "destination": {"populate": true}},
            "status": status,
        })
    };
    assert_eq!(destination_cell(request(json!({}))), "dev/<populate>");
    let adopted = json!({"destinationClaim": {"namespace": "dev", "name": "data", "uid": "u"}});
    assert_eq!(destination_cell(request(adopted)), "dev/data");
    let offer = json!({
        "metadata": {"name": "give", "namespace": "prod"},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"}},
    });
    assert_eq!(destination_cell(offer), "dev/*");
}

fn cells(t: serde_json::Value) -> Vec<Value> {
    let t: NamespaceTransfer = serde_json::from_value(t).unwrap();
    NamespaceTransferStrategy.table_cells(&t)
}

#[test]
fn a_claim_transfer_shows_its_source_and_destination_as_namespace_slash_name() {
    let request = json!({
        "metadata": {"name": "take", "namespace": "dev"},
        "spec": {"source": {"namespace": "prod", "name": "db"}, "destination": {"name": "db2"}},
    });
    let row = cells(request);
    assert_eq!(row[3], "prod/db");
    assert_eq!(row[4], "dev/db2");
    let explicit = json!({
        "metadata": {"name": "give", "namespace": "prod"},
        "spec": {"source": {"kind": "PersistentVolumeClaim", "name": "db"}, "destination": {"namespace": "dev"}},
    });
    let row = cells(explicit);
    assert_eq!(row[3], "prod/db");
    assert_eq!(row[4], "dev/*");
}

#[test]
fn a_snapshot_transfer_shows_its_kind_in_the_source_and_destination_columns() {
    let offer = json!({
        "metadata": {"name": "give", "namespace": "prod"},
        "spec": {"source": {"kind": "VolumeSnapshot", "name": "nightly"}, "destination": {"namespace": "dev"}},
        "status": {"role": "Source", "phase": "WaitingForPeer"},
    });
    let row = cells(offer);
    assert_eq!(row[1], "Source");
    assert_eq!(row[2], "Move");
    assert_eq!(row[3], "volumesnapshot/prod/nightly");
    assert_eq!(row[4], "volumesnapshot/dev/*");
    assert_eq!(row[5], "WaitingForPeer");
    let request = json!({
        "metadata": {"name": "take", "namespace": "dev"},
        "spec": {
            "source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "nightly"},
            "destination": {"name": "restored"},
        },
    });
    let row = cells(request);
    assert_eq!(row[1], "Destination");
    assert_eq!(row[3], "volumesnapshot/prod/nightly");
    assert_eq!(row[4], "volumesnapshot/dev/restored");
}

#[test]
fn the_table_keeps_seven_columns_whatever_the_source_kind() {
    let columns = NamespaceTransferStrategy.table_columns();
    let names: Vec<_> = columns.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Role",
            "Mode",
            "Source",
            "Destination",
            "Phase",
            "Age"
        ]
    );
    let snapshot = json!({
        "metadata": {"name": "give", "namespace": "prod"},
        "spec": {"source": {"kind": "VolumeSnapshot", "name": "nightly"}, "destination": {"namespace": "dev"}},
    });
    assert_eq!(cells(snapshot).len(), columns.len());
}

fn claims_of(t: serde_json::Value) -> Vec<UniqueClaim> {
    let t: NamespaceTransfer = serde_json::from_value(t).unwrap();
    NamespaceTransferStrategy.unique_claims(&t)
}

#[test]
fn a_snapshot_and_a_claim_of_the_same_name_are_held_under_different_keys() {
    let claim = claims_of(json!({
        "metadata": {"name": "give-claim", "namespace": "prod"},
        "spec": {"source": {"name": "db"}, "destination": {"namespace": "dev"}},
    }));
    let snapshot = claims_of(json!({
        "metadata": {"name": "give-snapshot", "namespace": "prod"},
        "spec": {"source": {"kind": "VolumeSnapshot", "name": "db"}, "destination": {"namespace": "dev"}},
    }));
    assert_eq!(
        claim,
        vec![UniqueClaim {
            index: "source/prod/db".to_owned(),
            what: "source claim prod/db".to_owned(),
        }]
    );
    assert_eq!(
        snapshot,
        vec![UniqueClaim {
            index: "source/volumesnapshot/prod/db".to_owned(),
            what: "source snapshot prod/db".to_owned(),
        }]
    );
    let received = claims_of(json!({
        "metadata": {"name": "take", "namespace": "dev"},
        "spec": {
            "source": {"kind": "VolumeSnapshot", "namespace": "prod", "name": "db"},
            "destination": {"name": "db"},
        },
    }));
    assert_eq!(
        received,
        vec![UniqueClaim {
            index: "destination/volumesnapshot/dev/db".to_owned(),
            what: "destination snapshot dev/db".to_owned(),
        }]
    );
}
