//! Many NamespaceTransfers at once (issue 18): 200 pairs filed together all
//! complete, and every volume comes out intact. Its own test binary, so that
//! its load never slows another test's timeouts. Not timed: how fast is the
//! bench's question (`make bench`, docs/benchmarks.md).
//!
//! Under `STA_TEST_SAMPLE=1` (a quick local check, which runs one test of
//! each binary only to show its environment installs and starts) it files
//! ten pairs: the full run of `make test`, CI's, is the one that files 200.

#![allow(clippy::unwrap_used)] // Tests fail by panicking.

use std::time::Duration;

use sta_testenv::scenario::ensure_classes;
use sta_testenv::scenario::many::Fleet;
use sta_testenv::shared;

const PAIRS: usize = 200;
const SAMPLE_PAIRS: usize = 10;

fn pairs() -> usize {
    if std::env::var("STA_TEST_SAMPLE").as_deref() == Ok("1") {
        SAMPLE_PAIRS
    } else {
        PAIRS
    }
}

#[test]
fn two_hundred_pairs_filed_at_once_all_complete_with_every_volume_intact() {
    let cp = shared(env!("CARGO_BIN_EXE_storage-transfer-apiserver"));
    ensure_classes(cp.kubectl());
    let pairs = pairs();
    let fleet = Fleet::prepare(cp, "scale", pairs);
    let run = fleet.request_all(cp, Duration::from_secs(600));
    assert_eq!(run.latencies.len(), pairs);
    fleet.assert_intact(cp.kubectl(), &cp.csi);
    eprintln!(
        "{pairs} pairs in {:?}; {:.1} etcd writes per pair",
        run.elapsed, run.writes_per_pair
    );
}
