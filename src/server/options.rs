//! Command-line options, and their completion into a config the server can run.
//!
//! As in k8s.io/apiserver, [`Options`] are what the operator typed, and a
//! [`CompletedConfig`] exists only once they are validated and every file they
//! name has been read. Bad configuration is an error that names the flag, never a
//! panic.
//!
//! # Audit
//!
//! As kube-apiserver's flags of the same names (k8s.io/apiserver
//! `options/audit.go`); events are written only when both a policy and a
//! log path are given:
//! - `--audit-policy-file`: an `audit.k8s.io/v1` Policy, YAML or JSON. A
//!   policy that does not parse or validate stops the server, with the
//!   reason and the field at fault.
//! - `--audit-log-path`: the file events are appended to, one JSON object per
//!   line; `-` for standard output. Its directory and the file (mode 0600)
//!   are created at start-up; a path that cannot be written stops the server.
//! - `--audit-log-maxsize` (megabytes; 0: never rotate),
//!   `--audit-log-maxbackup` (0: keep every backup) and `--audit-log-maxage`
//!   (days; 0: any age): rotation as lumberjack does it, backups named
//!   `<name>-<UTC timestamp>.<ext>`.
//! - `--audit-log-format`: only `json` (kube's `legacy` is not offered).
//! - `--audit-log-mode`: `blocking` (the default, as kube's log backend),
//!   `blocking-strict` or `batch`, with kube's meanings: in the blocking
//!   modes a request's event waits for room in the queue, so none is
//!   dropped, and in blocking-strict a request whose RequestReceived event
//!   cannot be written (and flushed) fails with 500 ("failed to store audit
//!   event"); in batch mode nothing waits, and an event that finds the
//!   queue full is dropped and counted
//!   (`storage_transfer_audit_error_total{reason="dropped"}`), as kube's
//!   buffered backend drops it. Any other value stops the server. Unlike
//!   kube's blocking backend, which writes each event before the request
//!   goes on, ours waits only for room in the queue, and the writer thread
//!   writes it soon after. Neither our batch mode nor kube's sends events
//!   in timed batches here: the writer writes each as it comes
//!   (`--audit-log-batch-max-size`, `-max-wait` and `-throttle-*` are not
//!   offered).
//! - `--audit-log-buffer-size` (kube: `--audit-log-batch-buffer-size`,
//!   which is taken too; 10,000): how many events may wait for the writer,
//!   and at most 64 MiB of them; past it, requests wait (blocking modes) or
//!   events are dropped (batch). kube uses it in batch mode only.
//!   `--audit-log-compress` is not offered.
//!
//! # Overload
//!
//! As kube-apiserver's max-in-flight flags, with a fixed fair queue per
//! user in place of API Priority and Fairness (see [`super::flowcontrol`]
//! and docs/operations.md): `--max-requests-inflight` (400),
//! `--max-mutating-requests-inflight` (200), and ours,
//! `--max-queued-requests-per-user` (50), `--max-queued-requests` (1000),
//! `--request-queue-timeout` (15s) and `--max-watches-per-user` (100).
//! Limits are whole numbers, 0 or more; a seat or watch limit of 0 means
//! no limit, a queue limit of 0 means no request waits.
//!
//! # Objects per namespace
//!
//! `--max-objects-per-namespace` (1000; 0: no limit): the most objects of
//! each of our kinds one namespace may hold, counted in the watch cache. A
//! client's create past it is refused with 403 Forbidden, naming the limit
//! and the flag. It is a backstop under the cluster's ResourceQuotas
//! (`count/namespacetransfers.storage.transfer.k8s.io`,
//! `count/ephemeralclaims.storage.transfer.k8s.io`), which the server
//! honours as kube-apiserver does (`crate::admission::quota`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::connection::ConnectionLimits;
use super::flowcontrol::FlowControlLimits;
use super::tls::{self, TlsError};
use crate::audit::{
    AuditConfig, LogConfig, Mode, Policy, PolicyError, RotatingFile, Rotation, UnknownMode,
};
use crate::controller::EnabledControllers;
use crate::storage::etcd::EtcdConfig;

/// The flags of `storage-transfer-apiserver`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "storage-transfer-apiserver",
    version,
    about = "Kubernetes aggregated API server for storage.transfer.k8s.io"
)]
pub struct Options {
    /// The address to listen on for HTTPS.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// The port to listen on for HTTPS. 0 picks a free port.
    #[arg(long, default_value_t = 8443)]
    pub secure_port: u16,

