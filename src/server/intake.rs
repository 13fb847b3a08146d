//! Taking a request's body in before the request takes a seat, and the
//! deadline every non-long-running request is served within.
//!
//! A client that sends its body slowly must not hold a seat of flow control
//! ([`super::flowcontrol`]) while it dawdles: a few identities could
//! otherwise hold every mutating seat with bodies sent at 10 bytes a second.
//! So the whole body is read first, and only then does the request queue for
//! a seat. What bounds the reading instead:
//!
//! - the request's deadline, `--request-timeout` (kube-apiserver's flag,
//!   60 s by default), counted from when the request's headers arrived: a
//!   body not in by then is answered 504 `Timeout`, as kube's timeout filter
//!   answers, and the same deadline then bounds the handler;
//! - [`crate::wire::MAX_BODY_BYTES`] per body (413 past it);
//! - the bytes of all bodies held at once, [`BODY_BYTES_IN_FLIGHT`]: a body
//!   takes its share of that budget chunk by chunk as its bytes arrive and
//!   gives it back when the request is done with it. So what the bodies
//!   being read cost is bounded whatever the number of connections and
//!   streams, and a client that sends slowly holds only what it has sent.
//!
//! Owns the reading and the deadline only; who may send a body at all is
//! authentication's (it runs first), and what the body says is the
//! handler's.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::api::errors::ApiError;

/// The bytes of request bodies the server holds at once, all requests
/// together: 64 MiB, about twenty bodies of the largest size.
pub const BODY_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;

/// kube-apiserver's default `--request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The message of a request cut at its deadline: kube's timeout filter's.
pub const TIMEOUT_MESSAGE: &str = "request did not complete within requested timeout";

/// The body budget and the deadline, shared by every connection.
#[derive(Debug, Clone)]
pub struct Intake {
    budget: Arc<Semaphore>,
    /// The budget's size, for messages.
    total: usize,
    /// `--request-timeout`.
    timeout: Duration,
}

/// A body read whole, and its share of the budget, given back when this is
/// dropped: hold it as long as the body (or anything decoded from it) lives.
#[derive(Debug)]
pub struct Taken {
    pub body: Bytes,
    _share: Option<OwnedSemaphorePermit>,
}

impl Intake {
    /// An intake holding at most `budget` bytes of bodies at once (at least
    /// one body of `max_body` bytes), serving requests within `timeout`.
    pub fn new(budget: usize, timeout: Duration) -> Self {
        let budget = budget.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            budget: Arc::new(Semaphore::new(budget)),
            total: budget,
            timeout,
        }
    }

    /// `--request-timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// When a request whose headers arrived at `received` must be answered.
    pub fn deadline(&self, received: Instant) -> Instant {
        received + self.timeout
    }

    /// Bytes of the budget not held by any body now.
    pub fn available(&self) -> usize {
        self.budget.available_permits()
    }

    /// Reads `body` whole by `deadline`, at most `limit` bytes, taking its
    /// share of the budget as its bytes arrive (waiting for the share, within
    /// the deadline, when other bodies hold the budget).
    pub async fn take<B>(&self, body: B, limit: usize, deadline: Instant) -> Result<Taken, ApiError>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        match tokio::time::timeout_at(deadline, self.read(body, limit)).await {
            Ok(taken) => taken,
            Err(_) => Err(ApiError::Timeout(format!(
                "{TIMEOUT_MESSAGE}: the request body did not arrive within {}s",
                self.timeout.as_secs()
            ))),
        }
    }

    async fn read<B>(&self, mut body: B, limit: usize) -> Result<Taken, ApiError>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let mut share: Option<OwnedSemaphorePermit> = None;
        let mut bytes = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if data.is_empty() {
                continue;
            }
            if bytes.len() + data.len() > limit {
                return Err(ApiError::TooLarge(format!(
                    "the request body is larger than the limit of {limit} bytes"
                )));
            }
            let more = self.share_of(data.len()).await?;
            match &mut share {
                Some(held) => held.merge(more),
                None => share = Some(more),
            }
            bytes.extend_from_slice(&data);
        }
        Ok(Taken {
            body: bytes.freeze(),
            _share: share,
        })
    }

    /// `n` bytes of the budget, waited for.
    async fn share_of(&self, n: usize) -> Result<OwnedSemaphorePermit, ApiError> {
        let n = u32::try_from(n.min(self.total)).unwrap_or(u32::MAX);
        self.budget
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|_| ApiError::ServiceUnavailable("the server is shutting down".to_owned()))
    }
}

#[cfg(test)]
mod tests;
