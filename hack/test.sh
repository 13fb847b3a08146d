#!/usr/bin/env bash
# Runs every test of the workspace and ends with one summary line,
# "tests: N passed, N failed", counted over all test binaries.
#
# STA_TEST_SAMPLE=1 runs every unit test but only the first integration test
# of each test binary (make fresh-check, where the whole suite would not fit
# CI's budget a second time).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
features=(--workspace --locked --features fault-injection)
if [[ "${STA_TEST_SAMPLE:-}" == 1 ]]; then
  cargo test "${features[@]}" --lib --bins "$@" 2>&1 | tee "$log" || status=$?
  # Every integration test binary, as cargo built it.
  mapfile -t binaries < <(cargo test "${features[@]}" --tests --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"target":{[^}]*"kind":\["test"\][^}]*}.*"executable":"\([^"]*\)".*/\1/p')
  ((${#binaries[@]})) || { echo "test: found no integration test binaries" >&2; exit 1; }
  for bin in "${binaries[@]}"; do
    first="$("$bin" --list --format=terse 2>/dev/null | sed -n 's/: test$//p' | sort | head -n1)"
    [[ -n "$first" ]] || continue
    echo "test: $(basename "$bin"): $first"
    "$bin" --exact "$first" 2>&1 | tee -a "$log" || status=$?
  done
else
  cargo test "${features[@]}" --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
fi
read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { print p+0, f+0 }' "$log")
echo "tests: $passed passed, $failed failed"
exit "$status"
