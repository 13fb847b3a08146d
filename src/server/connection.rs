//! One client connection, from accept to close, and what it may cost: a
//! permit from the cap on open connections, held until it closes; the TLS
//! handshake within its timeout; the first request's headers within theirs;
//! then HTTP/1 or HTTP/2 by hyper, with timers, so that an HTTP/1 connection
//! that stops sending headers is closed and an HTTP/2 connection that stops
//! answering pings is too.
//!
//! A response that takes long (a watch) is never cut here: the header timeout
//! runs only while hyper waits for a request, and a live HTTP/2 client answers
//! pings. Owns transport limits only; every request goes to
//! [`super::dispatch`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
    /// The most connections open at once; more wait to be accepted.
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

/// The cap on open connections: one permit each, for as long as it is open.
#[derive(Debug)]
pub(super) struct ConnectionCap {
    permits: Arc<Semaphore>,
    max: usize,
    /// Whether the cap was reached and said so, until a permit is free at once
    /// again: one warning per episode, not one per connection.
    warned: bool,
}

impl ConnectionCap {
    pub(super) fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            max,
            warned: false,
        }
    }

    /// A permit for the next connection, waiting for one to close if
    /// `max_connections` are open. New connections meanwhile wait in the
    /// listen backlog, unaccepted.
    pub(super) async fn acquire(&mut self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            self.warned = false;
            return Some(permit);
        }
        if !self.warned {
            tracing::warn!(
                max = self.max,
                "--max-connections are open: new connections wait until one closes"
            );
            self.warned = true;
        }
        // The semaphore is never closed, so this waits rather than fails.
        Arc::clone(&self.permits).acquire_owned().await.ok()
    }
}

/// What every connection is served with.
#[derive(Clone)]
pub(super) struct ConnectionServer {
    pub(super) acceptor: TlsAcceptor,
    pub(super) http: auto::Builder<TokioExecutor>,
    pub(super) limits: ConnectionLimits,
    pub(super) state: Arc<State>,
}

impl ConnectionServer {
    /// Serves one accepted connection until it closes, holding `permit`.
    pub(super) async fn serve(
        self,
        tcp: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        watcher: Watcher,
    ) {
        let Self {
            acceptor,
            http: builder,
            limits,
            state,
        } = self;
        let _permit = permit;
        let tls = match tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(tcp))
            .await
        {
            Ok(Ok(tls)) => tls,
            Ok(Err(err)) => {
                tracing::debug!(%peer, error = %err, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, timeout = ?limits.tls_handshake_timeout, "no TLS handshake in time; closing");
                return;
            }
        };
        let identity =
            Arc::new(Peer::new(tls.get_ref().1.peer_certificates().map(
                |chain| chain.iter().map(|c| c.clone().into_owned()).collect(),
            )));
        let requested = Arc::new(AtomicBool::new(false));
        let service = service_fn({
            let requested = Arc::clone(&requested);
            move |req| {
                requested.store(true, Ordering::Relaxed);
                let (state, identity) = (Arc::clone(&state), Arc::clone(&identity));
                async move { Ok::<_, std::convert::Infallible>(dispatch(&state, &identity, req).await) }
            }
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(tls), service)
            .into_owned();
        let conn = watcher.watch(conn);
        tokio::pin!(conn);
        // hyper times HTTP/1 headers itself, but not the bytes it reads to tell
        // HTTP/1 from HTTP/2, nor an HTTP/2 client's preface and first request.
        let ended = tokio::select! {
            ended = &mut conn => Some(ended),
            () = tokio::time::sleep(limits.read_header_timeout) => None,
        };
        let ended = match ended {
            Some(ended) => ended,
            None if !requested.load(Ordering::Relaxed) => {
                tracing::debug!(%peer, timeout = ?limits.read_header_timeout, "no request in time; closing");
                return;
            }
            None => conn.await,
        };
        if let Err(err) = ended {
            tracing::debug!(%peer, error = %err, "connection ended with an error");
        }
    }
}

#[cfg(test)]
mod tests;
