use super::*;

fn parse_ok(method: &str, path: &str, query: &str) -> ResourceRequest {
    let q = Query::parse(Some(query));
    parse(&Method::from_bytes(method.as_bytes()).unwrap(), path, &q)
        .unwrap()
        .unwrap_or_else(|| panic!("{path} is not ours"))
}

#[test]
fn verbs_follow_kube_request_info() {
    let base = "/apis/storage.transfer.k8s.io/v1alpha1";
    let cases = [
        (
            "GET",
            format!("{base}/namespaces/p/namespacetransfers"),
            "",
            Verb::List,
        ),
        ("GET", format!("{base}/namespacetransfers"), "", Verb::List),
        (
            "GET",
            format!("{base}/namespacetransfers"),
            "watch=true",
            Verb::Watch,
        ),
        (
            "GET",
            format!("{base}/namespaces/p/namespacetransfers/a"),
            "",
            Verb::Get,
        ),
        (
            "GET",
            format!("{base}/namespaces/p/namespacetransfers/a"),
            "watch=1",
            Verb::Watch,
        ),
        (
            "POST",
            format!("{base}/namespaces/p/ephemeralclaims"),
            "",
            Verb::Create,
        ),
        (
            "PUT",
            format!("{base}/namespaces/p/ephemeralclaims/a"),
            "",
            Verb::Update,
        ),
        (
            "PATCH",
            format!("{base}/namespaces/p/ephemeralclaims/a/status"),
            "",
            Verb::Patch,
        ),
        (
            "DELETE",
            format!("{base}/namespaces/p/ephemeralclaims/a"),
            "",
            Verb::Delete,
        ),
        (
            "DELETE",
            format!("{base}/namespaces/p/ephemeralclaims"),
            "",
            Verb::DeleteCollection,
        ),
    ];
    for (method, path, query, verb) in cases {
        assert_eq!(
            parse_ok(method, &path, query).verb,
            verb,
            "{method} {path}?{query}"
        );
    }
    let r = parse_ok(
        "PUT",
        &format!("{base}/namespaces/p/namespacetransfers/a/status"),
        "",
    );
    assert!(r.status);
    assert_eq!(r.namespace.as_deref(), Some("p"));
    assert_eq!(r.name.as_deref(), Some("a"));
}

#[test]
fn unknown_resources_and_subresources_are_not_found() {
    let q = Query::default();
    for path in [
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/pods",
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/namespacetransfers/a/scale",
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/namespacetransfers/a/status/x",
    ] {
        let err = parse(&Method::GET, path, &q).unwrap_err();
        assert_eq!(err.code(), 404, "{path}");
    }
}

#[test]
fn wrong_methods_are_method_not_allowed() {
    let q = Query::default();
    let base = "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/namespacetransfers";
    for (method, path) in [
        (Method::POST, format!("{base}/a")),
        (Method::PUT, base.to_owned()),
        (Method::DELETE, format!("{base}/a/status")),
    ] {
        assert_eq!(
            parse(&method, &path, &q).unwrap_err().code(),
            405,
            "{method} {path}"
        );
    }
}

#[test]
fn query_values_are_decoded_and_validated() {
    let q = Query::parse(Some(
        "labelSelector=app%3Ddb%2Ctier%20in%20(a)&watch=maybe&dryRun=Some&limit=x",
    ));
    assert_eq!(q.get("labelSelector"), Some("app=db,tier in (a)"));
    assert_eq!(q.bool("watch").unwrap_err().code(), 400);
    assert_eq!(q.dry_run().unwrap_err().code(), 400);
    assert_eq!(q.int("limit").unwrap_err().code(), 400);
    assert!(Query::parse(Some("dryRun=All")).dry_run().unwrap());
}
