# Sourced by hack/build-*.sh: the cache every Go-built binary lives in, the
# pins under hack/, and how a wrapper module takes over a released module's
# replace directives. Nothing here builds anything by itself.

hack_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The cache of built binaries, outside the source tree, keyed by version below.
cache_root="${STA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/storage-transfer-apiserver}"

# pin FILE: the version pinned in hack/FILE, without whitespace.
pin() { tr -d '[:space:]' < "$hack_dir/$1"; }

need_go() {
  command -v go >/dev/null 2>&1 || die "the Go toolchain is missing: install Go 1.26 or newer (https://go.dev/doc/install) and put 'go' on PATH"
}

# gomod_of MODULE VERSION: the path of that release's go.mod in the module
# cache, downloading it on a cold cache.
gomod_of() {
  local path
  path="$(go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$path" ]] || die "could not download the go.mod of $1@$2 (is the Go module proxy reachable?)"
  echo "$path"
}

# published_replaces GOMOD LOCAL_VERSION: the release's replace directives,
# one "OLD => NEW VERSION" per line, fit for a wrapper module. A directive to
# a directory inside the release's repository (./staging/src/k8s.io/api,
# ./client) becomes the published module of the same path at LOCAL_VERSION;
# one to ./FORBIDDEN_DEPENDENCY (a guard, not a module) is dropped.
published_replaces() {
  awk -v local_version="$2" '
    function emit(line,   parts, n) {
      n = split(line, parts, /[[:space:]]+/)
      # parts: OLD [OLDVERSION] => NEW [NEWVERSION]
      for (i = 1; i <= n; i++) if (parts[i] == "=>") break
      old = parts[1]; new = parts[i + 1]; ver = parts[i + 2]
      if (new ~ /FORBIDDEN_DEPENDENCY/) return
      if (new ~ /^\.\.?\//) { new = old; ver = local_version }
      print old " => " new " " ver
    }
    /^replace[[:space:]]*\($/ { block = 1; next }
    block && /^\)/ { block = 0; next }
    block && /=>/ { line = $0; sub(/^[[:space:]]+/, "", line); sub(/[[:space:]]*\/\/.*$/, "", line); emit(line); next }
    /^replace[[:space:]]+[^(]/ { line = $0; sub(/^replace[[:space:]]+/, "", line); sub(/[[:space:]]*\/\/.*$/, "", line); emit(line) }
  ' "$1"
}

# have_bins DIR NAME...: whether DIR holds every NAME and the marker that a
# build into it finished.
have_bins() {
  local dir="$1" c
  shift
  for c in "$@"; do [[ -x "$dir/$c" ]] || return 1; done
  [[ -f "$dir/.complete" ]]
}

# go_build OUT PACKAGE [LDFLAGS]: a static, trimmed build, moved into place
# only once it succeeded, so that an interrupted build never leaves a
# half-written binary that looks complete.
go_build() {
  local out="$1" pkg="$2" ldflags="${3:--s -w}" start
  start=$(date +%s)
  log "building $(basename "$out") from $pkg"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg" >&2
  mv "$out.tmp" "$out"
  log "built $(basename "$out") in $(( $(date +%s) - start ))s"
}
