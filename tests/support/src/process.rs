//! Starting, watching and stopping the component processes.
//!
//! Every component writes stdout and stderr to `<run>/logs/<name>.log`. In
//! attached mode (tests) a watchdog process outlives the test binary just long
//! enough to kill every component, so a panic, an abort or a SIGKILL of the test
//! binary still tears the control plane down. In detached mode (`make dev`) the
//! components outlive us and their pids are recorded under `<run>/pids/`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::{io_err, Error};

/// One running component.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    pub pid: u32,
    pub log: PathBuf,
    child: Option<Child>,
    /// How it was started, so that [`Process::respawn`] can start it again.
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Process {
    /// Starts `program` in its own process group with output to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        env: &[(&str, &str)],
    ) -> Result<Self, Error> {
        let out = File::create(log).map_err(io_err(log))?;
        let err = out.try_clone().map_err(io_err(log))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|e| Error::Spawn {
            component: name.to_owned(),
            program: program.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Self {
            name: name.to_owned(),
            pid: child.id(),
            log: log.to_owned(),
            child: Some(child),
            program: program.to_owned(),
            args: args.to_vec(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        })
    }

    /// SIGKILLs the process if it still runs, then starts it again exactly
    /// as it was started (same flags, so same ports), its earlier log kept
    /// as `<name>.<n>.log`. Does not wait for it to be ready.
    pub fn respawn(&mut self) -> Result<(), Error> {
        if self.child.is_none() {
            // Detached (or already stopped): not ours to start again.
            return Err(Error::Spawn {
                component: self.name.clone(),
                program: self.program.clone(),
                message: "a detached process is not started again by the harness".to_owned(),
            });
        }
        self.kill();
        rotate_log(&self.log)?;
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let fresh = Self::spawn(&self.name, &self.program, &self.args, &self.log, &env)?;
        *self = fresh;
        Ok(())
    }

    /// Whether the process is still running; reaps it if it exited.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => pid_is_running(self.pid),
        }
    }

    /// The exit code, once the process has exited (attached processes only).
    pub fn exit_code(&mut self) -> Option<i32> {
        self.child.as_mut()?.try_wait().ok()??.code()
    }

    /// The exit status, once the process has exited (attached processes only);
    /// reaps it.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok()?
    }

    /// Waits up to `timeout` for the process to exit by itself; its exit code
    /// as a shell reports it ([`status_code`]), or `None` on timeout.
    pub fn wait_for_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status_code(status));
            }
            if self.child.is_none() || Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL now, no grace, and reap. The exit status stays readable.
    /// Does nothing for a process already exited or detached.
    pub fn kill(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log, 30)
    }

    /// Whether its log says a port was already taken.
    pub fn lost_port_race(&self) -> bool {
        // Go says "bind: address already in use", Rust "Address already in use".
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.to_ascii_lowercase().contains("address already in use")
    }

    /// Whether the process gave up on a request to kube-apiserver that
    /// timed out (Go's "context deadline exceeded"), as the snapshot
    /// controller does when listing its CRDs takes more than 30 s on a
    /// loaded machine; a kubelet would restart it.
    pub fn gave_up_on_a_slow_request(&self) -> bool {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.contains("context deadline exceeded")
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for the exit.
    /// Does nothing for a process already stopped or detached.
    pub fn stop(&mut self, grace: Duration) {
        // Only while we still hold the unreaped child is its pid surely ours.
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Already exited and reaped: its pid may belong to someone else now.
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        terminate(self.pid, grace);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Forgets the child handle: the process keeps running after we exit (and
    /// is no longer stopped on drop).
    pub fn detach(&mut self) {
        self.child = None;
    }
}

/// An exit status as a shell reports it: the exit code, or 128 + the signal
/// number for a process killed by a signal (137 for SIGKILL).
pub fn status_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Sends the signal named `name` (`"STOP"`, `"CONT"`, `"KILL"`, …) to `pid`
/// with kill(2), not with a `kill` command: a bare machine may have none
/// (Debian's minimal root has no procps), and a signal that silently was
/// never sent makes a fault test pass without its fault.
pub fn send_signal(pid: u32, name: &str) -> Result<(), String> {
    let signal: Signal = format!("SIG{name}")
        .parse()
        .map_err(|e| format!("no signal SIG{name}: {e}"))?;
    let raw = i32::try_from(pid).map_err(|_| format!("pid {pid} is out of range"))?;
    kill(Pid::from_raw(raw), signal).map_err(|e| format!("SIG{name} to pid {pid}: {e}"))
}

/// SIGTERM to `pid`, without waiting; whether it was delivered.
pub fn sigterm(pid: u32) -> bool {
    send_signal(pid, "TERM").is_ok()
}

/// SIGTERM to `pid`, SIGKILL if it is still alive after `grace`.
pub fn terminate(pid: u32, grace: Duration) {
    let Ok(raw) = i32::try_from(pid) else { return };
    let pid_t = Pid::from_raw(raw);
    if kill(pid_t, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !pid_is_running(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = kill(pid_t, Signal::SIGKILL);
}

/// Whether `pid` is a live process (not a zombie).
pub fn pid_is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) => !rest.trim_start().starts_with(['Z', 'X']),
            None => false,
        },
        Err(_) => false,
    }
}

/// The command line of `pid`, with arguments joined by spaces.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Every live pid whose command line mentions `needle`, except our own.
pub fn pids_mentioning(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| cmdline(*pid).is_some_and(|c| c.contains(needle)))
        .filter(|pid| pid_is_running(*pid))
        .collect()
}

