//! The delegated authentication configuration: what kube-apiserver publishes
//! in `kube-system/extension-apiserver-authentication`, parsed into trust
//! anchors and header names.
//!
//! Parsing is pure; [`crate::authn::source`] loads and watches the ConfigMap.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

/// The ConfigMap kube-apiserver maintains for extension API servers.
pub const CONFIGMAP_NAMESPACE: &str = "kube-system";
pub const CONFIGMAP_NAME: &str = "extension-apiserver-authentication";

/// Why the configuration could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("key {key}: {message}")]
    Key { key: &'static str, message: String },
}

/// A CA bundle with a verifier for client certificates issued under it.
#[derive(Clone)]
pub struct TrustAnchor {
    pub verifier: Arc<dyn ClientCertVerifier>,
    /// How many CA certificates the bundle holds.
    pub certificates: usize,
}

impl std::fmt::Debug for TrustAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustAnchor")
            .field("certificates", &self.certificates)
            .finish_non_exhaustive()
    }
}

/// Who may send `X-Remote-*` headers, and which headers carry what.
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    pub ca: TrustAnchor,
    /// Common names allowed to act as the front proxy; empty allows any CN.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefixes: Vec<String>,
}

/// The whole authentication configuration.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Client certificates signed by this CA authenticate as CN, groups O.
    pub client_ca: Option<TrustAnchor>,
    /// The front proxy (the aggregator).
    pub request_header: Option<RequestHeaderConfig>,
}

impl AuthConfig {
    /// Parses the ConfigMap's data.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let client_ca = match data.get("client-ca-file").filter(|v| !v.trim().is_empty()) {
            Some(pem) => Some(anchor("client-ca-file", pem)?),
            None => None,
        };
        let request_header = match data
            .get("requestheader-client-ca-file")
            .filter(|v| !v.trim().is_empty())
        {
            Some(pem) => Some(RequestHeaderConfig {
                ca: anchor("requestheader-client-ca-file", pem)?,
                allowed_names: list(data, "requestheader-allowed-names")?,
                username_headers: list(data, "requestheader-username-headers")?,
                uid_headers: list(data, "requestheader-uid-headers")?,
                group_headers: list(data, "requestheader-group-headers")?,
                extra_headers_prefixes: list(data, "requestheader-extra-headers-prefix")?,
            }),
            None => None,
        };
        Ok(Self {
            client_ca,
            request_header,
        })
    }
}

fn anchor(key: &'static str, pem: &str) -> Result<TrustAnchor, ConfigError> {
    let mut roots = RootCertStore::empty();
    let mut certificates = 0;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|e| ConfigError::Key {
            key,
            message: format!("not a PEM certificate bundle: {e}"),
        })?;
        roots.add(cert).map_err(|e| ConfigError::Key {
            key,
            message: format!("unusable CA certificate: {e}"),
        })?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err(ConfigError::Key {
            key,
            message: "holds no certificate".to_owned(),
        });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| ConfigError::Key {
            key,
            message: e.to_string(),
        })?;
    Ok(TrustAnchor {
        verifier,
        certificates,
    })
}

/// A key holding a JSON array of strings (absent is empty).
fn list(data: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, ConfigError> {
    match data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| ConfigError::Key {
            key,
            message: format!("expected a JSON array of strings: {e}"),
        }),
    }
}
