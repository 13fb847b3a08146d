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
