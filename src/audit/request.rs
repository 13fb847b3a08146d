//! One served request's audit record, from authentication to the end of its
//! response, as k8s.io/apiserver's `WithAudit` filter keeps it.
//!
//! Owns which stages are written when: `RequestReceived` before the handler
//! runs, `ResponseStarted` when a watch's headers go out, `ResponseComplete`
//! when the response is done (for a watch, when its stream ends or the
//! client goes away), `Panic` if the handler panicked. A request that failed
//! authentication gets the one `ResponseStarted` event kube writes for it.
//!
//! A record dropped before its last stage (the client reset the stream
//! while the handler waited on a webhook or on etcd, so hyper dropped the
//! request's future) still writes `ResponseComplete`, as kube's filter does
//! in a `defer`: a write that committed leaves a trace even when
//! `RequestReceived` is omitted. That event is annotated
//! `audit.k8s.io/cancelled: "true"`; its `responseStatus` has the code the
//! handler answered if it had answered (the response body was still being
//! read), and otherwise no code, only a message that the outcome is unknown
//! (kube, whose handlers are not cancelled, fakes `200 Connection closed
//! early` for a handler that wrote nothing).
//!
//! How long each write waits is the sink's mode's (see [`super::sink`]);
//! where nothing can wait (a record dropped unfinished, a watch's end) the
//! event is handed over without waiting.
//!
//! Also owns reading bodies for the event without changing what the handler
//! or the client sees: a body is read up to a bound, and then handed on as a
//! [`Replayed`] body that yields the same frames, followed by the rest.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use k8s_openapi::jiff::Timestamp;

use super::event::{
    self, parse_body, read_body, strip_managed_fields, Event, ObjectReference, ResponseStatus,
    User, ANNOTATION_REQUEST_OBJECT, ANNOTATION_TRUNCATED,
};
use super::policy::{Level, Policy, RequestConfig, Stage};
use super::sink::{Lost, Mode, Sink};
use crate::authz::Attributes;

/// The annotation on the `ResponseComplete` of a request whose client went
/// away before its response was complete.
pub const ANNOTATION_CANCELLED: &str = "audit.k8s.io/cancelled";

/// Where a request came from, and how far its headers about that are
/// believed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Origin {
    /// Authentication succeeded: the event names the user.
    pub authenticated: bool,
    /// The connection's remote address.
    pub peer: Option<IpAddr>,
    /// The front proxy authenticated the request, so the `X-Forwarded-For`
    /// and `X-Real-Ip` headers are the proxy's, and are recorded. From any
    /// other client they are its own claim, and are ignored.
    pub front_proxy: bool,
}

/// One request's event, written at each stage the policy keeps; dropped
/// unfinished, it writes `ResponseComplete` (see the module's doc).
#[derive(Debug)]
pub struct RequestAudit {
    sink: Sink,
    config: RequestConfig,
    event: Event,
    /// A watch: `ResponseStarted` is written, and the response body is
    /// never read.
    long_running: bool,
    /// `None` once authenticated; else what kube says of the failure.
    authentication_failed: Option<String>,
    /// `ResponseStarted` is behind (or was not due).
    started: bool,
    /// The last stage is behind: nothing is left to write on drop.
    finished: bool,
}

impl RequestAudit {
    /// Evaluates the policy for a request; `None` if it is not recorded.
    /// `attributes` carry an empty user when authentication failed.
    pub fn begin<B>(
        policy: &Policy,
        sink: &Sink,
        req: &Request<B>,
        attributes: &Attributes,
        origin: Origin,
        audit_id: &str,
        received: Timestamp,
    ) -> Option<Self> {
        let config = policy.evaluate(attributes);
        if config.level == Level::None {
            return None;
        }
        let mut event = Event::new(config.level, audit_id, received);
        event.request_uri = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
        event.verb = attributes.verb.clone();
        if origin.authenticated {
            event.user = User::from(&attributes.user);
        }
        event.source_ips = source_ips(req.headers(), origin);
        if let Some(agent) = req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
        {
            event.set_user_agent(agent);
        }
        event.object_ref = attributes.resource.as_ref().map(|r| ObjectReference {
            resource: r.resource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            api_group: r.group.clone(),
            api_version: r.version.clone(),
            subresource: r.subresource.clone(),
            ..ObjectReference::default()
        });
        Some(Self {
            sink: sink.clone(),
            long_running: attributes.resource.is_some() && attributes.verb == "watch",
            authentication_failed: (!origin.authenticated).then(|| authentication_message(req)),
            config,
            event,
            started: false,
            finished: false,
        })
    }

