//! Authentication: who is calling, as k8s.io/apiserver's delegated
//! authenticators decide it (DESIGN §3.2), in order:
//!
//! 1. the front proxy: a client certificate that chains to the requestheader
//!    CA with a CN in `requestheader-allowed-names`; then the user comes from
//!    the `X-Remote-*` headers. Those headers are never read otherwise;
//! 2. a client certificate that chains to `client-ca-file`: CN is the user, O
//!    the groups;
//! 3. a bearer token: the cluster's ServiceAccount tokens are verified locally
//!    ([`jwt`]); anything else goes to a TokenReview (results cached 10 s);
//! 4. otherwise anonymous.
//!
//! Owns who the caller is; never what they may do.

pub mod config;
pub mod jwt;
pub mod source;
pub mod token;
pub mod x509;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::HeaderMap;
use rustls::pki_types::CertificateDer;

use crate::api::errors::ApiError;
use crate::api::meta::Requester;
use config::{AuthConfig, RequestHeaderConfig, TrustAnchor};
use token::TokenAuthenticator;

/// The authenticated user, as SubjectAccessReview and `spec.requester` name it.
pub type UserInfo = Requester;

/// The group every authenticated user belongs to.
pub const AUTHENTICATED: &str = "system:authenticated";

/// How long a connection's verified certificate chain is trusted without
/// verifying it again: a certificate that expires while its connection stays
/// open is refused at most this much later.
pub const VERIFIED_FOR: Duration = Duration::from_secs(10);

/// What the connection and its TLS layer tell of the peer: one per
/// connection.
#[derive(Debug, Default)]
pub struct Peer {
    /// The remote end of the TCP connection (for `sourceIPs`; not used to
    /// authenticate). `None` in tests that have no connection.
    address: Option<SocketAddr>,
    /// The certificate chain the client presented, leaf first (its signature
    /// was checked in the handshake; its trust is checked here).
    certificates: Option<Vec<CertificateDer<'static>>>,
    /// The chain's verification against the current configuration's trust
    /// anchors. A chain cannot change within a connection, so the requests
    /// it carries (every request the aggregator proxies, multiplexed on a
    /// few HTTP/2 connections) need not each repeat the signature checks.
    /// Forgotten after [`VERIFIED_FOR`] and whenever the configuration
    /// changes (a rotated CA).
    verified: Mutex<Option<Verified>>,
}

#[derive(Debug)]
struct Verified {
    config: Arc<AuthConfig>,
    at: Instant,
    /// Per [`Anchor`]: not tried yet, or the subject (none: not trusted).
    subjects: [Option<Option<x509::Subject>>; 2],
}

/// Which of the configuration's trust anchors a chain is verified against.
#[derive(Debug, Clone, Copy)]
enum Anchor {
    RequestHeader = 0,
    ClientCa = 1,
}

impl Peer {
    /// A peer that presented `certificates` (leaf first), or none.
    pub fn new(certificates: Option<Vec<CertificateDer<'static>>>) -> Self {
        Self {
            address: None,
            certificates,
            verified: Mutex::new(None),
        }
    }

    /// The peer, connected from `address`.
    pub fn with_address(mut self, address: SocketAddr) -> Self {
        self.address = Some(address);
        self
    }

    /// The connection's remote IP address; an IPv4 client of a server
    /// listening on IPv6 is named by its IPv4 address.
    pub fn ip(&self) -> Option<IpAddr> {
        self.address.map(|a| a.ip().to_canonical())
    }

    /// The subject of this peer's chain if it verifies against `anchor` (the
    /// trust anchor `which` of `config`), verified once per connection,
    /// configuration and [`VERIFIED_FOR`].
    fn verified_subject(
        &self,
        config: &Arc<AuthConfig>,
        which: Anchor,
        anchor: &TrustAnchor,
    ) -> Option<x509::Subject> {
        let chain = self.certificates.as_deref().filter(|c| !c.is_empty())?;
        let mut memo = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        let current = memo
            .as_ref()
            .is_some_and(|v| Arc::ptr_eq(&v.config, config) && v.at.elapsed() < VERIFIED_FOR);
        if !current {
            *memo = Some(Verified {
                config: config.clone(),
                at: Instant::now(),
                subjects: [None, None],
            });
        }
        let slot = memo.as_mut().map(|v| &mut v.subjects[which as usize])?;
        if let Some(subject) = slot {
            return subject.clone();
        }
        let subject = x509::verify(anchor, chain);
        *slot = Some(subject.clone());
        subject
    }
}

/// Who sent a request, and whether the front proxy vouched for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: UserInfo,
    /// The front proxy named the user (step 1 of the module's list): the
    /// connection is the aggregator's, so its `X-Forwarded-For` and
    /// `X-Real-Ip` headers are its word, not the end client's.
    pub by_front_proxy: bool,
}

impl Authenticated {
    /// `user`, authenticated by anything but the front proxy.
    pub fn directly(user: UserInfo) -> Self {
        Self {
            user,
            by_front_proxy: false,
        }
    }
}

/// Decides who sent a request.
#[async_trait::async_trait]
pub trait Authenticator: Send + Sync + std::fmt::Debug {
    /// The user, or 401 when presented credentials are invalid.
    async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: &Peer,
    ) -> Result<Authenticated, ApiError>;
}

/// Everyone is `system:anonymous` in `system:unauthenticated`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anonymous;

/// The anonymous user, as kube-apiserver names it.
pub fn anonymous_user() -> UserInfo {
    UserInfo {
        username: "system:anonymous".to_owned(),
        groups: vec!["system:unauthenticated".to_owned()],
        ..UserInfo::default()
    }
}

