#!/usr/bin/env bash
# Builds Helm v4 from the Go module proxy, pinned to the release in
# hack/helm-version, into a cache outside the source tree. A second run
# returns at once. tests/helm.rs lints and renders
# deploy/helm/storage-transfer-apiserver with it.
#
# A wrapper module requires helm.sh/helm/v4 at the pin and builds its
# cmd/helm; the release's go.mod has no replace directives. The binary is
# stamped with the release's tag, as Helm's own release builds are, so that
# `helm version` names it.
#
# Prints the path of the helm binary on stdout; everything else goes to stderr.
set -euo pipefail

log() { echo "build-helm: $*" >&2; }
die() { echo "build-helm: error: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"

version="${HELM_VERSION:-$(pin helm-version)}"
[[ "$version" =~ ^v4\.[0-9]+\.[0-9]+$ ]] || die "hack/helm-version must look like v4.3.2, not '$version'"
out="$cache_root/helm/$version"
bin="$out/bin"

if have_bins "$bin" helm; then
  log "using cached helm $version in $bin"
  echo "$bin/helm"
  exit 0
fi

need_go
mkdir -p "$out/src" "$bin"
cd "$out/src"
export GOWORK=off
wrapper_module helm helm.sh/helm/v4 "$version"
log "resolving helm.sh/helm/v4@$version"
GOFLAGS="-mod=mod" go get "helm.sh/helm/v4/cmd/helm@$version" >&2
GOFLAGS="-mod=mod" go_build "$bin/helm" helm.sh/helm/v4/cmd/helm \
  "-s -w -X helm.sh/helm/v4/internal/version.version=$version"
echo "$version" > "$bin/.complete"
echo "$bin/helm"
