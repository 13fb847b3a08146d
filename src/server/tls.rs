//! The serving identity: a certificate chain and key from PEM files, or a
//! self-signed one made at start-up, and the rustls configuration built on it.
//!
//! ALPN offers `h2` then `http/1.1`: the aggregator speaks HTTP/2 to us, older
//! clients HTTP/1.1.
//!
//! The certificate is handed out per handshake by a [`ServingCertificate`]
//! resolver, so that a [`CertificateReloader`] can swap in a renewed pair from
//! disk without a restart (as k8s.io/apiserver's dynamic serving certificate
//! controller does). This module owns the TLS identity only; whether a client
//! certificate is trusted is decided by `authn`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

/// Why a serving identity could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading certificates from {path}: {message}")]
    Certificates { path: PathBuf, message: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("reading private key from {path}: {message}")]
    PrivateKey { path: PathBuf, message: String },
    #[error("generating a self-signed certificate: {0}")]
    Generate(rcgen::Error),
    #[error("the certificate and key do not make a usable TLS identity: {0}")]
    Rustls(rustls::Error),
}

// The causes below are part of each message, not `source()`s as well, so
// that an error reporter walking the chain prints each cause once.
impl From<rcgen::Error> for TlsError {
    fn from(err: rcgen::Error) -> Self {
        TlsError::Generate(err)
    }
}

impl From<rustls::Error> for TlsError {
    fn from(err: rustls::Error) -> Self {
        TlsError::Rustls(err)
    }
}

/// A certificate chain and its private key.
#[derive(Debug)]
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    /// Loads a PEM chain (leaf first) and a PEM key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let files = PemFiles::read(cert, key)?;
        Self::from_pem(&files)
    }

    /// Parses PEM already read from `files.cert_path` and `files.key_path`
    /// (the paths only name the files in errors).
    fn from_pem(files: &PemFiles) -> Result<Self, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&files.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificates {
                path: files.cert_path.clone(),
                message: e.to_string(),
            })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: files.cert_path.clone(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(&files.key).map_err(|e| TlsError::PrivateKey {
            path: files.key_path.clone(),
            message: e.to_string(),
        })?;
        Ok(Self { chain, key })
    }

    /// A fresh self-signed certificate for `localhost` and `127.0.0.1`.
    pub fn self_signed() -> Result<Self, TlsError> {
        let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let certified = rcgen::generate_simple_self_signed(names)?;
        let key = PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        Ok(Self {
            chain: vec![certified.cert.der().clone()],
            key,
        })
    }

    /// The SHA-256 fingerprint of the leaf certificate, as
    /// `openssl x509 -fingerprint -sha256` prints it.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.chain[0].as_ref());
        digest
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The chain and key as rustls serves them, after checking that the key
    /// belongs to the leaf certificate.
    fn certified_key(&self, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, TlsError> {
        let certified = CertifiedKey::from_der(self.chain.clone(), self.key.clone_key(), provider)?;
        Ok(Arc::new(certified))
    }

    /// A rustls server configuration serving this identity, and only it.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = rustls::crypto::ring::default_provider();
        let certificate = ServingCertificate::new(self.certified_key(&provider)?);
        server_config(Arc::new(provider), Arc::new(certificate))
    }
}

