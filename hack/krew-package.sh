#!/usr/bin/env bash
# Packages kubectl-transfer for krew: the release archive of one platform,
# kubectl-transfer-v<version>-<os>-<arch>.tar.gz (the binary alone, at the top
# level, mode 0755), and the plugin manifest made from deploy/krew/transfer.yaml
# with the sha256 of every archive it has filled in.
#
#   hack/krew-package.sh [--bin PATH] [--os OS --arch ARCH] [--out DIR] [--all]
#
#   --bin PATH   the kubectl-transfer binary to package (or $KUBECTL_TRANSFER_BIN);
#                without either, `cargo build --locked --release -p kubectl-transfer`
#                builds it for this machine.
#   --os, --arch the platform the binary is for, as krew names it (linux, darwin;
#                amd64, arm64); default: this machine's. A binary cross-built for
#                another platform needs --bin.
#   --out DIR    write the archive and DIR/transfer.yaml, and print the manifest's
#                path; without it, the archive goes to target/krew/ and the
#                manifest to stdout.
#   --all        fail unless every platform of the template has its archive in
#                the output directory (a release: run once per platform with the
#                same --out, the last run with --all).
#
# The template's sha256 values are placeholders (KUBECTL_TRANSFER_<OS>_<ARCH>_SHA256).
# The manifest written has, for each platform whose archive is in the output
# directory, that archive's sha256; platforms without one are left out, since
# krew refuses a manifest with a placeholder. spec.version and the archive
# names must be v + the root Cargo.toml's version.
#
# The archive is reproducible: the same binary gives the same bytes (sorted,
# root-owned entries with the mtime $SOURCE_DATE_EPOCH, else the last
# commit's time; gzip without a name or time stamp). It needs GNU tar.
#
# Everything but the manifest (or its path) goes to stderr.
set -euo pipefail

log() { echo "krew-package: $*" >&2; }
die() { echo "krew-package: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
template="$repo/deploy/krew/transfer.yaml"
name=kubectl-transfer

bin="${KUBECTL_TRANSFER_BIN:-}"
os=""
arch=""
out=""
all=0
while (($#)); do
  case "$1" in
    --bin) bin="${2:?--bin needs a path}"; shift 2 ;;
    --bin=*) bin="${1#*=}"; shift ;;
    --os) os="${2:?--os needs a value}"; shift 2 ;;
    --os=*) os="${1#*=}"; shift ;;
    --arch) arch="${2:?--arch needs a value}"; shift 2 ;;
    --arch=*) arch="${1#*=}"; shift ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --all) all=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

# The version: the plugin package's, from the [package] table of its Cargo.toml.
manifest="$repo/crates/kubectl-transfer/Cargo.toml"
version="$(awk '
  /^\[/ { in_package = ($0 == "[package]"); next }
  in_package && /^version[[:space:]]*=/ { sub(/^version[[:space:]]*=[[:space:]]*"/, ""); sub(/".*$/, ""); print; exit }
' "$manifest")"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "found no version in the [package] table of $manifest"
tag="v$version"
grep -Eq "^  version: \"?$tag\"?\$" "$template" \
  || die "deploy/krew/transfer.yaml's spec.version is not $tag (the version of crates/kubectl-transfer/Cargo.toml): update it and its uris"

# This machine's platform, as krew (Go's GOOS and GOARCH) names it.
host_os="$(uname -s | tr '[:upper:]' '[:lower:]')"
case "$(uname -m)" in
  x86_64 | amd64) host_arch=amd64 ;;
  aarch64 | arm64) host_arch=arm64 ;;
  *) host_arch="$(uname -m)" ;;
esac
os="${os:-$host_os}"
arch="${arch:-$host_arch}"
[[ "$os" =~ ^[a-z0-9]+$ && "$arch" =~ ^[a-z0-9]+$ ]] || die "--os and --arch must look like linux and amd64, not '$os' and '$arch'"

if [[ -z "$bin" ]]; then
  [[ "$os/$arch" == "$host_os/$host_arch" ]] \
    || die "cannot build for $os/$arch on $host_os/$host_arch: cross-build the binary and pass it with --bin"
  log "building $name (release)"
  (cd "$repo" && cargo build --locked --release -p "$name" >&2)
  bin="${CARGO_TARGET_DIR:-$repo/target}/release/$name"
