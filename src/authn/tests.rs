use super::*;

fn parts(headers: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

#[test]
fn bearer_tokens_are_read_and_malformed_ones_are_unauthorized() {
    assert_eq!(bearer_token(&parts(&[])).unwrap(), None);
    assert_eq!(
        bearer_token(&parts(&[("Authorization", "Bearer abc")])).unwrap(),
        Some("abc".to_owned())
    );
    assert_eq!(
        bearer_token(&parts(&[("Authorization", "Basic abc")])).unwrap(),
        None
    );
    assert_eq!(
        bearer_token(&parts(&[("Authorization", "Bearer")]))
            .unwrap_err()
            .code(),
        401
    );
    assert_eq!(
        bearer_token(&parts(&[("Authorization", "bearer   ")]))
            .unwrap_err()
            .code(),
        401
    );
}

#[test]
fn extra_keys_are_percent_decoded() {
    assert_eq!(percent_decode("reason%2fwhy"), "reason/why");
    assert_eq!(percent_decode("plain"), "plain");
    assert_eq!(percent_decode("bad%zz"), "bad%zz");
    assert_eq!(percent_decode("end%2"), "end%2");
}

#[test]
fn authenticated_users_get_system_authenticated_once() {
    let u = with_authenticated(UserInfo {
        username: "a".to_owned(),
        groups: vec!["x".to_owned(), AUTHENTICATED.to_owned()],
        ..UserInfo::default()
    });
    assert_eq!(u.groups, ["x", AUTHENTICATED]);
    assert_eq!(
        with_authenticated(anonymous_user()).groups,
        ["system:unauthenticated"]
    );
}

#[tokio::test]
async fn without_configuration_requests_are_refused_as_unavailable() {
    let d = Delegating::new(Arc::new(RwLock::new(None)), None);
    let err = d
        .authenticate(&parts(&[]), &Peer::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), 503);
}

#[tokio::test]
async fn remote_user_headers_are_ignored_without_a_certificate() {
    let d = Delegating::new(
        Arc::new(RwLock::new(Some(Arc::new(AuthConfig::default())))),
        None,
    );
    let user = d
        .authenticate(
            &parts(&[("X-Remote-User", "system:admin")]),
            &Peer::default(),
        )
        .await
        .unwrap();
    assert_eq!(user, anonymous_user());
}