    pub fn level(&self) -> Level {
        self.config.level
    }

    /// The event as it stands (for tests).
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// Adds an annotation; the first value for a key wins.
    pub fn annotate(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.event.annotate(key, value);
    }

    /// Writes the `RequestReceived` stage (not for a request that failed
    /// authentication, as kube), waiting as the sink's mode says. In
    /// blocking-strict mode it waits until the event is written, and an
    /// error means the request must fail, as kube fails it ("failed to
    /// store audit event"); nothing more is written for it then.
    pub async fn request_received(&mut self) -> Result<(), Lost> {
        if self.authentication_failed.is_some() || !self.stage(Stage::RequestReceived) {
            return Ok(());
        }
        if self.sink.mode() != Mode::BlockingStrict {
            // Any loss is counted by the sink; the request goes on.
            let _ = self.sink.record(&self.event).await;
            return Ok(());
        }
        let written = self.sink.record_strictly(&self.event).await;
        if written.is_err() {
            self.finished = true;
        }
        written
    }

    /// Reads the request body (at most `limit` bytes) into the event when
    /// the level records it, or when a create or update needs its object's
    /// name for `objectRef`; the handler gets the same body either way.
    pub async fn capture_request<B>(
        &mut self,
        req: Request<B>,
        limit: usize,
    ) -> Request<Replayed<B>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Unpin,
    {
        let has_body = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let wanted = self.config.level >= Level::Request
            || matches!(self.event.verb.as_str(), "create" | "update");
        if !has_body || !wanted {
            return Replayed::passthrough(req);
        }
        let content_type = content_type(req.headers());
        let (parts, body) = req.into_parts();
        let (body, whole) = read_prefix(body, limit).await;
        match whole
            .as_deref()
            .map(|b| read_body(b, content_type.as_deref()))
        {
            Some(Ok(Some(mut object))) => {
                if let Some(r) = self.event.object_ref.as_mut() {
                    r.fill_from(&object);
                }
                if self.config.level >= Level::Request {
                    if self.config.omit_managed_fields {
                        strip_managed_fields(&mut object);
                    }
                    self.event.request_object = Some(object);
                }
            }
            Some(Ok(None)) => {}
            Some(Err(omitted)) => {
                if self.config.level >= Level::Request {
                    self.event.annotate(ANNOTATION_REQUEST_OBJECT, omitted);
                }
            }
            None => {
                if self.config.level >= Level::Request {
                    self.event.annotate(ANNOTATION_TRUNCATED, "true");
                }
            }
        }
        Request::from_parts(parts, body)
    }

    /// Writes the `Panic` stage: the handler panicked with `message`.
    pub async fn panicked(mut self, message: &str) {
        self.event.response_status = Some(ResponseStatus {
            status: "Failure".to_owned(),
            reason: "InternalError".to_owned(),
            message: format!("APIServer panic'd: {message}"),
            code: 500,
            ..ResponseStatus::default()
        });
        self.emit(Stage::Panic).await;
    }

