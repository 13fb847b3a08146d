use super::*;

const COUNT: &str = "count/namespacetransfers.storage.transfer.k8s.io";

/// A quota as the quota controller leaves it: `hard` copied to the status,
/// `used` counted (`None`: not counted yet).
fn quota(name: &str, hard: &str, used: Option<&str>) -> ResourceQuota {
    let mut status = json!({"hard": {COUNT: hard}});
    if let Some(used) = used {
        status["used"] = json!({COUNT: used});
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "team", "uid": name, "resourceVersion": "7"},
        "spec": {"hard": {COUNT: hard}},
        "status": status,
    }))
    .unwrap()
}

#[test]
fn a_create_under_every_limit_is_charged_to_each_quota_that_counts_it() {
    let quotas = [
        quota("small", "5", Some("4")),
        quota("large", "1k", Some("10")),
    ];
    assert_eq!(
        check_create(&quotas, COUNT),
        Ok(vec![
            Charge {
                index: 0,
                used: "5".to_owned()
            },
            Charge {
                index: 1,
                used: "11".to_owned()
            },
        ])
    );
}

#[test]
fn a_create_past_a_limit_is_refused_with_kubes_message() {
    let quotas = [quota("other", "10", Some("0")), quota("q", "2", Some("2"))];
    let refusal = check_create(&quotas, COUNT).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "exceeded quota: q, requested: count/namespacetransfers.storage.transfer.k8s.io=1, used: count/namespacetransfers.storage.transfer.k8s.io=2, limited: count/namespacetransfers.storage.transfer.k8s.io=2"
    );
    assert_eq!(
        forbidden(
            &GroupResource::new("storage.transfer.k8s.io", "namespacetransfers"),
            "t3",
            &refusal
        )
        .to_string(),
        format!("namespacetransfers.storage.transfer.k8s.io \"t3\" is forbidden: {refusal}")
    );
}

#[test]
fn a_limit_of_zero_refuses_the_first_create() {
    assert!(matches!(
        check_create(&[quota("none", "0", Some("0"))], COUNT),
        Err(Refusal::Exceeded { .. })
    ));
}

#[test]
fn a_quota_the_controller_has_not_counted_yet_refuses_as_kube_does() {
    assert_eq!(
        check_create(&[quota("q", "5", None)], COUNT)
            .unwrap_err()
            .to_string(),
        "status unknown for quota: q, resources: count/namespacetransfers.storage.transfer.k8s.io"
    );
}

#[test]
fn quotas_that_do_not_count_the_resource_charge_nothing() {
    let mut other = quota("pods", "5", Some("5"));
    other.status = Some(
        serde_json::from_value(json!({"hard": {"pods": "1"}, "used": {"pods": "1"}})).unwrap(),
    );
    // Only status.hard counts: the controller has not taken in the spec yet.
    let mut unsynced = quota("new", "0", Some("0"));
    unsynced.status = None;
    let claims = quota("claims", "0", Some("0"));
    assert_eq!(check_create(&[other, unsynced], COUNT), Ok(vec![]));
    assert_eq!(
        check_create(&[claims], "count/ephemeralclaims.storage.transfer.k8s.io"),
        Ok(vec![])
    );
}

#[test]
fn a_quota_with_scopes_never_counts_our_objects_as_kube_matches_no_scope_for_them() {
    let mut scoped = quota("scoped", "0", Some("0"));
    scoped.spec.as_mut().unwrap().scopes = Some(vec!["NotTerminating".to_owned()]);
    let mut selected = quota("selected", "0", Some("0"));
    selected.spec = Some(
        serde_json::from_value(json!({
            "hard": {COUNT: "0"},
            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]},
        }))
        .unwrap(),
    );
    let mut empty_selector = quota("empty", "0", Some("0"));
    empty_selector.spec =
        Some(serde_json::from_value(json!({"hard": {COUNT: "0"}, "scopeSelector": {}})).unwrap());
    assert_eq!(check_create(&[scoped, selected], COUNT), Ok(vec![]));
    assert!(check_create(&[empty_selector], COUNT).is_err());
}

#[test]
fn hard_and_used_values_that_are_not_quantities_refuse_without_failing() {
    for (hard, used) in [
        ("lots", "0"),
        ("", "0"),
        ("5", "five"),
        ("1e99999", "0"),
        ("99999999999999999999999999999999999999999", "0"),
        ("5", "170141183460469231731687303715884105727m"),
        ("1..5", "0"),
        ("5 ", "0"),
    ] {
        let refusal = check_create(&[quota("q", hard, Some(used))], COUNT).unwrap_err();
        assert!(
            matches!(refusal, Refusal::Unreadable { .. }),
            "{hard:?} {used:?}: {refusal:?}"
        );
        assert!(
            refusal.to_string().starts_with("failed quota: q: "),
            "{refusal}"
        );
    }
}

#[test]
fn a_negative_hard_limit_refuses_every_create() {
    let refusal = check_create(&[quota("q", "-1", Some("0"))], COUNT).unwrap_err();
    assert!(matches!(refusal, Refusal::Exceeded { .. }), "{refusal:?}");
}

#[test]
fn quantities_are_read_in_thousandths_as_kube_reads_them() {
    for (text, milli) in [
        ("0", 0),
        ("5", 5000),
        ("+5", 5000),
        ("-2", -2000),
        ("1.5", 1500),
        (".5", 500),
        ("1k", 1_000_000),
        ("2M", 2_000_000_000),
        ("1Ki", 1_024_000),
        ("1Gi", 1_073_741_824_000),
        ("500m", 500),
        ("1u", 1),
        ("1n", 1),
        ("0n", 0),
        ("1e3", 1_000_000),
        ("1E-3", 1),
        ("12e+1", 120_000),
    ] {
        assert_eq!(parse_milli(text), Some(milli), "{text}");
    }
    for text in ["", "k", "-", "1x", "1ki", "1e", "1e1000", "1.2.3", " 1"] {
        assert_eq!(parse_milli(text), None, "{text:?}");
    }
}

#[test]
fn a_fractional_usage_is_written_back_in_thousandths() {
    assert_eq!(
        check_create(&[quota("q", "5", Some("1500m"))], COUNT),
        Ok(vec![Charge {
            index: 0,
            used: "2500m".to_owned()
        }])
    );
}
