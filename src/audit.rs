//! The audit log, as kube-apiserver writes it (DESIGN §3.1): `audit.k8s.io/v1`
//! `Event`s, one JSON object per line, chosen by an `audit.k8s.io/v1`
//! `Policy` file, for the requests this server serves and for every write
//! its controllers make to PersistentVolumes and PersistentVolumeClaims.
//!
//! - [`policy`]: the policy file and which level a request gets.
//! - [`event`]: the event and its JSON form.
//! - [`sink`]: the queue, bounded by events and by bytes, and the writer
//!   thread; `--audit-log-mode` says whether a request waits for room
//!   (blocking, the default), waits for its `RequestReceived` event to be
//!   written and fails without it (blocking-strict), or never waits and
//!   has its events dropped and counted when the queue is full (batch).
//! - [`rotate`]: the log file, rotated by size as lumberjack rotates it.
//! - [`request`]: one served request's event through its stages, and the
//!   reading of bodies without changing them.
//! - [`client`]: the controllers' kube client, which names the transfer in
//!   its User-Agent, sends an `Audit-ID`, and records its PV/PVC writes.
//!
//! Owns nothing of how requests are served: `server` asks an [`Auditor`]
//! for a [`request::RequestAudit`] and hands it the request and the
//! response. A request waits on the log, or fails for it, only as the
//! mode says.
//!
//! `sourceIPs` are kube's (`X-Forwarded-For`, `X-Real-Ip`, then the
//! connection's remote address), except that the two headers are believed
//! only from the front proxy: kube-apiserver reads them from anyone, so a
//! client that calls it directly can put any address in its own event.
//!
//! Not done as kube does: the `legacy` log format, `--audit-log-compress`
//! and webhook backends.

pub mod client;
pub mod event;
pub mod policy;
pub mod request;
pub mod rotate;
pub mod sink;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Request, Response};
use k8s_openapi::jiff::Timestamp;

use crate::authz::Attributes;
pub use client::{controller_client, ActingFor, ControllerUser};
pub use event::{now, Event};
pub use policy::{Level, Policy, PolicyError, Stage};
pub use request::{Origin, Replayed, RequestAudit};
pub use rotate::{RotatingFile, Rotation};
pub use sink::{Lost, Mode, Sink, UnknownMode};

/// The header that carries a request's audit id, both ways.
pub const HEADER_AUDIT_ID: &str = "audit-id";

/// The authorizer's decision (`allow` or `forbid`), as kube annotates it.
pub const ANNOTATION_DECISION: &str = "authorization.k8s.io/decision";
/// The authorizer's reason, as kube annotates it.
pub const ANNOTATION_REASON: &str = "authorization.k8s.io/reason";

/// A response body larger than this is not put in `responseObject`; the
/// event says so with `audit.k8s.io/truncated: "true"`. Request bodies are
/// read up to the server's own body limit.
pub const MAX_AUDITED_RESPONSE_BYTES: usize = 1024 * 1024;

/// Where the log goes, and how it is rotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `None`: standard output (`--audit-log-path=-`).
    pub path: Option<PathBuf>,
    pub rotation: Rotation,
    /// What a request waits for (`--audit-log-mode`).
    pub mode: Mode,
    /// How many events may wait for the writer (`--audit-log-buffer-size`,
    /// kube's `--audit-log-batch-buffer-size`); past it new ones wait
    /// (blocking modes) or are dropped (batch). Whatever it allows, the
    /// events waiting hold at most [`sink::MAX_QUEUED_BYTES`] (64 MiB) of
    /// JSON: past it, the same.
    pub buffer: usize,
}

/// A complete audit configuration: a valid policy and a log to write to.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub policy: Arc<Policy>,
    pub log: LogConfig,
}

/// The policy and the running writer, shared by every request.
#[derive(Debug, Clone)]
pub struct Auditor {
    policy: Arc<Policy>,
    sink: Sink,
}

impl Auditor {
    /// Starts the writer of `config`'s log.
    pub fn start(config: &AuditConfig) -> Self {
        let out: Box<dyn std::io::Write + Send> = match &config.log.path {
            None => Box::new(std::io::stdout()),
            Some(path) => Box::new(RotatingFile::new(path, config.log.rotation)),
        };
        Self::new(
            config.policy.clone(),
            Sink::start(out, config.log.mode, config.log.buffer),
        )
    }

    pub fn new(policy: Arc<Policy>, sink: Sink) -> Self {
        Self { policy, sink }
    }

    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// The record of one request, if the policy records it. `attributes`
    /// carry an empty user when authentication failed.
    pub fn begin<B>(
        &self,
        req: &Request<B>,
        attributes: &Attributes,
        origin: Origin,
        audit_id: &str,
        received: Timestamp,
    ) -> Option<RequestAudit> {
        RequestAudit::begin(
            &self.policy,
            &self.sink,
            req,
            attributes,
            origin,
            audit_id,
            received,
        )
    }

    /// Waits (at most `timeout`) until every event so far is written.
    pub async fn flush(&self, timeout: Duration) -> bool {
        self.sink.flush(timeout).await
    }
}

/// The request's `Audit-ID` header if it has one, as kube takes it; else a
/// new one.
pub fn audit_id(headers: &HeaderMap) -> String {
    headers
        .get(HEADER_AUDIT_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned)
}

/// `resp` with the `Audit-ID` header, unless it has one already.
pub fn with_audit_id<B>(mut resp: Response<B>, audit_id: &str) -> Response<B> {
    if !resp.headers().contains_key(HEADER_AUDIT_ID) {
        if let Ok(value) = HeaderValue::from_str(audit_id) {
            resp.headers_mut().insert(HEADER_AUDIT_ID, value);
        }
    }
    resp
}

#[cfg(test)]
mod tests;
