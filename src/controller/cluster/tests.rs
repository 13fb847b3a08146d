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

// ----- the read cache -----------------------------------------------------------

use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event as WatchEvent;

fn claim_at(name: &str, version: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
    }))
    .unwrap()
}

/// A read cache over a claims copy filled with `claims` (listed, so ready).
fn cache_with(claims: &[PersistentVolumeClaim]) -> (ReadCache, Writer<PersistentVolumeClaim>) {
    let mut writer = Writer::default();
    writer.apply_watcher_event(&WatchEvent::Init);
    for c in claims {
        writer.apply_watcher_event(&WatchEvent::InitApply(c.clone()));
    }
    writer.apply_watcher_event(&WatchEvent::InitDone);
    let volumes = Writer::<PersistentVolume>::default();
    (
        ReadCache::new(writer.as_reader(), volumes.as_reader()),
        writer,
    )
}

fn lookup(cache: &ReadCache, name: &str) -> Option<Option<String>> {
    cache
        .lookup(
            &claim_key("ns", name),
            &cache.claims,
            &ObjectRef::new(name).within("ns"),
        )
        .map(|found| found.and_then(|c| c.metadata.resource_version))
}

#[test]
fn a_copy_that_has_not_listed_yet_is_never_read() {
    let writer = Writer::<PersistentVolumeClaim>::default();
    let volumes = Writer::<PersistentVolume>::default();
    let cache = ReadCache::new(writer.as_reader(), volumes.as_reader());
    assert_eq!(lookup(&cache, "db"), None, "read live");
}

#[test]
fn an_object_nobody_here_wrote_is_read_from_the_copy_present_or_absent() {
    let (cache, _writer) = cache_with(&[claim_at("db", "5")]);
    assert_eq!(lookup(&cache, "db"), Some(Some("5".to_owned())));
    assert_eq!(lookup(&cache, "other"), Some(None));
}

#[test]
fn after_its_own_write_the_controller_reads_live_until_the_copy_shows_that_write() {
    let (cache, mut writer) = cache_with(&[claim_at("db", "5")]);
    cache.wrote(claim_key("ns", "db"), Expect::Version("7".to_owned()));
    assert_eq!(
        lookup(&cache, "db"),
        None,
        "the copy still shows 5: read live"
    );
    writer.apply_watcher_event(&WatchEvent::Apply(claim_at("db", "6")));
    assert_eq!(lookup(&cache, "db"), None, "6 is not the write either");
    writer.apply_watcher_event(&WatchEvent::Apply(claim_at("db", "7")));
    assert_eq!(lookup(&cache, "db"), Some(Some("7".to_owned())));
    // Caught up: later versions are the copy's to tell again.
    writer.apply_watcher_event(&WatchEvent::Apply(claim_at("db", "9")));
    assert_eq!(lookup(&cache, "db"), Some(Some("9".to_owned())));
}

#[test]
fn an_object_seen_gone_is_read_live_while_the_copy_still_has_it() {
    let (cache, mut writer) = cache_with(&[claim_at("db", "5")]);
    let began = cache.begin_read();
    cache.read(claim_key("ns", "db"), began, Expect::Absent);
    assert_eq!(lookup(&cache, "db"), None);
    writer.apply_watcher_event(&WatchEvent::Delete(claim_at("db", "5")));
    assert_eq!(lookup(&cache, "db"), Some(None));
}

#[test]
fn a_refused_write_makes_the_next_read_live() {
    let (cache, _writer) = cache_with(&[claim_at("db", "5")]);
    let refused: Result<PersistentVolumeClaim, ClusterError> = Err(ClusterError::Conflict {
        message: "the object has been modified".to_owned(),
    });
    cache.wrote(claim_key("ns", "db"), expect_after(&refused));
    assert_eq!(lookup(&cache, "db"), None);
    // The live read says what to expect; the copy agrees, so it is trusted.
    let began = cache.begin_read();
    cache.read(
        claim_key("ns", "db"),
        began,
        expect_read(&Some(claim_at("db", "5"))),
    );
    assert_eq!(lookup(&cache, "db"), Some(Some("5".to_owned())));
}

#[test]
fn a_live_read_that_began_before_a_write_never_replaces_what_the_write_recorded() {
    // The copy has not seen the claim this controller just created.
    let (cache, _writer) = cache_with(&[]);
    let key = claim_key("ns", "db");
    let began = cache.begin_read();
    cache.wrote(key.clone(), Expect::Version("7".to_owned()));
    // A slow read from before the create lands now, having found nothing.
    cache.read(key.clone(), began, Expect::Absent);
    assert_eq!(
        lookup(&cache, "db"),
        None,
        "still read live, not 'absent' from the copy"
    );
    // A read that began after the write is recorded.
    let began = cache.begin_read();
    cache.read(key, began, Expect::Version("8".to_owned()));
    assert_eq!(lookup(&cache, "db"), None);
}

#[test]
fn a_403_from_the_authorizer_for_our_own_account_is_retried_and_a_policys_is_a_refusal() {
    let forbidden = |message: &str| {
        ClusterError::from(kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            reason: "Forbidden".to_owned(),
            message: message.to_owned(),
            ..Default::default()
        })))
    };
    // What kube-apiserver's RBAC authorizer answers until its caches have
    // synced after a restart (seen by the chaos soak): not a refusal of
    // the step, but of who is asking, which the deployment grants.
    let unsynced = forbidden(
        "persistentvolumeclaims is forbidden: User \"system:serviceaccount:storage-transfer-system:storage-transfer-apiserver\" cannot create resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"dst\"",
    );
    assert!(
        matches!(&unsynced, ClusterError::Unavailable(m) if m.contains("cannot create resource")),
        "{unsynced:?}"
    );
    for refusal in [
        "persistentvolumeclaims \"db\" is forbidden: exceeded quota: tiny, requested: requests.storage=1Gi, used: requests.storage=0, limited: requests.storage=100Mi",
        "admission webhook \"claims.example.com\" denied the request: no",
        "persistentvolumeclaims \"db\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no",
        "unable to create new content in namespace dst because it is being terminated",
    ] {
        assert!(
            matches!(forbidden(refusal), ClusterError::Refused { code: 403, .. }),
            "{refusal}"
        );
    }
}
