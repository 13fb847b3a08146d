//! Where events go: each event is serialized to its line when it is
//! recorded, and the line waits in a bounded queue for one writer thread.
//!
//! Owns what a request waits for, as `--audit-log-mode` says (kube's modes
//! of the same names, k8s.io/apiserver `options/audit.go`):
//! - [`Mode::Blocking`] (the default): recording waits for room in the
//!   queue, so nothing is dropped and a flood of requests slows down
//!   rather than hiding the next one from the log. A write that fails is
//!   counted; the request goes on.
//! - [`Mode::BlockingStrict`]: as blocking, and a request's
//!   `RequestReceived` event waits until it is written and flushed: if that
//!   fails the request fails (see [`Sink::record_strictly`]).
//! - [`Mode::Batch`]: recording never waits. Past the queue's bounds the
//!   event is dropped and counted (`reason="dropped"`), as kube's buffered
//!   backend drops what its full buffer cannot take.
//!
//! The queue is bounded twice: by its number of events
//! (`--audit-log-buffer-size`) and by the bytes they hold
//! ([`MAX_QUEUED_BYTES`]), since one event may carry a request body of
//! megabytes. Waiting takes a place in the channel, then room among the
//! bytes, from a fair semaphore that the writer refills as it writes; no
//! lock is held while waiting, and a request that goes away while it waits
//! gives back what it took. Lost events (dropped or failed) are logged as a
//! warning at most every ten seconds. The writer is a plain thread, not a
//! tokio task, because writing a file blocks.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::event::Event;

/// How many bytes of serialized events may wait for the writer, whatever
/// `--audit-log-buffer-size` allows: past it, events wait (blocking modes)
/// or are dropped and counted (`reason="dropped"`, batch mode) like those
/// over the event count. Larger than the largest event (a 3 MiB request
/// body and a 1 MiB response, as JSON) many times over.
pub const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// How often a run of dropped or failed events is reported in the log.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What recording waits for (`--audit-log-mode`; see the module's doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Waits for room; never drops.
    #[default]
    Blocking,
    /// Waits for room, and for the write of `RequestReceived`, whose
    /// failure fails the request.
    BlockingStrict,
    /// Never waits; drops and counts what does not fit.
    Batch,
}

impl Mode {
    /// The names `--audit-log-mode` takes, as kube lists them.
    pub const NAMES: &'static str = "batch, blocking, blocking-strict";

    /// Whether recording waits for room rather than dropping.
    fn waits(self) -> bool {
        matches!(self, Self::Blocking | Self::BlockingStrict)
    }
}

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, UnknownMode> {
        match s {
            "blocking" => Ok(Self::Blocking),
            "blocking-strict" => Ok(Self::BlockingStrict),
            "batch" => Ok(Self::Batch),
            other => Err(UnknownMode(other.to_owned())),
        }
    }
}

/// A mode `--audit-log-mode` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0:?}; the modes are {modes}", modes = Mode::NAMES)]
pub struct UnknownMode(String);

/// Why an event did not reach the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error("the audit event cannot be serialized")]
    Unserializable,
    /// Batch mode: the queue was full.
    #[error("the audit log buffer is full")]
    Dropped,
    #[error("the audit log writer has stopped")]
    WriterStopped,
    #[error("writing the audit log failed")]
    WriteFailed,
}

/// Why a line could not be queued at once.
#[derive(Debug)]
enum NoRoom {
    /// The queue is full now; here is the line back.
    Full(Vec<u8>),
    /// Batch mode: larger than the whole room, it never fits.
    Never,
    /// The writer is gone.
    Gone,
}

impl NoRoom {
    fn lost(&self) -> Lost {
        match self {
            Self::Full(_) | Self::Never => Lost::Dropped,
            Self::Gone => Lost::WriterStopped,
        }
    }
}

/// The sending end of the audit log. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sink {
    tx: mpsc::Sender<Message>,
    mode: Mode,
    /// Room for bytes of lines: one permit a byte, taken when a line is
    /// queued and given back by the writer once it is written.
    room: Arc<Semaphore>,
    stats: Arc<Stats>,
}

#[derive(Debug)]
enum Message {
    /// One event's line, newline included, holding `permits` of the room.
    Line {
        line: Vec<u8>,
        permits: u32,
        /// Answered once the line is written and flushed: whether both
        /// succeeded.
        written: Option<oneshot::Sender<bool>>,
    },
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
    /// The room's size: a line of more takes all of it.
    max_queued_bytes: u32,
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

