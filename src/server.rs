//! The process: TLS termination (rustls), the hyper accept loop, health endpoints
//! and graceful shutdown.
//!
//! Owns transport and lifecycle: what one connection may cost is in
//! [`connection`]. Everything under `/apis` is handed to
//! [`crate::endpoints`]; this module never interprets an API path itself.

pub mod connection;
pub mod flowcontrol;
pub mod health;
pub mod intake;
pub mod metrics;
pub mod options;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use crate::admission::config::AdmissionConfig;
use crate::api::errors::ApiError;
use crate::audit::{self, Auditor};
use crate::authn::{self, Anonymous, Authenticator, Peer, UserInfo};
use crate::authz::sar::SubjectAccessReviewer;
use crate::authz::{self, AllowAll, Attributes, Authorizer, Decision, ResourceAttributes};
use crate::controller::{self, leader::LeaderStatus, transfer::TransferOptions, ControllerConfig};
use crate::endpoints::kinds::Kinds;
use crate::endpoints::request::RequestInfo;
use crate::endpoints::{self, Api, Body};
use crate::registry::admission::AnnotationLevel;
use crate::registry::ephemeral_claim::EphemeralClaimStrategy;
use crate::registry::namespace_transfer::NamespaceTransferStrategy;
use crate::registry::{Context, Notes, Store, StoreConfig};
use crate::storage::etcd::EtcdStorage;
use crate::storage::Storage;
use bytes::Bytes;
use connection::{ConnectionCap, ConnectionServer, OpenConnections};
use flowcontrol::{FlowControl, RequestKind};
use futures::FutureExt;
use health::Health;
use http_body_util::{BodyExt, Full};
use intake::Intake;
use metrics::{Metrics, RequestLabels, Scrape};
pub use options::{AuthMode, CompletedConfig, ConfigError, Options};
use std::time::Instant;

/// The stack of every runtime worker thread. A write is polled through
/// hyper, the audit, admission, the store and etcd-client's tower stack on
/// one worker's stack; unoptimised builds (every test) spend far more stack
/// per frame than release ones, and 2 MiB (tokio's default) once ran out on
/// a finalizing PATCH. The stack is reserved, not resident, until used.
pub const WORKER_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Errors that stop the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listening on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("connecting to etcd: {0}")]
    Etcd(crate::storage::StorageError),
    #[error("--kubeconfig: {0}")]
    Kube(String),
    #[error("--etcd-servers: {0}")]
    EtcdUnsupported(crate::storage::etcd::version::UnsupportedEtcd),
}

// The causes below are part of each message, not `source()`s as well, so
// that an error reporter walking the chain prints each cause once.
impl From<crate::storage::StorageError> for ServeError {
    fn from(err: crate::storage::StorageError) -> Self {
        ServeError::Etcd(err)
    }
}

impl From<crate::storage::etcd::version::UnsupportedEtcd> for ServeError {
    fn from(err: crate::storage::etcd::version::UnsupportedEtcd) -> Self {
        ServeError::EtcdUnsupported(err)
    }
}

/// Runs the server until `shutdown` resolves, then drains connections for at most
/// the configured grace period.
pub async fn run(
    config: CompletedConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|error| ServeError::Bind {
            addr: config.bind,
            error,
        })?;
    let local = listener.local_addr().unwrap_or(config.bind);
    let etcd = EtcdStorage::connect(&config.etcd).await?;
    // etcd may still be starting (or unreachable: readiness says so), so the
    // version is checked as soon as it answers, and an unsupported one stops
    // the server with the reason.
    let (refuse, refused) = tokio::sync::oneshot::channel();
    tokio::spawn(verify_etcd_version(etcd.clone(), refuse));
    let refused = async move {
        match refused.await {
            Ok(why) => Some(why),
            Err(_) => std::future::pending().await,
        }
    };
    let etcd_client = etcd.client();
    let storage: Arc<dyn Storage> = Arc::new(etcd);
    let (auth, cluster) = match &config.auth {
        AuthMode::InsecureAllowAll => (Auth::insecure(), None),
        AuthMode::Delegated {
            kubeconfig,
            api_audiences,
        } => {
            let client = kube_client(kubeconfig.as_deref()).await?;
            (
                Auth::delegated(client.clone(), api_audiences.clone()),
                Some(Cluster {
                    client,
                    etcd: etcd_client,
                }),
            )
        }
    };
    tracing::info!(address = %local, "serving HTTPS");
    let refusal = std::sync::Mutex::new(None);
    let stop = async {
        tokio::select! {
            () = shutdown => {}
            why = refused => {
                *refusal.lock().unwrap_or_else(|p| p.into_inner()) = why;
            }
        }
    };
    serve(listener, config, storage, auth, cluster, stop).await;
    match refusal.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(why) => Err(why.into()),
        None => Ok(()),
    }
}

