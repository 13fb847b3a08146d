#!/usr/bin/env bash
# Builds krew, the kubectl plugin manager, from the Go module proxy, pinned to
# the release in hack/krew-version, into a cache outside the source tree. A
# second run returns at once. crates/kubectl-transfer/tests/krew.rs installs our kubectl plugin with it
# from deploy/krew/transfer.yaml, as a user would from the krew index.
#
# A wrapper module requires sigs.k8s.io/krew at the pin and builds its
# cmd/krew. The release's go.mod has no replace directives: its own module
# graph is used as it is. The binary is stamped with the release's tag, as
# krew's own release builds are, so that `krew version` names it.
#
# Prints the path of the krew binary on stdout; everything else goes to stderr.
set -euo pipefail

log() { echo "build-krew: $*" >&2; }
die() { echo "build-krew: error: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"

version="${KREW_VERSION:-$(pin krew-version)}"
[[ "$version" =~ ^v0\.[0-9]+\.[0-9]+$ ]] || die "hack/krew-version must look like v0.4.3, not '$version'"
out="$cache_root/krew/$version"
bin="$out/bin"

if have_bins "$bin" krew; then
  log "using cached krew $version in $bin"
  echo "$bin/krew"
  exit 0
fi

need_go
mkdir -p "$out/src" "$bin"
cd "$out/src"
wrapper_module krew sigs.k8s.io/krew "$version"
log "resolving sigs.k8s.io/krew@$version"
GOFLAGS="-mod=mod" go get "sigs.k8s.io/krew@$version" >&2
GOFLAGS="-mod=mod" go_build "$bin/krew" sigs.k8s.io/krew/cmd/krew \
  "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=$version"
echo "$version" > "$bin/.complete"
echo "$bin/krew"
