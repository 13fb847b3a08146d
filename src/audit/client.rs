//! The controllers' requests to kube-apiserver, made traceable: every
//! request carries a fresh `Audit-ID` (kube-apiserver records it as its
//! event's `auditID`) and a `User-Agent` naming the transfer it is made for,
//! and every write to a PersistentVolume or PersistentVolumeClaim also gets
//! an event in our own audit log, with the same `auditID`, naming the
//! transfer and the tenants it acts for (DESIGN §3.1).
//!
//! Owns the [`ActingFor`] scope and the client wrapper. The transfer
//! controller sets the scope around the reconcile of one transfer
//! ([`ActingFor::scope`]); the wrapper ([`controller_client`]) reads it. The
//! scope is a tokio task-local, so it follows the reconcile's own future and
//! nothing else: kube's client runs its middleware on a buffer task, which
//! is why the wrapper reads the scope in the future it returns (polled by
//! the caller) rather than when it is called.
//!
//! The controllers' writes are always recorded at level Metadata, whatever
//! the policy says of them: the design asks for every one of them, and the
//! policy describes requests this server serves, not the ones it makes.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use http::{header, HeaderValue, Method, Request, Response};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::PostParams;
use kube::client::Body;
// The tower `Service` trait (tower-service 0.3), which kube's client is built
// on, as tonic re-exports it: it saves a dependency of our own.
use tonic::codegen::Service;

use super::event::{self, parse_body, Event, ObjectReference, ResponseStatus, User};
use super::policy::{Level, Stage};
use super::request::{read_prefix, Replayed};
use super::sink::Sink;
use super::HEADER_AUDIT_ID;
use crate::api::namespace_transfer::NamespaceTransfer;
use crate::authn::UserInfo;

/// The transfer's uid.
pub const ANNOTATION_TRANSFER_UID: &str = "storage.transfer.k8s.io/transfer-uid";
/// The transfer, `namespace/name`.
pub const ANNOTATION_TRANSFER: &str = "storage.transfer.k8s.io/transfer";
/// The username of the tenant who created the source side.
pub const ANNOTATION_SOURCE_REQUESTER: &str = "storage.transfer.k8s.io/source-requester";
/// The username of the tenant who created the destination side.
pub const ANNOTATION_DESTINATION_REQUESTER: &str = "storage.transfer.k8s.io/destination-requester";

/// The replica whose controllers made the write (its election identity), so
/// that an audit of writes can be laid against the terms of leadership.
pub const ANNOTATION_REPLICA: &str = "storage.transfer.k8s.io/replica";

/// The User-Agent of every request the controllers make.
pub const USER_AGENT: &str = concat!("storage-transfer-apiserver/v", env!("CARGO_PKG_VERSION"));

/// An error response body larger than this is not read for its Status.
const MAX_ERROR_BODY: usize = 64 * 1024;

tokio::task_local! {
    static ACTING_FOR: ActingFor;
}

/// The transfer a piece of controller work is done for, and the tenants
/// behind it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActingFor {
    /// `namespace/name` of the object that drives the transfer.
    pub transfer: String,
    pub transfer_uid: String,
    /// `spec.requester.username` of the source side, if known.
    pub source_requester: Option<String>,
    /// `spec.requester.username` of the destination side, if known.
    pub destination_requester: Option<String>,
}

