#!/usr/bin/env bash
# CI's last step, in the fresh check's root: the benchmark at a tiny size
# (it must run end to end; its figures are not checked) and `make release`
# (the Dockerfile's command), side by side. The benchmark spends most of its
# time waiting on the control planes it starts, and the release build is
# compute alone, so together they take about as long as the longer of the
# two instead of their sum. The release build uses a target directory of
# its own: cargo locks a target directory for a whole build, and the
# release profile shares no artifacts with the benchmark's dev profile.
#
# The release build's output goes to target/release-check.log, and is
# printed once both have ended; the exit status is the benchmark's failure,
# else the release build's. Interrupted, it stops the release build too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Once, before the two makes that each check it: both then find nothing to
# install, so two apt-gets never race for dpkg's lock.
hack/prereqs.sh

started=$(date +%s)
release=0
mkdir -p target
log="$PWD/target/release-check.log"
CARGO_TARGET_DIR="$PWD/target/release-check" make release > "$log" 2>&1 &
release_pid=$!
trap 'kill "$release_pid" 2>/dev/null; exit 130' INT TERM

bench=0
BENCH_SCALE=0.01 BENCH_PROFILE=dev BENCH_OUT=target/bench-smoke make bench || bench=$?
bench_took=$(($(date +%s) - started))
wait "$release_pid" || release=$?
echo "bench-and-release: the benchmark took ${bench_took}s (exit $bench); both took $(($(date +%s) - started))s; the release build exited $release"
sed 's/^/release: /' "$log"
((bench == 0)) || exit "$bench"
exit "$release"
