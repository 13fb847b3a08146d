//! Many NamespaceTransfers at once (issue 18): 200 pairs filed together all
//! complete, and every volume comes out intact. Its own test binary, so that
//! its load never slows another test's timeouts. Not timed: how fast is the
//! bench's question (`make bench`, docs/benchmarks.md).

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

mod scenario;

use std::time::Duration;

use scenario::ensure_classes;
use scenario::many::Fleet;
use sta_testenv::shared;

const PAIRS: usize = 200;

#[test]
fn two_hundred_pairs_filed_at_once_all_complete_with_every_volume_intact() {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    ensure_classes(cp.kubectl());
    let fleet = Fleet::prepare(cp, "scale", PAIRS);
    let run = fleet.request_all(cp, Duration::from_secs(600));
    assert_eq!(run.latencies.len(), PAIRS);
    fleet.assert_intact(cp.kubectl(), &cp.csi);
    eprintln!(
        "{PAIRS} pairs in {:?}; {:.1} etcd writes per pair",
        run.elapsed, run.writes_per_pair
    );
}
