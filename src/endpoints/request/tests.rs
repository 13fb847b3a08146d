use super::*;

fn parse_ok(method: &str, path: &str, query: &str) -> ResourceRequest {
    let q = Query::parse(Some(query));
    parse(
        &Method::from_bytes(method.as_bytes()).unwrap(),
        path,
        &q,
        &Kinds::served(),
    )
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
        let err = parse(&Method::GET, path, &q, &Kinds::served()).unwrap_err();
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
            parse(&method, &path, &q, &Kinds::served())
                .unwrap_err()
                .code(),
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

fn info(method: Method, target: &str) -> RequestInfo {
    RequestInfo::new(&method, &target.parse().unwrap(), &Kinds::served())
}

#[test]
fn request_info_parses_the_path_and_query_once_for_every_filter() {
    let i = info(
        Method::GET,
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/namespacetransfers?watch=1&limit=5",
    );
    let r = i.resource().unwrap();
    assert_eq!(r.verb, Verb::Watch);
    assert_eq!(r.namespace.as_deref(), Some("p"));
    assert_eq!(i.query.get("limit"), Some("5"));
    assert_eq!(i.routed().unwrap(), Some(r));
    assert!(i.is_api());
}

#[test]
fn a_malformed_resource_path_is_no_resource_to_the_filters_and_an_error_to_the_router() {
    let i = info(
        Method::GET,
        "/apis/storage.transfer.k8s.io/v1alpha1/namespaces/p/namespacetransfers/a/b/c",
    );
    assert!(i.resource().is_none());
    assert_eq!(i.routed(), Err(ApiError::PathNotFound));
    let bad_watch = info(
        Method::GET,
        "/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers?watch=maybe",
    );
    assert!(bad_watch.resource().is_none());
    assert!(matches!(bad_watch.routed(), Err(ApiError::BadRequest(_))));
}

#[test]
fn only_the_apis_and_openapi_paths_are_the_apis() {
    for (path, api) in [
        ("/apis", true),
        ("/apis/storage.transfer.k8s.io", true),
        ("/openapi/v2", true),
        ("/metrics", false),
        ("/apisx", false),
        ("/openapi", false),
    ] {
        assert_eq!(info(Method::GET, path).is_api(), api, "{path}");
    }
}
