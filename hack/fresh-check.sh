#!/usr/bin/env bash
# make fresh-check: runs the README's commands as a new user would, on a bare
# Debian root, because a warm machine hides missing install steps (it hid
# libprotobuf-dev once). CI runs its whole suite here, and only here.
#
# 1. Builds a minimal root of the Debian release this machine runs
#    (mmdebstrap, from this machine's own apt sources), with only what a fresh
#    machine of this project's kind has besides the toolchains: a C compiler,
#    make, git and CA certificates.
# 2. Mounts the toolchains read-only (Go's GOROOT, rustup's toolchains and
#    cargo's binaries) and shares only pure download and build caches (cargo's
#    registry, Go's module and build caches). The project's cache of built
#    binaries and target/ are never shared: inside, everything is built afresh.
# 3. In a clone of the commit under test ($FRESH_CHECK_REF, default HEAD):
#      make dev            and the README's demo transfer, until both sides
#                          are Completed and dev/db is Bound
#      the README's plugin commands, which move the volume back
#      make down           then checks that nothing of it still runs
#      make test           the whole suite; STA_TEST_SAMPLE=1 make fresh-check
#                          runs only every unit test and the first
#                          integration test of each test binary (a quicker
#                          local check; CI never samples)
#    then each argument, a shell command run in the clone in the same way
#    (.ci/run passes the tiny benchmark and the release build).
# 4. Kills whatever still runs in the root, unmounts it and removes it, also
#    when a step fails.
#
# Each step's start is logged as it begins, and a table of every step's
# duration ends the run, whether it passed or not.
#
# Needs root (chroot and bind mounts) and mmdebstrap (installed with apt-get
# when missing). Exit code 0 only if every step passed.
set -euo pipefail

