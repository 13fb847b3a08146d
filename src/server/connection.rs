//! One client connection, from accept to close, and what it may cost: a
//! permit from the cap on open connections, held until it closes; the TLS
//! handshake within its timeout; the first request's headers within theirs;
//! then HTTP/1 or HTTP/2 by hyper, with timers, so that an HTTP/1 connection
//! that stops sending headers is closed and an HTTP/2 connection that stops
//! answering pings is too.
//!
//! A connection with no request open for `--idle-connection-timeout` is
//! closed (HTTP/2: GOAWAY first), as k8s.io/apiserver's secure serving closes
//! idle connections: a client that only answers pings cannot hold its place
//! for ever. When `--max-connections` are open, the longest idle one is closed
//! to make room for the next before the next is made to wait
//! ([`OpenConnections::close_longest_idle`]), so idle connections can never
//! lock out a client; only busy ones make new connections wait.
//!
//! A response that takes long (a watch) is never cut here: a request open on
//! a connection keeps it from being idle, and a live HTTP/2 client answers
//! pings. Owns transport limits only; every request goes to
//! [`super::dispatch`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Frame, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::{dispatch, State};
use crate::authn::Peer;

/// How long a connection may take over each stage, and how many may be open.
/// The flags of the same names set them (see [`super::options::Options`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accept to the end of the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// From the end of the handshake to the end of the first request's
    /// headers, and on HTTP/1 from the end of each response to the end of
    /// the next request's headers (so also how long an idle HTTP/1
    /// connection stays open).
    pub read_header_timeout: Duration,
    /// HTTP/2: how long a connection may send nothing before it is pinged.
    pub http2_read_idle_timeout: Duration,
    /// HTTP/2: how long a ping may go unanswered before the connection is
    /// closed.
    pub http2_ping_timeout: Duration,
    /// HTTP/2: the most streams open at once on one connection, as announced
    /// in the server's SETTINGS; 0 leaves hyper's default.
    pub http2_max_streams_per_connection: u32,
    /// How long a connection may have no request open, once it has sent
    /// its first, before it is closed.
    pub idle_connection_timeout: Duration,
    /// The most connections open at once. Past it the longest idle one is
    /// closed to make room; when none is idle, new ones wait to be accepted.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The hyper connection builder every connection is served with: timers,
    /// so that the header timeout and the HTTP/2 keep-alive pings run at all.
    pub(super) fn http_builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.read_header_timeout);
        let mut http2 = builder.http2();
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(self.http2_read_idle_timeout)
            .keep_alive_timeout(self.http2_ping_timeout);
        if self.http2_max_streams_per_connection > 0 {
            http2.max_concurrent_streams(self.http2_max_streams_per_connection);
        }
        builder
    }
}

/// Why the server closes a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// No request within `--read-header-timeout` of the handshake.
    NoRequestInTime,
    /// No request open for `--idle-connection-timeout`.
    Idle,
    /// The longest idle connection, closed when the cap was reached.
    MakeRoom,
    /// The server is shutting down.
    Shutdown,
}

/// What a connection's timer knows when it looks: a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IdleFacts {
    /// Requests open on it: their responses are not yet all sent.
    pub(super) open_requests: usize,
    /// Whether it has sent a request yet.
    pub(super) requested: bool,
    /// Since the handshake, or since its last response ended.
    pub(super) quiet_for: Duration,
}

/// What the timer does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdleVerdict {
    /// A request is open: no timer runs until it ends.
    Busy,
    /// Look again after this long.
    WaitFor(Duration),
    Close(Close),
}

/// The timer's decision: a connection that has never sent a request gets
/// `--read-header-timeout`, one that has gets `--idle-connection-timeout`,
/// counted from when it last had nothing open.
pub(super) fn idle_verdict(facts: IdleFacts, limits: &ConnectionLimits) -> IdleVerdict {
    if facts.open_requests > 0 {
        return IdleVerdict::Busy;
    }
    let (limit, close) = if facts.requested {
        (limits.idle_connection_timeout, Close::Idle)
    } else {
        (limits.read_header_timeout, Close::NoRequestInTime)
    };
    match limit.checked_sub(facts.quiet_for) {
        Some(rest) if !rest.is_zero() => IdleVerdict::WaitFor(rest),
        _ => IdleVerdict::Close(close),
    }
}

/// One open connection as the registry sees it.
#[derive(Debug)]
struct Activity {
    open_requests: AtomicUsize,
    requested: AtomicBool,
    /// When it last had nothing open, in milliseconds since the registry's
    /// epoch.
    quiet_since: AtomicU64,
    /// Set once the server has decided to close it.
    closing: AtomicBool,
    /// Told when its last open request ends, so that its timer starts.
    quiet: Notify,
    /// Told to close, if it is still idle, to make room.
    evict: Notify,
}

