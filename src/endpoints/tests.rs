use super::*;

fn discover(method: Method, path: &str) -> Option<(StatusCode, serde_json::Value)> {
    let resp = match discovery_document(&method, path) {
        Ok(Some(resp)) => resp,
        Ok(None) => return None,
        Err(e) => error_response(&e),
    };
    let status = resp.status();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let body = rt.block_on(async { resp.into_body().collect().await.unwrap().to_bytes() });
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
