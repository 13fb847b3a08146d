//! Where events go: a bounded channel to one writer thread, which
//! serializes each event and writes it as a line.
//!
//! Owns the promise that auditing never holds up or fails a request:
//! [`Sink::record`] never waits. When the channel is full (the disk is slow
//! or full, or stdout is blocked) the event is dropped and counted, and a
//! warning is logged at most every ten seconds; a write that fails is
//! counted the same way. The writer is a plain thread, not a tokio task,
//! because writing a file blocks.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::event::Event;

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
    Event(Box<Event>),
    /// Answered once everything before it is written and flushed.
    Flush(oneshot::Sender<()>),
}

/// What became of the events handed to a [`Sink`].
#[derive(Debug)]
struct Stats {
    written: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
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
    /// Starts the writer thread on `out`; at most `capacity` events wait
    /// for it.
    pub fn start(out: Box<dyn Write + Send>, capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let stats = Arc::new(Stats {
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
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

    /// Hands an event to the writer, or drops and counts it if the writer
    /// is behind. Never waits.
    pub fn record(&self, event: Event) {
        match self.tx.try_send(Message::Event(Box::new(event))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .warn("the audit log buffer is full (is the disk slow or full?)");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                self.stats.warn("the audit log writer has stopped");
            }
        }
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

    /// Events whose write failed.
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
                Message::Event(event) => write_one(&mut out, &event, stats),
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

fn write_one(out: &mut Box<dyn Write + Send>, event: &Event, stats: &Stats) {
    let written = event
        .to_line()
        .map_err(|e| e.to_string())
        .and_then(|line| out.write_all(&line).map_err(|e| e.to_string()));
    match written {
        Ok(()) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
        }
        Err(err) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            stats.warn(&format!("writing the audit log failed: {err}"));
        }
    }
}