    /// Counts a lost event.
    fn lose(&self, lost: Lost) -> Lost {
        match lost {
            Lost::Dropped => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.warn("the audit log buffer is full (is the disk slow or full?)");
            }
            Lost::WriterStopped => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.warn("the audit log writer has stopped");
            }
            Lost::Unserializable | Lost::WriteFailed => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        lost
    }
}

impl Sink {
    /// Starts the writer thread on `out`; at most `capacity` events, of at
    /// most [`MAX_QUEUED_BYTES`] in all, wait for it.
    pub fn start(out: Box<dyn Write + Send>, mode: Mode, capacity: usize) -> Self {
        Self::start_bounded(out, mode, capacity, MAX_QUEUED_BYTES)
    }

    /// [`Sink::start`] with another bound on the bytes waiting.
    pub fn start_bounded(
        out: Box<dyn Write + Send>,
        mode: Mode,
        capacity: usize,
        max_bytes: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let max_bytes = u32::try_from(max_bytes).unwrap_or(u32::MAX).max(1);
        let room = Arc::new(Semaphore::new(max_bytes as usize));
        let stats = Arc::new(Stats {
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            queued_bytes: AtomicUsize::new(0),
            max_queued_bytes: max_bytes,
            started: Instant::now(),
            last_warning: AtomicU64::new(0),
        });
        let (writer_stats, writer_room) = (stats.clone(), room.clone());
        let spawned = std::thread::Builder::new()
            .name("audit-writer".to_owned())
            .spawn(move || write_events(rx, out, &writer_stats, &writer_room));
        if let Err(err) = spawned {
            // Without a thread the channel's receiver is gone: every event
            // is lost and counted, and requests go on.
            tracing::error!(error = %err, "cannot start the audit log writer");
        }
        Self {
            tx,
            mode,
            room,
            stats,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Serializes an event and hands its line to the writer, waiting for
    /// room if the mode waits, else dropping and counting it if there is
    /// none. Keeps nothing of `event`. A lost event is counted; the error
    /// says why, for a caller that cares (none but [`Self::record_strictly`]'s).
    pub async fn record(&self, event: &Event) -> Result<(), Lost> {
        let line = self.line(event)?;
        if self.mode.waits() {
            self.send(line, None).await
        } else {
            self.try_send(line, None)
                .map_err(|no_room| self.stats.lose(no_room.lost()))
        }
    }

    /// Records `event` and waits until it is written and flushed, whatever
    /// the mode: for `RequestReceived` in blocking-strict mode, whose
    /// request fails when this does.
    pub async fn record_strictly(&self, event: &Event) -> Result<(), Lost> {
        let line = self.line(event)?;
        let (done, written) = oneshot::channel();
        self.send(line, Some(done)).await?;
        match written.await {
            Ok(true) => Ok(()),
            // Counted by the writer.
            Ok(false) => Err(Lost::WriteFailed),
            Err(_) => Err(self.stats.lose(Lost::WriterStopped)),
        }
    }

    /// [`Self::record`] where nothing can wait (a request's record dropped
    /// unfinished, a watch's end): never waits. In the blocking modes an
    /// event that finds no room is handed to a task that waits for it, so
    /// that it is not dropped; there is at most one such event per request.
    pub fn record_detached(&self, event: &Event) {
        let Ok(line) = self.line(event) else {
            return;
        };
        match self.try_send(line, None) {
            Ok(()) => {}
            Err(NoRoom::Full(line)) if self.mode.waits() => {
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        let sink = self.clone();
                        runtime.spawn(async move {
                            let _ = sink.send(line, None).await;
                        });
                    }
                    Err(_) => {
                        self.stats.lose(Lost::Dropped);
                    }
                }
            }
            Err(no_room) => {
                self.stats.lose(no_room.lost());
            }
        }
    }

    /// The event's line, or the failure counted.
    fn line(&self, event: &Event) -> Result<Vec<u8>, Lost> {
        event.to_line().map_err(|err| {
            self.stats
                .warn(&format!("an audit event cannot be serialized: {err}"));
            self.stats.lose(Lost::Unserializable)
        })
    }

    /// The room a line of `size` bytes takes: all of it at most, so that a
    /// line larger than the room waits until the queue is empty (and is
    /// dropped in batch mode).
    fn permits(&self, size: usize) -> u32 {
        u32::try_from(size)
            .unwrap_or(u32::MAX)
            .min(self.stats.max_queued_bytes)
    }