/// A rustls server configuration offering h2 and http/1.1, asking for (not
/// requiring) a client certificate, and serving whatever `certificate`
/// currently holds.
pub fn server_config(
    provider: Arc<CryptoProvider>,
    certificate: Arc<ServingCertificate>,
) -> Result<rustls::ServerConfig, TlsError> {
    let verifier = Arc::new(RequestClientCertificate {
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The certificate and key served right now; every handshake reads it, the
/// [`CertificateReloader`] replaces it.
#[derive(Debug)]
pub struct ServingCertificate {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCertificate {
    fn new(certified: Arc<CertifiedKey>) -> Self {
        Self {
            current: RwLock::new(certified),
        }
    }

    /// The pair new handshakes get.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn replace(&self, certified: Arc<CertifiedKey>) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = certified;
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The bytes of a certificate file and a key file, read one after the other.
#[derive(Debug, PartialEq, Eq)]
struct PemFiles {
    cert_path: PathBuf,
    key_path: PathBuf,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl PemFiles {
    fn read(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        Ok(Self {
            cert: std::fs::read(cert).map_err(|e| TlsError::Certificates {
                path: cert.to_owned(),
                message: e.to_string(),
            })?,
            key: std::fs::read(key).map_err(|e| TlsError::PrivateKey {
                path: key.to_owned(),
                message: e.to_string(),
            })?,
            cert_path: cert.to_owned(),
            key_path: key.to_owned(),
        })
    }

    /// A digest of both contents, to notice a change without keeping the key
    /// material around.
    fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update((self.cert.len() as u64).to_be_bytes());
        hasher.update(&self.cert);
        hasher.update(&self.key);
        hasher.finalize().into()
    }
}

/// Watches `--tls-cert-file` and `--tls-private-key-file` by polling, and
/// swaps a changed pair into the [`ServingCertificate`] once both files parse
/// and the key matches the certificate. Anything else (a half-written file, a
/// certificate renewed before its key) is logged and the pair being served is
/// kept; the next poll tries again.
#[derive(Debug, Clone)]
pub struct CertificateReloader {
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    provider: Arc<CryptoProvider>,
    certificate: Arc<ServingCertificate>,
    /// The digest of the file contents last looked at, usable or not, so
    /// that a bad pair is reported once rather than at every poll.
    seen: Option<[u8; 32]>,
}

/// What one look at the files found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The files hold what was last seen.
    Unchanged,
    /// A new pair is being served; its SHA-256 fingerprint.
    Reloaded { sha256: String },
    /// The files changed but do not make a usable pair; the old one stays.
    Refused { reason: String },
}

impl CertificateReloader {
    /// Loads the pair once (an error names the file) and returns the reloader
    /// and the server configuration that serves whatever it last loaded.
    pub fn start(
        cert: &Path,
        key: &Path,
        interval: Duration,
    ) -> Result<(Self, rustls::ServerConfig), TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = PemFiles::read(cert, key)?;
        let identity = Identity::from_pem(&files)?;
        let certificate = Arc::new(ServingCertificate::new(identity.certified_key(&provider)?));
        tracing::info!(sha256 = %identity.fingerprint(), "serving certificate");
        let config = server_config(provider.clone(), certificate.clone())?;
        let reloader = Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            interval,
            provider,
            certificate,
            seen: Some(files.digest()),
        };
        Ok((reloader, config))
    }

    /// The resolver the server configuration uses.
    pub fn certificate(&self) -> &Arc<ServingCertificate> {
        &self.certificate
    }

    /// Polls every `interval` until `stop` is notified.
    pub async fn run(mut self, stop: Arc<Notify>) {
        let stopped = stop.notified();
        tokio::pin!(stopped);
        // Registered now, so a notification during a poll is not missed.
        stopped.as_mut().enable();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.interval) => {}
                () = &mut stopped => return,
            }
            match self.poll() {
                ReloadOutcome::Unchanged => {}
                ReloadOutcome::Reloaded { sha256 } => {
                    tracing::info!(%sha256, "serving certificate reloaded");
                }
                ReloadOutcome::Refused { reason } => {
                    tracing::warn!(
                        error = %reason,
                        "serving certificate files changed but are not usable; keeping the current one"
                    );
                }
            }
        }
    }

    /// One look at the files.
    pub fn poll(&mut self) -> ReloadOutcome {
        let files = match PemFiles::read(&self.cert, &self.key) {
            Ok(files) => files,
            Err(err) => {
                // A file replaced by rename can be briefly missing: say so
                // once, and look again next time.
                if self.seen.take().is_some() {
                    return ReloadOutcome::Refused {
                        reason: err.to_string(),
                    };
                }
                return ReloadOutcome::Unchanged;
            }
        };
        let digest = files.digest();
        if self.seen == Some(digest) {
            return ReloadOutcome::Unchanged;
        }
        self.seen = Some(digest);
        let loaded = Identity::from_pem(&files).and_then(|identity| {
            let certified = identity.certified_key(&self.provider)?;
            Ok((identity.fingerprint(), certified))
        });
        match loaded {
            Ok((sha256, certified)) => {
                self.certificate.replace(certified);
                ReloadOutcome::Reloaded { sha256 }
            }
            Err(err) => ReloadOutcome::Refused {
                reason: err.to_string(),
            },
        }
    }
}

/// Asks every client for a certificate and accepts any, after checking that
/// the client holds its key (the handshake signature). Whether the chain is
/// trusted, and as whom, is decided per request by `authn` against the
/// current CA bundles, so that a CA rotation needs no new TLS configuration,
/// and an untrusted certificate makes the caller anonymous rather than
/// breaking the handshake (as Go's `tls.RequestClientCert` does for
/// k8s.io/apiserver).
#[derive(Debug)]
struct RequestClientCertificate {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::server::danger::ClientCertVerifier for RequestClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
