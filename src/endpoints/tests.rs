use super::*;

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The document response for `target` (a path with an optional query), if any.
fn document(method: Method, target: &str, headers: &[(&str, &str)]) -> Option<Response<Body>> {
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let mut map = header::HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            header::HeaderValue::from_str(value).unwrap(),
        );
    }
    let documents = discovery::Documents::new(kinds::Kinds::served().schemas());
    match discovery_document(&documents, &method, path, &Query::parse(query), &map) {
        Ok(resp) => resp,
        Err(e) => Some(error_response(&e)),
    }
}

fn body_of(resp: Response<Body>) -> Bytes {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async { resp.into_body().collect().await.unwrap().to_bytes() })
}

fn header_of(resp: &Response<Body>, name: header::HeaderName) -> Option<&str> {
    resp.headers().get(name).map(|v| v.to_str().unwrap())
}

fn discover(method: Method, path: &str) -> Option<(StatusCode, serde_json::Value)> {
    let resp = document(method, path, &[])?;
    let status = resp.status();
    let body = body_of(resp);
    Some((status, serde_json::from_slice(&body).unwrap()))
}

#[test]
fn version_path_serves_the_resource_list() {
    let (code, v) = discover(Method::GET, "/apis/storage.transfer.k8s.io/v1alpha1").unwrap();
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["kind"], "APIResourceList");
}

#[test]
fn group_and_root_paths_serve_group_documents() {
    assert_eq!(
        discover(Method::GET, "/apis/storage.transfer.k8s.io")
            .unwrap()
            .1["kind"],
        "APIGroup"
    );
    assert_eq!(
        discover(Method::GET, "/apis").unwrap().1["kind"],
        "APIGroupList"
    );
    assert_eq!(
        discover(Method::GET, "/apis/").unwrap().1["kind"],
        "APIGroupList"
    );
}

#[test]
fn resource_paths_are_not_discovery_documents() {
    assert!(discover(
        Method::GET,
        "/apis/storage.transfer.k8s.io/v1alpha1/namespacetransfers"
    )
    .is_none());
    assert!(discover(Method::GET, "/apis/other.group").is_none());
}

#[test]
fn writes_to_discovery_documents_are_method_not_allowed() {
    let (code, v) = discover(Method::POST, "/apis/storage.transfer.k8s.io/v1alpha1").unwrap();
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["reason"], "MethodNotAllowed");
}

#[test]
fn errors_are_status_bodies_with_the_error_code() {
    let resp = error_response(&ApiError::TooLarge("x".to_owned()));
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
}

#[test]
fn an_error_with_a_retry_hint_carries_the_retry_after_header() {
    let resp = error_response(&ApiError::TooLargeResourceVersion {
        requested: 9,
        current: 7,
    });
    assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(header_of(&resp, header::RETRY_AFTER), Some("1"));
    let plain = error_response(&ApiError::Timeout("x".to_owned()));
    assert_eq!(header_of(&plain, header::RETRY_AFTER), None);
}

#[test]
fn apis_with_the_aggregated_accept_serves_aggregated_discovery_with_its_exact_content_type() {
    let resp = document(Method::GET, "/apis", &[("accept", AGGREGATED_V2)]).unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header_of(&resp, header::CONTENT_TYPE), Some(AGGREGATED_V2));
    assert!(header_of(&resp, header::ETAG).is_some());
    let v: serde_json::Value = serde_json::from_slice(&body_of(resp)).unwrap();
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    assert_eq!(v["apiVersion"], "apidiscovery.k8s.io/v2");
    assert_eq!(v["items"][0]["metadata"]["name"], "storage.transfer.k8s.io");
}

#[test]
fn apis_with_a_plain_accept_keeps_serving_the_legacy_group_list() {
    let resp = document(Method::GET, "/apis", &[("accept", "application/json, */*")]).unwrap();
    assert_eq!(
        header_of(&resp, header::CONTENT_TYPE),
        Some("application/json")
    );
    let v: serde_json::Value = serde_json::from_slice(&body_of(resp)).unwrap();
    assert_eq!(v["kind"], "APIGroupList");
}

#[test]
fn tagged_documents_answer_304_when_if_none_match_names_their_etag() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("/apis", &[("accept", AGGREGATED_V2)]),
        ("/openapi/v2", &[]),
        ("/openapi/v3", &[]),
        ("/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1", &[]),
    ];
    for (path, headers) in cases {
        let first = document(Method::GET, path, headers).unwrap();
        assert_eq!(first.status(), StatusCode::OK, "{path}");
        let etag = header_of(&first, header::ETAG)
            .unwrap_or_else(|| panic!("{path} has no ETag"))
            .to_owned();
        assert!(
            etag.starts_with('"') && etag.ends_with('"'),
            "{path}: {etag}"
        );

        let mut conditional = headers.to_vec();
        conditional.push(("if-none-match", &etag));
        let again = document(Method::GET, path, &conditional).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(
            header_of(&again, header::ETAG),
            Some(etag.as_str()),
            "{path}"
        );
        assert!(body_of(again).is_empty(), "{path}");

        conditional.pop();
        conditional.push(("if-none-match", "\"stale\""));
        let changed = document(Method::GET, path, &conditional).unwrap();
        assert_eq!(changed.status(), StatusCode::OK, "{path}");
    }
}