/// Asks etcd for its version until it answers, then sends the reason on
/// `refuse` if this server cannot run on it (see
/// [`crate::storage::etcd::version`]).
async fn verify_etcd_version(
    etcd: EtcdStorage,
    refuse: tokio::sync::oneshot::Sender<crate::storage::etcd::version::UnsupportedEtcd>,
) {
    let mut logged = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), etcd.server_version()).await {
            Ok(Ok(version)) => {
                match crate::storage::etcd::version::check(&version) {
                    Ok(()) => tracing::info!(%version, "etcd version supported"),
                    Err(why) => {
                        let _ = refuse.send(why);
                    }
                }
                return;
            }
            Ok(Err(err)) if !logged => {
                tracing::warn!(error = %err, "cannot read etcd's version yet; retrying");
                logged = true;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A client for the cluster this server extends.
async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, ServeError> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ServeError::Kube(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| ServeError::Kube(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ServeError::Kube(format!("no kubeconfig given and none found: {e}")))?,
    };
    kube::Client::try_from(config).map_err(|e| ServeError::Kube(e.to_string()))
}

/// Authentication and authorization, and what readiness needs to know of them.
#[derive(Debug)]
pub struct Auth {
    authn: Arc<dyn Authenticator>,
    authz: Arc<dyn Authorizer>,
    /// The controllers' own authorizer: the rights they check again before
    /// acting are reviews of their own, never refused because callers'
    /// requests (a flood of unique paths) hold every review in flight.
    controller_authz: Arc<dyn Authorizer>,
    /// The SubjectAccessReview client, for its cache statistics.
    reviewer: Option<Arc<SubjectAccessReviewer>>,
    /// `Some(problem)` while the delegated configuration is not usable.
    problem: Option<authn::source::Problem>,
}

impl Auth {
    /// Everyone anonymous, everything allowed: for tests without a cluster.
    pub fn insecure() -> Self {
        tracing::warn!(
            "running with --insecure-allow-all: every caller is anonymous and every request is allowed; never do this in a real cluster"
        );
        Self {
            authn: Arc::new(Anonymous),
            authz: Arc::new(AllowAll),
            controller_authz: Arc::new(AllowAll),
            reviewer: None,
            problem: None,
        }
    }

    /// Delegated to the cluster, as k8s.io/apiserver's extension servers do.
    /// ServiceAccount tokens for `api_audiences` (none: the issuer) are
    /// verified locally.
    pub fn delegated(client: kube::Client, api_audiences: Vec<String>) -> Self {
        let (config, problem) = authn::source::watch(client.clone());
        let tokens = authn::token::TokenAuthenticator::new(client.clone(), Vec::new());
        let accounts =
            authn::jwt::ServiceAccountVerifier::start(client.clone()).with_audiences(api_audiences);
        let reviewer = Arc::new(SubjectAccessReviewer::new(client.clone()));
        Self {
            authn: Arc::new(
                authn::Delegating::new(config, Some(tokens)).with_service_accounts(accounts),
            ),
            authz: reviewer.clone(),
            controller_authz: Arc::new(SubjectAccessReviewer::for_controllers(client)),
            reviewer: Some(reviewer),
            problem: Some(problem),
        }
    }
}

/// The cluster the controllers act on, and the etcd client of their
/// election. Without it (`--insecure-allow-all`) no controller runs.
pub struct Cluster {
    pub client: kube::Client,
    pub etcd: etcd_client::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").finish_non_exhaustive()
    }
}

