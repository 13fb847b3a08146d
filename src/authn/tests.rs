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
    assert_eq!(user, Authenticated::directly(anonymous_user()));
}

/// A trust anchor that accepts every chain and counts how often it was asked.
#[derive(Debug, Default)]
struct CountingVerifier {
    calls: std::sync::atomic::AtomicUsize,
}

impl rustls::server::danger::ClientCertVerifier for CountingVerifier {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("not used".to_owned()))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("not used".to_owned()))
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        Vec::new()
    }
}

fn front_proxy_config(verifier: Arc<CountingVerifier>) -> Arc<AuthConfig> {
    Arc::new(AuthConfig {
        client_ca: None,
        request_header: Some(config::RequestHeaderConfig {
            ca: TrustAnchor {
                verifier,
                certificates: 1,
            },
            allowed_names: vec!["front-proxy-client".to_owned()],
            username_headers: vec!["X-Remote-User".to_owned()],
            uid_headers: Vec::new(),
            group_headers: vec!["X-Remote-Group".to_owned()],
            extra_headers_prefixes: Vec::new(),
        }),
    })
}

#[tokio::test]
async fn a_connection_s_certificate_is_verified_once_until_the_configuration_changes() {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "front-proxy-client");
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = params.self_signed(&key).unwrap().der().clone();
    let verifier = Arc::new(CountingVerifier::default());
    let shared: SharedConfig = Arc::new(RwLock::new(Some(front_proxy_config(verifier.clone()))));
    let d = Delegating::new(shared.clone(), None);
    let connection = Peer::new(Some(vec![leaf.clone()]));
    let calls = || verifier.calls.load(std::sync::atomic::Ordering::SeqCst);

    for user in ["alice", "bob", "carol"] {
        let seen = d
            .authenticate(&parts(&[("X-Remote-User", user)]), &connection)
            .await
            .unwrap();
        assert_eq!(seen.user.username, user, "each request names its own user");
        assert!(seen.by_front_proxy);
    }
    assert_eq!(
        calls(),
        1,
        "three requests on one connection, one verification"
    );

    let other_connection = Peer::new(Some(vec![leaf]));
    d.authenticate(&parts(&[("X-Remote-User", "dave")]), &other_connection)
        .await
        .unwrap();
    assert_eq!(calls(), 2, "another connection is verified on its own");

    // A new configuration (a rotated requestheader CA) is verified afresh.
    *shared.write().unwrap() = Some(front_proxy_config(verifier.clone()));
    d.authenticate(&parts(&[("X-Remote-User", "erin")]), &connection)
        .await
        .unwrap();
    assert_eq!(calls(), 3);
}

/// A TokenReview that counts its calls and authenticates nobody.
#[derive(Debug, Default)]
struct CountingReviews(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl token::TokenReviewer for CountingReviews {
    async fn review(
        &self,
        _token: &str,
        _audiences: &[String],
    ) -> Result<Option<UserInfo>, ApiError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(None)
    }
}

/// The cluster's keys: an empty JWKS for `https://cluster.example`.
#[derive(Debug)]
struct NoKeys;

#[async_trait::async_trait]
impl jwt::KeySource for NoKeys {
    async fn issuer(&self) -> Result<String, String> {
        Ok("https://cluster.example".to_owned())
    }

    async fn keys(&self) -> Result<jsonwebtoken::jwk::JwkSet, String> {
        Ok(jsonwebtoken::jwk::JwkSet { keys: Vec::new() })
    }
}

#[derive(Debug)]
struct NoAccounts;

impl jwt::Accounts for NoAccounts {
    fn lookup(&self, _namespace: &str, _name: &str) -> jwt::Account {
        jwt::Account::Missing
    }
}

#[tokio::test]
async fn a_forged_token_of_the_cluster_s_issuer_and_a_malformed_token_cost_no_token_review() {
    let reviews = Arc::new(CountingReviews::default());
    let d = Delegating::new(
        Arc::new(RwLock::new(Some(Arc::new(AuthConfig::default())))),
        Some(token::TokenAuthenticator::with_reviewer(
            reviews.clone(),
            Vec::new(),
        )),
    )
    .with_service_accounts(jwt::ServiceAccountVerifier::new(
        Arc::new(NoKeys),
        Arc::new(NoAccounts),
    ));
    let forger = rcgen::KeyPair::generate().unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("forged".to_owned());
    let forged = jsonwebtoken::encode(
        &header,
        &serde_json::json!({
            "iss": "https://cluster.example",
            "aud": ["https://cluster.example"],
            "sub": "system:serviceaccount:kube-system:admin",
            "exp": 4_000_000_000_u64,
        }),
        &jsonwebtoken::EncodingKey::from_ec_pem(forger.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    for token in [forged.as_str(), "not{a}token"] {
        let err = d
            .authenticate(
                &parts(&[("Authorization", &format!("Bearer {token}"))]),
                &Peer::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), 401, "{token}");
    }
    assert_eq!(reviews.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Anything else of the right form is the TokenReview's.
    let _ = d
        .authenticate(
            &parts(&[("Authorization", "Bearer opaque-token")]),
            &Peer::default(),
        )
        .await;
    assert_eq!(reviews.0.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_peer_is_named_by_its_ip_and_an_ipv4_client_on_ipv6_by_its_ipv4_address() {
    let mapped: std::net::SocketAddr = "[::ffff:127.0.0.1]:50000".parse().unwrap();
    assert_eq!(
        Peer::new(None).with_address(mapped).ip(),
        Some(std::net::IpAddr::from([127, 0, 0, 1]))
    );
    assert_eq!(Peer::default().ip(), None);
}