    /// PEM serving certificate (chain). Without it, a self-signed certificate is
    /// generated at start-up and its fingerprint is logged.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key matching --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// How often --tls-cert-file and --tls-private-key-file are checked for a
    /// renewed pair, which is then served without a restart.
    #[arg(long, default_value = "10s", value_parser = parse_duration, hide = true)]
    pub tls_reload_interval: Duration,

    /// How long a client has to complete the TLS handshake after it connects.
    /// kube's clients give the handshake 10s too.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub tls_handshake_timeout: Duration,

    /// How long a client has to send a request's headers: from the end of
    /// the TLS handshake for the first request (HTTP/1 or HTTP/2), and on
    /// HTTP/1 from the end of the previous response, which makes it the idle
    /// timeout of a kept-alive HTTP/1 connection too. A connection that sends
    /// none in time is closed. Long responses (watches) are not affected.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub read_header_timeout: Duration,

    /// HTTP/2: how long a connection may send nothing before the server
    /// pings it (client-go calls its own HTTP2_READ_IDLE_TIMEOUT_SECONDS).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub http2_read_idle_timeout: Duration,

    /// HTTP/2: how long a ping may go unanswered before the connection is
    /// closed (client-go: HTTP2_PING_TIMEOUT_SECONDS).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub http2_ping_timeout: Duration,

    /// HTTP/2: the most streams a client may have open on one connection
    /// (kube's flag of the same name). The default is 1,000, what
    /// k8s.io/apiserver's recommended options give every aggregated server:
    /// its client is kube-apiserver's proxy, which carries many requests
    /// and long-running watches on one connection. 0 means hyper's default,
    /// 200.
    #[arg(long, default_value_t = 1000)]
    pub http2_max_streams_per_connection: u32,

    /// How long a connection may have no request open, once it has sent its
    /// first, before the server closes it (HTTP/2: with a GOAWAY). A watch is
    /// an open request. 90s, as k8s.io/apiserver's secure serving closes idle
    /// connections, so that a client that only answers pings cannot hold a
    /// connection for ever.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    pub idle_connection_timeout: Duration,

    /// The most client connections open at once. Past it, the longest idle
    /// connection is closed to make room for the next; when none is idle,
    /// new connections wait in the listen backlog until one closes.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,

    /// How long to drain open connections after SIGTERM before closing them.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace_period: Duration,

    /// etcd endpoints, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    pub etcd_servers: Vec<String>,

    /// The key prefix under which objects are stored.
    #[arg(long, default_value = "/registry")]
    pub etcd_prefix: String,

    /// CA bundle to verify etcd's serving certificate.
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,

    /// Client certificate for etcd (with --etcd-keyfile).
    #[arg(long, requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,

    /// Client key for etcd (with --etcd-certfile).
    #[arg(long, requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,

    /// Kubeconfig for the cluster this server extends: it reads the
    /// authentication ConfigMap and sends TokenReviews and
    /// SubjectAccessReviews there. Without it, the in-cluster configuration
    /// (or $KUBECONFIG) is used.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// The audiences a ServiceAccount token may be for to be verified
    /// locally, comma-separated, as kube-apiserver's flag of the same name.
    /// Empty: the cluster's issuer, its default API audience. Tokens for
    /// other audiences go to a TokenReview.
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,

    /// Treat every caller as anonymous and allow every request, with no
    /// cluster at all. For tests and local experiments only; the server says
    /// so loudly in its log.
    #[arg(long)]
    pub insecure_allow_all: bool,

    /// How long the controllers' leader lease lasts without a renewal. A
    /// replica that cannot renew stops acting before it runs out; another
    /// takes over after it has.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,

    /// Allow transfers of volumes of every StorageClass, and of volumes with
    /// none, not only of classes annotated
    /// `storage.transfer.k8s.io/allow-namespace-transfer: "true"`.
    #[arg(long)]
    pub allow_all_storage_classes: bool,

    /// How long a Clone-mode transfer's clone may stay unbound, whatever
    /// the reason, before the transfer fails with reason `CloneFailed` and
    /// the clone is deleted, giving back the source namespace's quota.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub clone_timeout: Duration,

