//! Where events go: each event is serialized to its line when it is
//! recorded, and the line waits in a bounded channel for one writer thread.
//!
//! Owns the promise that auditing never holds up or fails a request:
//! [`Sink::record`] never waits. The queue is bounded twice: by its number
//! of events (`--audit-log-buffer-size`) and by the bytes they hold
//! ([`MAX_QUEUED_BYTES`]), since one event may carry a request body of
//! megabytes. When either bound is reached (the disk is slow or full, or
//! stdout is blocked) the event is dropped and counted, and a warning is
//! logged at most every ten seconds; a write that fails is counted the same
//! way. The writer is a plain thread, not a tokio task, because writing a
//! file blocks.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::event::Event;

/// How many bytes of serialized events may wait for the writer, whatever
/// `--audit-log-buffer-size` allows: past it, events are dropped and
/// counted (`reason="dropped"`) like those over the event count. Larger
/// than the largest event (a 3 MiB request body and a 1 MiB response, as
/// JSON) many times over.
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// How often a run of dropped or failed events is reported in the log.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The sending end of the audit log. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sink {
    tx: mpsc::Sender<Message>,
    stats: Arc<Stats>,
}

#[derive(Debug)]
enum Message {
    /// One event's line, newline included.
    Line(Vec<u8>),
    /// Answered once everything before it is written and flushed.
    Flush(oneshot::Sender<()>),
}

/// What became of the events handed to a [`Sink`].
#[derive(Debug)]
struct Stats {
    written: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    /// Bytes of the lines sent and not yet written.
    queued_bytes: AtomicUsize,
    max_queued_bytes: usize,
    started: Instant,
    /// Milliseconds after `started` of the last warning, plus one (0: none yet).
    last_warning: AtomicU64,
}

impl Stats {
    /// Logs a warning about lost events, unless one was logged recently.
    fn warn(&self, what: &str) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last_warning.load(Ordering::Relaxed);
        let due = last == 0
            || now.saturating_sub(last) >= u64::try_from(WARN_EVERY.as_millis()).unwrap_or(0);
        if due
            && self
                .last_warning
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                dropped = self.dropped.load(Ordering::Relaxed),
                failed = self.failed.load(Ordering::Relaxed),
                "audit events are being lost: {what}"
            );
        }
    }
}

impl Sink {
    /// Starts the writer thread on `out`; at most `capacity` events, of at
    /// most [`MAX_QUEUED_BYTES`] in all, wait for it.
    pub fn start(out: Box<dyn Write + Send>, capacity: usize) -> Self {
        Self::start_bounded(out, capacity, MAX_QUEUED_BYTES)
    }

    /// [`Sink::start`] with another bound on the bytes waiting.
    pub fn start_bounded(out: Box<dyn Write + Send>, capacity: usize, max_bytes: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let stats = Arc::new(Stats {
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            queued_bytes: AtomicUsize::new(0),
            max_queued_bytes: max_bytes,
            started: Instant::now(),
            last_warning: AtomicU64::new(0),
        });
        let writer_stats = stats.clone();
        let spawned = std::thread::Builder::new()
            .name("audit-writer".to_owned())
            .spawn(move || write_events(rx, out, &writer_stats));
        if let Err(err) = spawned {
            // Without a thread the channel's receiver is gone: every event
            // is counted as dropped, and requests go on.
            tracing::error!(error = %err, "cannot start the audit log writer");
        }
        Self { tx, stats }
    }

    /// Serializes an event and hands its line to the writer, or drops and
    /// counts it if the writer is behind. Never waits; keeps nothing of
    /// `event`.
    pub fn record(&self, event: &Event) {
        match event.to_line() {
            Ok(line) => self.record_line(line),
            Err(err) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .warn(&format!("an audit event cannot be serialized: {err}"));
            }
        }
    }

    fn record_line(&self, line: Vec<u8>) {
        let size = line.len();
        // Reserve first, so that racing requests never exceed the bound
        // together; give back what is not sent.
        let before = self.stats.queued_bytes.fetch_add(size, Ordering::Relaxed);
        if before.saturating_add(size) > self.stats.max_queued_bytes {
            self.stats.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            self.stats
                .warn("the audit log buffer is full by size (is the disk slow or full?)");
            return;
        }
        let lost = match self.tx.try_send(Message::Line(line)) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                "the audit log buffer is full (is the disk slow or full?)"
            }
            Err(mpsc::error::TrySendError::Closed(_)) => "the audit log writer has stopped",
        };
        self.stats.queued_bytes.fetch_sub(size, Ordering::Relaxed);
        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        self.stats.warn(lost);
    }

    /// Waits, at most `timeout`, until every event recorded so far is
    /// written and flushed. For shutdown and tests; `false` if it took too
    /// long.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let (done, written) = oneshot::channel();
        let flushed =
            async { self.tx.send(Message::Flush(done)).await.is_ok() && written.await.is_ok() };
        tokio::time::timeout(timeout, flushed)
            .await
            .unwrap_or(false)
    }

    /// Events written so far.
    pub fn written(&self) -> u64 {
        self.stats.written.load(Ordering::Relaxed)
    }

    /// Events dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.stats.dropped.load(Ordering::Relaxed)
    }

    /// Bytes of events waiting for the writer.
    pub fn queued_bytes(&self) -> usize {
        self.stats.queued_bytes.load(Ordering::Relaxed)
    }

    /// Events whose write failed (or that could not be serialized).
    pub fn failed(&self) -> u64 {
        self.stats.failed.load(Ordering::Relaxed)
    }

    /// The counters in Prometheus' text format.
    pub fn metrics(&self) -> String {
        format!(
            "# HELP storage_transfer_audit_event_total Audit events written to the audit log.\n# TYPE storage_transfer_audit_event_total counter\nstorage_transfer_audit_event_total {}\n# HELP storage_transfer_audit_error_total Audit events lost: dropped because the writer was behind, or failed to write.\n# TYPE storage_transfer_audit_error_total counter\nstorage_transfer_audit_error_total{{reason=\"dropped\"}} {}\nstorage_transfer_audit_error_total{{reason=\"failed\"}} {}\n",
            self.written(),
            self.dropped(),
            self.failed()
        )
    }
}

/// The writer thread: writes what arrives, and flushes whenever it has
/// caught up. Ends when every [`Sink`] is gone.
fn write_events(mut rx: mpsc::Receiver<Message>, mut out: Box<dyn Write + Send>, stats: &Stats) {
    let mut waiting = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Line(line) => {
                    write_one(&mut out, &line, stats);
                    stats.queued_bytes.fetch_sub(line.len(), Ordering::Relaxed);
                }
                Message::Flush(done) => waiting.push(done),
            }
            next = rx.try_recv().ok();
        }
        if let Err(err) = out.flush() {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, "cannot flush the audit log");
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
    let _ = out.flush();
}

fn write_one(out: &mut Box<dyn Write + Send>, line: &[u8], stats: &Stats) {
    match out.write_all(line) {
        Ok(()) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
        }
        Err(err) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            stats.warn(&format!("writing the audit log failed: {err}"));
        }
    }
}
