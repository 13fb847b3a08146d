//! The process: TLS termination (rustls), the hyper accept loop, health endpoints
//! and graceful shutdown.
//!
//! Owns transport and lifecycle. Everything under `/apis` is handed to
//! [`crate::endpoints`]; this module never interprets an API path itself.

pub mod health;
pub mod options;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::api::errors::ApiError;
use crate::endpoints::{self, Body};
use health::Health;
pub use options::{CompletedConfig, ConfigError, Options};

/// Errors that stop the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Runs the server until `shutdown` resolves, then drains connections for at most
/// the configured grace period.
pub async fn run(
    config: CompletedConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.bind,
            source,
        })?;
    let local = listener.local_addr().unwrap_or(config.bind);
    tracing::info!(address = %local, "serving HTTPS");
    serve(listener, config, shutdown).await;
    Ok(())
}

/// The accept loop on an already bound listener.
pub async fn serve(
    listener: TcpListener,
    config: CompletedConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(config.tls.clone());
    let health = Arc::new(Health::new());
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);

    loop {
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
        let acceptor = acceptor.clone();
        let health = health.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(err) => {
                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                    return;
                }
            };
            let service = service_fn(move |req| {
                let health = health.clone();
                async move { Ok::<_, std::convert::Infallible>(dispatch(&health, req)) }
            });
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(err) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }

    health.begin_shutdown();
    tracing::info!(
        grace = ?config.shutdown_grace,
        "shutting down: no longer accepting connections, draining"
    );
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(config.shutdown_grace) => {
            tracing::warn!("grace period over with connections still open; closing them");
        }
    }
}

fn dispatch(health: &Health, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    let resp = if let Some(resp) = health.serve(path, req.uri().query()) {
        resp
    } else if path == "/apis" || path.starts_with("/apis/") {
        endpoints::serve_api(&req)
    } else {
        endpoints::error_response(&ApiError::PathNotFound)
    };
    tracing::debug!(
        method = %req.method(),
        path = %req.uri().path(),
        code = resp.status().as_u16(),
        "request"
    );
    resp
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
