//! A transfer's progress as a person follows it: the waits (for the peer, for
//! the claim's pods, or for the claims a snapshot is being restored into) and
//! the protocol's steps, each with its time and in the words of what moves (a
//! claim's volume or a VolumeSnapshot), derived from the transfer's status
//! alone; and the two ways of drawing it, a live display on a terminal and
//! one plain line per change when piped.
//!
//! [`timeline`] is pure: the status in, the lines out. [`Follower`] keeps what
//! it has printed, so that a watch that sees the same status twice, or a
//! status that jumps several steps, prints each line once, in order.

use std::io::Write;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::output::one_line;
use transfer_api::meta::{find_condition, CONDITION_TRUE};
use transfer_api::namespace_transfer::{
    NamespaceTransfer, NamespaceTransferPhase as Phase, Role, TransferMode, TransferStepName,
    CONDITION_PEER_MATCHED, CONDITION_SOURCE_RELEASED,
};

/// The stages a person sees, in order: two waits, then the six steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Matched with the transfer in the other namespace.
    Peer,
    /// No pod uses the claim any more (Move), or the clone is made (Clone);
    /// for a snapshot, no claim is being restored from it.
    Pods,
    Step(TransferStepName),
}

/// Every stage, in order.
pub fn stages() -> impl Iterator<Item = Stage> {
    [Stage::Peer, Stage::Pods]
        .into_iter()
        .chain(TransferStepName::ALL.into_iter().map(Stage::Step))
}

/// How many stages a transfer passes on its way to Completed.
pub const STAGES: u64 = 8;

impl Stage {
    /// The word a line starts with.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Peer => "matched",
            Stage::Pods => "free",
            Stage::Step(TransferStepName::Locked) => "locked",
            Stage::Step(TransferStepName::Retained) => "retained",
            Stage::Step(TransferStepName::Created) => "created",
            Stage::Step(TransferStepName::Committed) => "committed",
            Stage::Step(TransferStepName::Released) => "released",
            Stage::Step(TransferStepName::Settled) => "settled",
        }
    }
}

/// One line of progress: a stage passed, or what the transfer waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// When the server recorded it; `None` for a wait, which is as of now.
    pub time: Option<Timestamp>,
    pub what: What,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    Passed(Stage),
    /// Waiting, with the status reason.
    Waiting(String),
    /// Between steps, in the phase named: what the terminal's display says
    /// meanwhile; plain output skips it.
    Working(String),
}

/// The end of a transfer, if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
}

/// What the status says has happened, in order, and what it waits for now.
/// On the destination side the server's words never name the source's pods,
/// so neither does this.
pub fn timeline(t: &NamespaceTransfer) -> (Vec<Line>, Option<Line>) {
    let Some(st) = &t.status else {
        return (Vec::new(), None);
    };
    let mut lines = Vec::new();
    let time = |c: &str| {
        find_condition(&st.conditions, c)
            .filter(|c| c.status == CONDITION_TRUE)
            .map(|c| c.last_transition_time.0)
    };
    let first_step = st.steps.first().map(|s| s.time.0);
    if let Some(peer) = &st.peer {
        let detail = if t.role() == Ok(Role::Both) {
            "a rename: the transfer is its own peer".to_owned()
        } else {
            format!("with {}/{}", peer.namespace, peer.name)
        };
        let at = time(CONDITION_PEER_MATCHED).or(first_step);
        lines.push(Line {
            time: at,
            what: What::Passed(Stage::Peer),
            detail,
        });
    }
    // Free of pods at the latest when it was locked: the two are recorded in
    // one write, the condition's clock read a moment later.
    let unused = match (time(CONDITION_SOURCE_RELEASED), first_step) {
        (Some(c), Some(l)) => Some(c.min(l)),
        (c, l) => c.or(l),
    };
    if let Some(at) = unused {
        let detail = match t.mode() {
            _ if t.moves_snapshot() => "no claim is being restored from the snapshot",
            TransferMode::Move => "no pod uses the claim",
            TransferMode::Clone => "the clone is made and no pod uses it",
        };
        lines.push(Line {
            time: Some(at),
            what: What::Passed(Stage::Pods),
            detail: detail.to_owned(),
        });
    }
    for step in &st.steps {
        lines.push(Line {
            time: Some(step.time.0),
            what: What::Passed(Stage::Step(step.name)),
            detail: step_detail(t, step.name),
        });
    }
    let phase = st.phase.unwrap_or(Phase::Pending);
    let reason = st.reason.clone().filter(|r| !r.is_empty());
    let waiting = (!phase.is_finished()).then(|| Line {
        time: None,
        what: if is_wait(phase, reason.as_deref()) {
            What::Waiting(reason.unwrap_or_else(|| phase.as_str().to_owned()))
        } else {
            What::Working(phase.as_str().to_owned())
        },
        detail: st
            .message
            .clone()
            .unwrap_or_else(|| phase_text(t, phase).to_owned()),
    });
    (lines, waiting)
}