#[async_trait::async_trait]
impl Authenticator for Anonymous {
    async fn authenticate(
        &self,
        _headers: &HeaderMap,
        _peer: &Peer,
    ) -> Result<Authenticated, ApiError> {
        Ok(Authenticated::directly(anonymous_user()))
    }
}

/// The shared, swappable configuration: replaced whole when the ConfigMap
/// changes, so a request sees one consistent version.
pub type SharedConfig = Arc<RwLock<Option<Arc<AuthConfig>>>>;

/// The delegated chain.
#[derive(Debug)]
pub struct Delegating {
    config: SharedConfig,
    service_accounts: Option<jwt::ServiceAccountVerifier>,
    tokens: Option<TokenAuthenticator>,
}

impl Delegating {
    pub fn new(config: SharedConfig, tokens: Option<TokenAuthenticator>) -> Self {
        Self {
            config,
            service_accounts: None,
            tokens,
        }
    }

    /// Verifies the cluster's ServiceAccount tokens locally before falling
    /// back to TokenReview.
    pub fn with_service_accounts(mut self, verifier: jwt::ServiceAccountVerifier) -> Self {
        self.service_accounts = Some(verifier);
        self
    }

    fn current(&self) -> Option<Arc<AuthConfig>> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait::async_trait]
impl Authenticator for Delegating {
    async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: &Peer,
    ) -> Result<Authenticated, ApiError> {
        let config = self.current().ok_or_else(|| {
            ApiError::ServiceUnavailable(
                "the authentication configuration has not been loaded yet".to_owned(),
            )
        })?;
        if let Some(rh) = &config.request_header {
            let proxy = peer.verified_subject(&config, Anchor::RequestHeader, &rh.ca);
            if let Some(user) = proxy.and_then(|subject| front_proxy_user(rh, &subject, headers)) {
                return Ok(Authenticated {
                    user: with_authenticated(user),
                    by_front_proxy: true,
                });
            }
        }
        self.authenticate_directly(&config, headers, peer)
            .await
            .map(Authenticated::directly)
    }
}

impl Delegating {
    /// Steps 2 to 4 of the module's list: a client certificate, a bearer
    /// token, or anonymous.
    async fn authenticate_directly(
        &self,
        config: &Arc<AuthConfig>,
        headers: &HeaderMap,
        peer: &Peer,
    ) -> Result<UserInfo, ApiError> {
        if let Some(ca) = &config.client_ca {
            if let Some(subject) = peer.verified_subject(config, Anchor::ClientCa, ca) {
                return Ok(with_authenticated(UserInfo {
                    username: subject.common_name,
                    groups: subject.organizations,
                    ..UserInfo::default()
                }));
            }
        }
        if let Some(token) = bearer_token(headers)? {
            if let Some(accounts) = &self.service_accounts {
                match accounts.verify(&token).await {
                    jwt::Verdict::User(user) => return Ok(with_authenticated(user)),
                    jwt::Verdict::Invalid(why) => {
                        tracing::debug!(reason = %why, "refused a ServiceAccount token");
                        return Err(ApiError::Unauthorized);
                    }
                    jwt::Verdict::NotMine => {}
                }
            }
            return match &self.tokens {
                Some(tokens) => tokens.authenticate(&token).await.map(with_authenticated),
                None => Err(ApiError::Unauthorized),
            };
        }
        Ok(anonymous_user())
    }
}

/// The user named by the front proxy's headers, if the client certificate
/// (verified against the requestheader CA, of `subject`) is the front proxy's.
fn front_proxy_user(
    rh: &RequestHeaderConfig,
    subject: &x509::Subject,
    headers: &HeaderMap,
) -> Option<UserInfo> {
    if !rh.allowed_names.is_empty() && !rh.allowed_names.contains(&subject.common_name) {
        return None;
    }
    let values = |names: &[String]| -> Vec<String> {
        names
            .iter()
            .flat_map(|n| headers.get_all(n.as_str()).iter())
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let username = values(&rh.username_headers)
        .into_iter()
        .find(|u| !u.is_empty())?;
    let uid = values(&rh.uid_headers).into_iter().find(|u| !u.is_empty());
    let groups = values(&rh.group_headers);
    let mut extra = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (name, value) in headers {
        let lower = name.as_str().to_ascii_lowercase();
        for prefix in &rh.extra_headers_prefixes {
            if let Some(key) = lower.strip_prefix(&prefix.to_ascii_lowercase()) {
                if key.is_empty() {
                    continue;
                }
                if let Ok(v) = value.to_str() {
                    extra
                        .entry(percent_decode(key))
                        .or_default()
                        .push(v.to_owned());
                }
            }
        }
    }
    Some(UserInfo {
        username,
        uid,
        groups,
        extra,
    })
}

fn with_authenticated(mut user: UserInfo) -> UserInfo {
    if user.username != "system:anonymous" && !user.groups.iter().any(|g| g == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.to_owned());
    }
    user
}

/// `Authorization: Bearer <token>`; a malformed header is a 401.
fn bearer_token(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| ApiError::Unauthorized)?;
    let mut parts = text.splitn(2, ' ');
    match (parts.next(), parts.next()) {
        (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") => {
            let token = token.trim();
            if token.is_empty() {
                Err(ApiError::Unauthorized)
            } else {
                Ok(Some(token.to_owned()))
            }
        }
        // "Bearer" with no token is malformed, not anonymous.
        (Some(scheme), None) if scheme.eq_ignore_ascii_case("bearer") => {
            Err(ApiError::Unauthorized)
        }
        // Other schemes (basic) are not ours to judge: not authenticated.
        _ => Ok(None),
    }
}

/// Decodes `%XX` escapes in an extra key, as the request-header authenticator
/// does; invalid escapes are kept as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