    /// The fence pod (`namespace/name`) whose writes give the transfers'
    /// in-use checks a revision to list pods at: as fresh as a consistent
    /// LIST, without waiting for
    /// kube-apiserver's watch cache to learn it has caught up (up to 100 ms
    /// per check). The server patches one annotation on it and nothing else;
    /// `deploy/rbac/fence.yaml` creates it, gated so that it never runs.
    /// Empty, missing or not patchable: pods are listed consistently.
    #[arg(long, default_value = "storage-transfer-system/storage-transfer-fence", value_parser = parse_pod_fence)]
    pub pod_fence: PodFenceName,

    /// How many reconciles run at once, per controller. A reconcile mostly
    /// waits on kube-apiserver and etcd, so many run side by side; what
    /// bounds the load they put on kube-apiserver is the queue's pacing.
    #[arg(long, default_value_t = 16)]
    pub controller_workers: usize,

    /// Which controllers run, as kube-controller-manager's flag of the same
    /// name: `*` for all, `namespacetransfer` or `ephemeralclaim` to enable
    /// one, `-name` to disable one. A replica with none only serves the API
    /// and takes no part in the leader election.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Log format: `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// The audit policy (`audit.k8s.io/v1` Policy, YAML or JSON). Without
    /// it, nothing is audited.
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,

    /// Where audit events are written, one JSON object per line; `-` for
    /// standard output. Without it, nothing is audited.
    #[arg(long)]
    pub audit_log_path: Option<String>,

    /// The most days a rotated audit log is kept; 0: no limit by age.
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxage: u32,

    /// The most rotated audit logs kept; 0: no limit by number.
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: u32,

    /// The size in megabytes at which the audit log is rotated; 0: never.
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u32,

    /// The audit log's format: `json` (one Event per line).
    #[arg(long, default_value = "json", value_parser = ["json"])]
    pub audit_log_format: String,

    /// What a request waits for, as kube-apiserver's flag of the same
    /// name: `blocking` (its event waits for room in the queue; none is
    /// dropped), `blocking-strict` (as blocking, and the request fails if
    /// its RequestReceived event cannot be written) or `batch` (never
    /// waits; past the queue's bounds events are dropped and counted).
    #[arg(long, default_value = "blocking", value_name = "MODE")]
    pub audit_log_mode: String,

    /// How many audit events may wait for the writer (at most 64 MiB of
    /// them in all). Past it, in batch mode new events are dropped and
    /// counted; in the blocking modes requests wait for room, so memory
    /// stays bounded. kube's name for it, `--audit-log-batch-buffer-size`
    /// (whose default is 10,000 too), is taken as well.
    #[arg(long, default_value_t = 10_000, alias = "audit-log-batch-buffer-size")]
    pub audit_log_buffer_size: usize,

    /// The most read-only requests (get, list) served at once, as
    /// kube-apiserver's flag of the same name; past it they wait in their
    /// user's queue. 0: no limit. Watches, health checks, /metrics and
    /// members of system:masters are not counted.
    #[arg(long, default_value = "400", value_parser = parse_limit, value_name = "N")]
    pub max_requests_inflight: usize,

    /// The most mutating requests (create, update, patch, delete) served
    /// at once, as kube-apiserver's flag of the same name. 0: no limit.
    #[arg(long, default_value = "200", value_parser = parse_limit, value_name = "N")]
    pub max_mutating_requests_inflight: usize,

    /// How many requests of one user may wait for a seat (of each kind);
    /// past it they are refused with 429. 0: none wait, a request that finds
    /// every seat taken is refused at once.
    #[arg(long, default_value = "50", value_parser = parse_limit, value_name = "N")]
    pub max_queued_requests_per_user: usize,

    /// How many requests may wait for a seat (of each kind), all users
    /// together; it bounds the queues' memory. When every place is taken, a
    /// user with a shorter queue than the longest takes the place of that
    /// queue's newest request.
    #[arg(long, default_value = "1000", value_parser = parse_limit, value_name = "N")]
    pub max_queued_requests: usize,

    /// How long a request may wait in its queue for a seat before it is
    /// refused with 429 (API Priority and Fairness waits 15s too).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub request_queue_timeout: Duration,

    /// How long a request may take, as kube-apiserver's flag of the same
    /// name: from its headers to its answer, its body's arrival and its
    /// wait for a seat included. Past it the answer is 504 `Timeout`.
    /// Watches are long-running and not bounded by it.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// How many watches one user may hold open at once; past it a watch is
    /// refused with 429. 0: no limit. Members of system:masters are not
    /// counted.
    #[arg(long, default_value = "100", value_parser = parse_limit, value_name = "N")]
    pub max_watches_per_user: usize,

