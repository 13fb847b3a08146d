#!/usr/bin/env bash
# Builds tests/clientgo, the client-go program tests/client_go.rs drives our
# server with, against the client-go release its go.mod pins (the staging
# version of hack/kube-version's Kubernetes release: v1.36.3 -> v0.36.3),
# into the cache of built binaries outside the source tree. Modules come
# through the Go module proxy, as for the other hack/build-*.sh.
#
# The cache key is a hash of the module's sources, go.mod and go.sum, and the
# Kubernetes release: a second run returns at once, an edit rebuilds.
#
# Prints the binary's path on stdout; everything else goes to stderr.
set -euo pipefail

log() { echo "build-clientgo: $*" >&2; }
die() { echo "build-clientgo: error: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"

kube="${KUBE_VERSION:-$(pin kube-version)}"
src="$(cd "$hack_dir/../tests/clientgo" && pwd)"
hash="$(cd "$src" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"
out="$cache_root/clientgo/kube-$kube-src-$hash"
bin="$out/bin"

if have_bins "$bin" clientgo; then
  log "using the cached client-go test program in $bin"
  echo "$bin/clientgo"
  exit 0
fi

need_go
[[ "$kube" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "hack/kube-version must look like v1.36.3, not '$kube'"
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
# The program tests what clients of the Kubernetes release we run see: its
# client-go must be that release's.
for m in k8s.io/client-go k8s.io/apimachinery k8s.io/api; do
  grep -Eq "^[[:space:]]*(require[[:space:]]+)?$m $staging_version( |$)" "$src/go.mod" \
    || die "tests/clientgo/go.mod does not require $m $staging_version (hack/kube-version is $kube); run: (cd tests/clientgo && go get k8s.io/client-go@$staging_version k8s.io/apimachinery@$staging_version k8s.io/api@$staging_version && go mod tidy)"
done

mkdir -p "$bin"
# go.mod and go.sum are checked in and complete: build with them as they
# are. No VCS stamp: the tree may be a clone git will not read (another owner).
(cd "$src" && GOFLAGS="-mod=readonly -buildvcs=false" go_build "$bin/clientgo" .)
echo "$kube $hash" > "$bin/.complete"
echo "$bin/clientgo"
