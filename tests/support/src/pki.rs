//! The per-run public key infrastructure of the test control plane.
//!
//! - a cluster CA: kube-apiserver's serving certificate, the admin client
//!   certificate (`system:masters`), the controller-manager's client certificate,
//!   and per-test user certificates;
//! - a front-proxy CA: the aggregator's proxy client certificate;
//! - a serving CA for our server, whose bundle goes into the APIService;
//! - the ServiceAccount token signing key pair.
//!
//! Everything is written as PEM under `<run>/pki`, freshly generated each run.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::{io_err, Error};

/// A certificate and key on disk.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA on disk, able to issue more certificates later (per-test users).
#[derive(Debug, Clone)]
pub struct Ca {
    pub cert: PathBuf,
    key: PathBuf,
    /// The parameters the CA certificate was made from: an issuer is rebuilt from
    /// them and the key, so its name and key identifier match the certificate.
    params: CertificateParams,
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
    /// Both, as etcd wants of its serving certificate: its gateway dials
    /// itself with it.
    ServerAndClient,
}

/// All the key material of one control plane.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
    pub cluster_ca: Ca,
    pub front_proxy_ca: Ca,
    pub serving_ca: Ca,
    pub apiserver_serving: CertPair,
    pub admin: CertPair,
    pub controller_manager: CertPair,
    pub front_proxy_client: CertPair,
    pub server_serving: CertPair,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

/// The CN of the aggregator's proxy client certificate, which
/// `--requestheader-allowed-names` admits.
pub const FRONT_PROXY_CLIENT_CN: &str = "front-proxy-client";

impl Pki {
    /// Generates every CA, certificate and key. `server_dns` is the
    /// `<service>.<namespace>.svc` name the aggregator dials our server by.
    pub fn generate(dir: &Path, server_dns: &str) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let cluster_ca = Ca::create(dir, "ca", "storage-transfer-test-cluster-ca")?;
        let front_proxy_ca = Ca::create(
            dir,
            "front-proxy-ca",
            "storage-transfer-test-front-proxy-ca",
        )?;
        let serving_ca = Ca::create(dir, "serving-ca", "storage-transfer-test-serving-ca")?;

        let apiserver_serving = cluster_ca.issue(
            dir,
            "kube-apiserver",
            "kube-apiserver",
            &[],
            &[
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            Usage::Server,
        )?;
        let admin = cluster_ca.issue(
            dir,
            "admin",
            "admin",
            &["system:masters"],
            &[],
            Usage::Client,
        )?;
        let controller_manager = cluster_ca.issue(
            dir,
            "kube-controller-manager",
            "system:kube-controller-manager",
            &["system:masters"],
            &[],
            Usage::Client,
        )?;
        let front_proxy_client = front_proxy_ca.issue(
            dir,
            "front-proxy-client",
            FRONT_PROXY_CLIENT_CN,
            &[],
            &[],
            Usage::Client,
        )?;
        let server_serving = serving_ca.issue(
            dir,
            "storage-transfer-apiserver",
            server_dns,
            &[],
            &[server_dns, "localhost", "127.0.0.1"],
            Usage::Server,
        )?;

        let sa = KeyPair::generate().map_err(pki_err("service account key"))?;
        let service_account_key = dir.join("sa.key");
        let service_account_pub = dir.join("sa.pub");
        write(&service_account_key, &sa.serialize_pem())?;
        write(&service_account_pub, &sa.public_key_pem())?;

        Ok(Self {
            dir: dir.to_owned(),
            cluster_ca,
            front_proxy_ca,
            serving_ca,
            apiserver_serving,
            admin,
            controller_manager,
            front_proxy_client,
            server_serving,
            service_account_key,
            service_account_pub,
        })
    }
}

impl Ca {
    /// A new self-signed CA `<dir>/<file>.crt` with CN `cn`.
    pub fn create(dir: &Path, file: &str, cn: &str) -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err(cn))?;
        params.distinguished_name = name(cn, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(pki_err(cn))?;
        let key_pem = key.serialize_pem();
        let issuer = CertifiedIssuer::self_signed(params.clone(), key).map_err(pki_err(cn))?;
        let ca = Self {
            cert: dir.join(format!("{file}.crt")),
            key: dir.join(format!("{file}.key")),
            params,
        };
        write(&ca.cert, &issuer.pem())?;
        write(&ca.key, &key_pem)?;
        Ok(ca)
    }

    /// The CA certificate in PEM, for kubeconfigs and the APIService caBundle.
    pub fn pem(&self) -> Result<String, Error> {
        std::fs::read_to_string(&self.cert).map_err(io_err(&self.cert))
    }

    /// Issues a leaf certificate `<dir>/<file>.crt` with CN `cn` and O `orgs`.
    pub fn issue(
        &self,
        dir: &Path,
        file: &str,
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        usage: Usage,
    ) -> Result<CertPair, Error> {
        let ca_key_pem = std::fs::read_to_string(&self.key).map_err(io_err(&self.key))?;
        let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(pki_err(file))?;
        let issuer = Issuer::new(self.params.clone(), ca_key);

        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).map_err(pki_err(file))?;
        params.distinguished_name = name(cn, orgs);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::ServerAndClient => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(pki_err(file))?;
        let cert = params.signed_by(&key, &issuer).map_err(pki_err(file))?;
        let pair = CertPair {
            cert: dir.join(format!("{file}.crt")),
            key: dir.join(format!("{file}.key")),
        };
        write(&pair.cert, &cert.pem())?;
        write(&pair.key, &key.serialize_pem())?;
        Ok(pair)
    }
}

/// rcgen keeps one value per attribute type, so a certificate carries at most one
/// organization (group). Users with several groups are made by impersonation.
fn name(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = orgs.first() {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(io_err(path))
}

fn pki_err(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |e| Error::Pki(format!("{what}: {e}"))
}
