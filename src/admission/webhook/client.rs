//! The HTTPS POST to a webhook (kube's `webhookutil.ClientManager` and the
//! REST client under it): the target from `clientConfig`, TLS verified
//! against `caBundle` (the system roots when it is empty), HTTP/1.1, one
//! deadline over resolving, connecting and reading, a bounded response body,
//! and a few idle connections kept per target.
//!
//! Failures are returned as the reason kube puts after
//! `failed calling webhook "<name>": `.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use sha2::{Digest, Sha256};

use super::resolver::{Endpoint, ServiceResolver};

/// The most a webhook's response body may hold: 3 MiB, kube's limit on a
/// request body (`maxRequestBodyBytes`). kube-apiserver reads webhook
/// answers unbounded; this server does not let a hostile webhook make it
/// buffer more than this per call.
pub const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Idle connections kept per target.
const MAX_IDLE_PER_TARGET: usize = 4;
/// Targets (and TLS configurations) kept; kube caches 200 clients.
const MAX_TARGETS: usize = 200;
/// An idle connection older than this is closed (Go's `IdleConnTimeout`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Where a webhook is, from its `clientConfig`.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// `https://host[:port]`, as kube prints the URL in errors.
    origin: String,
    /// The request path (never empty).
    path: String,
    /// The `Host` header.
    authority: String,
    /// The name the serving certificate must be valid for.
    server_name: String,
    dial: Dial,
    ca_bundle: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Dial {
    Direct(Endpoint),
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

impl Target {
    /// The target of `config`; the error is kube's reason for a client it
    /// could not build.
    pub(super) fn new(webhook: &str, config: &WebhookClientConfig) -> Result<Self, String> {
        let ca_bundle = config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.clone())
            .unwrap_or_default();
        let inner = |reason: String| {
            format!("could not get REST client: failed calling webhook {webhook:?}: {reason}")
        };
        if let Some(service) = &config.service {
            let port = u16::try_from(service.port.unwrap_or(443))
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| inner("Invalid service port".to_owned()))?;
            let server_name = format!("{}.{}.svc", service.name, service.namespace);
            let authority = format!("{server_name}:{port}");
            return Ok(Self {
                origin: format!("https://{authority}"),
                path: clean_path(service.path.as_deref().unwrap_or_default()),
                authority,
                server_name,
                dial: Dial::Service {
                    namespace: service.namespace.clone(),
                    name: service.name.clone(),
                    port,
                },
                ca_bundle,
            });
        }
        let Some(url) = config.url.as_deref() else {
            return Err(inner(
                "webhook configuration must have either service or URL".to_owned(),
            ));
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e| inner(format!("Unparsable URL: {e}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(inner(
                "Unparsable URL: 'https' is the only allowed URL scheme".to_owned(),
            ));
        }
        let authority = uri
            .authority()
            .filter(|a| !a.as_str().contains('@') && !a.host().is_empty())
            .ok_or_else(|| inner("Unparsable URL: host must be specified".to_owned()))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = authority.port_u16().unwrap_or(443);
        Ok(Self {
            origin: format!("https://{}", authority.as_str()),
            path: clean_path(uri.path()),
            authority: authority.as_str().to_owned(),
            server_name: host.clone(),
            dial: Dial::Direct(Endpoint { host, port }),
            ca_bundle,
        })
    }
}

/// Go's `path.Join("", p)` as client-go builds the request path: no
/// trailing slash, no empty segments; `/` for nothing.
fn clean_path(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    format!("/{}", segments.join("/"))
}

/// What came back over HTTP.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) content_type: Option<String>,
    pub(super) body: Bytes,
}

/// The TLS configurations and idle connections, shared by every call.
#[derive(Default)]
pub(super) struct Transport {
    tls: Mutex<HashMap<Vec<u8>, Arc<ClientConfig>>>,
    idle: Mutex<HashMap<PoolKey, Vec<Idle>>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let targets = self.idle.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("Transport")
            .field("idle_targets", &targets)
            .finish_non_exhaustive()
    }
}

/// One target's connections: where, as whom, trusting what.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    host: String,
    port: u16,
    server_name: String,
    ca_bundle: [u8; 32],
}

struct Idle {
    sender: SendRequest<Full<Bytes>>,
    since: Instant,
}

