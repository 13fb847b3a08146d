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
