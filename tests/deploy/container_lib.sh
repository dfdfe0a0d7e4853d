# Shared by the tests of tests/deploy/ (sourced): buildah and podman as they work on a machine
# without a registry or systemd (chroot isolation, host network,
# runc with cgroupfs, explicit ulimits), and a Debian 12 base image made by debootstrap.

# Ulimits at or below the sandbox's hard limits (podman's defaults exceed them).
LOOM_CT_ULIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=1000:1000)

ct_buildah() {
  buildah --cgroup-manager=cgroupfs "$@"
}

ct_podman() {
  podman --cgroup-manager=cgroupfs --runtime runc "$@"
}

# ct_base_image: prints the name of a local Debian 12 image made from the debootstrap tarball that
# tests/fresh_machine.sh caches (made here when missing), slimmed as the official -slim images are
# (no documentation, manuals, locales, package lists or downloaded packages). Imported once per
# tarball: the tag names its modification time and size.
ct_base_image() {
  local cache="${LOOM_FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
  local tarball="$cache/debian-bookworm-minbase.tar"
  local mirror="${LOOM_FRESH_MIRROR:-http://deb.debian.org/debian}"
  if [[ ! -s "$tarball" ]]; then
    mkdir -p "$cache"
    local staging
    staging="$(mktemp -d)"
    echo "deploy: debootstrap --variant=minbase bookworm (cached in $cache)" >&2
    debootstrap --variant=minbase bookworm "$staging" "$mirror" >"$staging.log" 2>&1 ||
      { tail -n 30 "$staging.log" >&2; return 1; }
    tar -C "$staging" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf --one-file-system "$staging" "$staging.log"
  fi
  local tag
  tag="localhost/loom-test-debian:bookworm-$(stat -c '%Y-%s' "$tarball")"
  if ! ct_podman image exists "$tag"; then
    local rootfs
    rootfs="$(mktemp -d)"
    tar -C "$rootfs" -xf "$tarball"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
      "$rootfs"/usr/share/locale/*
    tar -C "$rootfs" -c . | ct_podman import -q - "$tag" >/dev/null
    rm -rf --one-file-system "$rootfs"
  fi
  echo "$tag"
}

# ct_build_base_image BASE: prints the name of BASE with the build stage's Debian packages
# installed (the packages of the first RUN of deploy/docker/Containerfile, read from it), made
# once per base and package list. The tests build FROM it without a layer cache: the
# Containerfile's own apt-get step then finds everything installed, and no intermediate layers
# pile up in the container storage from one run to the next.
ct_build_base_image() {
  local base="$1" root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  local packages
  packages="$(sed -n '/^RUN apt-get update/,/rm -rf/p' "$root/deploy/docker/Containerfile" |
    tr -s ' \\\n' ' ' | sed 's/.*--no-install-recommends //; s/ &&.*//')"
  [[ -n "$packages" ]] || { echo "deploy: no apt-get step found in deploy/docker/Containerfile" >&2; return 1; }
  local tag
  tag="localhost/loom-test-build:$(printf '%s %s' "$base" "$packages" | sha256sum | cut -c1-16)"
  if ! ct_podman image exists "$tag"; then
    local ctr
    ctr="$(ct_buildah from --pull=false "$base")"
    # shellcheck disable=SC2086 -- the package list is words
    local log
    log="$(mktemp)"
    echo "deploy: installing the build stage's packages into $tag" >&2
    ct_buildah run --isolation chroot --network host "$ctr" -- sh -c \
      "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages && rm -rf /var/lib/apt/lists/*" \
      >"$log" 2>&1 || { tail -n 30 "$log" >&2; rm -f "$log"; ct_buildah rm "$ctr" >/dev/null; return 1; }
    rm -f "$log"
    ct_buildah commit -q --rm "$ctr" "$tag" >/dev/null
  fi
  echo "$tag"
}

# ct_free_port: a TCP port free on loopback now (the containers share the host's network).
ct_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ct_wait_listening CONTAINER TIMEOUT_S: waits for loomd's port line in the container's log;
# fails (printing the log) when the container exits or the time is up.
ct_wait_listening() {
  local cid="$1" timeout_s="$2" start=$SECONDS
  while ! ct_podman logs "$cid" 2>/dev/null | grep -q '^loomd listening on '; do
    if [[ "$(ct_podman inspect --format '{{.State.Running}}' "$cid")" != true ]]; then
      echo "deploy: the container exited before loomd listened; its log:" >&2
      ct_podman logs "$cid" >&2 || true
      return 1
    fi
    if (( SECONDS - start > timeout_s )); then
      echo "deploy: loomd not listening after ${timeout_s}s; the container's log:" >&2
      ct_podman logs "$cid" >&2 || true
      return 1
    fi
    sleep 1
  done
}
