//! The one recorder of `kubectl get -w` that tests and benches watch with:
//! every watch event as JSON (`--output-watch-events -o json`), stamped when
//! it arrived.
//!
//! - [`Recording::start`] runs the watch on a thread of its own, which reads
//!   events as kubectl prints them. An ERROR event ends the stream, as it
//!   ends a reflector's; with [`Ends::StartAgain`] the watch is then started
//!   again, as a reflector re-lists, and the restarts are counted.
//! - [`Recording::wait_started`] waits for the watch request's answer, read
//!   from kubectl's `-v=6` log, so that every later change arrives through it.
//! - [`Recording::events`] is what arrived so far; [`Recording::next`]
//!   takes the events in order, one consumer's cursor; [`Recording::finish`]
//!   stops the watch and returns everything.
//!
//! Dropping a recording (on a panic too) kills its kubectl.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Kubectl;

/// One watch event, as it arrived.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub kind: String,
    pub object: Value,
}

impl Event {
    /// `metadata.name` of the object.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// `metadata.namespace` of the object.
    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }
}

/// What a recording does when its stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    /// It is over: a watch of one thing, for one test.
    Once,
    /// The watch starts again, as a reflector's does.
    StartAgain,
}

/// How long a restart waits, so that a server that refuses every watch is
/// not asked in a tight loop.
const RESTART_PAUSE: Duration = Duration::from_millis(200);
/// How many of kubectl's last log lines a failure message shows.
const LOG_LINES: usize = 20;

/// A running `kubectl get -w`, recorded.
#[derive(Debug)]
pub struct Recording {
    what: String,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    restarts: AtomicUsize,
    /// The kubectl of the watch now running.
    child: Mutex<Option<Child>>,
}

#[derive(Debug, Default)]
struct State {
    events: Vec<Event>,
    /// Whether kubectl has had a watch request answered.
    started: bool,
    /// Set when the recording is over: no event comes any more.
    ended: bool,
    /// [`Recording::next`]'s place in `events`.
    cursor: usize,
    log: VecDeque<String>,
}

impl Recording {
    /// `kubectl get <args> -w` as `k`: `args` name what is watched (`["pv",
    /// "pv-1"]`, `["namespacetransfers", "-A"]`) and may add flags.
    pub fn start(k: &Kubectl, args: &[&str], ends: Ends) -> Self {
        let what = format!("kubectl get {}", args.join(" "));
        let shared = Arc::new(Shared::default());
        let mut command = Command::new(k.binary());
        command
            .arg(format!("--kubeconfig={}", k.kubeconfig().display()))
            .arg("get")
            .args(args)
            .args([
                "-w",
                "--output-watch-events",
                "-o",
                "json",
                "--request-timeout=0",
                "-v=6",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let thread = std::thread::spawn({
            let shared = shared.clone();
            move || record(&shared, &mut command, ends)
        });
        Self {
            what,
            shared,
            thread: Some(thread),
        }
    }

    /// Waits until the watch request has been answered; an error names what
    /// kubectl said.
    pub fn wait_started(&self, timeout: Duration) -> Result<(), String> {
        let state = self.wait_until(timeout, |s| s.started || s.ended);
        if state.started {
            return Ok(());
        }
        Err(format!(
            "{} did not start within {timeout:?}; kubectl said:\n{}",
            self.what,
            tail(&state.log)
        ))
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.read(<[Event]>::to_vec)
    }

    /// `f` of the events so far, without copying them.
    pub fn read<R>(&self, f: impl FnOnce(&[Event]) -> R) -> R {
        f(&self.shared.lock().events)
    }

    /// How often the watch was started again.
    pub fn restarts(&self) -> usize {
        self.shared.restarts.load(Ordering::SeqCst)
    }

    /// The first event not yet taken that `wanted` accepts, taking it and
    /// every one before it; `what` names it in the error, which shows the
    /// last event seen and what kubectl said.
    pub fn next(
        &self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&Event) -> bool,
    ) -> Result<Event, String> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            while state.cursor < state.events.len() {
                let event = state.events[state.cursor].clone();
                state.cursor += 1;
                if wanted(&event) {
                    return Ok(event);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if state.ended || left.is_zero() {
                let last = state
                    .events
                    .last()
                    .map(|e| serde_json::to_string_pretty(&e.object).unwrap_or_default())
                    .unwrap_or_default();
                let how = if state.ended {
                    "the watch ended before it was".to_owned()
                } else {
                    format!("within {timeout:?} it was not")
                };
                return Err(format!(
                    "{}: {how} {what}; last seen:\n{last}\nkubectl said:\n{}",
                    self.what,
                    tail(&state.log)
                ));
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Stops the watch; every event it recorded, and how often it was
    /// started again.
    pub fn finish(mut self) -> (Vec<Event>, usize) {
        self.stop();
        let events = std::mem::take(&mut self.shared.lock().events);
        (events, self.restarts())
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        kill(&self.shared);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&State) -> bool,
    ) -> MutexGuard<'_, State> {
        let state = self.shared.lock();
        self.shared
            .changed
            .wait_timeout_while(state, timeout, |s| !done(s))
            .unwrap_or_else(|e| e.into_inner())
            .0
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.lock());
        self.changed.notify_all();
    }
}

/// The recording thread: one kubectl after another, until stopped.
fn record(shared: &Shared, command: &mut Command, ends: Ends) {
    let mut first = true;
    while !shared.stop.load(Ordering::SeqCst) {
        if !first {
            if ends == Ends::Once {
                break;
            }
            shared.restarts.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(RESTART_PAUSE);
        }
        first = false;
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                shared.update(|s| s.log.push_back(format!("starting kubectl: {e}")));
                continue;
            }
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            continue;
        };
        *shared.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        // Stopped while it started: the stop found no child to kill.
        if shared.stop.load(Ordering::SeqCst) {
            kill(shared);
        }
        std::thread::scope(|scope| {
            scope.spawn(|| read_log(shared, stderr));
            let events = serde_json::Deserializer::from_reader(BufReader::new(stdout));
            for event in events.into_iter::<Value>() {
                let Ok(mut event) = event else { break };
                let event = Event {
                    at: Instant::now(),
                    kind: event["type"].as_str().unwrap_or_default().to_owned(),
                    object: event["object"].take(),
                };
                let error = event.kind == "ERROR";
                shared.update(|s| s.events.push(event));
                if error {
                    kill(shared);
                    break;
                }
            }
            // kubectl may still be writing its log; its end ends that too.
            kill(shared);
        });
        if let Some(mut child) = shared
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = child.wait();
        }
    }
    shared.update(|s| s.ended = true);
}

/// Kills the kubectl of the watch now running, if any.
fn kill(shared: &Shared) {
    if let Some(child) = shared
        .child
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
    {
        let _ = child.kill();
    }
}

/// kubectl's `-v=6` log: its last lines, and each watch request answered
/// (`"Response" verb="GET" url="…watch=true…" status="200 OK"`).
fn read_log(shared: &Shared, stderr: std::process::ChildStderr) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let answered = line.contains("watch=true") && line.contains("200 OK");
        shared.update(|s| {
            s.started |= answered;
            if s.log.len() == LOG_LINES {
                s.log.pop_front();
            }
            s.log.push_back(line);
        });
    }
}

fn tail(log: &VecDeque<String>) -> String {
    log.iter().cloned().collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests;
