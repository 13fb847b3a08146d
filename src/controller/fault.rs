//! Fault injection for the crash tests, compiled in only with the
//! `fault-injection` cargo feature (which `make test` enables and a release
//! build does not). Without it every hook here is an empty inline function.
//!
//! - `STA_FAULT_EXIT_AFTER=R3` makes the process exit at once, with
//!   [`FAULT_EXIT_CODE`], right after the controller has completed step R3 of
//!   a transfer: no destructor, no graceful shutdown, no lease resignation, as
//!   if the machine had lost power. `C2` (a wait, with no write) exits once
//!   the clone is seen Bound, before R1.
//! - `STA_FAULT_PAUSE_BEFORE=R4:3000` makes the controller sleep 3000 ms just
//!   before step R4, so that a test can change the world in between.
//!   `R1-count` is a point inside a standing offer's pair's R1: after the
//!   offer's write of the pair's record and count, before the request's
//!   state (R1's second write). `Populate` is right after a standing
//!   populating request made a request for one of its claims.
//! - `STA_FAULT_UNHEARD_KEY_LOSS=1` makes the leadership's watch of its
//!   election key never end the term when the key goes, as if the watch's
//!   round trip took forever: `check` goes on passing, so the controllers'
//!   next write of our objects reaches etcd and is refused by its fence
//!   (the window `leader`'s module docs describe), and that refusal ends
//!   the term.

use super::transfer::Step;

/// The exit code of an injected crash.
pub const FAULT_EXIT_CODE: i32 = 86;

/// Called right after `step` is done.
pub fn after(step: Step) {
    after_named(step.name());
}

/// Called right after the step named `name` is done; also for a step with no
/// write of its own, such as C2 (a wait), which ends when it is seen done.
#[cfg(feature = "fault-injection")]
pub fn after_named(name: &str) {
    if std::env::var("STA_FAULT_EXIT_AFTER").ok().as_deref() == Some(name) {
        eprintln!("fault injection: exiting right after step {name}");
        std::process::exit(FAULT_EXIT_CODE);
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn after_named(_name: &str) {}

/// Called at the boundary after write `n` (from 1) of the plan of the
/// action `label`; `names` are the points the boundary also is (`R4`,
/// `R1-count`). Exits or pauses as the environment says.
#[cfg(feature = "fault-injection")]
pub async fn at_boundary(label: &str, n: usize, names: impl Iterator<Item = &'static str>) {
    let boundary = format!("{label}#{n}");
    let names: Vec<&str> = names.collect();
    if let Ok(exit) = std::env::var("STA_FAULT_EXIT_AFTER") {
        // Two reconciles at two new boundaries at once would both list
        // theirs, and the process would exit for one: the first to take
        // this lists its boundary and exits holding it.
        static CROSSING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _crossing = CROSSING.lock().unwrap_or_else(|p| p.into_inner());
        let first_time_here = exit.strip_prefix("*:").is_some_and(|crossed| {
            // One line per boundary already crashed at: `<boundary> <names>`.
            let done = std::fs::read_to_string(crossed).unwrap_or_default();
            let seen = done
                .lines()
                .any(|line| line.split(' ').next() == Some(boundary.as_str()));
            if !seen {
                use std::io::Write as _;
                let line = std::iter::once(boundary.as_str())
                    .chain(names.iter().copied())
                    .collect::<Vec<_>>()
                    .join(" ");
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(crossed)
                    .and_then(|mut f| writeln!(f, "{line}"));
            }
            !seen
        });
        if first_time_here || exit == boundary || names.contains(&exit.as_str()) {
            eprintln!("fault injection: exiting at {boundary} {names:?}");
            std::process::exit(FAULT_EXIT_CODE);
        }
    }
    for name in names.iter().copied().chain([boundary.as_str()]) {
        before_named(name).await;
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub async fn at_boundary(_label: &str, _n: usize, _names: impl Iterator<Item = &'static str>) {}

/// Whether [`before`] pauses before `step`.
#[cfg(feature = "fault-injection")]
pub fn pauses_before(step: Step) -> bool {
    std::env::var("STA_FAULT_PAUSE_BEFORE")
        .ok()
        .and_then(|spec| spec.split_once(':').map(|(name, _)| name == step.name()))
        .unwrap_or(false)
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn pauses_before(_step: Step) -> bool {
    false
}

/// Called right before `step` starts.
pub async fn before(step: Step) {
    before_named(step.name()).await;
}

/// Called right before the point named `name`: a step, or a point inside
/// one, such as `R1-count`.
#[cfg(feature = "fault-injection")]
pub async fn before_named(name: &str) {
    let Ok(spec) = std::env::var("STA_FAULT_PAUSE_BEFORE") else {
        return;
    };
    let Some((at, millis)) = spec.split_once(':') else {
        return;
    };
    if at == name {
        if let Ok(millis) = millis.parse::<u64>() {
            tracing::warn!(step = name, millis, "fault injection: pausing");
            tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub async fn before_named(_name: &str) {}

/// Whether the leadership's watch is to leave a lost election key unheard
/// (`STA_FAULT_UNHEARD_KEY_LOSS=1`).
#[cfg(feature = "fault-injection")]
pub fn key_loss_unheard() -> bool {
    std::env::var("STA_FAULT_UNHEARD_KEY_LOSS").is_ok_and(|v| v == "1")
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn key_loss_unheard() -> bool {
    false
}