impl ActingFor {
    /// The pair `source` drives, with its destination-side object when it
    /// is known (for a transfer within one namespace, `source` itself).
    pub fn pair(source: &NamespaceTransfer, destination: Option<&NamespaceTransfer>) -> Self {
        let requester = |t: &NamespaceTransfer| {
            t.spec
                .requester
                .as_ref()
                .map(|r| r.username.clone())
                .filter(|u| !u.is_empty())
        };
        let meta = &source.metadata;
        Self {
            transfer: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            ),
            transfer_uid: meta.uid.clone().unwrap_or_default(),
            source_requester: requester(source),
            destination_requester: destination.and_then(requester),
        }
    }

    /// Runs `work` acting for this transfer: every request the controllers'
    /// client makes inside it names the transfer.
    pub async fn scope<F: Future>(self, work: F) -> F::Output {
        ACTING_FOR.scope(self, work).await
    }

    /// The transfer the current task acts for, if any.
    pub fn current() -> Option<Self> {
        ACTING_FOR.try_with(Clone::clone).ok()
    }

    /// `storage-transfer-apiserver/v0.1.0 (transfer ns/name uid …)`.
    pub fn user_agent(&self) -> String {
        format!(
            "{USER_AGENT} (transfer {} uid {})",
            self.transfer, self.transfer_uid
        )
    }

    /// The annotations of an event for a write made for this transfer.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        out.insert(ANNOTATION_TRANSFER.to_owned(), self.transfer.clone());
        out.insert(
            ANNOTATION_TRANSFER_UID.to_owned(),
            self.transfer_uid.clone(),
        );
        if let Some(u) = &self.source_requester {
            out.insert(ANNOTATION_SOURCE_REQUESTER.to_owned(), u.clone());
        }
        if let Some(u) = &self.destination_requester {
            out.insert(ANNOTATION_DESTINATION_REQUESTER.to_owned(), u.clone());
        }
        out
    }
}

/// Who the controllers are to kube-apiserver: a stand-in until a
/// SelfSubjectReview says (see [`ControllerUser::discover`]).
#[derive(Debug, Clone)]
pub struct ControllerUser(Arc<RwLock<UserInfo>>);

impl ControllerUser {
    pub fn new(stand_in: UserInfo) -> Self {
        Self(Arc::new(RwLock::new(stand_in)))
    }

    pub fn get(&self) -> UserInfo {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, user: UserInfo) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = user;
    }

    /// Asks kube-apiserver, in the background, who `client` authenticates
    /// as (a SelfSubjectReview, which every authenticated user may make),
    /// so that our events name the same user as kube-apiserver's.
    pub fn discover(&self, client: kube::Client) {
        let me = self.clone();
        tokio::spawn(async move {
            let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(client);
            match reviews
                .create(&PostParams::default(), &SelfSubjectReview::default())
                .await
            {
                Ok(review) => {
                    if let Some(info) = review.status.and_then(|s| s.user_info) {
                        me.set(UserInfo {
                            username: info.username.unwrap_or_default(),
                            uid: info.uid,
                            groups: info.groups.unwrap_or_default(),
                            extra: info.extra.unwrap_or_default().into_iter().collect(),
                        });
                    }
                }
                Err(err) => tracing::warn!(
                    error = %err,
                    user = %me.get().username,
                    "cannot learn the controllers' user from a SelfSubjectReview; audit events name the stand-in"
                ),
            }
        });
    }
}

/// `inner`, with every request traced: a fresh `Audit-ID`, a User-Agent
/// naming the current [`ActingFor`] (or just ours outside one), and for
/// each write to a PV or PVC an event to `sink`, as `user`, naming the
/// `replica` that made it.
pub fn controller_client(
    inner: kube::Client,
    sink: Option<Sink>,
    user: ControllerUser,
    replica: &str,
) -> kube::Client {
    let namespace = inner.default_namespace().to_owned();
    let valid_until = *inner.valid_until();
    let traced = Traced {
        inner,
        sink,
        user,
        replica: replica.into(),
    };
    kube::Client::new(traced, namespace).with_valid_until(valid_until)
}

/// The service under [`controller_client`].
#[derive(Clone)]
struct Traced {
    inner: kube::Client,
    sink: Option<Sink>,
    user: ControllerUser,
    replica: Arc<str>,
}

impl std::fmt::Debug for Traced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traced").finish_non_exhaustive()
    }
}

type TracedFuture =
    Pin<Box<dyn Future<Output = Result<Response<Replayed<Body>>, kube::Error>> + Send>>;

impl Service<Request<Body>> for Traced {
    type Response = Response<Replayed<Body>>;
    type Error = kube::Error;
    type Future = TracedFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        // `kube::Client::send` waits for its own readiness.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> TracedFuture {
        // Everything, the scope included, is read in the future: this call
        // runs on the buffer's task, the future on the caller's.
        Box::pin(send_traced(self.clone(), req))
    }
}

