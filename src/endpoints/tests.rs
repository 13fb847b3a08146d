use super::*;

fn get(method: Method, path: &str) -> (StatusCode, serde_json::Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(())
        .unwrap();
    let resp = serve_api(&req);
    let status = resp.status();
    let body = futures_body(resp);
    (status, serde_json::from_slice(&body).unwrap())
}

fn futures_body(resp: Response<Body>) -> Bytes {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async { resp.into_body().collect().await.unwrap().to_bytes() })
}

#[test]
fn version_path_serves_the_resource_list() {
    let (code, v) = get(Method::GET, "/apis/storage.transfer.k8s.io/v1alpha1");
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["kind"], "APIResourceList");
}

#[test]
fn group_and_root_paths_serve_group_documents() {
    assert_eq!(
        get(Method::GET, "/apis/storage.transfer.k8s.io").1["kind"],
        "APIGroup"
    );
    assert_eq!(get(Method::GET, "/apis").1["kind"], "APIGroupList");
    assert_eq!(get(Method::GET, "/apis/").1["kind"], "APIGroupList");
}

#[test]
fn unknown_paths_answer_a_not_found_status() {
    for path in [
        "/apis/other.group",
        "/apis/storage.transfer.k8s.io/v1",
        "/apis/storage.transfer.k8s.io/v1alpha1/nope/x/y/z/w/v",
    ] {
        let (code, v) = get(Method::GET, path);
        assert_eq!(code, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["reason"], "NotFound");
    }
}

#[test]
fn writes_to_discovery_documents_are_method_not_allowed() {
    let (code, v) = get(Method::POST, "/apis/storage.transfer.k8s.io/v1alpha1");
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(v["reason"], "MethodNotAllowed");
}
