use super::*;
use serde_json::json;

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn running_pod_with(volumes: Value) -> Pod {
    pod(json!({
        "metadata": {"name": "app"},
        "spec": {"nodeName": "n1", "containers": [], "volumes": volumes},
        "status": {"phase": "Running"},
    }))
}

#[test]
fn a_scheduled_running_pod_naming_the_claim_uses_it() {
    let p =
        running_pod_with(json!([{"name": "data", "persistentVolumeClaim": {"claimName": "db"}}]));
    assert!(pod_uses_claim(&p, "db"));
    assert!(!pod_uses_claim(&p, "other"));
}

#[test]
fn an_unscheduled_pod_does_not_use_the_claim() {
    let p = pod(json!({
        "metadata": {"name": "app"},
        "spec": {"containers": [], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "db"}}]},
        "status": {"phase": "Pending"},
    }));
    assert!(!pod_uses_claim(&p, "db"));
}

#[test]
fn a_finished_pod_does_not_use_the_claim() {
    for phase in ["Succeeded", "Failed"] {
        let mut p =
            running_pod_with(json!([{"name": "d", "persistentVolumeClaim": {"claimName": "db"}}]));
        p.status.as_mut().unwrap().phase = Some(phase.to_owned());
        assert!(!pod_uses_claim(&p, "db"), "{phase}");
    }
}

#[test]
fn a_generic_ephemeral_volume_uses_the_claim_named_after_pod_and_volume() {
    let p = running_pod_with(
        json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]),
    );
    assert!(pod_uses_claim(&p, "app-scratch"));
    assert!(!pod_uses_claim(&p, "scratch"));
}

#[test]
fn api_refusals_are_told_apart_from_passing_trouble() {
    let status = |code: u16, reason: &str| {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.to_owned(),
            message: "m".to_owned(),
            ..Default::default()
        }))
    };
    assert!(matches!(
        ClusterError::from(status(404, "NotFound")),
        ClusterError::NotFound { .. }
    ));
    assert!(matches!(
        ClusterError::from(status(409, "AlreadyExists")),
        ClusterError::AlreadyExists { .. }
    ));
    assert!(matches!(
        ClusterError::from(status(409, "Conflict")),
        ClusterError::Conflict { .. }
    ));
    assert!(matches!(
        ClusterError::from(status(403, "Forbidden")),
        ClusterError::Refused { code: 403, .. }
    ));
    assert!(matches!(
        ClusterError::from(status(429, "TooManyRequests")),
        ClusterError::Unavailable(_)
    ));
    assert!(matches!(
        ClusterError::from(status(503, "ServiceUnavailable")),
        ClusterError::Unavailable(_)
    ));
}
