#!/usr/bin/env bash
# The fresh-machine stage of tests/run.sh: proves that the README's set-up command works on a new
# Debian 12 machine, not just on one where packages were once installed by hand.
#
#   tests/fresh_machine.sh
#
# 1. Makes a minimal Debian 12 root (`debootstrap --variant=minbase bookworm`), cached as a tarball
#    in $LOOM_FRESH_CACHE (default ~/.cache/loom) and unpacked anew under build/fresh-machine/ on
#    every run, so nothing installed by an earlier run is ever reused.
# 2. Gives it only the machine's network settings: /etc/resolv.conf, the CA bundle (and the local
#    CA certificates it was made from), /etc/pip.conf and any proxy variables. No package, wheel
#    or library of this machine goes in.
# 3. Clones the repository into it (plus the work tree's uncommitted changes, so a local run tests
#    what is on disk) and, in a private mount namespace with /proc, /dev and /sys bind-mounted,
#    runs `deploy/quickstart.sh --port 0` inside the root as root: install-deps.sh, the
#    cpu-release configure, the loomd build, then loomd on a free loopback port.
# 4. Waits for loomd to listen, asks it for one completion with curl inside the root, and stops it.
#
# Any failure names the step and prints the end of its log (build/fresh-machine/*.log).
# Needs root (chroot, mount) and the network access install-deps.sh needs.
#
# Environment (all optional):
#   LOOM_FRESH_CACHE     where the debootstrap tarball is kept (default ~/.cache/loom)
#   LOOM_FRESH_MIRROR    Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   LOOM_FRESH_TIMEOUT   seconds allowed for install + build + first answer (default 3600)
#   CCACHE_DIR           a compiler cache to share with the root (see below)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$root/build/fresh-machine"
cache="${LOOM_FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}"
mirror="${LOOM_FRESH_MIRROR:-http://deb.debian.org/debian}"
timeout_s="${LOOM_FRESH_TIMEOUT:-3600}"
base_tar="$cache/debian-bookworm-minbase.tar"
rootfs="$work/root"
log="$work/quickstart.log"

fail() {
  echo "fresh-machine: FAILED: $*" >&2
  exit 1
}

# Shows the end of a log and fails naming the step.
fail_with_log() {
  local step="$1" file="$2"
  if [[ -f "$file" ]]; then
    echo "--- last 60 lines of $file" >&2
    tail -n 60 "$file" >&2
    echo "---" >&2
  fi
  fail "$step (full log: $file)"
}

[[ $(id -u) -eq 0 ]] || fail "needs root (chroot and mounts); LOOM_FRESH_MACHINE=0 skips this stage"
for tool in debootstrap unshare chroot git tar; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' not found (deploy/install-deps.sh installs it)"
done

mkdir -p "$work" "$cache"

# Removes the root. --one-file-system keeps rm out of anything still mounted inside it.
remove_root() {
  [[ -d "$rootfs" ]] || return 0
  if grep -q " $rootfs/" /proc/mounts; then
    fail "$rootfs still has mounts; unmount them before running again"
  fi
  rm -rf --one-file-system "$rootfs"
}

# 1. The base system, made once per cache folder.
if [[ ! -s "$base_tar" ]]; then
  echo "fresh-machine: debootstrap --variant=minbase bookworm (cached in $cache)"
  staging="$work/debootstrap"
  rm -rf --one-file-system "$staging"
  if ! debootstrap --variant=minbase bookworm "$staging" "$mirror" >"$work/debootstrap.log" 2>&1; then
    fail_with_log "debootstrap of a minimal Debian 12" "$work/debootstrap.log"
  fi
  tar -C "$staging" -cf "$base_tar.tmp" .
  mv "$base_tar.tmp" "$base_tar"
  rm -rf --one-file-system "$staging"
fi
remove_root
mkdir -p "$rootfs"
tar -C "$rootfs" -xf "$base_tar"

# 2. The machine's network settings, and nothing else of it.
cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf"
for f in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf; do
  if [[ -f "$f" ]]; then
    mkdir -p "$rootfs$(dirname "$f")"
    cp -L "$f" "$rootfs$f"
  fi
done
# Package scripts inside a chroot must not start services (Prometheus's would); Debian's
# policy-rc.d convention tells them so.
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod +x "$rootfs/usr/sbin/policy-rc.d"
# Local CA certificates survive the ca-certificates package regenerating the bundle.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  cp -L /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
fi

