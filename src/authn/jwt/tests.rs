use std::sync::atomic::{AtomicUsize, Ordering};

use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// An ES256 signing key of the cluster, and its JWK.
struct SigningKey {
    kid: String,
    encoding: EncodingKey,
    jwk: serde_json::Value,
}

impl SigningKey {
    fn generate(kid: &str) -> Self {
        let pair = rcgen::KeyPair::generate().unwrap();
        let point = pair.public_key_raw();
        assert_eq!(
            (point.len(), point[0]),
            (65, 4),
            "an uncompressed P-256 point"
        );
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        Self {
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": b64(&point[1..33]), "y": b64(&point[33..]),
            }),
        }
    }

    fn sign(&self, claims: &serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

/// The cluster's discovery document and JWKS, which a test may change.
#[derive(Debug, Default)]
struct FakeKeys {
    jwks: Mutex<Vec<serde_json::Value>>,
    fetches: AtomicUsize,
}

impl FakeKeys {
    fn publish(&self, keys: &[&SigningKey]) {
        *self.jwks.lock().unwrap() = keys.iter().map(|k| k.jwk.clone()).collect();
    }
}

#[async_trait::async_trait]
impl KeySource for FakeKeys {
    async fn issuer(&self) -> Result<String, String> {
        Ok(ISSUER.to_owned())
    }

    async fn keys(&self) -> Result<JwkSet, String> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let keys = self.jwks.lock().unwrap().clone();
        serde_json::from_value(json!({ "keys": keys })).map_err(|e| e.to_string())
    }
}

/// One ServiceAccount: `ci/builder`, uid `sa-uid`.
#[derive(Debug)]
struct OneAccount;