/// This replica's name in the election and in Events: the pod name when
/// run in a cluster, else the host name, with the process id.
fn replica_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}_{}", std::process::id())
}

/// Everything a request handler needs, shared by all connections.
#[derive(Debug)]
struct State {
    /// For the transfers-by-phase gauge.
    transfers: Arc<Store<NamespaceTransferStrategy>>,
    /// Whether this replica leads the controllers; `None` without a cluster.
    leader: Option<LeaderStatus>,
    health: Health,
    metrics: Metrics,
    reviewer: Option<Arc<SubjectAccessReviewer>>,
    api: Api,
    authn: Arc<dyn Authenticator>,
    authz: Arc<dyn Authorizer>,
    /// The audit policy and log; `None` when auditing is off.
    audit: Option<Auditor>,
    /// In-flight seats, per-user queues and the watch cap, for everything
    /// under `/apis` and `/openapi`.
    flow_control: FlowControl,
    /// The request bodies' budget and `--request-timeout`.
    intake: Intake,
    /// The open client connections, for the gauge.
    open: Arc<OpenConnections>,
}

/// The accept loop on an already bound listener.
pub async fn serve(
    listener: TcpListener,
    config: CompletedConfig,
    storage: Arc<dyn Storage>,
    auth: Auth,
    cluster: Option<Cluster>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let stop = Arc::new(Notify::new());
    let auditor = config.audit.as_ref().map(Auditor::start);
    // The cluster's admission configuration, watched for the policies and
    // webhooks, and for readiness.
    let watched = cluster
        .as_ref()
        .map(|c| Arc::new(AdmissionConfig::start(c.client.clone())));
    let admission = crate::admission::plugins(
        auth.authz.clone(),
        cluster.as_ref().map(|c| &c.client).zip(watched.as_ref()),
    );
    let api = Api::new(
        Kinds::served(),
        &StoreConfig {
            storage: storage.clone(),
            etcd_prefix: config.etcd_prefix.clone(),
            shutdown: stop.clone(),
            admission,
            max_objects_per_namespace: config.max_objects_per_namespace,
        },
    );
    // The controllers', and the gauge's, own kinds.
    let (Some(transfers), Some(claims)) = (
        api.store::<NamespaceTransferStrategy>(),
        api.store::<EphemeralClaimStrategy>(),
    ) else {
        tracing::error!("the table of kinds serves no NamespaceTransfer or no EphemeralClaim store; not serving");
        return;
    };
    let mut health = Health::new();
    if let Some(watched) = watched {
        health.add_readyz("admission-config", move || {
            if watched.synced() {
                Ok(())
            } else {
                Err("the cluster's admission configuration has not been listed yet".to_owned())
            }
        });
    }
    let etcd_ok = Arc::new(AtomicBool::new(false));
    tokio::spawn(probe_etcd(storage.clone(), etcd_ok.clone(), stop.clone()));
    health.add_readyz("etcd", {
        let etcd_ok = etcd_ok.clone();
        move || {
            if etcd_ok.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err("etcd is not reachable".to_owned())
            }
        }
    });
    health.add_readyz("watch-cache-sync", {
        let api = api.clone();
        move || {
            if api.is_ready() {
                Ok(())
            } else {
                Err("the watch caches have not synced yet".to_owned())
            }
        }
    });
    if let Some(problem) = auth.problem.clone() {
        health.add_readyz("authentication-config", move || {
            match problem.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
                None => Ok(()),
                Some(why) => Err(why.clone()),
            }
        });
    }
    // The controllers stop (and a leader hands over) as soon as shutdown
    // begins; the API keeps serving while connections drain.
    let controllers_stop = Arc::new(Notify::new());
    // The controllers run on a runtime of their own, so that however many
    // requests the API is serving, the controllers' work never queues
    // behind them for a worker thread: the operating system shares the
    // cores between the two, as between kube-apiserver and
    // kube-controller-manager.
    let controller_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("controllers")
        .thread_stack_size(WORKER_STACK_BYTES)
        .enable_all()
        .build();
    let controller_runtime = match controller_runtime {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            tracing::warn!(error = %e, "the controllers share the API's runtime: no runtime of their own");
            None
        }
    };
    let entered = controller_runtime.as_ref().map(|r| r.enter());
    let controllers = match cluster {
        Some(_) if !config.controllers.enabled.any() => {
            tracing::info!("--controllers enables none: this replica only serves the API");
            None
        }
        Some(cluster) => {
            let identity = replica_identity();
            // The controllers' requests name the transfer they act for, and
            // their PV/PVC writes are audited (crate::audit::client).
            let controller_user = audit::ControllerUser::new(UserInfo {
                username: format!("system:controller:{identity}"),
                ..UserInfo::default()
            });
            if auditor.is_some() {
                controller_user.discover(cluster.client.clone());
            }
            let client = audit::controller_client(
                cluster.client,
                auditor.as_ref().map(|a| a.sink().clone()),
                controller_user,
                &identity,
            );
            Some(controller::start(
                ControllerConfig {
                    identity,
                    election: format!(
                        "{}/{}/_leader/controllers",
                        config.etcd_prefix,
                        crate::api::GROUP
                    ),
                    lease_ttl: config.controllers.lease_ttl,
                    pod_fence: config.controllers.pod_fence.0.clone(),
                    workers: config.controllers.workers,
                    enabled: config.controllers.enabled,
                    transfer: TransferOptions {
                        allow_all_storage_classes: config.controllers.allow_all_storage_classes,
                        clone_timeout: config.controllers.clone_timeout,
                    },
                },
                controller::Dependencies {
                    transfers: transfers.clone(),
                    claims: claims.clone(),
                    client,
                    etcd: cluster.etcd,
                    authorizer: auth.controller_authz.clone(),
                },
                controllers_stop.clone(),
            ))
        }
        None => {
            tracing::warn!("no cluster: the controllers do not run");
            None
        }
    };
    drop(entered);
    let (leader, election) = match controllers {
        Some(running) => (Some(running.status), Some(running.task)),
        None => (None, None),
    };
    let open = Arc::new(OpenConnections::default());
    let state = Arc::new(State {
        leader,
        health,
        metrics: Metrics::default(),
        reviewer: auth.reviewer.clone(),
        transfers: transfers.clone(),
        api,
        authn: auth.authn,
        authz: auth.authz,
        audit: auditor.clone(),
        flow_control: FlowControl::new(config.flow_control),
        intake: Intake::new(intake::BODY_BYTES_IN_FLIGHT, config.request_timeout),
        open: open.clone(),
    });

    if let Some(reloader) = config.tls_reloader.clone() {
        tokio::spawn(reloader.run(stop.clone()));
    }
    let server = ConnectionServer {
        acceptor: TlsAcceptor::from(config.tls.clone()),
        http: config.connections.http_builder(),
        limits: config.connections,
        state: state.clone(),
        open: open.clone(),
    };
    let mut cap = ConnectionCap::new(config.connections.max_connections);
    tokio::pin!(shutdown);

    loop {
        // Accepted first, then given a permit: the longest idle connection
        // is closed only when a new one is there to take its place.
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(err) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let permit = tokio::select! {
            permit = cap.acquire(&open) => match permit {
                Some(permit) => permit,
                None => break,
            },
            () = &mut shutdown => break,
        };
        // Small responses must not wait for a delayed ACK (Nagle).
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %err, "cannot set TCP_NODELAY");
        }
        tokio::spawn(server.clone().serve(tcp, peer, permit));
    }

    state.health.begin_shutdown();
    if let Some(election) = election {
        controllers_stop.notify_waiters();
        if tokio::time::timeout(Duration::from_secs(3), election)
            .await
            .is_err()
        {
            tracing::warn!("the controllers did not stop within 3s");
        }
    }
    if let Some(runtime) = controller_runtime {
        runtime.shutdown_background();
    }
    tracing::info!(
        grace = ?config.shutdown_grace,
        "shutting down: no longer accepting connections, draining"
    );
    open.begin_shutdown();
    tokio::select! {
        () = open.drained() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(config.shutdown_grace) => {
            tracing::warn!("grace period over with connections still open; closing them");
        }
    }
    stop.notify_waiters();
    if let Some(auditor) = &auditor {
        if !auditor.flush(Duration::from_secs(5)).await {
            tracing::warn!("the audit log was not flushed within 5s");
        }
    }
}

