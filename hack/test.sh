#!/usr/bin/env bash
# Runs every test of the workspace and ends with one summary line,
# "tests: N passed, N failed", counted over all test binaries.
#
# The test binaries run STA_TEST_JOBS at a time (default 2), the heaviest
# first. An integration binary spends most of its time waiting on its own
# control plane (transfer_crash alone keeps two cores a third busy), and each
# binary starts its own control plane on ports it picks, in directories named
# after it, so two binaries never share anything. A binary's output is printed
# whole when it ends, so outputs never interleave. STA_TEST_JOBS=1 runs them
# one after another, as `cargo test` does.
#
# STA_TEST_SAMPLE=1 runs every unit test but only the first integration test
# of each test binary: a quicker local check (also `STA_TEST_SAMPLE=1 make
# fresh-check`); CI runs the whole suite. A test may run smaller under it:
# the scale test files 10 pairs instead of 200.
#
# It ends with a table of the test binaries by wall time, slowest first, with
# their sum and the wall time of the whole run, so a slow binary shows.
#
# Arguments go to every test binary (a name filter, --skip NAME, ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

parallel="${STA_TEST_JOBS:-2}"
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "test: STA_TEST_JOBS must be a positive number, not '$parallel'" >&2; exit 2; }
sample="${STA_TEST_SAMPLE:-}"
features=(--workspace --locked --features fault-injection)
# The slowest binaries by name, longest first: started first, they do not
# leave one job running alone at the end.
heaviest=(fairness transfer_crash snapshot_crash client_go storage_transfer_apiserver transfer_scale transfer chaos etcd_cluster ephemeral_claim hostile testenv)

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# Build everything first: a compile error is reported once, by cargo.
cargo test "${features[@]}" --no-run

# Every test harness cargo built, as "kind<TAB>package directory<TAB>executable"
# (sed, not a JSON tool: the fresh-check's bare root has neither python nor jq).
cargo test "${features[@]}" --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"target":{\([^}]*\)}.*"profile":{[^}]*"test":true[^}]*}.*"executable":"\([^"]*\)".*/\2\t\1\t\3/p' \
  | sed 's/^[^\t]*"kind":\["test"\][^\t]*\t/integration\t/; s/^[^\t]*"kind":[^\t]*\t/unit\t/' > "$out/binaries"
[[ -s "$out/binaries" ]] || { echo "test: cargo built no test binaries" >&2; exit 1; }

# Heaviest first, then the rest in cargo's order.
{
  for name in "${heaviest[@]}"; do
    awk -F'\t' -v n="$name" '{ b = $3; sub(".*/", "", b); sub("-[0-9a-f]+$", "", b); if (b == n) print }' "$out/binaries"
  done
  cat "$out/binaries"
} | awk '!seen[$0]++' > "$out/order"

# run INDEX KIND DIR EXECUTABLE: one binary, as cargo would run it (from its
# package's directory), its output kept in $out/INDEX.log and printed whole.
run() {
  local i="$1" kind="$2" dir="$3" bin="$4" first status=0 started took
  local args=("${@:5}")
  started=$(date +%s)
  {
    if [[ "$sample" == 1 && "$kind" == integration ]]; then
      first="$("$bin" --list --format=terse 2>/dev/null | sed -n 's/: test$//p' | sort | head -n1)"
      if [[ -n "$first" ]]; then
        echo "test: sampled: $first"
        (cd "$dir" && "$bin" --exact "$first") || status=$?
      fi
    else
      (cd "$dir" && "$bin" "${args[@]}") || status=$?
    fi
  } > "$out/$i.body" 2>&1
  echo "$status" > "$out/$i.rc"
  took=$(($(date +%s) - started))
  printf '%s\t%s\t%s\n' "$took" "$(basename "$bin" | sed 's/-[0-9a-f]*$//')" "$status" > "$out/$i.time"
  {
    echo "test: $(basename "$bin") ($took s, exit $status)"
    cat "$out/$i.body"
  } > "$out/$i.log"
  flock "$out/print.lock" cat "$out/$i.log"
}

# busy_idle: the machine's busy and idle CPU ticks since boot (/proc/stat),
# so that the table can say how busy the cores were: near 100%, more jobs
# would not finish sooner.
busy_idle() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat; }

trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
run_started=$(date +%s)
read -r busy_before idle_before < <(busy_idle)
i=0
while IFS=$'\t' read -r kind dir bin; do
  i=$((i + 1))
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  run "$i" "$kind" "$dir" "$bin" "$@" &
done < "$out/order"
wait

# Doc tests have no binary of their own to run; cargo runs them.
if [[ "$sample" != 1 ]]; then
  doc=0
  doc_started=$(date +%s)
  cargo test "${features[@]}" --doc -- "$@" > "$out/doc.log" 2>&1 || doc=$?
  echo "$doc" > "$out/doc.rc"
  printf '%s\t%s\t%s\n' "$(($(date +%s) - doc_started))" "(doc tests)" "$doc" > "$out/doc.time"
  cat "$out/doc.log"
fi
wall=$(($(date +%s) - run_started))
read -r busy_after idle_after < <(busy_idle)
busy=$((busy_after - busy_before))
idle=$((idle_after - idle_before))

# Wall time by binary, slowest first. Binaries of one name (the unit tests of
# several crates) stay apart; the sum over all exceeds the wall time by the
# overlap of the STA_TEST_JOBS that ran at once.
echo "test: wall time by test binary, slowest first ($parallel at a time):"
sort -t$'\t' -k1,1nr "$out"/*.time | awk -F'\t' '
  { printf "test:   %6d s  %s%s\n", $1, $2, ($3 == 0 ? "" : " (exit " $3 ")"); sum += $1 }
  END { printf "test:   %6d s  sum\n", sum }'
echo "test:   $(printf '%6d' "$wall") s  wall, from the first binary to the last; the cores were $((100 * busy / (busy + idle > 0 ? busy + idle : 1)))% busy"

status=0
for rc in "$out"/*.rc; do
  [[ "$(cat "$rc")" == 0 ]] || status=1
done
read -r passed failed < <(cat "$out"/*.log | awk '/^test result:/ { p += $4; f += $6 } END { print p+0, f+0 }')
ran=$(ls "$out"/[0-9]*.rc | wc -l)
expected=$(wc -l < "$out/order")
if ((ran != expected)); then
  echo "test: only $ran of $expected test binaries reported" >&2
  status=1
fi
echo "tests: $passed passed, $failed failed"
exit "$status"