#[test]
fn openapi_v3_root_points_at_the_served_group_version_document_by_its_hash() {
    let (code, root) = discover(Method::GET, "/openapi/v3").unwrap();
    assert_eq!(code, StatusCode::OK);
    let url = root["paths"]["apis/storage.transfer.k8s.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let hash = url
        .strip_prefix("/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1?hash=")
        .unwrap();
    let resp = document(Method::GET, &url, &[]).unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header_of(&resp, header::CACHE_CONTROL),
        Some("public, immutable")
    );
    assert_eq!(
        header_of(&resp, header::ETAG).unwrap(),
        format!("\"{hash}\"")
    );
    let body = body_of(resp);
    assert_eq!(discovery::document::content_hash(&body), hash);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["openapi"], "3.0.0");
}

#[test]
fn openapi_v3_with_a_stale_hash_redirects_to_the_current_one() {
    let resp = document(
        Method::GET,
        "/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1?hash=0123",
        &[],
    )
    .unwrap();
    assert_eq!(resp.status(), StatusCode::MOVED_PERMANENTLY);
    let location = header_of(&resp, header::LOCATION).unwrap();
    let served = discovery::openapi::build(&kinds::Kinds::served().schemas()).unwrap();
    let current = served.v3_group_version.hash();
    assert_eq!(
        location,
        format!("/openapi/v3/apis/storage.transfer.k8s.io/v1alpha1?hash={current}")
    );
}

#[test]
fn openapi_v2_is_swagger_with_our_definitions() {
    let resp = document(Method::GET, "/openapi/v2", &[]).unwrap();
    assert_eq!(
        header_of(&resp, header::CONTENT_TYPE),
        Some("application/json")
    );
    let v: serde_json::Value = serde_json::from_slice(&body_of(resp)).unwrap();
    assert_eq!(v["swagger"], "2.0");
    assert!(v["definitions"]["io.k8s.transfer.storage.v1alpha1.NamespaceTransfer"].is_object());
}

#[test]
fn writes_to_openapi_documents_are_method_not_allowed() {
    for path in ["/openapi/v2", "/openapi/v3"] {
        let (code, _) = discover(Method::PUT, path).unwrap();
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{path}");
    }
}

#[test]
fn openapi_paths_of_other_groups_are_not_documents() {
    assert!(document(Method::GET, "/openapi/v3/apis/apps/v1", &[]).is_none());
    assert!(document(Method::GET, "/openapi/v1", &[]).is_none());
}

#[test]
fn an_apply_body_is_yaml_whose_top_level_is_an_object() {
    use super::handler::decode_apply_body;
    let (v, dup) = decode_apply_body(b"kind: X\nmetadata:\n  name: a\n").unwrap();
    assert_eq!(v["metadata"]["name"], "a");
    assert!(dup.is_none());
    let (_, dup) = decode_apply_body(b"metadata:\n  labels:\n    a: x\n    a: y\n").unwrap();
    assert!(dup.is_some_and(|d| d.contains("duplicate")));
    for (body, says) in [
        (&b"- a\n- b\n"[..], "cannot unmarshal array"),
        (b"just text", "cannot unmarshal string"),
        (b"{a: [", "error converting YAML to JSON"),
    ] {
        let err = decode_apply_body(body).unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.to_string().contains(says), "{err}");
    }
    assert!(decode_apply_body(b"  \n")
        .unwrap()
        .0
        .as_object()
        .unwrap()
        .is_empty());
}

#[test]
fn an_apply_body_that_would_cost_the_parser_too_much_is_refused_before_it_is_built() {
    use super::handler::decode_apply_body;
    let deep = "[".repeat(3 * 1024 * 1024);
    let err = decode_apply_body(deep.as_bytes()).unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(err.to_string().contains("nests deeper"), "{err}");
    let wide = format!("a: [{}]", "[],".repeat(1024 * 1024));
    let err = decode_apply_body(wide.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("more than"), "{err}");
    // Quotes and comments hide nothing, and hide no brackets either.
    let (v, _) = decode_apply_body(b"a: \"[[[[\" # [[[[\nb: don't [1, [2]]\n").unwrap();
    assert_eq!(v["a"], "[[[[");
    let sneaky = format!("a: x'\nb: {}", "[".repeat(200));
    assert!(decode_apply_body(sneaky.as_bytes()).is_err());
}