/// Keeps the `etcd` readiness check current.
async fn probe_etcd(storage: Arc<dyn Storage>, ok: Arc<AtomicBool>, stop: Arc<Notify>) {
    loop {
        let reachable = matches!(
            tokio::time::timeout(Duration::from_secs(2), storage.current_revision()).await,
            Ok(Ok(_))
        );
        if ok.swap(reachable, Ordering::Relaxed) != reachable {
            tracing::info!(reachable, "etcd reachability changed");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            () = stop.notified() => return,
        }
    }
}

/// The filter chain, in kube-apiserver's order, one function each:
/// 1. [`authenticate`];
/// 2. [`audit_begin`]: the audit event's RequestReceived stage, the policy
///    judging the request with who made it (crate::audit);
/// 3. [`flow_control`], for the API: its body read whole first
///    ([`intake`]), then a seat charged to who the caller is;
/// 4. [`authorize`];
/// 5. the handler: [`handle`] for the API, within `--request-timeout`, or
///    [`serve_own`] for the server's own paths (`/metrics`).
///
/// Health checks come before all of them. The request is parsed once, into
/// the [`RequestInfo`] every filter reads. [`finish`] counts every request
/// and completes its audit event, refusals with 429 included; every
/// response carries its `Audit-ID`.
///
/// Flow control comes after authentication, so that a seat is charged to
/// who the caller is, and before authorization, so that what an
/// authenticated caller makes the server ask kube-apiserver is throttled
/// with the rest of what it does. A request holds no seat while its body
/// arrives, nor while it is refused as unauthenticated.
async fn dispatch(state: &State, peer: &Peer, req: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let arrived = tokio::time::Instant::now();
    let received = audit::now();
    let audit_id = audit::audit_id(req.headers());
    if let Some(resp) = state.health.serve(req.uri().path(), req.uri().query()) {
        return audit::with_audit_id(resp, &audit_id);
    }
    let info = RequestInfo::new(req.method(), req.uri(), state.api.kinds());
    let mut caller = authenticate(state, peer, &req, &info).await;
    let mut record = audit_begin(state, peer, &req, &mut caller, &audit_id, received).await;
    let notes = Notes::default();
    let mut held = None;
    let seats = &mut held;
    let handled = async {
        let user = match caller.user {
            Ok(user) => user,
            Err(err) => return endpoints::error_response(&err),
        };
        if !info.is_api() {
            return match authorize(state, &caller.attributes, &mut record).await {
                Ok(()) => serve_own(state, &info).await,
                Err(err) => endpoints::error_response(&err),
            };
        }
        // The body first, whole, within the request's deadline: a client
        // that sends it slowly holds no seat meanwhile.
        let deadline = state.intake.deadline(arrived);
        let (parts, body) = req.into_parts();
        let taken = match state
            .intake
            .take(body, crate::wire::MAX_BODY_BYTES, deadline)
            .await
        {
            Ok(taken) => taken,
            Err(err) => return endpoints::error_response(&err),
        };
        let req = Request::from_parts(parts, Full::new(taken.body.clone()));
        let permit = match flow_control(state, &user, &info).await {
            Ok(permit) => permit,
            Err(err) => return endpoints::error_response(&err),
        };
        if let Err(err) = authorize(state, &caller.attributes, &mut record).await {
            return endpoints::error_response(&err);
        }
        let resp = handle(state, &info, user, &notes, req, &mut record, deadline).await;
        drop(taken);
        // Held on through the writing of the response, which starts
        // after the audit record has taken its copy.
        *seats = Some(permit);
        resp
    };
    let resp = match std::panic::AssertUnwindSafe(handled).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            if let Some(record) = record.take() {
                record.panicked(&panic_message(panic.as_ref())).await;
            }
            std::panic::resume_unwind(panic);
        }
    };
    let resp = finish(state, &info, started, resp, record, &notes).await;
    let resp = audit::with_audit_id(resp, &audit_id);
    match held {
        Some(permit) => permit.hold_through(resp),
        None => resp,
    }
}

