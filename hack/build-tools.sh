#!/usr/bin/env bash
# make tools: every pinned component built from the Go module proxy (etcd,
# Kubernetes, the CSI stack, the client-go test program, krew, Prometheus,
# Helm), all at once. On a cold machine most of a build is waiting: for the
# module proxy while `go get` resolves and downloads, and for one linker
# thread at the end. Run side by side, one build's downloads and link
# overlap the others' compiling, and the Go build cache (safe for concurrent
# use) compiles a module shared by two of them once. On a warm cache each
# script returns at once.
#
# Each script's log lines carry its name. Ends with how long each took; the
# exit status is non-zero if any build failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

builds=(etcd kube csi clientgo krew prometheus helm)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Interrupted, the whole process group goes: the scripts and their go.
trap 'trap - INT TERM; kill 0; exit 130' INT TERM

started=$(date +%s)
for b in "${builds[@]}"; do
  (
    t=$(date +%s)
    status=0
    ./"build-$b.sh" > /dev/null || status=$?
    echo "$status $(($(date +%s) - t))" > "$out/$b"
  ) &
done
wait

failed=()
for b in "${builds[@]}"; do
  read -r status took < "$out/$b"
  echo "build-tools: $b ${took}s$( ((status == 0)) || echo ", failed (exit $status)")" >&2
  ((status == 0)) || failed+=("$b")
done
echo "build-tools: $(($(date +%s) - started))s in all" >&2
if ((${#failed[@]})); then
  echo "build-tools: error: failed: ${failed[*]} (their output is above)" >&2
  exit 1
fi