/// Why one exchange failed.
enum Failure {
    /// A reused connection was closed before the request went out: safe to
    /// send again on a new one.
    Stale,
    /// Anything else, as the reason after `Post "<url>": ` (or alone).
    Reason { reason: String, with_url: bool },
}

impl Transport {
    /// POSTs `body` to the target within `timeout`, all steps included.
    pub(super) async fn post(
        &self,
        target: &Target,
        resolver: &dyn ServiceResolver,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Reply, String> {
        let tls = self
            .tls_config(&target.ca_bundle)
            .map_err(|e| format!("could not get REST client: {e}"))?;
        let path = format!("{}?timeout={}s", target.path, timeout.as_secs());
        let url = format!("{}{path}", target.origin);
        let body = Bytes::from(body);
        let exchange = self.exchange(target, tls, resolver, &path, body);
        match tokio::time::timeout(timeout, exchange).await {
            Err(_) => Err(format!(
                "failed to call webhook: Post {url:?}: context deadline exceeded"
            )),
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(Failure::Reason { reason, with_url })) if with_url => {
                Err(format!("failed to call webhook: Post {url:?}: {reason}"))
            }
            Ok(Err(Failure::Reason { reason, .. })) => {
                Err(format!("failed to call webhook: {reason}"))
            }
            Ok(Err(Failure::Stale)) => Err(format!(
                "failed to call webhook: Post {url:?}: connection closed"
            )),
        }
    }

    async fn exchange(
        &self,
        target: &Target,
        tls: Arc<ClientConfig>,
        resolver: &dyn ServiceResolver,
        path: &str,
        body: Bytes,
    ) -> Result<Reply, Failure> {
        let endpoint = match &target.dial {
            Dial::Direct(endpoint) => endpoint.clone(),
            Dial::Service {
                namespace,
                name,
                port,
            } => resolver
                .resolve(namespace, name, *port)
                .await
                .map_err(|reason| Failure::Reason {
                    reason,
                    with_url: true,
                })?,
        };
        let key = PoolKey {
            host: endpoint.host.clone(),
            port: endpoint.port,
            server_name: target.server_name.clone(),
            ca_bundle: Sha256::digest(&target.ca_bundle).into(),
        };
        let request = || {
            http::Request::post(path)
                .header(http::header::HOST, &target.authority)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::ACCEPT, "application/json, */*")
                .header(http::header::USER_AGENT, "storage-transfer-apiserver")
                .body(Full::new(body.clone()))
                .map_err(|e| Failure::Reason {
                    reason: e.to_string(),
                    with_url: true,
                })
        };
        if let Some(sender) = self.take_idle(&key) {
            match self.send(&key, sender, request()?).await {
                Err(Failure::Stale) => {}
                done => return done,
            }
        }
        let sender = connect(&endpoint, &target.server_name, tls).await?;
        match self.send(&key, sender, request()?).await {
            Err(Failure::Stale) => Err(Failure::Reason {
                reason: "connection closed before the request was sent".to_owned(),
                with_url: true,
            }),
            done => done,
        }
    }

    /// Sends on `sender` and reads the answer, at most
    /// [`MAX_RESPONSE_BYTES`] of it; keeps the connection when it can.
    async fn send(
        &self,
        key: &PoolKey,
        mut sender: SendRequest<Full<Bytes>>,
        request: http::Request<Full<Bytes>>,
    ) -> Result<Reply, Failure> {
        // A connection that closed while idle fails `ready`, or cancels the
        // request before writing it: both are safe to send again.
        let reason = |e: hyper::Error| Failure::Reason {
            reason: e.to_string(),
            with_url: true,
        };
        sender.ready().await.map_err(|_| Failure::Stale)?;
        let response = sender.send_request(request).await.map_err(|e| {
            if e.is_canceled() {
                Failure::Stale
            } else {
                reason(e)
            }
        })?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let too_large = || Failure::Reason {
            reason: format!("the response body exceeds the limit of {MAX_RESPONSE_BYTES} bytes"),
            with_url: false,
        };
        let declared = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_RESPONSE_BYTES as u64) {
            return Err(too_large());
        }
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    too_large()
                } else {
                    Failure::Reason {
                        reason: format!(
                            "unexpected error when reading response body. Please retry. Original error: {e}"
                        ),
                        with_url: false,
                    }
                }
            })?
            .to_bytes();
        self.put_idle(key, sender);
        Ok(Reply {
            status,
            content_type,
            body,
        })
    }

    fn take_idle(&self, key: &PoolKey) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(entry) = list.pop() {
            if entry.since.elapsed() < IDLE_TIMEOUT && !entry.sender.is_closed() {
                return Some(entry.sender);
            }
        }
        None
    }

    fn put_idle(&self, key: &PoolKey, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() >= MAX_TARGETS && !idle.contains_key(key) {
            idle.clear();
        }
        let list = idle.entry(key.clone()).or_default();
        list.retain(|e| e.since.elapsed() < IDLE_TIMEOUT && !e.sender.is_closed());
        if list.len() < MAX_IDLE_PER_TARGET {
            list.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// The TLS configuration trusting `ca_bundle` (the system's roots when
    /// empty), speaking HTTP/1.1 only, as kube talks to webhooks.
    fn tls_config(&self, ca_bundle: &[u8]) -> Result<Arc<ClientConfig>, String> {
        let mut cache = self.tls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = cache.get(ca_bundle) {
            return Ok(config.clone());
        }
        let roots = if ca_bundle.is_empty() {
            system_roots()?.clone()
        } else {
            let mut roots = RootCertStore::empty();
            let (added, _) = roots
                .add_parsable_certificates(CertificateDer::pem_slice_iter(ca_bundle).flatten());
            if added == 0 {
                return Err(
                    "unable to load root certificates: unable to parse bytes as PEM block"
                        .to_owned(),
                );
            }
            roots
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if cache.len() >= MAX_TARGETS {
            cache.clear();
        }
        cache.insert(ca_bundle.to_vec(), config.clone());
        Ok(config)
    }
}

/// Where the system keeps its CA bundle: `$SSL_CERT_FILE`, else the first
/// of the files Go's crypto/x509 looks for on Linux.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

fn system_roots() -> Result<&'static RootCertStore, String> {
    static ROOTS: OnceLock<Result<RootCertStore, String>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
            let candidates = from_env
                .into_iter()
                .chain(SYSTEM_BUNDLES.iter().map(std::path::PathBuf::from));
            for path in candidates {
                let Ok(pem) = std::fs::read(&path) else {
                    continue;
                };
                let mut roots = RootCertStore::empty();
                let (added, _) =
                    roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).flatten());
                if added > 0 {
                    return Ok(roots);
                }
            }
            Err("unable to load system root certificates".to_owned())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A new TLS connection to `endpoint`, checked for `server_name`, with its
