#!/usr/bin/env bash
# Runs every test of the workspace and ends with one summary line,
# "tests: N passed, N failed", counted over all test binaries.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast --features fault-injection "$@" 2>&1 | tee "$log" || status=$?
read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { print p+0, f+0 }' "$log")
echo "tests: $passed passed, $failed failed"
exit "$status"
