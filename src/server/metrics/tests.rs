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
fn a_method_a_client_makes_up_is_counted_as_other_so_it_adds_no_series() {
    let m = Metrics::default();
    for i in 0..100 {
        let method = http::Method::from_bytes(format!("FOO{i}").as_bytes()).unwrap();
        let info = RequestInfo::new(
            &method,
            &"/healthz".parse().unwrap(),
            &crate::endpoints::kinds::Kinds::served(),
        );
        m.observe(RequestLabels::of(&info), 405, Duration::from_millis(1));
    }
    let text = m.render();
    let series = text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .collect::<Vec<_>>();
    assert_eq!(series.len(), 1, "{text}");
    assert!(
        series[0].starts_with("apiserver_request_total{verb=\"OTHER\""),
        "{text}"
    );
    assert!(series[0].ends_with("} 100"), "{text}");
}

/// A transfer in `p` on the side `role` (`source` or `destination`), with
/// `more` merged into its object.
fn transfer(role: &str, mode: &str, phase: &str, more: serde_json::Value) -> NamespaceTransfer {
    let (source, destination) = match role {
        "source" => ("p", "q"),
        _ => ("q", "p"),
    };
    let mut object = serde_json::json!({
        "apiVersion": "storage.transfer.k8s.io/v1alpha1",
        "kind": "NamespaceTransfer",
        "metadata": {"name": "t", "namespace": "p"},
        "spec": {
            "mode": mode,
            "source": {"namespace": source, "name": "db"},
            "destination": {"namespace": destination},
        },
        "status": {"phase": phase},
    });
    merge(&mut object, more);
    serde_json::from_value(object).unwrap()
}