/// Every live process of the control plane whose run directory is `dir`: those
/// whose command line names `dir`, or the etcd data dir recorded in it (which
/// may live on tmpfs, outside `dir`).
pub fn pids_of_run(dir: &Path) -> Vec<u32> {
    let mut pids = pids_mentioning(&format!("{}/", dir.display()));
    if let Ok(data) = std::fs::read_to_string(dir.join("etcd-data.path")) {
        let data = data.trim();
        if !data.is_empty() {
            pids.extend(pids_mentioning(&format!("--data-dir={data}")));
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The last `lines` lines of a log file, read from its end.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    let mut buf = String::new();
    if f.seek(SeekFrom::Start(start)).is_err() || f.read_to_string(&mut buf).is_err() {
        return format!("(unreadable log at {})", path.display());
    }
    let all: Vec<&str> = buf.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// An attached process never outlives its handle: a failed start-up or a
/// panicking test must not leave it running.
impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(2));
    }
}

/// A shell process that kills the registered pids and removes the registered
/// paths when its stdin closes, which happens when the test binary exits in any
/// way, including a panic or SIGKILL.
///
/// Dropping it (the control plane that owns it is done, or failed to start)
/// closes its stdin and waits for it, so that its clean-up is over before the
/// caller goes on; it gives up on the processes it was given within about
/// four seconds (two after SIGTERM, two after SIGKILL).
#[derive(Debug)]
pub struct Watchdog {
    stdin: Option<ChildStdin>,
    child: Child,
}

const WATCHDOG_SCRIPT: &str = r#"
pids=""; paths=""
while read -r kind value; do
  case "$kind" in
    pid) pids="$pids $value" ;;
    unpid) np=""; for p in $pids; do [ "$p" = "$value" ] || np="$np $p"; done; pids="$np" ;;
    path) paths="$paths $value" ;;
  esac
done
[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
i=0
while [ $i -lt 20 ]; do
  alive=""
  for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break
  sleep 0.1; i=$((i+1))
done
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
# A killed process may still be writing until it is gone: wait, then
# remove, and once more for anything it wrote meanwhile.
i=0
while [ $i -lt 20 ]; do
  alive=""
  for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && break
  sleep 0.1; i=$((i+1))
done
for p in $paths; do rm -rf "$p" 2>/dev/null || { sleep 0.2; rm -rf "$p"; }; done
exit 0
"#;

impl Watchdog {
    pub fn start() -> Result<Self, Error> {
        let mut child = Command::new("sh")
            .args(["-c", WATCHDOG_SCRIPT, "sta-testenv-watchdog"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::Spawn {
                component: "watchdog".to_owned(),
                program: PathBuf::from("sh"),
                message: e.to_string(),
            })?;
        let stdin = child.stdin.take().ok_or_else(|| Error::Spawn {
            component: "watchdog".to_owned(),
            program: PathBuf::from("sh"),
            message: "no stdin pipe".to_owned(),
        })?;
        Ok(Self {
            stdin: Some(stdin),
            child,
        })
    }

    /// Kill `pid` when the test binary exits.
    pub fn guard_pid(&mut self, pid: u32) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "pid {pid}");
        }
    }

    /// No longer kill `pid` (it was stopped and reaped; the number may be
    /// reused by an unrelated process).
    pub fn forget_pid(&mut self, pid: u32) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "unpid {pid}");
        }
    }

    /// Remove `path` (no spaces) when the test binary exits.
    pub fn guard_path(&mut self, path: &Path) {
        if let Some(stdin) = &mut self.stdin {
            let _ = writeln!(stdin, "path {}", path.display());
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Moves an existing `<dir>/<name>.log` aside to the first free
/// `<dir>/<name>.<n>.log` (n = 1, 2, …), so that a restarted component keeps
/// its earlier output. Returns where it went, if there was a log.
pub fn rotate_log(log: &Path) -> Result<Option<PathBuf>, Error> {
    if !log.exists() {
        return Ok(None);
    }
    let stem = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    for n in 1.. {
        let old = log.with_file_name(format!("{stem}.{n}.log"));
        if !old.exists() {
            std::fs::rename(log, &old).map_err(io_err(log))?;
            return Ok(Some(old));
        }
    }
    unreachable!("some number is free")
}

/// Spawns `name` until it is ready: on fresh ports (from `args_for`, called
/// once a start) while it loses port races, and again if it gave up on a
/// request that timed out; up to three starts. A component we start is a
/// separate program that must be told its port, so the port is chosen
/// free ([`crate::free_port`]) and the race for it lost now and then is
/// won by a start on another. Logs to `log`; the caller tracks the process.
pub(crate) fn spawn_ready(
    name: &str,
    program: &Path,
    mut args_for: impl FnMut() -> Result<Vec<String>, Error>,
    log: &Path,
    env: &[(&str, &str)],
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<Process, Error> {
    let mut attempt = 1;
    loop {
        let args = args_for()?;
        let mut p = Process::spawn(name, program, &args, log, env)?;
        match wait_ready(&mut p, name, timeout, &mut ready) {
            Ok(()) => return Ok(p),
            Err(e) => {
                let retry = attempt < 3 && (p.lost_port_race() || p.gave_up_on_a_slow_request());
                p.stop(Duration::from_secs(2));
                if !retry {
                    return Err(e);
                }
            }
        }
        attempt += 1;
    }
}

/// Waits until `ready` says `p` (named `name`) is, for at most `timeout`;
/// an error with its log's tail if it exits or the time runs out.
pub(crate) fn wait_ready(
    p: &mut Process,
    name: &str,
    timeout: Duration,
    ready: &mut impl FnMut() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        if !p.is_running() {
            return Err(Error::Exited {
                component: name.to_owned(),
                log: p.log.clone(),
                tail: p.log_tail(),
            });
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("{name} to become ready"),
                timeout,
                log: p.log.clone(),
                tail: p.log_tail(),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