/// Whether the transfer waits for something a person may need to act on,
/// rather than passing from one step to the next: the early phases, and a
/// reason other than the progress notes the protocol leaves between steps
/// (`Matched`, then none while it rebinds).
fn is_wait(phase: Phase, reason: Option<&str>) -> bool {
    match reason {
        Some("Matched") => false,
        Some(_) => true,
        None => matches!(
            phase,
            Phase::Pending | Phase::WaitingForPeer | Phase::WaitingForRelease
        ),
    }
}

/// The transfer's end, once it has one.
pub fn outcome(t: &NamespaceTransfer) -> Option<Outcome> {
    let st = t.status.as_ref()?;
    let phase = st.phase.filter(|p| p.is_finished())?;
    Some(Outcome {
        phase,
        reason: st
            .reason
            .clone()
            .unwrap_or_else(|| phase.as_str().to_owned()),
        message: st.message.clone().unwrap_or_default(),
    })
}

fn step_detail(t: &NamespaceTransfer, step: TransferStepName) -> String {
    if t.moves_snapshot() {
        return snapshot_step_detail(t, step);
    }
    let st = t.status.as_ref();
    let source = st.and_then(|s| s.source_claim.as_ref());
    let destination = st.and_then(|s| s.destination_claim.as_ref());
    match step {
        TransferStepName::Locked => match (source, t.mode()) {
            (Some(snap), _) => format!(
                "{}/{} (volume {})",
                t.source_namespace(),
                snap.name,
                snap.volume_name
            ),
            (None, TransferMode::Move) => "the source claim".to_owned(),
            (None, TransferMode::Clone) => "the clone of the source claim".to_owned(),
        },
        TransferStepName::Retained => "the volume's reclaim policy is Retain".to_owned(),
        TransferStepName::Created => match destination {
            Some(d) => format!("{}/{}", d.namespace, d.name),
            None => "the destination claim".to_owned(),
        },
        TransferStepName::Committed => "the volume names the destination claim".to_owned(),
        TransferStepName::Released => match t.mode() {
            TransferMode::Move => "the source claim is deleted".to_owned(),
            TransferMode::Clone => {
                "the clone's claim in the source namespace is deleted; the original stays"
                    .to_owned()
            }
        },
        TransferStepName::Settled => "the destination claim is bound".to_owned(),
    }
}

/// A snapshot move's steps: the source side names the snapshots (its
/// status records them); the destination side, which never learns the
/// source's content, reads the same steps in general words.
fn snapshot_step_detail(t: &NamespaceTransfer, step: TransferStepName) -> String {
    let st = t.status.as_ref();
    let source = st.and_then(|s| s.source_snapshot.as_ref());
    let destination = st.and_then(|s| s.destination_snapshot.as_ref());
    match step {
        TransferStepName::Locked => match source {
            Some(snap) => format!(
                "{}/{} (content {})",
                t.source_namespace(),
                snap.name,
                snap.content_name
            ),
            None => "the source snapshot".to_owned(),
        },
        TransferStepName::Retained => "the snapshot content's deletionPolicy is Retain".to_owned(),
        TransferStepName::Created => match destination {
            Some(d) => format!("{}/{} (content {})", d.namespace, d.name, d.content_name),
            None => "the destination snapshot".to_owned(),
        },
        TransferStepName::Committed => {
            "the destination snapshot is bound to its content and ready to use".to_owned()
        }
        TransferStepName::Released => {
            "the source snapshot is deleted; the stored snapshot stays".to_owned()
        }
        TransferStepName::Settled => {
            "the destination snapshot's content has the original deletionPolicy back".to_owned()
        }
    }
}

/// What a phase means, when the server gave no message, in the words of
/// what `t` moves.
pub fn phase_text(t: &NamespaceTransfer, phase: Phase) -> &'static str {
    if t.moves_snapshot() {
        match phase {
            Phase::WaitingForRelease => {
                return "waiting until the snapshot is ready and no claim is being restored from it"
            }
            Phase::Rebinding => return "the snapshot is being handed over",
            Phase::Completed => return "the snapshot was handed over",
            _ => {}
        }
    }
    match phase {
        Phase::Pending => "accepted, not yet looked at",
        Phase::WaitingForPeer => "waiting for the transfer in the other namespace",
        Phase::WaitingForRelease => "waiting until no pod uses the claim",
        Phase::Rebinding => "the volume is being handed over",
        Phase::Completed => "the volume was handed over",
        Phase::Failed => "the transfer failed; the source is as it was",
        Phase::Cancelled => "the transfer was cancelled; the source is as it was",
    }
}

/// `HH:MM:SS` in UTC.
pub fn clock(at: Timestamp) -> String {
    at.strftime("%H:%M:%S").to_string()
}