fn merge(into: &mut serde_json::Value, more: serde_json::Value) {
    match (into, more) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn scraped(transfers: &[NamespaceTransfer], now: i64) -> String {
    let mut scrape = Scrape::new();
    scrape.transfers(transfers.iter(), now);
    crate::metrics::text(|r| std::mem::swap(r, scrape.registry()))
}

fn has(text: &str, line: &str) {
    assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
}

#[test]
fn transfers_are_counted_by_phase_and_clones_once_on_the_receiving_side() {
    let none = serde_json::json!({});
    let all = [
        transfer("source", "Move", "Completed", none.clone()),
        transfer("destination", "Move", "Completed", none.clone()),
        transfer("source", "Clone", "Completed", none.clone()),
        transfer("destination", "Clone", "Failed", none),
    ];
    let text = scraped(&all, 0);
    has(
        &text,
        "storage_transfer_namespace_transfers{phase=\"Completed\"} 3",
    );
    has(
        &text,
        "storage_transfer_namespace_transfers{phase=\"Failed\"} 1",
    );
    has(
        &text,
        "storage_transfer_namespace_transfers{phase=\"Rebinding\"} 0",
    );
    has(&text, "storage_transfer_clones{phase=\"Completed\"} 0");
    has(&text, "storage_transfer_clones{phase=\"Failed\"} 1");
}

fn ready(reason: &str) -> serde_json::Value {
    serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": reason, "message": "",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    }]}})
}

#[test]
fn transfers_that_have_not_ended_are_counted_by_their_ready_reason_and_an_unknown_one_is_one_label()
{
    let all = [
        transfer("source", "Move", "WaitingForRelease", ready("SourceInUse")),
        transfer("source", "Move", "WaitingForRelease", ready("SourceInUse")),
        transfer(
            "destination",
            "Move",
            "WaitingForPeer",
            ready("WaitingForPeer"),
        ),
        // A reason this build does not know (a newer server's), twice, and
        // none at all: one closed label, whatever is written.
        transfer("source", "Move", "Pending", ready("SomethingNew")),
        transfer("source", "Move", "Pending", ready("SomethingElse")),
        transfer("source", "Move", "Pending", serde_json::json!({})),
        // Ended transfers do not wait.
        transfer("source", "Move", "Failed", ready("Forbidden")),
    ];
    let text = scraped(&all, 0);
    has(
        &text,
        "storage_transfer_transfers_waiting{reason=\"SourceInUse\"} 2",
    );
    has(
        &text,
        "storage_transfer_transfers_waiting{reason=\"WaitingForPeer\"} 1",
    );
    has(
        &text,
        "storage_transfer_transfers_waiting{reason=\"Unknown\"} 3",
    );
    assert!(!text.contains("Forbidden"), "{text}");
    assert!(!text.contains("SomethingNew"), "{text}");
}

#[test]
fn the_oldest_transfer_of_each_phase_that_has_not_ended_gives_its_age() {
    let created = |at: &str| serde_json::json!({"metadata": {"creationTimestamp": at}});
    let all = [
        transfer(
            "source",
            "Move",
            "Rebinding",
            created("2026-12-01T00:00:00Z"),
        ),
        transfer(
            "source",
            "Move",
            "Rebinding",
            created("2026-12-01T00:10:00Z"),
        ),
        transfer("source", "Move", "Pending", created("2026-12-01T00:59:00Z")),
        transfer(
            "source",
            "Move",
            "Completed",
            created("2026-11-01T00:00:00Z"),
        ),
    ];
    let now = "2026-12-01T01:00:00Z"
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second();
    let text = scraped(&all, now);
    has(
        &text,
        "storage_transfer_oldest_transfer_age_seconds{phase=\"Rebinding\"} 3600",
    );
    has(
        &text,
        "storage_transfer_oldest_transfer_age_seconds{phase=\"Pending\"} 60",
    );
    assert!(
        !text.contains("oldest_transfer_age_seconds{phase=\"Completed\"}"),
        "{text}"
    );
}

#[test]
fn a_transfer_rebinding_is_timed_from_its_locked_step_not_its_creation() {
    let all = [transfer(
        "source",
        "Move",
        "Rebinding",
        serde_json::json!({
            "metadata": {"creationTimestamp": "2026-12-01T00:00:00Z"},
            "status": {"steps": [{"name": "Locked", "time": "2026-12-01T00:55:00Z"}]},
        }),
    )];
    let now = "2026-12-01T01:00:00Z"
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second();
    let text = scraped(&all, now);
    has(&text, "storage_transfer_rebinding_seconds 300");
    has(
        &text,
        "storage_transfer_oldest_transfer_age_seconds{phase=\"Rebinding\"} 3600",
    );
    // None Rebinding: 0, so that the alert's series is always there.
    has(&scraped(&[], now), "storage_transfer_rebinding_seconds 0");
}

#[test]
fn only_the_offers_nearest_their_max_clones_are_shown_however_many_a_tenant_makes() {
    let offer = |i: usize, alive: i64| {
        let mut t = transfer(
            "source",
            "Clone",
            "WaitingForPeer",
            serde_json::json!({
                "metadata": {"name": format!("offer-{i:03}")},
                "spec": {"maxClones": 10},
                "status": {"clones": {"made": alive, "alive": alive}},
            }),
        );
        t.spec.destination.name = String::new();
        t
    };
    // 500 offers with one clone each, and one with nine of ten.
    let mut all: Vec<_> = (0..500).map(|i| offer(i, 1)).collect();
    all.push(offer(777, 9));
    let text = scraped(&all, 0);
    let shown = text
        .lines()
        .filter(|l| l.starts_with("storage_transfer_offer_clones{"))
        .count();
    assert_eq!(shown, MAX_OFFERS_SHOWN, "{text}");
    has(
        &text,
        "storage_transfer_offer_clones{namespace=\"p\",offer=\"offer-777\"} 9",
    );
    has(
        &text,
        "storage_transfer_offer_max_clones{namespace=\"p\",offer=\"offer-777\"} 10",
    );
    has(&text, "storage_transfer_offers 501");
    // Ties are broken by name, so the same offers are shown every scrape.
    has(
        &text,
        "storage_transfer_offer_clones{namespace=\"p\",offer=\"offer-000\"} 1",
    );
    assert!(!text.contains("offer-499"), "{text}");
}

#[test]
fn a_whole_scrape_declares_each_family_once_in_the_text_format() {
    let m = Metrics::default();
    m.observe(list(), 200, Duration::from_millis(3));
    let mut scrape = Scrape::new();
    scrape.transfers(std::iter::empty(), 0);
    scrape.leader(true);
    scrape.open_connections(3);
    scrape.authorization_cache(CacheStats::default());
    let text = scrape.render(&m);
    let mut types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let all = types.len();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types.len(), all, "a family is declared twice in\n{text}");
    has(&text, "storage_transfer_leader 1");
    has(&text, "storage_transfer_open_connections 3");
    // The process's families are served too, once they have a series.
    crate::metrics::global().workqueue.queue("a-whole-scrape");
    let text = scrape.render(&m);
    has(&text, "workqueue_depth{name=\"a-whole-scrape\"} 0");
    assert!(!text.contains("# EOF"), "{text}");
}
