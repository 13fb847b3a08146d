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
# Both outputs are printed whole once both have ended; the exit status is
# the first failure's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

started=$(date +%s)
release=0
CARGO_TARGET_DIR="$PWD/target/release-check" make release > "$out/release.log" 2>&1 &
release_pid=$!

bench=0
BENCH_SCALE=0.01 BENCH_PROFILE=dev BENCH_OUT=target/bench-smoke make bench || bench=$?
bench_took=$(($(date +%s) - started))
wait "$release_pid" || release=$?
echo "bench-and-release: the benchmark took ${bench_took}s (exit $bench); make release ended ${bench_took}s in or later (exit $release), $(($(date +%s) - started))s in all"
sed 's/^/release: /' "$out/release.log"
((bench == 0)) || exit "$bench"
exit "$release"