    /// Queues `line`, waiting for a place in the channel and then for room.
    /// A caller that goes away while it waits takes nothing with it.
    async fn send(
        &self,
        line: Vec<u8>,
        written: Option<oneshot::Sender<bool>>,
    ) -> Result<(), Lost> {
        let Ok(place) = self.tx.reserve().await else {
            return Err(self.stats.lose(Lost::WriterStopped));
        };
        let permits = self.permits(line.len());
        let Ok(room) = self.room.acquire_many(permits).await else {
            return Err(self.stats.lose(Lost::WriterStopped));
        };
        // From here on nothing waits: the line is queued whole, or not.
        self.queue(place, room, line, permits, written);
        Ok(())
    }

    /// Queues `line` if there is room now.
    fn try_send(
        &self,
        line: Vec<u8>,
        written: Option<oneshot::Sender<bool>>,
    ) -> Result<(), NoRoom> {
        if !self.mode.waits() && line.len() > self.stats.max_queued_bytes as usize {
            return Err(NoRoom::Never);
        }
        let place = match self.tx.try_reserve() {
            Ok(place) => place,
            Err(mpsc::error::TrySendError::Full(())) => return Err(NoRoom::Full(line)),
            Err(mpsc::error::TrySendError::Closed(())) => return Err(NoRoom::Gone),
        };
        let permits = self.permits(line.len());
        let Ok(room) = self.room.try_acquire_many(permits) else {
            return Err(NoRoom::Full(line));
        };
        self.queue(place, room, line, permits, written);
        Ok(())
    }

    /// Queues `line` in the `place` and `room` taken for it; the room is
    /// given back when the writer has written it.
    fn queue(
        &self,
        place: mpsc::Permit<'_, Message>,
        room: tokio::sync::SemaphorePermit<'_>,
        line: Vec<u8>,
        permits: u32,
        written: Option<oneshot::Sender<bool>>,
    ) {
        room.forget();
        self.stats
            .queued_bytes
            .fetch_add(line.len(), Ordering::Relaxed);
        place.send(Message::Line {
            line,
            permits,
            written,
        });
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

    /// The counters, under kube-apiserver's names, added to `registry` at a
    /// scrape: `apiserver_audit_event_total` (events written) and
    /// `apiserver_audit_error_total{plugin="log",reason}` (events lost:
    /// `dropped` because the writer was behind, or `failed` to write; kube
    /// counts both in one series per plugin, ours says which).
    pub fn scrape(&self, registry: &mut Registry) {
        let written = Counter::<u64>::default();
        written.inc_by(self.written());
        let errors = Family::<ErrorLabels, Counter>::default();
        for (reason, n) in [("dropped", self.dropped()), ("failed", self.failed())] {
            errors
                .get_or_create(&ErrorLabels {
                    plugin: "log",
                    reason,
                })
                .inc_by(n);
        }
        registry.register(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend",
            written,
        );
        registry.register(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly, by plugin and reason",
            errors,
        );
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    plugin: &'static str,
    reason: &'static str,
}

/// The writer thread: writes what arrives, gives back its room, and
/// flushes whenever it has caught up. Ends when every [`Sink`] is gone.
fn write_events(
    mut rx: mpsc::Receiver<Message>,
    mut out: Box<dyn Write + Send>,
    stats: &Stats,
    room: &Semaphore,
) {
    let mut waiting = Vec::new();
    let mut written_lines = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Line {
                    line,
                    permits,
                    written,
                } => {
                    let ok = write_one(&mut out, &line, stats);
                    stats.queued_bytes.fetch_sub(line.len(), Ordering::Relaxed);
                    room.add_permits(permits as usize);
                    if let Some(done) = written {
                        written_lines.push((done, ok));
                    }
                }
                Message::Flush(done) => waiting.push(done),
            }
            next = rx.try_recv().ok();
        }
        let flushed = match out.flush() {
            Ok(()) => true,
            Err(err) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %err, "cannot flush the audit log");
                false
            }
        };
        for (done, ok) in written_lines.drain(..) {
            let _ = done.send(ok && flushed);
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
    let _ = out.flush();
}

/// Writes one line; whether it was written (a failure is counted).
fn write_one(out: &mut Box<dyn Write + Send>, line: &[u8], stats: &Stats) -> bool {
    match out.write_all(line) {
        Ok(()) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(err) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            stats.warn(&format!("writing the audit log failed: {err}"));
            false
        }
    }
}
