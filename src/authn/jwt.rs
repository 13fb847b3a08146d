//! Local verification of the cluster's ServiceAccount tokens, so that most
//! bearer tokens cost no TokenReview round trip.
//!
//! The issuer and its signing keys come from the cluster's OIDC discovery
//! (`/.well-known/openid-configuration`, `/openid/v1/jwks`), fetched again
//! when they are [`KEYS_MAX_AGE`] old or a token names an unknown key id (at
//! most every 10 s), and replaced whole, so a key the cluster stops
//! publishing stops being trusted within minutes. Tokens must be for one of
//! the API audiences (`--api-audiences`, by default the issuer), with a
//! minute of clock skew allowed, as kube allows it. A token that verifies
//! must still name a ServiceAccount that exists with the uid in the token,
//! checked against a watch-fed cache, so a deleted account's tokens stop
//! working at once.
//!
//! A token of the cluster's issuer that fails verification (a key the
//! cluster does not publish, a bad signature, expired) is refused here,
//! without a TokenReview. Anything that is not clearly one of this
//! cluster's ServiceAccount tokens (another issuer or audience, a token
//! bound to a pod, an account not cached yet) is left to the TokenReview.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::runtime::reflector::ObjectRef;
use serde::Deserialize;
use tokio::time::Instant;

use super::UserInfo;
use crate::reflect::Watched;

/// The shortest time between two fetches of the keys (for unknown key ids,
/// or because they are old).
const REFRESH_EVERY: Duration = Duration::from_secs(10);
/// How old the keys may get before they are fetched again, so that a key
/// removed from the cluster's JWKS is trusted at most this much longer.
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(3 * 60);
/// Keys not confirmed for this long (every fetch failed) are not used:
/// tokens then go to the TokenReview.
const KEYS_TRUSTED_FOR: Duration = Duration::from_secs(2 * 3 * 60);
/// The clock skew allowed on `exp`, `nbf` and `iat`: kube's (go-jose's
/// `DefaultLeeway`).
const LEEWAY_SECONDS: u64 = 60;

/// What local verification concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A valid token of an existing ServiceAccount.
    User(UserInfo),
    /// One of ours, but expired, forged, or of a deleted account: 401.
    Invalid(String),
    /// Not recognisably one of ours: ask the TokenReview.
    NotMine,
}

#[derive(Debug, Deserialize)]
struct Discovery {
    issuer: String,
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    iat: Option<u64>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<KubernetesClaims>,
    jti: Option<String>,
}

#[derive(Debug, Deserialize)]
struct KubernetesClaims {
    namespace: String,
    serviceaccount: Named,
    pod: Option<Named>,
    secret: Option<Named>,
    node: Option<Named>,
}

#[derive(Debug, Deserialize)]
struct Named {
    name: String,
    uid: String,
}

#[derive(Debug, Deserialize)]
struct Unverified {
    iss: Option<String>,
}

/// Where the cluster publishes its issuer and signing keys.
#[async_trait::async_trait]
pub trait KeySource: Send + Sync + std::fmt::Debug {
    /// The `issuer` of the OIDC discovery document.
    async fn issuer(&self) -> Result<String, String>;
    /// The JWKS.
    async fn keys(&self) -> Result<JwkSet, String>;
}

/// What the cluster says of a ServiceAccount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    /// The cache has not synced yet: nothing is known.
    Unknown,
    /// No such account (or not cached yet).
    Missing,
    /// It exists with this uid.
    Uid(String),
}

/// The ServiceAccounts that exist.
pub trait Accounts: Send + Sync + std::fmt::Debug {
    fn lookup(&self, namespace: &str, name: &str) -> Account;
}

/// The cluster's OIDC discovery document and JWKS, read through kube-apiserver.
pub struct ClusterKeys {
    client: kube::Client,
}

impl std::fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterKeys").finish_non_exhaustive()
    }
}

impl ClusterKeys {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.client
            .request::<T>(request)
            .await
            .map_err(|e| e.to_string())
    }
}

#[async_trait::async_trait]
impl KeySource for ClusterKeys {
    async fn issuer(&self) -> Result<String, String> {
        self.get::<Discovery>("/.well-known/openid-configuration")
            .await
            .map(|d| d.issuer)
    }

    async fn keys(&self) -> Result<JwkSet, String> {
        self.get::<JwkSet>("/openid/v1/jwks").await
    }
}