/// Audit, the chain's second filter: begins the request's event, as the policy says, with who made
/// it. As kube, RequestReceived is written before authorization speaks; in
/// blocking-strict mode a request whose event cannot be written fails, with
/// nothing more written for it.
async fn audit_begin(
    state: &State,
    peer: &Peer,
    req: &Request<Incoming>,
    caller: &mut Caller,
    audit_id: &str,
    received: k8s_openapi::jiff::Timestamp,
) -> Option<audit::RequestAudit> {
    let auditor = state.audit.as_ref()?;
    let mut record = auditor.begin(
        req,
        &caller.attributes,
        audit::Origin {
            authenticated: caller.user.is_ok(),
            peer: peer.ip(),
            front_proxy: caller.by_front_proxy,
        },
        audit_id,
        received,
    )?;
    if let Err(lost) = record.request_received().await {
        tracing::warn!(error = %lost, path = %req.uri().path(), "refusing a request whose audit event cannot be written");
        caller.user = Err(ApiError::Internal("failed to store audit event".to_owned()));
    }
    Some(record)
}

/// Flow control, the third filter: a seat, or a watch's place, charged to `user`. A list
/// weighs as many seats as the objects it may return, counted in the watch
/// cache (kube's list work estimator).
async fn flow_control(
    state: &State,
    user: &UserInfo,
    info: &RequestInfo,
) -> Result<flowcontrol::Permit, ApiError> {
    let kind = RequestKind::of(info.resource(), &info.method);
    let width = state
        .api
        .objects_listed(info, flowcontrol::MAX_WEIGHED_OBJECTS)
        .map_or(1, flowcontrol::list_width);
    Ok(state.flow_control.admit_wide(user, kind, width).await?)
}

