//! The serving identity: a certificate chain and key from PEM files, or a
//! self-signed one made at start-up, and the rustls configuration built on it.
//!
//! ALPN offers `h2` then `http/1.1`: the aggregator speaks HTTP/2 to us, older
//! clients HTTP/1.1.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

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
    Generate(#[from] rcgen::Error),
    #[error("the certificate and key do not make a usable TLS identity: {0}")]
    Rustls(#[from] rustls::Error),
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
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| TlsError::Certificates {
                path: cert.to_owned(),
                message: e.to_string(),
            })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: cert.to_owned(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::PrivateKey {
            path: key.to_owned(),
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

    /// A rustls server configuration offering h2 and http/1.1, and asking
    /// for (not requiring) a client certificate.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(RequestClientCertificate {
            algorithms: provider.signature_verification_algorithms,
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
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
