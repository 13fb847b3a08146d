#!/usr/bin/env bash
# Builds Prometheus and promtool from the Go module proxy, pinned to the
# module version in hack/prometheus-version (Prometheus 3.x publishes its Go
# module as v0.3xx.y: v0.316.0 is Prometheus 3.16.0), into a cache outside
# the source tree. A second run returns at once. tests/monitoring.rs scrapes
# the test control plane's server with it and checks deploy/monitoring's
# rules with promtool.
#
# Built with the tag remove_all_sd, which Prometheus's plugins/ honour: every
# service discovery but file and http is left out (the test scrapes a static
# target), and with it the cloud SDKs, which are most of the build's time.
# The web UI's assets are not embedded (no builtinassets tag); the HTTP API
# the test queries is all there.
#
# Prints the directory of the binaries on stdout; everything else goes to
# stderr.
set -euo pipefail

log() { echo "build-prometheus: $*" >&2; }
die() { echo "build-prometheus: error: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/lib/gobuild.sh"

version="${PROMETHEUS_VERSION:-$(pin prometheus-version)}"
[[ "$version" =~ ^v0\.3[0-9]{2}\.[0-9]+$ ]] || die "hack/prometheus-version must look like v0.316.0, not '$version'"
out="$cache_root/prometheus/$version"
bin="$out/bin"

if have_bins "$bin" prometheus promtool; then
  log "using cached prometheus $version in $bin"
  echo "$bin"
  exit 0
fi

need_go
mkdir -p "$out/src" "$bin"
cd "$out/src"
export GOWORK=off
wrapper_module prometheus github.com/prometheus/prometheus "$version"
log "resolving github.com/prometheus/prometheus@$version"
GOFLAGS="-mod=mod" go get "github.com/prometheus/prometheus/cmd/prometheus@$version" \
  "github.com/prometheus/prometheus/cmd/promtool@$version" >&2
# v0.316.0 is Prometheus 3.16.0: the version the binaries print.
release="3.$((10#${version:4:2})).${version##*.}"
stamp="-s -w -X github.com/prometheus/common/version.Version=$release"
export GOFLAGS="-mod=mod -tags=remove_all_sd"
go_build "$bin/prometheus" github.com/prometheus/prometheus/cmd/prometheus "$stamp"
go_build "$bin/promtool" github.com/prometheus/prometheus/cmd/promtool "$stamp"
echo "$version" > "$bin/.complete"
echo "$bin"
