use super::*;

fn list() -> RequestLabels {
    RequestLabels {
        verb: "LIST".to_owned(),
        resource: "namespacetransfers".to_owned(),
        subresource: String::new(),
    }
}

#[test]
fn requests_are_counted_by_verb_resource_and_code() {
    let m = Metrics::default();
    m.observe(list(), 200, Duration::from_millis(3));
    m.observe(list(), 200, Duration::from_millis(30));
    m.observe(list(), 400, Duration::from_millis(1));
    let text = m.render();
    assert!(text.contains(r#"apiserver_request_total{verb="LIST",group="storage.transfer.k8s.io",version="v1alpha1",resource="namespacetransfers",subresource="",code="200"} 2"#), "{text}");
    assert!(text.contains(r#"code="400"} 1"#), "{text}");
}

#[test]
fn latency_buckets_are_cumulative_and_watches_are_left_out() {
    let m = Metrics::default();
    m.observe(list(), 200, Duration::from_millis(3));
    m.observe(list(), 200, Duration::from_millis(30));
    let mut watch = list();
    watch.verb = "WATCH".to_owned();
    m.observe(watch, 200, Duration::from_secs(600));
    let text = m.render();
    assert!(text.contains(r#"le="0.005"} 1"#), "{text}");
    assert!(text.contains(r#"le="0.05"} 2"#), "{text}");
    assert!(text.contains(r#"le="+Inf"} 2"#), "{text}");
    assert!(
        !text.contains(r#"apiserver_request_duration_seconds_count{verb="WATCH""#),
        "{text}"
    );
    assert!(
        text.contains(r#"apiserver_request_total{verb="WATCH""#),
        "{text}"
    );
}

#[test]
fn a_request_is_labelled_by_its_verb_and_resource_or_else_by_its_method() {
    let info = |method: http::Method, target: &str| {
        RequestInfo::new(
            &method,
            &target.parse().unwrap(),
            &crate::endpoints::kinds::Kinds::served(),
        )
    };
    let status = RequestLabels::of(&info(
        http::Method::PATCH,
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/ephemeralclaims/a/status",
    ));
    assert_eq!(status.verb, "PATCH");
    assert_eq!(status.resource, "ephemeralclaims");
    assert_eq!(status.subresource, "status");
    let own = RequestLabels::of(&info(http::Method::GET, "/metrics"));
    assert_eq!((own.verb.as_str(), own.resource.as_str()), ("GET", ""));
}

#[test]
fn transfers_are_counted_by_phase_and_clones_once_on_the_receiving_side() {
    let transfer = |role: &str, mode: &str, phase: &str| -> NamespaceTransfer {
        let (source, destination) = match role {
            "source" => ("p", "q"),
            _ => ("q", "p"),
        };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.transfer.k8s.io/v1alpha1",
            "kind": "NamespaceTransfer",
            "metadata": {"name": "t", "namespace": "p"},
            "spec": {
                "mode": mode,
                "source": {"namespace": source, "name": "db"},
                "destination": {"namespace": destination},
            },
            "status": {"phase": phase},
        }))
        .unwrap()
    };
    let all = [
        transfer("source", "Move", "Completed"),
        transfer("destination", "Move", "Completed"),
        transfer("source", "Clone", "Completed"),
        transfer("destination", "Clone", "Failed"),
    ];
    let text = transfers_by_phase(all.iter());
    assert!(
        text.contains("storage_transfer_namespace_transfers{phase=\"Completed\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("storage_transfer_namespace_transfers{phase=\"Failed\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("storage_transfer_clones{phase=\"Completed\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("storage_transfer_clones{phase=\"Failed\"} 1\n"),
        "{text}"
    );
}