async fn send_traced(
    traced: Traced,
    mut req: Request<Body>,
) -> Result<Response<Replayed<Body>>, kube::Error> {
    let acting = ActingFor::current();
    let audit_id = uuid::Uuid::new_v4().to_string();
    let agent = acting
        .as_ref()
        .map_or_else(|| USER_AGENT.to_owned(), ActingFor::user_agent);
    let headers = req.headers_mut();
    headers.insert(
        header::USER_AGENT,
        HeaderValue::from_str(&agent).unwrap_or(HeaderValue::from_static(USER_AGENT)),
    );
    if let Ok(id) = HeaderValue::from_str(&audit_id) {
        headers.insert(HEADER_AUDIT_ID, id);
    }
    let write = traced
        .sink
        .as_ref()
        .and_then(|sink| VolumeWrite::of(req.method(), req.uri()).map(|w| (sink, w)));
    let Some((sink, write)) = write else {
        return Ok(traced.inner.send(req).await?.map(Replayed::new));
    };

    let mut event = Event::new(Level::Metadata, audit_id, event::now());
    event.request_uri = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    event.verb = write.verb.to_owned();
    event.user = User::from(&traced.user.get());
    event.set_user_agent(&agent);
    let mut object_ref = write.object_ref;
    if object_ref.name.is_empty() {
        // A create names its object in the body (always in memory here).
        if let Some(body) = req.body().try_clone() {
            if let Ok(bytes) = body.collect_bytes().await {
                if let Some(object) = parse_body(&bytes, None) {
                    object_ref.fill_from(&object);
                }
            }
        }
    }
    event.object_ref = Some(object_ref);
    if let Some(acting) = &acting {
        event.annotations = acting.annotations();
    }
    event
        .annotations
        .insert(ANNOTATION_REPLICA.to_owned(), traced.replica.to_string());

    let result = match traced.inner.send(req).await {
        Ok(resp) if resp.status().is_success() => {
            event.response_status = Some(ResponseStatus::code(resp.status().as_u16()));
            Ok(resp.map(Replayed::new))
        }
        Ok(resp) => {
            let code = resp.status().as_u16();
            let (parts, body) = resp.into_parts();
            let (body, whole) = read_prefix(body, MAX_ERROR_BODY).await;
            let status = whole.as_deref().and_then(|b| parse_body(b, None));
            event.response_status = Some(ResponseStatus::from_body(code, status.as_ref()));
            Ok(Response::from_parts(parts, body))
        }
        Err(err) => {
            event.response_status = Some(ResponseStatus {
                status: "Failure".to_owned(),
                message: err.to_string(),
                ..ResponseStatus::default()
            });
            Err(err)
        }
    };
    event.stage = Stage::ResponseComplete;
    event.stage_timestamp = event::now();
    // Waits as the mode says; a loss is the sink's to count.
    let _ = sink.record(&event).await;
    result
}

/// A write to a PersistentVolume or PersistentVolumeClaim, as kube's
/// request info reads it from the method and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeWrite {
    pub verb: &'static str,
    pub object_ref: ObjectReference,
}

impl VolumeWrite {
    /// `Some` for POST, PUT, PATCH and DELETE on `/api/v1/persistentvolumes…`
    /// or `/api/v1/namespaces/{ns}/persistentvolumeclaims…`.
    pub fn of(method: &Method, uri: &http::Uri) -> Option<Self> {
        let rest = uri.path().strip_prefix("/api/v1/")?;
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let (namespace, parts) = match parts.as_slice() {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
            _ => ("", parts.as_slice()),
        };
        let (resource, name, subresource) = match parts {
            [resource] => (*resource, "", ""),
            [resource, name] => (*resource, *name, ""),
            [resource, name, sub] => (*resource, *name, *sub),
            _ => return None,
        };
        let namespaced = match resource {
            "persistentvolumes" => false,
            "persistentvolumeclaims" => true,
            _ => return None,
        };
        if namespaced == namespace.is_empty() {
            return None;
        }
        let verb = match *method {
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if name.is_empty() => "deletecollection",
            Method::DELETE => "delete",
            _ => return None,
        };
        Some(Self {
            verb,
            object_ref: ObjectReference {
                resource: resource.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                api_version: "v1".to_owned(),
                subresource: subresource.to_owned(),
                ..ObjectReference::default()
            },
        })
    }
}