/// HTTP/1.1 connection driven on a task of its own.
async fn connect(
    endpoint: &Endpoint,
    server_name: &str,
    tls: Arc<ClientConfig>,
) -> Result<SendRequest<Full<Bytes>>, Failure> {
    let reason = |reason: String| Failure::Reason {
        reason,
        with_url: true,
    };
    let address = if endpoint.host.contains(':') {
        format!("[{}]:{}", endpoint.host, endpoint.port)
    } else {
        format!("{}:{}", endpoint.host, endpoint.port)
    };
    let tcp = tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| reason(dial_error(&address, &e)))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| reason(format!("tls: invalid server name {server_name:?}: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| reason(tls_error(&e)))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| reason(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "webhook connection ended");
        }
    });
    Ok(sender)
}

/// Go's `dial tcp <addr>: …` wording for the common failures.
fn dial_error(address: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {address}: connect: connection refused")
        }
        std::io::ErrorKind::ConnectionReset => {
            format!("dial tcp {address}: connect: connection reset by peer")
        }
        _ => format!("dial tcp {address}: {e}"),
    }
}

/// Go's wording for the common handshake failures.
fn tls_error(e: &std::io::Error) -> String {
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return format!("tls: handshake failed: {e}");
    };
    match tls {
        // A CA of the same name that did not sign it is as unknown to Go.
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
        ) => "tls: failed to verify certificate: x509: certificate signed by unknown authority"
            .to_owned(),
        rustls::Error::InvalidCertificate(cert) => {
            format!("tls: failed to verify certificate: x509: {cert}")
        }
        other => format!("tls: {other}"),
    }
}