    /// Records the response and writes the stages that are due: for a
    /// watch `ResponseStarted` now and `ResponseComplete` when its body
    /// ends; otherwise `ResponseComplete` now, with the response body (at
    /// most `limit` bytes) when the level or a failure needs it. The
    /// client gets the same response.
    pub async fn finish<B>(
        mut self,
        resp: Response<B>,
        limit: usize,
    ) -> Response<UnsyncBoxBody<Bytes, B::Error>>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Send + Unpin + 'static,
    {
        let code = resp.status().as_u16();
        if self.finished {
            // Its RequestReceived could not be written (blocking-strict).
            return resp.map(BodyExt::boxed_unsync);
        }
        if let Some(message) = self.authentication_failed.take() {
            self.event.response_status = Some(ResponseStatus {
                message,
                code,
                ..ResponseStatus::default()
            });
            // Finished before it waits: should the client go away while
            // it does, nothing more is written.
            self.finished = true;
            self.emit(Stage::ResponseStarted).await;
            return resp.map(BodyExt::boxed_unsync);
        }
        // Known from here on, should the client go away while the body
        // is read.
        self.event.response_status = Some(ResponseStatus::code(code));
        let success = (200..300).contains(&code);
        if self.long_running && success {
            self.emit(Stage::ResponseStarted).await;
            return resp.map(|body| {
                Completion {
                    inner: body,
                    pending: Some(self),
                }
                .boxed_unsync()
            });
        }
        let content_type = content_type(resp.headers());
        let (parts, body) = resp.into_parts();
        let wants_object = self.config.level >= Level::RequestResponse && !self.long_running;
        let body = if wants_object || !success {
            let (body, whole) = read_prefix(body, limit).await;
            let parsed = whole
                .as_deref()
                .and_then(|b| parse_body(b, content_type.as_deref()));
            self.event.response_status = Some(ResponseStatus::from_body(code, parsed.as_ref()));
            if wants_object {
                match (whole.is_some(), parsed) {
                    (true, Some(mut object)) => {
                        if self.config.omit_managed_fields {
                            strip_managed_fields(&mut object);
                        }
                        self.event.response_object = Some(object);
                    }
                    (false, _) => self.event.annotate(ANNOTATION_TRUNCATED, "true"),
                    (true, None) => {}
                }
            }
            body.boxed_unsync()
        } else {
            body.boxed_unsync()
        };
        if self.long_running {
            self.emit(Stage::ResponseStarted).await;
        }
        self.emit(Stage::ResponseComplete).await;
        Response::from_parts(parts, body)
    }

    /// Moves the event to `stage`; whether the policy records that stage.
    fn stage(&mut self, stage: Stage) -> bool {
        match stage {
            Stage::ResponseStarted => self.started = true,
            Stage::ResponseComplete | Stage::Panic => self.finished = true,
            Stage::RequestReceived => {}
        }
        if !self.config.records(stage) {
            return false;
        }
        self.event.stage = stage;
        self.event.stage_timestamp = if stage == Stage::RequestReceived {
            self.event.request_received_timestamp
        } else {
            event::now()
        };
        true
    }

    /// Writes the event as it stands at `stage`, waiting as the sink's
    /// mode says; a loss is the sink's to count. The event is serialized
    /// where it is, not copied: its bodies may be megabytes.
    async fn emit(&mut self, stage: Stage) {
        if self.stage(stage) {
            let _ = self.sink.record(&self.event).await;
        }
    }

    /// [`Self::emit`] where nothing can wait (see
    /// [`Sink::record_detached`]).
    fn emit_detached(&mut self, stage: Stage) {
        if self.stage(stage) {
            self.sink.record_detached(&self.event);
        }
    }

    /// `ResponseComplete` of a watch.
    fn complete(mut self) {
        self.emit_detached(Stage::ResponseComplete);
    }
}

impl Drop for RequestAudit {
    /// The client went away before the last stage: writes what kube's
    /// deferred `ResponseComplete` would. Never waits (see
    /// [`Sink::record_detached`]), never panics.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.event.annotate(ANNOTATION_CANCELLED, "true");
        if let Some(message) = self.authentication_failed.take() {
            // The one event kube writes for such a request.
            self.event.response_status = Some(ResponseStatus {
                message,
                ..ResponseStatus::default()
            });
            self.emit_detached(Stage::ResponseStarted);
            self.finished = true;
            return;
        }
        if self.event.response_status.is_none() {
            self.event.response_status = Some(ResponseStatus {
                message: "the client went away before the response was complete; \
                          the request's outcome is unknown"
                    .to_owned(),
                ..ResponseStatus::default()
            });
        }
        if self.long_running && !self.started {
            self.emit_detached(Stage::ResponseStarted);
        }
        self.emit_detached(Stage::ResponseComplete);
    }
}

