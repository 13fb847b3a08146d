use super::*;

#[test]
fn the_families_are_named_as_kube_names_them() {
    let m = Metrics::new();
    m.workqueue.queue("q").retries.inc();
    m.watch_cache.cache("g", "r", 1);
    m.transfers.step("s", Duration::ZERO);
    m.transfers
        .duration
        .get_or_create(&TransferLabels {
            mode: Mode::Move,
            kind: SourceKind::PersistentVolumeClaim,
            outcome: Outcome::Failed,
        })
        .observe(1.0);
    m.transfers
        .fenced_writes
        .get_or_create(&ControllerLabels { controller: "c" })
        .inc();
    let mut text = String::new();
    m.encode(&mut text);
    for family in [
        "# TYPE workqueue_depth gauge",
        "# TYPE workqueue_adds_total counter",
        "# TYPE workqueue_queue_duration_seconds histogram",
        "# TYPE workqueue_work_duration_seconds histogram",
        "# TYPE workqueue_retries_total counter",
        "# TYPE apiserver_watch_cache_events_received_total counter",
        "# TYPE apiserver_watch_cache_events_dispatched_total counter",
        "# TYPE apiserver_watch_cache_initializations_total counter",
        "# TYPE apiserver_watch_cache_resource_version gauge",
        "# TYPE apiserver_watch_cache_capacity gauge",
        "# TYPE storage_transfer_transfer_duration_seconds histogram",
        "# TYPE storage_transfer_step_duration_seconds histogram",
        "# TYPE storage_transfer_fenced_writes_total counter",
    ] {
        assert!(text.contains(family), "{family} missing in\n{text}");
    }
}

#[test]
fn a_queue_is_labelled_by_its_name_as_client_go_labels_it() {
    let m = Metrics::new();
    let q = m.workqueue.queue("a-queue-of-this-test");
    q.adds.inc();
    q.depth.set(3);
    q.queue_duration.observe(0.5);
    let mut text = String::new();
    m.encode(&mut text);
    assert!(
        text.contains("workqueue_adds_total{name=\"a-queue-of-this-test\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_depth{name=\"a-queue-of-this-test\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "workqueue_queue_duration_seconds_bucket{name=\"a-queue-of-this-test\",le=\"1\"} 1\n"
        ),
        "{text}"
    );
}

#[test]
fn a_transfer_is_labelled_by_mode_source_kind_and_outcome() {
    let m = Metrics::new();
    m.transfers
        .duration
        .get_or_create(&TransferLabels {
            mode: Mode::Clone,
            kind: SourceKind::VolumeSnapshot,
            outcome: Outcome::Completed,
        })
        .observe(42.0);
    m.transfers
        .step("R4-rebind-volume", Duration::from_millis(20));
    let mut text = String::new();
    m.encode(&mut text);
    assert!(
        text.contains("storage_transfer_transfer_duration_seconds_count{mode=\"Clone\",kind=\"VolumeSnapshot\",outcome=\"Completed\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "storage_transfer_step_duration_seconds_count{step=\"R4-rebind-volume\"} 1\n"
        ),
        "{text}"
    );
}

#[test]
fn a_cache_is_labelled_by_its_group_and_resource_and_shows_its_capacity() {
    let m = Metrics::new();
    let c = m.watch_cache.cache("example.com", "things", 10_000);
    c.events_received.inc();
    c.resource_version.set(42);
    let mut text = String::new();
    m.encode(&mut text);
    for line in [
        "apiserver_watch_cache_capacity{group=\"example.com\",resource=\"things\"} 10000",
        "apiserver_watch_cache_events_received_total{group=\"example.com\",resource=\"things\"} 1",
        "apiserver_watch_cache_resource_version{group=\"example.com\",resource=\"things\"} 42",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}