#[test]
fn an_apply_body_whose_aliases_expand_past_its_size_is_a_bad_request() {
    let mut doc = String::from("apiVersion: storage.transfer.k8s.io/v1alpha1\nkind: NamespaceTransfer\nmetadata:\n  name: t\n  annotations: {a: &a [");
    doc.push_str(&vec!["0"; 20_000].join(","));
    doc.push_str("]}\nspec:\n  x: [");
    doc.push_str(&vec!["*a"; 20_000].join(","));
    doc.push_str("]\n");
    let err = super::handler::decode_apply_body(doc.as_bytes()).unwrap_err();
    assert_eq!(err.code(), 400, "{err}");
    assert!(err.to_string().contains("excessive aliasing"), "{err}");
}

// ----- how an apply body's YAML is read (YAML 1.1 and 1.2 disagree) -----

/// The apply body `yaml`, read as the handler reads it.
fn applied(yaml: &str) -> serde_json::Value {
    super::handler::decode_apply_body(yaml.as_bytes())
        .unwrap()
        .0
}

/// The 400 the handler answers `yaml` with.
fn refused(yaml: &[u8]) -> String {
    let err = super::handler::decode_apply_body(yaml).unwrap_err();
    assert_eq!(err.code(), 400, "{err}");
    err.to_string()
}

#[test]
fn a_yes_in_an_apply_body_is_a_string_not_a_boolean() {
    let v = applied("a: yes\nb: on\nc: n\nd: True\ne: false\n");
    assert_eq!(
        v,
        serde_json::json!({"a": "yes", "b": "on", "c": "n", "d": true, "e": false})
    );
}

#[test]
fn a_number_with_a_leading_zero_in_an_apply_body_is_a_string_not_octal() {
    let v = applied("a: 017\nb: 0o17\nc: 0x1f\nd: 1_000\ne: 08\nf: 1e3\n");
    assert_eq!(
        v,
        serde_json::json!({"a": "017", "b": 15, "c": 31, "d": "1_000", "e": "08", "f": 1000.0})
    );
}

#[test]
fn a_merge_key_in_an_apply_body_is_an_ordinary_key() {
    let v = applied("base: &b {x: 1, y: 2}\ncopy:\n  <<: *b\n  y: 3\n");
    assert_eq!(
        v["copy"],
        serde_json::json!({"<<": {"x": 1, "y": 2}, "y": 3})
    );
}

#[test]
fn an_unknown_tag_in_an_apply_body_is_ignored_and_binary_is_decoded() {
    let v = applied("a: !foo bar\nb: !!str 12\nc: !!binary aGVsbG8=\nd: !foo {x: 1}\n");
    assert_eq!(
        v,
        serde_json::json!({"a": "bar", "b": "12", "c": "hello", "d": {"x": 1}})
    );
}

#[test]
fn an_integer_too_large_for_64_bits_in_an_apply_body_is_a_float() {
    let v = applied("a: 123456789012345678901234567890\n");
    assert_eq!(v["a"].as_f64(), Some(1.2345678901234568e29));
}

#[test]
fn infinity_and_nan_in_an_apply_body_are_null() {
    assert_eq!(
        applied("a: .inf\nb: .nan\n"),
        serde_json::json!({"a": null, "b": null})
    );
}

#[test]
fn scalar_keys_in_an_apply_body_are_strings_and_others_are_refused() {
    assert_eq!(
        applied("1: a\ntrue: b\n1.5: c\n"),
        serde_json::json!({"1": "a", "true": "b", "1.5": "c"})
    );
    for body in [&b"~: a\n"[..], b"? [a, b]\n: c\n"] {
        let says = refused(body);
        assert!(says.contains("error converting YAML to JSON"), "{says}");
    }
}

#[test]
fn a_key_given_twice_in_an_apply_body_is_named_and_the_last_wins() {
    let (v, dup) =
        super::handler::decode_apply_body(b"metadata:\n  labels:\n    a: x\n    a: y\n").unwrap();
    assert_eq!(v, serde_json::json!({"metadata": {"labels": {"a": "y"}}}));
    assert_eq!(
        dup.as_deref(),
        Some(r#"duplicate entry with key "a" at line 4 column 5"#)
    );
}

#[test]
fn an_apply_body_of_two_documents_is_a_bad_request() {
    let says = refused(b"a: 1\n---\nb: 2\n");
    assert!(
        says.contains("only single YAML document expected"),
        "{says}"
    );
}

#[test]
fn an_apply_body_that_is_not_utf_8_is_a_bad_request() {
    let says = refused(b"a: \xff\n");
    assert!(says.contains("not valid UTF-8"), "{says}");
}

#[test]
fn an_apply_body_whose_tree_would_cost_many_times_its_size_is_too_large() {
    use super::handler::decode_apply_body;
    // Within the token bound: 20,000 one-member mappings in 160 KB,
    // about 15 MB as a JSON tree.
    let dense = format!("a: [{}]\n", vec!["{b: 0}"; 20_000].join(", "));
    let err = decode_apply_body(dense.as_bytes()).unwrap_err();
    assert_eq!(err.code(), 413, "{err}");
    assert!(err.to_string().contains("JSON values"), "{err}");
}