    /// The most objects of each kind (NamespaceTransfers, EphemeralClaims)
    /// one namespace may hold: past it a client's create is refused with
    /// 403. The server's own bound on what one tenant can make it keep in
    /// memory, whatever the cluster's ResourceQuotas say. 0: no limit.
    #[arg(long, default_value = "1000", value_parser = parse_limit, value_name = "N")]
    pub max_objects_per_namespace: usize,
}

/// A validated configuration, ready to serve.
#[derive(Debug, Clone)]
pub struct CompletedConfig {
    pub bind: SocketAddr,
    pub tls: Arc<rustls::ServerConfig>,
    /// Reloads the serving certificate from its files; `None` when it is
    /// self-signed.
    pub tls_reloader: Option<tls::CertificateReloader>,
    pub shutdown_grace: Duration,
    pub connections: ConnectionLimits,
    /// In-flight seats, the per-user queues and the watch cap.
    pub flow_control: FlowControlLimits,
    /// `--request-timeout`.
    pub request_timeout: Duration,
    pub etcd: EtcdConfig,
    pub etcd_prefix: String,
    pub auth: AuthMode,
    pub controllers: ControllerOptions,
    /// `--max-objects-per-namespace`; 0 for no limit.
    pub max_objects_per_namespace: usize,
    /// `None` unless both `--audit-policy-file` and `--audit-log-path` are
    /// given.
    pub audit: Option<AuditConfig>,
}

/// What the controllers are told (they run only with a cluster, that is in
/// delegated mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerOptions {
    pub lease_ttl: Duration,
    pub allow_all_storage_classes: bool,
    pub clone_timeout: Duration,
    pub pod_fence: PodFenceName,
    pub workers: usize,
    pub enabled: EnabledControllers,
}

/// `--pod-fence`: the fence pod's namespace and name, or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFenceName(pub Option<(String, String)>);

/// Reads `--pod-fence`: `namespace/name`, each a DNS label / subdomain as
/// kube requires, or empty for none.
fn parse_pod_fence(value: &str) -> Result<PodFenceName, String> {
    if value.trim().is_empty() {
        return Ok(PodFenceName(None));
    }
    let (namespace, name) = value
        .split_once('/')
        .ok_or_else(|| format!("{value:?} is not namespace/name"))?;
    let problems: Vec<String> = crate::api::validation::is_dns1123_label(namespace)
        .into_iter()
        .map(|p| format!("namespace {namespace:?}: {p}"))
        .chain(
            crate::api::validation::is_dns1123_subdomain(name)
                .into_iter()
                .map(|p| format!("name {name:?}: {p}")),
        )
        .collect();
    if !problems.is_empty() {
        return Err(format!(
            "{value:?} is not namespace/name: {}",
            problems.join("; ")
        ));
    }
    Ok(PodFenceName(Some((namespace.to_owned(), name.to_owned()))))
}

/// How callers are authenticated and authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMode {
    /// Delegated to the cluster (DESIGN §3.2).
    Delegated {
        kubeconfig: Option<PathBuf>,
        /// `--api-audiences`; empty: the issuer.
        api_audiences: Vec<String>,
    },
    /// Everyone is anonymous and everything is allowed (tests only).
    InsecureAllowAll,
}