/// Every ServiceAccount of the cluster, kept by a watch.
#[derive(Debug)]
pub struct WatchedAccounts(Watched<ServiceAccount>);

impl WatchedAccounts {
    /// Starts the watch.
    pub fn start(client: kube::Client) -> Self {
        Self(Watched::start(client))
    }
}

impl Accounts for WatchedAccounts {
    fn lookup(&self, namespace: &str, name: &str) -> Account {
        if !self.0.ready() {
            return Account::Unknown;
        }
        match self
            .0
            .store
            .get(&ObjectRef::new(name).within(namespace))
            .and_then(|a| a.metadata.uid.clone())
        {
            Some(uid) => Account::Uid(uid),
            None => Account::Missing,
        }
    }
}

/// The verifier: issuer, keys, and the ServiceAccounts.
#[derive(Debug)]
pub struct ServiceAccountVerifier {
    source: Arc<dyn KeySource>,
    accounts: Arc<dyn Accounts>,
    /// The audiences a token may be for (`--api-audiences`); empty: the issuer.
    audiences: Vec<String>,
    keys: RwLock<Keys>,
    /// When a fetch was last started, successful or not.
    last_attempt: Mutex<Option<Instant>>,
}

/// What the last successful fetch found.
#[derive(Default)]
struct Keys {
    issuer: Option<String>,
    by_kid: HashMap<String, (DecodingKey, Algorithm)>,
    /// When; `None` before the first success.
    fetched: Option<Instant>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("issuer", &self.issuer)
            .field("kids", &self.by_kid.keys().collect::<Vec<_>>())
            .field("fetched", &self.fetched)
            .finish()
    }
}

impl ServiceAccountVerifier {
    /// Verifies against the cluster behind `client`; keys are fetched on
    /// first use.
    pub fn start(client: kube::Client) -> Self {
        Self::new(
            Arc::new(ClusterKeys::new(client.clone())),
            Arc::new(WatchedAccounts::start(client)),
        )
    }

    /// Verifies against `source`'s keys and `accounts`.
    pub fn new(source: Arc<dyn KeySource>, accounts: Arc<dyn Accounts>) -> Self {
        Self {
            source,
            accounts,
            audiences: Vec::new(),
            keys: RwLock::new(Keys::default()),
            last_attempt: Mutex::new(None),
        }
    }

    /// Accepts tokens for `audiences` (kube-apiserver's `--api-audiences`);
    /// none: for the issuer.
    pub fn with_audiences(mut self, audiences: Vec<String>) -> Self {
        self.audiences = audiences;
        self
    }