/// kube's `utilnet.SourceIPs`: the `X-Forwarded-For` chain, then
/// `X-Real-Ip` if it is not in it, then the connection's remote address
/// unless it ends the chain already. The headers are read only from the
/// front proxy (see [`Origin::front_proxy`]): any client can send them, and
/// a direct client's are its own claim, so it is recorded by its address
/// alone.
pub fn source_ips(headers: &HeaderMap, origin: Origin) -> Vec<String> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if origin.front_proxy {
        ips.extend(
            headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .into_iter()
                .flat_map(|chain| chain.split(','))
                .filter_map(|part| part.trim().parse::<IpAddr>().ok()),
        );
        if let Some(real) = headers
            .get("x-real-ip")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<IpAddr>().ok())
        {
            if !ips.contains(&real) {
                ips.push(real);
            }
        }
    }
    if let Some(peer) = origin.peer {
        if ips.last() != Some(&peer) {
            ips.push(peer);
        }
    }
    ips.iter().map(IpAddr::to_string).collect()
}

/// kube's `getAuthMethods`, for the status of a failed authentication.
fn authentication_message<B>(req: &Request<B>) -> String {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"));
    if bearer {
        "Authentication failed, attempted: bearer".to_owned()
    } else {
        "Authentication failed, no credentials provided".to_owned()
    }
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Reads `body` until it ends or more than `limit` bytes have come. Returns
/// a body that yields exactly what `body` would have, and the whole body
/// if it ended within the limit.
pub async fn read_prefix<B>(mut body: B, limit: usize) -> (Replayed<B>, Option<Bytes>)
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    let mut frames: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut size = 0usize;
    loop {
        match body.frame().await {
            None => {
                let mut whole = BytesMut::with_capacity(size);
                for data in frames.iter().filter_map(|f| f.data_ref()) {
                    whole.extend_from_slice(data);
                }
                let replayed = Replayed {
                    frames,
                    error: None,
                    rest: None,
                };
                return (replayed, Some(whole.freeze()));
            }
            Some(Err(err)) => {
                let replayed = Replayed {
                    frames,
                    error: Some(err),
                    rest: None,
                };
                return (replayed, None);
            }
            Some(Ok(frame)) => {
                size += frame.data_ref().map_or(0, Bytes::len);
                frames.push_back(frame);
                if size > limit {
                    let replayed = Replayed {
                        frames,
                        error: None,
                        rest: Some(body),
                    };
                    return (replayed, None);
                }
            }
        }
    }
}

/// A body already partly (or wholly) read: its frames again, then its
/// error if reading it failed, then whatever was not read yet.
pub struct Replayed<B: Body> {
    frames: VecDeque<Frame<Bytes>>,
    error: Option<B::Error>,
    rest: Option<B>,
}

impl<B: Body> std::fmt::Debug for Replayed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayed")
            .field("frames", &self.frames.len())
            .field("failed", &self.error.is_some())
            .field("rest", &self.rest.is_some())
            .finish()
    }
}

impl<B: Body> Replayed<B> {
    /// `body`, untouched.
    pub fn new(body: B) -> Self {
        Self {
            frames: VecDeque::new(),
            error: None,
            rest: Some(body),
        }
    }

    /// `req` with its body untouched.
    pub fn passthrough(req: Request<B>) -> Request<Self> {
        req.map(Self::new)
    }
}

impl<B> Body for Replayed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(err) = this.error.take() {
            return Poll::Ready(Some(Err(err)));
        }
        match this.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
            && self.error.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self
            .frames
            .iter()
            .filter_map(|f| f.data_ref())
            .map(|d| d.len() as u64)
            .sum();
        // A body read to its end may still report its original length.
        let rest = self
            .rest
            .as_ref()
            .filter(|r| !r.is_end_stream())
            .map_or_else(|| SizeHint::with_exact(0), |r| r.size_hint());
        // Upper first: `set_lower` asserts that it stays under the upper
        // bound, and the old upper may be below the new lower one.
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint.set_lower(rest.lower() + read);
        hint
    }
}

/// A watch's body: when it ends, or is dropped because the client went
/// away, the request's `ResponseComplete` is written.
struct Completion<B> {
    inner: B,
    pending: Option<RequestAudit>,
}

impl<B> Completion<B> {
    fn complete(&mut self) {
        if let Some(record) = self.pending.take() {
            record.complete();
        }
    }
}

impl<B> Drop for Completion<B> {
    fn drop(&mut self) {
        self.complete();
    }
}

impl<B> Body for Completion<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.complete();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