/// Every open connection, so that the accept loop can close the longest
/// idle one when the cap is reached, shutdown can tell them all to finish,
/// and the server can wait until they have.
#[derive(Debug)]
pub(super) struct OpenConnections {
    epoch: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
    drained: Notify,
    shutdown: watch::Sender<bool>,
}

impl Default for OpenConnections {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            drained: Notify::new(),
            shutdown: watch::channel(false).0,
        }
    }
}

/// Of the connections with nothing open and not already closing, the one
/// quiet the longest: `(id, open requests, quiet since, closing)` each.
fn longest_idle(connections: impl IntoIterator<Item = (u64, usize, u64, bool)>) -> Option<u64> {
    connections
        .into_iter()
        .filter(|&(_, open, _, closing)| open == 0 && !closing)
        .min_by_key(|&(id, _, since, _)| (since, id))
        .map(|(id, ..)| id)
}

impl OpenConnections {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection in until the returned registration drops.
    fn register(self: &Arc<Self>) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity {
            open_requests: AtomicUsize::new(0),
            requested: AtomicBool::new(false),
            quiet_since: AtomicU64::new(self.now()),
            closing: AtomicBool::new(false),
            quiet: Notify::new(),
            evict: Notify::new(),
        });
        self.lock().insert(id, Arc::clone(&activity));
        Registration {
            id,
            activity,
            connections: Arc::clone(self),
        }
    }

    /// How many are open.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Tells the longest idle connection to close; whether there was one.
    pub(super) fn close_longest_idle(&self) -> bool {
        let open = self.lock();
        let chosen = longest_idle(open.iter().map(|(&id, a)| {
            (
                id,
                a.open_requests.load(Ordering::SeqCst),
                a.quiet_since.load(Ordering::Relaxed),
                a.closing.load(Ordering::Relaxed),
            )
        }));
        match chosen.and_then(|id| open.get(&id)) {
            Some(activity) => {
                activity.closing.store(true, Ordering::Relaxed);
                activity.evict.notify_one();
                true
            }
            None => false,
        }
    }

    /// Tells every connection to finish what it has open and close.
    pub(super) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits until every connection has closed.
    pub(super) async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.lock().is_empty() {
                return;
            }
            notified.await;
        }
    }
}

/// A connection's place in [`OpenConnections`], given up on drop.
#[derive(Debug)]
struct Registration {
    id: u64,
    activity: Arc<Activity>,
    connections: Arc<OpenConnections>,
}

impl Registration {
    fn facts(&self) -> IdleFacts {
        let since = self.activity.quiet_since.load(Ordering::Relaxed);
        IdleFacts {
            open_requests: self.activity.open_requests.load(Ordering::SeqCst),
            requested: self.activity.requested.load(Ordering::Relaxed),
            quiet_for: Duration::from_millis(self.connections.now().saturating_sub(since)),
        }
    }

    /// Counts a request open until the returned guard drops, which is when
    /// its response has been sent (or the client gave up on it).
    fn request_started(&self) -> OpenRequest {
        self.activity.requested.store(true, Ordering::Relaxed);
        self.activity.open_requests.fetch_add(1, Ordering::SeqCst);
        OpenRequest {
            activity: Arc::clone(&self.activity),
            connections: Arc::clone(&self.connections),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        open.remove(&self.id);
        if open.is_empty() {
            self.connections.drained.notify_waiters();
        }
    }
}

/// One open request on a connection; see [`Registration::request_started`].
#[derive(Debug)]
struct OpenRequest {
    activity: Arc<Activity>,
    connections: Arc<OpenConnections>,
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.activity
            .quiet_since
            .store(self.connections.now(), Ordering::Relaxed);
        if self.activity.open_requests.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.activity.quiet.notify_one();
        }
    }
}

/// A response body that keeps its request counted open until it has been
/// sent whole or dropped.
#[derive(Debug)]
struct CountedBody<B> {
    body: B,
    _open: OpenRequest,
}

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The cap on open connections: one permit each, for as long as it is open.
#[derive(Debug)]
pub(super) struct ConnectionCap {
    permits: Arc<Semaphore>,
    max: usize,
    /// Whether the cap was reached and said so, until a permit is free at once
    /// again: one warning per episode, not one per connection.
    warned: bool,
    /// Whether an idle connection was closed to make room and said so, in
    /// this episode.
    warned_closing: bool,
}

/// How long to wait for a connection told to make room to close before
/// telling the next.
const MAKE_ROOM_WAIT: Duration = Duration::from_millis(200);
/// How often to look again for an idle connection while every one is busy.
const BUSY_WAIT: Duration = Duration::from_secs(1);