impl Accounts for OneAccount {
    fn lookup(&self, namespace: &str, name: &str) -> Account {
        if (namespace, name) == ("ci", "builder") {
            Account::Uid("sa-uid".to_owned())
        } else {
            Account::Missing
        }
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The claims kube-apiserver puts in a ServiceAccount token for `ci/builder`
/// issued at `issued` (seconds from now), for `aud`.
fn claims(issued: i64, aud: &str) -> serde_json::Value {
    let iat = now() + issued;
    json!({
        "iss": ISSUER,
        "aud": [aud],
        "sub": "system:serviceaccount:ci:builder",
        "iat": iat,
        "nbf": iat,
        "exp": iat + 3600,
        "jti": "token-id",
        "kubernetes.io": {
            "namespace": "ci",
            "serviceaccount": {"name": "builder", "uid": "sa-uid"},
        },
    })
}

fn verifier(keys: &Arc<FakeKeys>) -> ServiceAccountVerifier {
    ServiceAccountVerifier::new(keys.clone(), Arc::new(OneAccount))
}

#[track_caller]
fn assert_user(verdict: &Verdict) {
    match verdict {
        Verdict::User(user) => assert_eq!(user.username, "system:serviceaccount:ci:builder"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_removed_from_the_cluster_s_jwks_stops_being_trusted_within_minutes() {
    let (old, new) = (SigningKey::generate("old"), SigningKey::generate("new"));
    let keys = Arc::new(FakeKeys::default());
    keys.publish(&[&old, &new]);
    let v = verifier(&keys);
    let token = old.sign(&claims(0, ISSUER));
    assert_user(&v.verify(&token).await);

    // The cluster rotates: "old" is gone from its JWKS, "new" signs.
    keys.publish(&[&new]);
    tokio::time::advance(KEYS_MAX_AGE + Duration::from_secs(1)).await;
    assert_user(&v.verify(&new.sign(&claims(0, ISSUER))).await);
    assert!(
        matches!(v.verify(&token).await, Verdict::Invalid(_)),
        "a token signed by a removed key is refused"
    );
}

#[tokio::test(start_paused = true)]
async fn keys_are_fetched_at_most_once_per_interval_however_many_tokens_name_unknown_ones() {
    let known = SigningKey::generate("known");
    let keys = Arc::new(FakeKeys::default());
    keys.publish(&[&known]);
    let v = verifier(&keys);
    assert_user(&v.verify(&known.sign(&claims(0, ISSUER))).await);
    for i in 0..50 {
        let stranger = SigningKey::generate(&format!("forged-{i}"));
        let verdict = v.verify(&stranger.sign(&claims(0, ISSUER))).await;
        assert!(matches!(verdict, Verdict::Invalid(_)), "{verdict:?}");
    }
    assert!(
        keys.fetches.load(Ordering::SeqCst) <= 2,
        "fetched {:?} times",
        keys.fetches
    );
}

#[tokio::test]
async fn a_token_for_a_configured_api_audience_is_verified_locally() {
    let key = SigningKey::generate("k");
    let keys = Arc::new(FakeKeys::default());
    keys.publish(&[&key]);
    let v = verifier(&keys).with_audiences(vec![
        "https://kubernetes.default.svc".to_owned(),
        "api".to_owned(),
    ]);
    assert_user(&v.verify(&key.sign(&claims(0, "api"))).await);
    assert_eq!(
        v.verify(&key.sign(&claims(0, "vault"))).await,
        Verdict::NotMine,
        "another audience is the TokenReview's to judge"
    );
}

#[tokio::test]
async fn without_api_audiences_a_token_must_be_for_the_issuer() {
    let key = SigningKey::generate("k");
    let keys = Arc::new(FakeKeys::default());
    keys.publish(&[&key]);
    let v = verifier(&keys);
    assert_user(&v.verify(&key.sign(&claims(0, ISSUER))).await);
    assert_eq!(
        v.verify(&key.sign(&claims(0, "api"))).await,
        Verdict::NotMine
    );
}

#[tokio::test]
async fn a_minute_of_clock_skew_is_tolerated_as_kube_tolerates_it() {
    let key = SigningKey::generate("k");
    let keys = Arc::new(FakeKeys::default());
    keys.publish(&[&key]);
    let v = verifier(&keys);
    // Issued by a clock 30 s ahead of ours: not yet valid without leeway.
    assert_user(&v.verify(&key.sign(&claims(30, ISSUER))).await);
    // Expired 30 s ago by our clock.
    let mut expired = claims(-3600, ISSUER);
    expired["exp"] = json!(now() - 30);
    assert_user(&v.verify(&key.sign(&expired)).await);
    // But not two minutes.
    expired["exp"] = json!(now() - 120);
    assert!(matches!(
        v.verify(&key.sign(&expired)).await,
        Verdict::Invalid(_)
    ));
    assert!(matches!(
        v.verify(&key.sign(&claims(120, ISSUER))).await,
        Verdict::Invalid(_)
    ));
}

#[tokio::test]
async fn a_token_of_our_issuer_that_fails_verification_is_invalid_not_left_to_the_token_review() {
    let key = SigningKey::generate("k");
    let keys = Arc::new(FakeKeys::default());
    keys.publish(&[&key]);
    let v = verifier(&keys);
    let good = key.sign(&claims(0, ISSUER));
    let (head, rest) = good.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let mut tampered_claims = claims(0, ISSUER);
    tampered_claims["kubernetes.io"]["namespace"] = json!("kube-system");
    let tampered_payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&tampered_claims).unwrap());
    let forged_with_unknown_key = SigningKey::generate("unknown").sign(&claims(0, ISSUER));
    let mut not_a_service_account = claims(0, ISSUER);
    not_a_service_account
        .as_object_mut()
        .unwrap()
        .remove("kubernetes.io");
    for (case, token) in [
        ("tampered", format!("{head}.{tampered_payload}.{signature}")),
        (
            "signed by a key the cluster never published",
            forged_with_unknown_key,
        ),
        (
            "without kubernetes.io claims",
            key.sign(&not_a_service_account),
        ),
    ] {
        let verdict = v.verify(&token).await;
        assert!(
            matches!(verdict, Verdict::Invalid(_)),
            "{case}: {verdict:?}"
        );
    }
    let mut foreign = claims(0, ISSUER);
    foreign["iss"] = json!("https://idp.example");
    assert_eq!(
        v.verify(&key.sign(&foreign)).await,
        Verdict::NotMine,
        "another issuer's token is the TokenReview's"
    );
}
