//! Building blocks of the crash tests: a private control plane whose
//! server leads again within seconds of a restart, restarts with a fault in
//! the server's environment, and the loop that crashes the server once at
//! every boundary between two writes that it has not crashed at yet.
//!
//! Only with this crate's `fault-injection` feature, which the server's
//! feature of the same name turns on: a server built without it ignores
//! the faults these restarts ask for.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::{ControlPlane, Kubectl, Options};

/// The exit code of an injected crash (src/controller/fault.rs).
pub const FAULT_EXIT_CODE: i32 = 86;
/// A short lease, so that a restarted server leads again within seconds.
const LEASE: &str = "--leader-elect-lease-duration=2s";

/// A control plane of its own for a crash test binary, whose server
/// (`server_bin`) is restarted at will.
pub fn private_control_plane(server_bin: &str) -> ControlPlane {
    let mut opts = Options::for_tests(server_bin);
    opts.server_args.push(LEASE.to_owned());
    let cp = ControlPlane::start(opts).unwrap_or_else(|e| panic!("{e}"));
    super::ensure_classes(cp.kubectl());
    cp
}

/// `pairs` as the environment a server is started with.
pub fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Restarts the server with `fault` in its environment (or none).
pub fn restart(cp: &ControlPlane, fault: &[(&str, &str)]) {
    cp.restart_server(&[], &env(fault))
        .unwrap_or_else(|e| panic!("restarting the server: {e}"));
}

/// The `STA_FAULT_EXIT_AFTER` that crashes the server once at each
/// boundary `crossed` does not list yet, and adds it there.
pub fn every_new_boundary(crossed: &Path) -> String {
    format!("*:{}", crossed.display())
}

/// Pairs, each made by `setup`, begun by `begin` and checked by `done`
/// once it settled, with the server crashing once at each boundary
/// `crossed` does not list yet, until one pair crosses no new boundary (a
/// crash may keep a later boundary of the same action from being reached:
/// the next decision goes on from the first write). The crashes and the
/// pairs.
pub fn crash_each_new_boundary_of<S>(
    cp: &ControlPlane,
    crossed: &Path,
    setup: impl Fn() -> S,
    begin: impl Fn(&Kubectl, &S),
    done: impl Fn(S),
) -> (usize, usize) {
    let spec = every_new_boundary(crossed);
    let every = [("STA_FAULT_EXIT_AFTER", spec.as_str())];
    let (mut crashes, mut transfers) = (0, 0);
    // A server that makes no new write for `quiet` has nothing left to
    // write. A restarted server leads and crashes within about 2 s (its
    // predecessor's lease is 2 s); `quiet` stays three times the longest
    // wait for a crash seen, so a slow machine widens it.
    let mut quiet = Duration::from_secs(8);
    loop {
        transfers += 1;
        assert!(transfers <= 10, "still new boundaries after 10 transfers");
        restart(cp, &every);
        let s = setup();
        begin(cp.direct(), &s);
        let before = crashes;
        let mut since = Instant::now();
        while let Some(code) = cp.wait_for_server_exit(quiet) {
            assert_eq!(code, FAULT_EXIT_CODE, "after {crashes} crashes");
            quiet = quiet.max(since.elapsed() * 3);
            crashes += 1;
            assert!(crashes < 300, "the transfers never settle");
            restart(cp, &every);
            since = Instant::now();
        }
        restart(cp, &[]);
        done(s);
        if crashes == before {
            return (crashes, transfers);
        }
    }
}