/// The handler, last: the API as `user`, within the request's `deadline`; a watch runs
/// until its client or its `timeoutSeconds` ends it.
async fn handle(
    state: &State,
    info: &RequestInfo,
    user: UserInfo,
    notes: &Notes,
    req: Request<Full<Bytes>>,
    record: &mut Option<audit::RequestAudit>,
    deadline: tokio::time::Instant,
) -> Response<Body> {
    let ctx = Context {
        user,
        dry_run: false,
        writer: crate::registry::Writer::Client,
        manager: String::new(),
        notes: notes.clone(),
        fence: None,
    };
    let req = match record {
        Some(record) => {
            record
                .capture_request(req, crate::wire::MAX_BODY_BYTES)
                .await
        }
        None => audit::Replayed::passthrough(req),
    };
    let serving = endpoints::serve_api(&state.api, info, req, ctx);
    if RequestKind::of(info.resource(), &info.method) == RequestKind::Watch {
        return serving.await;
    }
    match tokio::time::timeout_at(deadline, serving).await {
        Ok(resp) => resp,
        Err(_) => endpoints::error_response(&ApiError::Timeout(intake::TIMEOUT_MESSAGE.to_owned())),
    }
}

/// The handler for the server's own paths: `/metrics`, with the request metrics and
/// what each part of the server counts; any other is not found.
async fn serve_own(state: &State, info: &RequestInfo) -> Response<Body> {
    if info.path != "/metrics" || info.method != http::Method::GET {
        return endpoints::error_response(&ApiError::PathNotFound);
    }
    let mut scrape = Scrape::new();
    if let Some(reviewer) = &state.reviewer {
        scrape.authorization_cache(reviewer.stats());
    }
    if let Ok(list) = state.transfers.list(None, &Default::default()).await {
        scrape.transfers(
            list.items.iter().map(|t| &**t),
            crate::api::meta::now().0.as_second(),
        );
    }
    if let Some(leader) = &state.leader {
        scrape.leader(leader.is_leader());
    }
    if let Some(auditor) = &state.audit {
        auditor.sink().scrape(scrape.registry());
    }
    state.flow_control.scrape(scrape.registry());
    scrape.open_connections(state.open.len());
    let text = scrape.render(&state.metrics);
    let mut resp = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    resp
}