    /// Fetches the issuer and the key set, at most every [`REFRESH_EVERY`],
    /// and replaces the keys whole: a key the cluster no longer publishes is
    /// dropped. A failed fetch keeps the last keys.
    async fn refresh(&self) {
        {
            let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        let issuer = match self.source.issuer().await {
            Ok(issuer) => issuer,
            Err(e) => {
                tracing::warn!(error = %e, "fetching the cluster's OIDC discovery document");
                return;
            }
        };
        let set = match self.source.keys().await {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %e, "fetching the cluster's JWKS");
                return;
            }
        };
        let mut by_kid = HashMap::new();
        for jwk in &set.keys {
            let (Some(kid), Ok(key)) = (jwk.common.key_id.clone(), DecodingKey::from_jwk(jwk))
            else {
                continue;
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok())
                .unwrap_or(Algorithm::RS256);
            by_kid.insert(kid, (key, alg));
        }
        let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
        if keys.by_kid.len() != by_kid.len() || by_kid.keys().any(|k| !keys.by_kid.contains_key(k))
        {
            tracing::info!(
                keys = by_kid.len(),
                "loaded the ServiceAccount signing keys"
            );
        }
        *keys = Keys {
            issuer: Some(issuer),
            by_kid,
            fetched: Some(Instant::now()),
        };
    }

    /// The issuer and the key `kid`, if the keys are recent enough to trust,
    /// and whether they are.
    fn lookup(&self, kid: &str) -> (Option<String>, Option<(DecodingKey, Algorithm)>, bool) {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let trusted = keys
            .fetched
            .is_some_and(|at| at.elapsed() < KEYS_TRUSTED_FOR);
        (keys.issuer.clone(), keys.by_kid.get(kid).cloned(), trusted)
    }

    fn keys_are_old(&self) -> bool {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .fetched
            .is_none_or(|at| at.elapsed() >= KEYS_MAX_AGE)
    }

    /// Verifies `token` if it is one of this cluster's ServiceAccount tokens.
    pub async fn verify(&self, token: &str) -> Verdict {
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return Verdict::NotMine;
        };
        let Some(kid) = header.kid else {
            return Verdict::NotMine;
        };
        if self.keys_are_old() {
            self.refresh().await;
        }
        let (Some(issuer), mut key, mut trusted) = self.lookup(&kid) else {
            return Verdict::NotMine;
        };
        if unverified_issuer(token).as_deref() != Some(issuer.as_str()) {
            return Verdict::NotMine;
        }
        if key.is_none() {
            // Perhaps a key the cluster started signing with a moment ago.
            self.refresh().await;
            (_, key, trusted) = self.lookup(&kid);
        }
        // Keys we could not confirm for a while may have been removed: the
        // TokenReview decides.
        if !trusted {
            return Verdict::NotMine;
        }
        let Some(key) = key else {
            // The cluster's issuer, but a key its JWKS does not publish: a
            // forgery, or a key removed since. Not worth a TokenReview.
            return Verdict::Invalid(format!(
                "signed by key {kid:?}, which the cluster does not publish"
            ));
        };
        let (key, alg) = key;
        if header.alg != alg {
            return Verdict::Invalid(format!(
                "token algorithm {:?} does not match its key",
                header.alg
            ));
        }
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer.as_str()]);
        // `--api-audiences`; by default the cluster's API audience is its
        // issuer.
        if self.audiences.is_empty() {
            validation.set_audience(&[issuer.as_str()]);
        } else {
            validation.set_audience(&self.audiences);
        }
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        let claims = match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
            Ok(data) => data.claims,
            // Signed by the cluster for another audience: the TokenReview
            // knows all of the cluster's audiences, we know ours.
            Err(e) if matches!(e.kind(), jsonwebtoken::errors::ErrorKind::InvalidAudience) => {
                return Verdict::NotMine
            }
            Err(e) => return Verdict::Invalid(e.to_string()),
        };
        if claims
            .iat
            .is_some_and(|iat| iat > now_seconds() + LEEWAY_SECONDS)
        {
            return Verdict::Invalid("the token is issued in the future".to_owned());
        }
        let Some(k8s) = claims.kubernetes else {
            return Verdict::Invalid(
                "signed by the cluster's ServiceAccount key, but not a ServiceAccount token"
                    .to_owned(),
            );
        };
        // A token bound to a pod, Secret or node is valid only while that
        // object lives; kube-apiserver checks that, so the TokenReview
        // decides, rather than a stolen pod token living on here.
        if k8s.pod.is_some() || k8s.secret.is_some() || k8s.node.is_some() {
            return Verdict::NotMine;
        }
        let expected_sub = format!(
            "system:serviceaccount:{}:{}",
            k8s.namespace, k8s.serviceaccount.name
        );
        if claims.sub != expected_sub {
            return Verdict::Invalid("subject does not match the ServiceAccount claim".to_owned());
        }
        match self
            .accounts
            .lookup(&k8s.namespace, &k8s.serviceaccount.name)
        {
            Account::Uid(uid) if uid == k8s.serviceaccount.uid => {}
            Account::Uid(_) => {
                return Verdict::Invalid(format!(
                    "ServiceAccount {}/{} was recreated since the token was issued",
                    k8s.namespace, k8s.serviceaccount.name
                ))
            }
            // Deleted, or created a moment ago and not cached yet (or the
            // cache has not synced): the TokenReview gives the
            // authoritative answer.
            Account::Missing | Account::Unknown => return Verdict::NotMine,
        }
        let mut extra = std::collections::BTreeMap::new();
        if let Some(jti) = claims.jti {
            extra.insert(
                "authentication.kubernetes.io/credential-id".to_owned(),
                vec![format!("JTI={jti}")],
            );
        }
        Verdict::User(UserInfo {
            username: expected_sub,
            uid: Some(k8s.serviceaccount.uid),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{}", k8s.namespace),
            ],
            extra,
        })
    }
}

/// Seconds since the epoch, as JWTs count them.
fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The `iss` claim, read without verifying anything (only to route the token).
fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Unverified>(&raw).ok()?.iss
}

#[cfg(test)]
mod tests;