# 3. The repository: a clone of HEAD, plus the work tree's uncommitted changes.
git clone --quiet --no-hardlinks "$root" "$rootfs/loom"
(
  cd "$root"
  git ls-files -z --modified --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -
) | tar -C "$rootfs/loom" -xf -
(cd "$root" && git ls-files -z --deleted) | (cd "$rootfs/loom" && xargs -0 -r rm -f --)

# The command run inside the root: the README's first set-up command, on a free port, then one
# completion. loomd's first line names the port it bound.
cat >"$rootfs/fresh-machine.sh" <<'INNER'
#!/bin/bash
set -euo pipefail
cd /loom
deploy/quickstart.sh --port 0 --threads 1 --kv-cache-mb 64 >/quickstart.log 2>&1 &
pid=$!
port=""
deadline=$((SECONDS + LOOM_FRESH_TIMEOUT))
while [[ -z "$port" ]]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" || true
    echo "fresh-machine: quickstart.sh ended before loomd listened" >&2
    exit 1
  fi
  if (( SECONDS > deadline )); then
    echo "fresh-machine: loomd not listening after ${LOOM_FRESH_TIMEOUT}s" >&2
    kill "$pid"
    exit 1
  fi
  port=$(sed -n 's/^loomd listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' /quickstart.log)
  sleep 2
done
echo "fresh-machine: loomd listening on port $port; asking for a completion"
status=0
answer=$(curl -sS --max-time 120 "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "Hello", "max_tokens": 8}') || status=$?
kill -TERM "$pid" 2>/dev/null || true
wait "$pid" || true
echo "fresh-machine: answer: $answer"
if [[ $status -ne 0 ]] || ! grep -q '"text_completion"' <<<"$answer" ||
   ! grep -q '"finish_reason"' <<<"$answer"; then
  echo "fresh-machine: no completion from loomd (curl exit $status)" >&2
  exit 1
fi
INNER
chmod +x "$rootfs/fresh-machine.sh"

# 4. Run it as root of the new system, with a clean environment (only PATH, HOME, locale and the
# machine's proxy settings), in a mount namespace of its own so the bind mounts end with it.
env_vars=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "LOOM_FRESH_TIMEOUT=$timeout_s")
# The compiler cache of this machine, when there is one, is shared with the root: it only saves
# compiling what compiled identically before (ccache checks every header the root's compiler sees,
# and linking always runs), so a missing header or library still fails the build.
export CCACHE_HOST_DIR=""
if [[ -n "${CCACHE_DIR:-}" && -d "${CCACHE_DIR:-}" ]]; then
  CCACHE_HOST_DIR="$CCACHE_DIR"
  env_vars+=(CCACHE_DIR=/ccache CCACHE_BASEDIR=/loom)
fi
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -n "${!v:-}" ]] && env_vars+=("$v=${!v}")
done
echo "fresh-machine: install-deps, build and loomd inside a minimal Debian 12 root ($rootfs)"
start=$SECONDS
set +e
unshare --mount --propagation private -- /bin/bash -c '
  set -e
  r="$1"; shift
  mount --rbind /proc "$r/proc"
  mount --rbind /dev "$r/dev"
  mount --rbind /sys "$r/sys"
  if [[ -n "$CCACHE_HOST_DIR" ]]; then
    mkdir -p "$r/ccache"
    mount --bind "$CCACHE_HOST_DIR" "$r/ccache"
  fi
  exec env -i "$@" chroot "$r" /fresh-machine.sh
' fresh-machine "$rootfs" "${env_vars[@]}" 2>&1 | tee "$work/stage.log"
rc=${PIPESTATUS[0]}
set -e
cp "$rootfs/quickstart.log" "$log" 2>/dev/null || true
if [[ $rc -ne 0 ]]; then
  # Name the missing piece: the first error line of the install or the build.
  missing=$(grep -m 3 -E "Could NOT find|not found|No such file|E: |fatal error|ModuleNotFoundError|error:" \
    "$log" 2>/dev/null || true)
  [[ -n "$missing" ]] && echo "fresh-machine: first errors:" >&2 && echo "$missing" | sed 's/^/  /' >&2
  fail_with_log "quickstart on a minimal Debian 12" "$log"
fi
echo "fresh-machine: passed in $((SECONDS - start))s (install, build, first completion)"
remove_root