/// After the handler: what the request collected on its way goes into its
/// audit event, the request is counted, and the event completed.
async fn finish(
    state: &State,
    info: &RequestInfo,
    started: Instant,
    resp: Response<Body>,
    record: Option<audit::RequestAudit>,
    notes: &Notes,
) -> Response<Body> {
    let code = resp.status().as_u16();
    state
        .metrics
        .observe(RequestLabels::of(info), code, started.elapsed());
    tracing::debug!(method = %info.method, path = %info.path, code, "request");
    let Some(mut record) = record else {
        return resp;
    };
    let level = if record.level() >= audit::Level::Request {
        AnnotationLevel::Request
    } else {
        AnnotationLevel::Metadata
    };
    for (key, value) in notes.annotations_at(level) {
        record.annotate(key, value);
    }
    record.finish(resp, audit::MAX_AUDITED_RESPONSE_BYTES).await
}

/// What a panic said, for the audit event of its request.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

/// What authentication made of a request.
struct Caller {
    /// What the request would be authorized on (the user is empty when
    /// authentication failed); the audit policy reads them too.
    attributes: Attributes,
    /// The front proxy authenticated the request (see
    /// [`authn::Authenticated`]).
    by_front_proxy: bool,
    user: Result<UserInfo, ApiError>,
}

/// Authentication, the first filter: who the caller of `req` is, and what it asks for.
async fn authenticate(
    state: &State,
    peer: &Peer,
    req: &Request<Incoming>,
    info: &RequestInfo,
) -> Caller {
    let authenticated = state.authn.authenticate(req.headers(), peer).await;
    let by_front_proxy = authenticated.as_ref().is_ok_and(|a| a.by_front_proxy);
    let user = authenticated.map(|a| a.user);
    let attributes = Attributes {
        user: user.as_ref().cloned().unwrap_or_default(),
        ..request_attributes(info)
    };
    Caller {
        attributes,
        by_front_proxy,
        user,
    }
}

/// What a request asks to do, for the authorizer, by no one yet.
fn request_attributes(info: &RequestInfo) -> Attributes {
    match info.resource() {
        Some(r) => Attributes {
            user: UserInfo::default(),
            verb: r.verb.as_str().to_owned(),
            resource: Some(ResourceAttributes {
                group: crate::api::GROUP.to_owned(),
                version: crate::api::VERSION.to_owned(),
                resource: r.resource.plural.to_owned(),
                subresource: if r.status {
                    "status".to_owned()
                } else {
                    String::new()
                },
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
            }),
            path: info.path.clone(),
        },
        None => Attributes {
            user: UserInfo::default(),
            verb: info.method.as_str().to_ascii_lowercase(),
            resource: None,
            path: info.path.clone(),
        },
    }
}

/// Authorization, the fourth filter: asks the authorizer about an authenticated request, and annotates its
/// audit event with the answer (`authorization.k8s.io/decision` and
/// `/reason`, as kube's authorization filter does).
async fn authorize(
    state: &State,
    attributes: &Attributes,
    record: &mut Option<audit::RequestAudit>,
) -> Result<(), ApiError> {
    let (outcome, annotations) = match state.authz.authorize(attributes).await {
        Ok(Decision::Allow) => (
            Ok(()),
            vec![
                (audit::ANNOTATION_DECISION, "allow".to_owned()),
                (audit::ANNOTATION_REASON, String::new()),
            ],
        ),
        Ok(Decision::Deny { reason }) => (
            Err(authz::forbidden(attributes, &reason)),
            vec![
                (audit::ANNOTATION_DECISION, "forbid".to_owned()),
                (audit::ANNOTATION_REASON, reason),
            ],
        ),
        Err(err) => (
            Err(err),
            vec![(audit::ANNOTATION_REASON, "internal error".to_owned())],
        ),
    };
    if let Some(record) = record {
        for (key, value) in annotations {
            record.annotate(key, value);
        }
    }
    outcome
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn termination_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received SIGINT"),
        () = term => tracing::info!("received SIGTERM"),
    }
}