log() { echo "fresh-check: $*" >&2; }
die() { echo "fresh-check: error: $*" >&2; exit 1; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ref="${FRESH_CHECK_REF:-HEAD}"
work="${FRESH_CHECK_DIR:-/var/tmp/sta-fresh-check-$$}"
root="$work/root"

[[ "$(id -u)" == 0 ]] || die "needs root, for chroot and bind mounts (run it as root, as CI does)"
command -v go >/dev/null || die "go is not on PATH: the check mounts this machine's Go toolchain"
command -v cargo >/dev/null || die "cargo is not on PATH: the check mounts this machine's Rust toolchain"
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2
fi

goroot="$(go env GOROOT)"
gomodcache="$(go env GOMODCACHE)"
gocache="$(go env GOCACHE)"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
[[ -d "$rustup_home/toolchains" ]] || die "no rustup toolchains in $rustup_home"
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[[ -n "$suite" ]] || die "cannot tell which Debian release this machine runs (/etc/os-release)"

# Everything mounted into the root, as "host-path root-path mode".
mounts=(
  "$goroot /usr/local/go ro"
  "$rustup_home /root/.rustup ro"
  "$cargo_home/bin /root/.cargo/bin ro"
  "$cargo_home/registry /root/.cargo/registry rw"
  "$gomodcache /root/go/pkg/mod rw"
  "$gocache /root/.cache/go-build rw"
)

# phase NAME: logs that the step NAME starts, and ends the step before it;
# phase_table prints how long each took.
phase_start=$(date +%s)
phase_names=()
phase_starts=()
phase() {
  local now
  now=$(date +%s)
  phase_names+=("$*")
  phase_starts+=("$now")
  log "[$((now - phase_start))s] $*"
}
phase_table() {
  local i end now
  now=$(date +%s)
  ((${#phase_names[@]})) || return 0
  log "steps, in order (${1:-}):"
  for i in "${!phase_names[@]}"; do
    end="${phase_starts[$((i + 1))]:-$now}"
    log "$(printf '%6d s  %s' "$((end - phase_starts[i]))" "${phase_names[i]}")"
  done
  log "$(printf '%6d s  in all' "$((now - phase_start))")"
}

# Undo everything, whatever state the run is in. Nothing under $root is
# removed while anything is still mounted there: a shared cache is mounted
# read-write, and rm -rf through it would empty it.
cleanup() {
  local status=$? pid left
  set +e
  if ((status != 0)); then
    if ((${#phase_names[@]})); then
      log "failed with exit $status in the step: ${phase_names[${#phase_names[@]} - 1]}"
    else
      log "failed with exit $status before the first step"
    fi
  fi
  phase "cleaning up"
  if [[ -d "$root" ]]; then
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
      [[ "$(readlink "/proc/$pid/root" 2>/dev/null)" == "$root" ]] && kill -KILL "$pid" 2>/dev/null
    done
    sleep 1
    # Deepest first.
    for m in $(findmnt -rn -o TARGET | grep -F "$root" | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    done
    left="$(findmnt -rn -o TARGET | grep -F "$root" || true)"
    if [[ -n "$left" ]]; then
      log "left $work in place: still mounted there: $left"
    else
      rm -rf "$work"
    fi
  fi
  phase_table "$( ((status == 0)) && echo passed || echo "failed, exit $status")"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# interruptible COMMAND...: runs COMMAND and waits for it so that a signal to
# this script is handled at once (bash runs a trap only once the foreground
# command ends, and a step may take twenty minutes): .ci/run stops the check
# this way when lint, which runs beside it, fails.
interruptible() {
  "$@" <&0 &
  wait "$!"
}

mkdir -p "$work"
phase "building a bare Debian $suite root in $root"
sources=()
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do sources+=("$f"); done
shopt -u nullglob
if ((${#sources[@]})); then
  cat "${sources[@]}" > "$work/sources"
else
  grep -E '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list > "$work/sources" || die "no apt sources on this machine"
fi
interruptible mmdebstrap --quiet --variant=minbase \
  --include=ca-certificates,git,make,gcc,g++,libc6-dev \
  "$suite" "$root" - < "$work/sources" >&2

for m in "${mounts[@]}"; do
  read -r from to mode <<< "$m"
  [[ -d "$from" ]] || mkdir -p "$from"
  mkdir -p "$root$to"
  mount --bind "$from" "$root$to"
  [[ "$mode" == ro ]] && mount -o remount,bind,ro "$root$to"
done
# The machine's own trust anchors: a machine of this kind reaches the
# package registries through a TLS proxy whose CA its trust store holds, and a
# fresh one would hold it too. Each certificate of this machine's bundle that
# the root's lacks goes where update-ca-certificates keeps local ones.
awk -v dir="$root/usr/local/share/ca-certificates" '
  /BEGIN CERTIFICATE/ { n++; file = sprintf("%s/machine-%03d.crt", dir, n) }
  file { print > file }
  /END CERTIFICATE/ { close(file); file = "" }
' /etc/ssl/certs/ca-certificates.crt
for f in "$root"/usr/local/share/ca-certificates/machine-*.crt; do
  if grep -qF -- "$(sed -n '2p' "$f")" "$root/etc/ssl/certs/ca-certificates.crt" \
    && grep -qF -- "$(sed -n '3p' "$f")" "$root/etc/ssl/certs/ca-certificates.crt"; then
    rm -f "$f"
  fi
done
chroot "$root" update-ca-certificates >/dev/null
log "trusting $(ls "$root"/usr/local/share/ca-certificates | wc -l) certificate(s) of this machine that Debian's bundle lacks"

mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
mount -t sysfs sysfs "$root/sys"
# Name resolution as the machine has it, like any new machine: its DNS, and
# /etc/hosts, where localhost (which the loopback APIService points at) is.
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp /etc/hosts "$root/etc/hosts"

phase "cloning $ref"
git -C "$repo" rev-parse --verify "$ref^{commit}" >/dev/null || die "$ref is not a commit"
commit="$(git -C "$repo" rev-parse "$ref^{commit}")"
git clone --quiet --no-local --no-checkout "$repo" "$root/work/clone"
git -C "$root/work/clone" checkout --quiet "$commit"
log "checked out $commit"

# in_root SCRIPT: runs SCRIPT with bash in the clone, as a new user's shell
# would: a clean environment with the toolchains on PATH.
in_root() {
  interruptible chroot "$root" /usr/bin/env -i \
    HOME=/root \
    PATH=/root/.cargo/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUSTUP_HOME=/root/.rustup CARGO_HOME=/root/.cargo \
    LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
    STA_TEST_SAMPLE="${STA_TEST_SAMPLE:-}" STA_TEST_JOBS="${STA_TEST_JOBS:-}" \
    CARGO_TERM_COLOR=never CARGO_TERM_PROGRESS_WHEN=never \
    /bin/bash -euo pipefail -c "cd /work/clone && $1"
}

# The README's demo transfer, exactly as the README shows it.
demo="$(awk '/^kubectl apply -f - <<.YAML.$/ { on = 1 } on { print } on && /^YAML$/ { exit }' "$root/work/clone/README.md")"
[[ -n "$demo" ]] || die "the README has no demo transfer (kubectl apply -f - <<'YAML' … YAML)"

phase "make dev"
in_root "make dev"

phase "the README's demo transfer"
in_root "export KUBECONFIG=\$PWD/.dev/kubeconfig
# The pinned kubectl, as make dev's next steps alias it.
kubectl() { /root/.cache/storage-transfer-apiserver/kube/*/bin/kubectl \"\$@\"; }
$demo
kubectl wait --for=jsonpath='{.status.phase}'=Completed nst/db-to-dev -n prod --timeout=60s
kubectl wait --for=jsonpath='{.status.phase}'=Completed nst/db-from-prod -n dev --timeout=60s
kubectl wait --for=jsonpath='{.status.phase}'=Bound pvc/db -n dev --timeout=60s
kubectl get nst -A
kubectl get pvc -n dev db"

# The README's plugin commands: the demo volume moves back, through kubectl.
plugin="$(awk '/^export PATH=.PWD\/target\/debug:.PATH$/ { on = 1 } on && /^```$/ { exit } on { print }' "$root/work/clone/README.md")"
[[ -n "$plugin" ]] || die "the README has no plugin commands (export PATH=\$PWD/target/debug:\$PATH …)"

phase "the README's plugin commands"
in_root "export KUBECONFIG=\$PWD/.dev/kubeconfig
kubectl() { /root/.cache/storage-transfer-apiserver/kube/*/bin/kubectl \"\$@\"; }
$plugin
kubectl wait --for=jsonpath='{.status.phase}'=Bound pvc/db -n prod --timeout=60s"

phase "make down"
in_root "make down"
running=""
for pid in $(ls /proc | grep -E '^[0-9]+$'); do
  [[ "$(readlink "/proc/$pid/root" 2>/dev/null)" == "$root" ]] && running+=" $pid:$(tr '\0' ' ' < "/proc/$pid/cmdline" | cut -c1-80)"
done
[[ -z "$running" ]] || die "make down left processes running:$running"
sockets="$(find "$root/work/clone/.dev" -type s 2>/dev/null || true)"
[[ -z "$sockets" ]] || die "make down left sockets behind: $sockets"

if [[ "${STA_TEST_SAMPLE:-}" == 1 ]]; then
  phase "make test, sampled (STA_TEST_SAMPLE=1: every unit test, and the first integration test of each test binary)"
else
  phase "make test, the whole suite"
fi
in_root "make test"

for step in "$@"; do
  phase "$step"
  in_root "$step"
done
log "passed: make dev, the demo transfer, make down, make test${*:+ and $# more step(s)} on a bare Debian $suite root, at $commit"