impl ConnectionCap {
    pub(super) fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            max,
            warned: false,
            warned_closing: false,
        }
    }

    /// A permit for the next connection. If `max_connections` are open, the
    /// longest idle one is told to close and its permit is taken; if none is
    /// idle, this waits for one to close or become idle. The accept loop
    /// asks only once a new connection is there, which waits unserved
    /// meanwhile, and the ones after it in the listen backlog.
    pub(super) async fn acquire(&mut self, open: &OpenConnections) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            self.warned = false;
            self.warned_closing = false;
            return Some(permit);
        }
        loop {
            let made_room = open.close_longest_idle();
            if made_room && !self.warned_closing {
                tracing::warn!(
                    max = self.max,
                    "--max-connections are open: closing the longest idle connections to make room"
                );
                self.warned_closing = true;
            } else if !made_room && !self.warned {
                tracing::warn!(
                    max = self.max,
                    "--max-connections are open: new connections wait until one closes"
                );
                self.warned = true;
            }
            let wait = if made_room { MAKE_ROOM_WAIT } else { BUSY_WAIT };
            // The semaphore is never closed, so this waits rather than fails.
            if let Ok(permit) =
                tokio::time::timeout(wait, Arc::clone(&self.permits).acquire_owned()).await
            {
                return permit.ok();
            }
        }
    }
}

/// What every connection is served with.
#[derive(Clone)]
pub(super) struct ConnectionServer {
    pub(super) acceptor: TlsAcceptor,
    pub(super) http: auto::Builder<TokioExecutor>,
    pub(super) limits: ConnectionLimits,
    pub(super) state: Arc<State>,
    pub(super) open: Arc<OpenConnections>,
}

impl ConnectionServer {
    /// Serves one accepted connection until it closes, holding `permit`.
    pub(super) async fn serve(
        self,
        tcp: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
    ) {
        let Self {
            acceptor,
            http: builder,
            limits,
            state,
            open,
        } = self;
        let _permit = permit;
        let registration = Arc::new(open.register());
        let mut shutdown = open.shutdown.subscribe();
        let handshake = tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(tcp));
        let tls = tokio::select! {
            accepted = handshake => match accepted {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, timeout = ?limits.tls_handshake_timeout, "no TLS handshake in time; closing");
                    return;
                }
            },
            () = registration.activity.evict.notified() => return,
            _ = shutdown.wait_for(|down| *down) => return,
        };
        registration
            .activity
            .quiet_since
            .store(open.now(), Ordering::Relaxed);
        let identity = Arc::new(
            Peer::new(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .map(|chain| chain.iter().map(|c| c.clone().into_owned()).collect()),
            )
            .with_address(peer),
        );
        let service = service_fn({
            let registration = Arc::clone(&registration);
            move |req| {
                let counted = registration.request_started();
                let (state, identity) = (Arc::clone(&state), Arc::clone(&identity));
                async move {
                    let resp = dispatch(&state, &identity, req).await;
                    Ok::<_, std::convert::Infallible>(resp.map(|body| CountedBody {
                        body,
                        _open: counted,
                    }))
                }
            }
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tls), service)
            .into_owned();
        tokio::pin!(conn);
        let mut closing = None;
        let ended = loop {
            let verdict = idle_verdict(registration.facts(), &limits);
            let wait = match (closing, verdict) {
                // Told to go while idle: a grace to read the GOAWAY, then cut.
                (
                    Some(Close::Idle | Close::MakeRoom),
                    IdleVerdict::WaitFor(_) | IdleVerdict::Close(_),
                ) => limits.read_header_timeout,
                // Shutting down: what is open runs to its end (the server
                // bounds the whole drain).
                (Some(_), _) | (None, IdleVerdict::Busy) => Duration::MAX,
                (None, IdleVerdict::WaitFor(rest)) => rest,
                (None, IdleVerdict::Close(Close::NoRequestInTime)) => {
                    tracing::debug!(%peer, timeout = ?limits.read_header_timeout, "no request in time; closing");
                    return;
                }
                (None, IdleVerdict::Close(reason)) => {
                    tracing::debug!(%peer, ?reason, "closing an idle connection");
                    registration.activity.closing.store(true, Ordering::Relaxed);
                    conn.as_mut().graceful_shutdown();
                    closing = Some(reason);
                    continue;
                }
            };
            let timer = tokio::time::sleep(wait.min(Duration::from_secs(86_400)));
            tokio::select! {
                ended = &mut conn => break ended,
                () = timer => {
                    if matches!(closing, Some(Close::Idle | Close::MakeRoom)) {
                        tracing::debug!(%peer, "an idle connection told to close did not; cutting it");
                        return;
                    }
                }
                () = registration.activity.quiet.notified() => {}
                () = registration.activity.evict.notified(), if closing.is_none() => {
                    if registration.facts().open_requests == 0 {
                        tracing::debug!(%peer, "closing the longest idle connection to make room");
                        conn.as_mut().graceful_shutdown();
                        closing = Some(Close::MakeRoom);
                    } else {
                        registration.activity.closing.store(false, Ordering::Relaxed);
                    }
                }
                _ = shutdown.wait_for(|down| *down), if closing.is_none() => {
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Close::Shutdown);
                }
            }
        };
        if let Err(err) = ended {
            tracing::debug!(%peer, error = %err, "connection ended with an error");
        }
    }
}

#[cfg(test)]
mod tests;