/// `+7s`, `+2m05s`, `+1h02m` since `from`.
pub fn since(from: Option<Timestamp>, at: Timestamp) -> String {
    let Some(from) = from else {
        return String::new();
    };
    let seconds = at.as_second().saturating_sub(from.as_second()).max(0);
    match seconds {
        s if s < 60 => format!("+{s}s"),
        s if s < 3600 => format!("+{}m{:02}s", s / 60, s % 60),
        s => format!("+{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// One plain line: `HH:MM:SS  +7s   locked     prod/db (volume pvc-…)`.
pub fn plain(line: &Line, created: Option<Timestamp>, now: Timestamp) -> String {
    let at = line.time.unwrap_or(now);
    let word = match &line.what {
        What::Passed(stage) => stage.label(),
        What::Waiting(_) => "waiting",
        What::Working(_) => "working",
    };
    let detail = match &line.what {
        What::Waiting(reason) | What::Working(reason) => format!("{} ({reason})", line.detail),
        What::Passed(_) => line.detail.clone(),
    };
    format!(
        "{}  {:<7} {:<9}  {}",
        clock(at),
        since(created, at),
        word,
        one_line(&detail)
    )
}

/// The closing line of a finished transfer.
pub fn closing(outcome: &Outcome) -> String {
    let line = match outcome.phase {
        Phase::Completed => format!("Completed: {}", outcome.message),
        phase => format!("{phase} ({}): {}", outcome.reason, outcome.message),
    };
    one_line(&line).into_owned()
}

/// Prints a transfer's progress as its statuses arrive, each line once.
#[derive(Debug)]
pub struct Follower {
    printed: Vec<Stage>,
    waiting: Option<(String, String)>,
    created: Option<Timestamp>,
    to_stderr: bool,
    out: Sink,
}

#[derive(Debug)]
enum Sink {
    /// Plain lines.
    Plain,
    /// A live display on the terminal: a bar of the stages passed and a
    /// spinner with the current wait; passed stages print above it.
    Terminal(ProgressBar),
}

impl Follower {
    /// `terminal`: draw a live display; otherwise plain lines, to stderr
    /// when stdout carries an object (`-o`).
    pub fn new(terminal: bool, to_stderr: bool) -> Self {
        let out = if terminal {
            let target = if to_stderr {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::stdout()
            };
            let bar = ProgressBar::with_draw_target(Some(STAGES), target);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{bar:16}] {pos}/{len} {wide_msg} {elapsed:>4}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            Sink::Terminal(bar)
        } else {
            Sink::Plain
        };
        Self {
            printed: Vec::new(),
            waiting: None,
            created: None,
            to_stderr,
            out,
        }
    }

    /// Shows what `t` adds to what was shown.
    pub fn update(&mut self, t: &NamespaceTransfer) {
        if self.created.is_none() {
            self.created = t.metadata.creation_timestamp.as_ref().map(|c| c.0);
        }
        let now = Timestamp::now();
        let (lines, waiting) = timeline(t);
        for line in &lines {
            let What::Passed(stage) = line.what else {
                continue;
            };
            if self.printed.contains(&stage) {
                continue;
            }
            self.printed.push(stage);
            self.emit(&plain(line, self.created, now));
        }
        if let Sink::Terminal(bar) = &self.out {
            bar.set_position(self.printed.len() as u64);
        }
        match waiting {
            Some(line) => {
                let (What::Waiting(reason) | What::Working(reason)) = &line.what else {
                    return;
                };
                let key = (reason.clone(), line.detail.clone());
                if self.waiting.as_ref() != Some(&key) {
                    match &self.out {
                        Sink::Terminal(bar) => {
                            let text = format!("{} ({reason})", line.detail);
                            bar.set_message(one_line(&text).into_owned());
                        }
                        Sink::Plain if matches!(line.what, What::Waiting(_)) => {
                            self.emit(&plain(&line, self.created, now));
                        }
                        Sink::Plain => {}
                    }
                    self.waiting = Some(key);
                }
            }
            None => self.waiting = None,
        }
    }

    /// How many stages have been shown so far.
    pub fn stages_shown(&self) -> usize {
        self.printed.len()
    }

    /// Ends the live display without a last line, for an error to follow.
    pub fn abandon(&mut self) {
        if let Sink::Terminal(bar) = &self.out {
            bar.finish_and_clear();
        }
    }

    /// Ends the live display, leaving `last` as the final line.
    pub fn finish(&mut self, last: &str) {
        if let Sink::Terminal(bar) = &self.out {
            bar.finish_and_clear();
        }
        self.write(last);
    }

    fn emit(&self, text: &str) {
        match &self.out {
            Sink::Terminal(bar) => bar.println(one_line(text)),
            Sink::Plain => self.write(text),
        }
    }

    fn write(&self, text: &str) {
        let text = one_line(text);
        if self.to_stderr {
            let _ = writeln!(std::io::stderr(), "{text}");
        } else {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        }
    }
}

/// A `Time` as a jiff timestamp.
pub fn timestamp(t: &Time) -> Timestamp {
    t.0
}
