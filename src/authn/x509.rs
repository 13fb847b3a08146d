//! Client certificates: does a presented chain verify against a trust anchor,
//! and whose is it (CN, O)?

use rustls::pki_types::{CertificateDer, UnixTime};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::config::TrustAnchor;

/// The subject of a verified certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// Verifies `chain` (leaf first) against `anchor`, including the clientAuth
/// key usage, and returns its subject.
pub fn verify(anchor: &TrustAnchor, chain: &[CertificateDer<'static>]) -> Option<Subject> {
    let (leaf, intermediates) = chain.split_first()?;
    anchor
        .verifier
        .verify_client_cert(leaf, intermediates, UnixTime::now())
        .ok()?;
    subject(leaf)
}

/// The CN and O of a certificate.
pub fn subject(der: &CertificateDer<'_>) -> Option<Subject> {
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_owned();
    let organizations = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(Subject {
        common_name,
        organizations,
    })
}