fi
[[ -f "$bin" && -x "$bin" ]] || die "$bin is not an executable file"

if [[ -n "$out" ]]; then
  archive_dir="$out"
else
  archive_dir="${CARGO_TARGET_DIR:-$repo/target}/krew"
fi
mkdir -p "$archive_dir"
archive_dir="$(cd "$archive_dir" && pwd)"
archive="$name-$tag-$os-$arch.tar.gz"
grep -Fq "/$archive" "$template" || die "deploy/krew/transfer.yaml has no platform whose uri ends in $archive"

if command -v sha256sum >/dev/null 2>&1; then
  sha256() { sha256sum "$1" | cut -d' ' -f1; }
else
  sha256() { shasum -a 256 "$1" | cut -d' ' -f1; }
fi
tar --version 2>/dev/null | grep -q 'GNU tar' || die "GNU tar is needed (for --sort, --owner and --mtime)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
install -m 0755 "$bin" "$stage/$name"
mtime="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}"
log "packing $bin into $archive_dir/$archive"
tar -C "$stage" --format=ustar --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime="@$mtime" -cf - "$name" | gzip -n > "$stage/$archive"
mv "$stage/$archive" "$archive_dir/$archive"

# The sha256 of every archive of this version in the output directory, by name.
sums="$stage/sums"
: > "$sums"
for f in "$archive_dir/$name-$tag-"*.tar.gz; do
  [[ -f "$f" ]] || continue
  echo "$(basename "$f") $(sha256 "$f")" >> "$sums"
done
log "$archive: sha256 $(sed -n "s/^$archive //p" "$sums")"

# The manifest: the template without its leading comment, each platform item
# (from "  - " to the next one or to the end of spec.platforms) kept with its
# archive's sha256, or dropped when its archive is not there.
manifest="$stage/transfer.yaml"
awk -v sums="$sums" -v missing="$stage/missing" -v tag="$tag" '
  BEGIN {
    while ((getline line < sums) > 0) { split(line, f, " "); sha[f[1]] = f[2] }
    print "# Generated by hack/krew-package.sh from deploy/krew/transfer.yaml for " tag "."
    print "# Every sha256 below is that of the archive its uri names."
  }
  function flush(   i, file) {
    if (n == 0) return
    file = uri; sub(/^.*\//, "", file)
    if (file in sha) {
      for (i = 1; i <= n; i++) {
        # Quoted: a hex string of digits alone, or with one "e", is a number to YAML.
        if (item[i] ~ /^    sha256:/) item[i] = "    sha256: \"" sha[file] "\""
        print item[i]
      }
      kept++
    } else {
      print file > missing
    }
    n = 0; uri = ""
  }
  !started && /^#/ { next }
  { started = 1 }
  /^  platforms:[[:space:]]*$/ { print; in_platforms = 1; next }
  in_platforms && /^  - / { flush(); item[++n] = $0; next }
  in_platforms && n > 0 && /^    / {
    item[++n] = $0
    if ($0 ~ /^    uri:/) { uri = $0; sub(/^    uri:[[:space:]]*/, "", uri) }
    next
  }
  in_platforms { flush(); in_platforms = 0 }
  { print }
  END { flush(); if (!kept) exit 3 }
' "$template" > "$manifest" || die "the manifest has no platform left (is the archive's uri in deploy/krew/transfer.yaml?)"
if [[ -s "$stage/missing" ]]; then
  if ((all)); then
    die "no archive in $archive_dir for: $(tr '\n' ' ' < "$stage/missing")"
  fi
  log "left out of the manifest, for want of an archive in $archive_dir: $(tr '\n' ' ' < "$stage/missing")"
fi
if grep -Eq 'KUBECTL_TRANSFER_[A-Z0-9_]*_SHA256' "$manifest"; then
  die "a sha256 placeholder is left in the manifest"
fi

if [[ -n "$out" ]]; then
  mv "$manifest" "$archive_dir/transfer.yaml"
  log "wrote $archive_dir/transfer.yaml"
  echo "$archive_dir/transfer.yaml"
else
  cat "$manifest"
fi