/// Why the options could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--tls-cert-file/--tls-private-key-file: {0}")]
    Tls(TlsError),
    #[error("--etcd-servers: {0}")]
    Etcd(String),
    #[error("--etcd-prefix: {0}")]
    EtcdPrefix(String),
    #[error("--kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("--controllers: {0}")]
    Controllers(String),
    /// A connection limit that would refuse every connection.
    #[error("--{flag}: {reason}")]
    ConnectionLimit { flag: &'static str, reason: String },
    #[error("--audit-policy-file {path}: {error}")]
    AuditPolicy { path: String, error: PolicyError },
    #[error("--audit-log-path {path}: {reason}")]
    AuditLog { path: String, reason: String },
    #[error("--audit-log-buffer-size: must be at least 1")]
    AuditBuffer,
    #[error("--audit-log-mode: {0}")]
    AuditMode(UnknownMode),
    /// A flow-control limit that contradicts another.
    #[error("--{flag}: {reason}")]
    FlowControl { flag: &'static str, reason: String },
}

// The causes below are part of each message, not `source()`s as well, so
// that an error reporter walking the chain prints each cause once.
impl From<TlsError> for ConfigError {
    fn from(err: TlsError) -> Self {
        ConfigError::Tls(err)
    }
}

impl From<UnknownMode> for ConfigError {
    fn from(err: UnknownMode) -> Self {
        ConfigError::AuditMode(err)
    }
}

impl Options {
    /// Validates the options and loads every file they name.
    pub fn complete(&self) -> Result<CompletedConfig, ConfigError> {
        if self.etcd_servers.iter().all(|s| s.trim().is_empty()) {
            return Err(ConfigError::Etcd(
                "at least one endpoint is required".to_owned(),
            ));
        }
        for server in &self.etcd_servers {
            if !(server.starts_with("http://") || server.starts_with("https://")) {
                return Err(ConfigError::Etcd(format!(
                    "{server:?} must be a URL such as https://127.0.0.1:2379"
                )));
            }
        }
        if !self.etcd_prefix.starts_with('/') {
            return Err(ConfigError::EtcdPrefix(format!(
                "{:?} must start with '/'",
                self.etcd_prefix
            )));
        }
        let connections = self.connection_limits()?;
        let flow_control = self.flow_control_limits()?;
        let (tls_config, tls_reloader) = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => {
                let (reloader, config) = tls::CertificateReloader::start(
                    cert,
                    key,
                    self.tls_reload_interval.max(Duration::from_millis(10)),
                )?;
                (config, Some(reloader))
            }
            _ => {
                let identity = tls::Identity::self_signed()?;
                tracing::warn!(
                    sha256 = %identity.fingerprint(),
                    "no --tls-cert-file given: serving a self-signed certificate"
                );
                (identity.server_config()?, None)
            }
        };
        Ok(CompletedConfig {
            bind: SocketAddr::new(self.bind_address, self.secure_port),
            tls: Arc::new(tls_config),
            tls_reloader,
            shutdown_grace: self.shutdown_grace_period,
            connections,
            flow_control,
            request_timeout: self.request_timeout,
            etcd: EtcdConfig {
                endpoints: self.etcd_servers.clone(),
                ca_file: self.etcd_cafile.clone(),
                cert_file: self.etcd_certfile.clone(),
                key_file: self.etcd_keyfile.clone(),
            },
            etcd_prefix: self.etcd_prefix.trim_end_matches('/').to_owned(),
            auth: if self.insecure_allow_all {
                AuthMode::InsecureAllowAll
            } else {
                if let Some(path) = &self.kubeconfig {
                    if !path.is_file() {
                        return Err(ConfigError::Kubeconfig(format!(
                            "{} is not a readable file",
                            path.display()
                        )));
                    }
                }
                let api_audiences: Vec<String> = self
                    .api_audiences
                    .iter()
                    .map(|a| a.trim().to_owned())
                    .filter(|a| !a.is_empty())
                    .collect();
                AuthMode::Delegated {
                    kubeconfig: self.kubeconfig.clone(),
                    api_audiences,
                }
            },
            controllers: ControllerOptions {
                lease_ttl: self.leader_elect_lease_duration.max(Duration::from_secs(1)),
                allow_all_storage_classes: self.allow_all_storage_classes,
                clone_timeout: self.clone_timeout,
                pod_fence: self.pod_fence.clone(),
                workers: self.controller_workers.max(1),
                enabled: EnabledControllers::parse(&self.controllers)
                    .map_err(ConfigError::Controllers)?,
            },
            max_objects_per_namespace: self.max_objects_per_namespace,
            audit: self.audit()?,
        })
    }

    /// The audit configuration: the policy read and validated, and the log
    /// file created, as kube-apiserver does both before it serves.
    fn audit(&self) -> Result<Option<AuditConfig>, ConfigError> {
        // Refused even when nothing is audited: a typo stays one.
        let mode: Mode = self.audit_log_mode.parse()?;
        let path = self.audit_log_path.as_deref().filter(|p| !p.is_empty());
        let (policy_file, path) = match (&self.audit_policy_file, path) {
            (Some(policy), Some(path)) => (policy, path),
            (Some(_), None) => {
                tracing::warn!(
                    "--audit-policy-file without --audit-log-path: no audit events are written"
                );
                return Ok(None);
            }
            (None, Some(_)) => {
                tracing::warn!(
                    "--audit-log-path without --audit-policy-file: no audit events are written"
                );
                return Ok(None);
            }
            (None, None) => return Ok(None),
        };
        let policy = Policy::load(policy_file).map_err(|error| ConfigError::AuditPolicy {
            path: policy_file.display().to_string(),
            error,
        })?;
        if self.audit_log_buffer_size == 0 {
            return Err(ConfigError::AuditBuffer);
        }
        let path = if path == "-" {
            None
        } else {
            let file = PathBuf::from(path);
            RotatingFile::ensure(&file).map_err(|e| ConfigError::AuditLog {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
            Some(file)
        };
        const MEGABYTE: u64 = 1024 * 1024;
        const DAY: u64 = 24 * 60 * 60;
        Ok(Some(AuditConfig {
            policy: Arc::new(policy),
            log: LogConfig {
                path,
                rotation: Rotation {
                    max_size: u64::from(self.audit_log_maxsize) * MEGABYTE,
                    max_backups: usize::try_from(self.audit_log_maxbackup).unwrap_or(usize::MAX),
                    max_age: (self.audit_log_maxage > 0)
                        .then(|| Duration::from_secs(u64::from(self.audit_log_maxage) * DAY)),
                },
                mode,
                buffer: self.audit_log_buffer_size,
            },
        }))
    }

    /// The connection limits, each of which must let something through: a
    /// zero timeout or cap would close or refuse every connection.
    fn connection_limits(&self) -> Result<ConnectionLimits, ConfigError> {
        let timeouts = [
            ("tls-handshake-timeout", self.tls_handshake_timeout),
            ("read-header-timeout", self.read_header_timeout),
            ("http2-read-idle-timeout", self.http2_read_idle_timeout),
            ("http2-ping-timeout", self.http2_ping_timeout),
            ("idle-connection-timeout", self.idle_connection_timeout),
            ("request-timeout", self.request_timeout),
        ];
        for (flag, timeout) in timeouts {
            if timeout.is_zero() {
                return Err(ConfigError::ConnectionLimit {
                    flag,
                    reason: "must be longer than 0s".to_owned(),
                });
            }
        }
        if self.max_connections == 0 {
            return Err(ConfigError::ConnectionLimit {
                flag: "max-connections",
                reason: "must be at least 1".to_owned(),
            });
        }
        Ok(ConnectionLimits {
            tls_handshake_timeout: self.tls_handshake_timeout,
            read_header_timeout: self.read_header_timeout,
            http2_read_idle_timeout: self.http2_read_idle_timeout,
            http2_ping_timeout: self.http2_ping_timeout,
            http2_max_streams_per_connection: self.http2_max_streams_per_connection,
            idle_connection_timeout: self.idle_connection_timeout,
            max_connections: self.max_connections,
        })
    }
}

impl Options {
    /// The flow-control limits. Each number is already 0 or more (the
    /// parser saw to it); what is left is how they combine: a wait of 0s
    /// would refuse every queued request, and a total smaller than one
    /// user's queue would make the per-user bound a lie.
    fn flow_control_limits(&self) -> Result<FlowControlLimits, ConfigError> {
        if self.request_queue_timeout.is_zero() && self.max_queued_requests_per_user > 0 {
            return Err(ConfigError::FlowControl {
                flag: "request-queue-timeout",
                reason: "must be longer than 0s (to queue no request, set --max-queued-requests-per-user=0)".to_owned(),
            });
        }
        if self.max_queued_requests < self.max_queued_requests_per_user {
            return Err(ConfigError::FlowControl {
                flag: "max-queued-requests",
                reason: format!(
                    "{} is less than --max-queued-requests-per-user={}",
                    self.max_queued_requests, self.max_queued_requests_per_user
                ),
            });
        }
        Ok(FlowControlLimits {
            max_read_only: self.max_requests_inflight,
            max_mutating: self.max_mutating_requests_inflight,
            max_queued_per_user: self.max_queued_requests_per_user,
            max_queued_total: self.max_queued_requests,
            queue_timeout: self.request_queue_timeout,
            max_watches_per_user: self.max_watches_per_user,
        })
    }
}

/// Parses a limit: a whole number, 0 or more.
fn parse_limit(s: &str) -> Result<usize, String> {
    let s = s.trim();
    s.parse::<usize>().map_err(|_| {
        let negative = s
            .strip_prefix('-')
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if negative {
            format!("'{s}' is negative; use 0 or more (0: no limit)")
        } else {
            format!("'{s}' is not a whole number")
        }
    })
}

/// Parses `30s`, `500ms`, `2m` or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{s}' is not a duration like 30s, 500ms or 2m"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("'{s}' is too long a duration")),
        _ => Err(format!("'{s}' has an unknown unit; use ms, s or m")),
    }
}

#[cfg(test)]
mod tests;
