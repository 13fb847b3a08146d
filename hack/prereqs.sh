#!/usr/bin/env bash
# Checks (and where it can, installs) what `make dev` and `make test` need:
# Rust's cargo, Go >= the version the pinned releases ask for (etcd, Kubernetes
# and the CSI stack are built with it, by hack/build-*.sh), and for etcd-client's
# build protoc with the well-known .proto files it imports.
#
# Missing Debian packages are installed with apt-get when running as root (as
# CI does); otherwise the exact command to run is printed and we exit non-zero.
#
# --fresh-check also installs what make fresh-check needs (mmdebstrap), in the
# same apt-get run: .ci/run installs everything at once, before lint and the
# fresh check run side by side, so two apt-gets never race for dpkg's lock.
set -euo pipefail

fresh_check=""
case "${1:-}" in
  "") ;;
  --fresh-check) fresh_check=1 ;;
  *) echo "prereqs: unknown argument '$1' (the only one is --fresh-check)" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
missing=()
apt_packages=()

need_go="1.26"

if ! command -v cargo >/dev/null 2>&1; then
  missing+=("cargo (Rust toolchain): install it with rustup, https://rustup.rs")
fi

if ! command -v go >/dev/null 2>&1; then
  missing+=("go $need_go or newer: https://go.dev/doc/install (Debian's golang package is too old)")
else
  have_go="$(go env GOVERSION | sed 's/^go//')"
  if [[ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]]; then
    missing+=("go $need_go or newer (found $have_go): https://go.dev/doc/install")
  fi
fi

# hack/gen-certs.sh (and the tests of it) issue certificates with openssl.
if ! command -v openssl >/dev/null 2>&1; then
  apt_packages+=(openssl)
fi

# `make bench` draws its plots with this font.
if [[ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]]; then
  apt_packages+=(fonts-dejavu-core)
fi

# etcd-client compiles etcd's protobuf definitions at build time. They import
# google/protobuf/descriptor.proto, which is in libprotobuf-dev: protoc alone
# (protobuf-compiler, which only recommends it) fails with "File not found".
if ! command -v protoc >/dev/null 2>&1 && [[ -z "${PROTOC:-}" ]]; then
  apt_packages+=(protobuf-compiler)
fi
if [[ -z "${PROTOC_INCLUDE:-}" && ! -f /usr/include/google/protobuf/descriptor.proto ]]; then
  apt_packages+=(libprotobuf-dev)
fi

if [[ -n "$fresh_check" ]] && ! command -v mmdebstrap >/dev/null 2>&1; then
  apt_packages+=(mmdebstrap)
fi

if ((${#apt_packages[@]})); then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "prereqs: installing ${apt_packages[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >&2
  else
    missing+=("Debian packages ${apt_packages[*]}: sudo apt-get update && sudo apt-get install -y ${apt_packages[*]}")
  fi
fi

if ((${#missing[@]})); then
  echo "prereqs: missing:" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 1
fi

