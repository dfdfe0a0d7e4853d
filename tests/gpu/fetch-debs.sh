#!/usr/bin/env bash
# Downloads the Debian packages that tests/gpu/run.sh unpacks on the GPU machine, which has CUDA,
# CMake and Ninja but no package registry and none of loom's -dev packages.
#
#   tests/gpu/fetch-debs.sh [--with-ccache] [DIR]     (DIR defaults to .gpu-deps, git-ignored)
#
# Run it on a Debian 12 (bookworm) x86-64 machine with apt, the one whose packages loom is built
# and tested against. It fetches .deb files only (apt-get download: nothing is installed) and
# writes DIR/MANIFEST (package, version, size, sha256), which run.sh checks. The folder travels
# with the working tree to the GPU machine, whose transfer limit is 64 MiB in all, so the script
# fails when the packages take more than 40 MiB.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="$root/.gpu-deps"
with_ccache=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --with-ccache) with_ccache=1; shift ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "fetch-debs: unknown option: $1" >&2; exit 2 ;;
    *) dest="$1"; shift ;;
  esac
done

# Abseil, GoogleTest/GoogleMock, Google Benchmark (headers, CMake package files and libraries)
# and nlohmann/json: what the engine, the tests and the benchmarks link. Not gRPC, Boost or
# prometheus-cpp: nothing the GPU build needs uses them.
packages=(
  libabsl-dev libabsl20220623
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev libbenchmark1debian
  nlohmann-json3-dev
)
# A fresh GPU machine starts with an empty cache, so ccache only helps repeated builds within
# one machine's lease; it also needs its own shared libraries there.
[[ $with_ccache -eq 1 ]] && packages+=(ccache)
max_bytes=$((40 * 1024 * 1024))

command -v apt-get >/dev/null || { echo "fetch-debs: needs apt-get (Debian 12)" >&2; exit 1; }
if [[ "$(dpkg --print-architecture)" != amd64 ]]; then
  echo "fetch-debs: this machine is $(dpkg --print-architecture); the GPU machine is amd64" >&2
  exit 1
fi

mkdir -p "$dest"
rm -f "$dest"/*.deb "$dest/MANIFEST"
echo "fetch-debs: downloading ${packages[*]} into $dest"
if ! (cd "$dest" && apt-get download -q "${packages[@]}"); then
  echo "fetch-debs: apt-get download failed; if a package was not found, run apt-get update" >&2
  exit 1
fi

{
  echo "# package version bytes sha256 (written by tests/gpu/fetch-debs.sh)"
  for deb in "$dest"/*.deb; do
    printf '%s %s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
      "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
  done
} > "$dest/MANIFEST"

debs=("$dest"/*.deb)
total=$(cat "${debs[@]}" | wc -c)
echo "fetch-debs: ${#debs[@]} packages, $((total / 1024)) KiB in $dest"
if [[ $total -gt $max_bytes ]]; then
  echo "fetch-debs: more than $((max_bytes / 1024 / 1024)) MiB: too much to carry" >&2
  exit 1
fi
