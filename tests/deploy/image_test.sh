#!/usr/bin/env bash
# The container images, built and run as users will (tests/run.sh's deployment stage, part a):
#
#   tests/deploy/image_test.sh --loomd BIN --model GGUF [--cuda-loomd BIN]
#
# CPU image (deploy/docker/Containerfile), built with buildah from a Debian 12 base made by
# debootstrap (no registry is reachable here), then run with podman:
#   - the runtime image is under 300 MB (no model bundled) and runs as a non-root user;
#   - the model comes from the /models volume (the entry point finds the one .gguf file there)
#     and LOOM_* variables configure loomd: it serves a completion under the served name given;
#   - it runs with a read-only root file system (as deploy/k8s/ runs it);
#   - its HEALTHCHECK passes once ready; `podman stop` (SIGTERM) ends it with exit code 0;
#   - built with WITH_DEFAULT_MODEL=1 (the model copied in from --model), it serves that model
#     with no volume mounted.
# CUDA image (deploy/docker/Containerfile.cuda, only with --cuda-loomd): built from the same base
# plus the CUDA libraries copied from the toolkit of this machine; under 3 GB; with no GPU,
# LOOM_BACKEND=cuda fails at start with a clear error, and the CPU backend serves.
#
# By default the images copy in the BIN given (what tests/run.sh built): compiling loomd inside
# the build takes long on a small machine. LOOM_DEPLOY_FROM_SOURCE=1 compiles it in the build
# stage instead, as `podman build` does for users, with this machine's compiler cache mounted.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=tests/deploy/container_lib.sh
source "$root/tests/deploy/container_lib.sh"
loomd=""
model=""
cuda_loomd=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --loomd) loomd="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --cuda-loomd) cuda_loomd="$2"; shift 2 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
[[ -x "$loomd" && -f "$model" ]] || { echo "usage: $0 --loomd BIN --model GGUF [--cuda-loomd BIN]" >&2; exit 2; }
for tool in buildah podman runc debootstrap curl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found (deploy/install-deps.sh installs it)" >&2; exit 1; }
done

failures=0
check() {  # check DESCRIPTION COMMAND...: runs the command, reports, counts failures
  local what="$1"
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAIL: $what" >&2
    failures=$((failures + 1))
  fi
}

containers=()
cleanup() {
  for cid in "${containers[@]}"; do ct_podman rm -f -t 0 "$cid" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

base="$(ct_base_image)"
build_base="$(ct_build_base_image "$base")"
echo "deploy: base image $base; build stage base $build_base"

# build_image CONTAINERFILE TAG LOOMD [buildah arguments...]
build_image() {
  local file="$1" tag="$2" bin
  bin="$(realpath "$3")"
  shift 3
  local args=(--build-arg "BUILD_BASE=$build_base" --build-arg "RUNTIME_BASE=$base")
  if [[ "${LOOM_DEPLOY_FROM_SOURCE:-0}" == 1 ]]; then
    local ccache_dir="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/ccache}"
    mkdir -p "$ccache_dir"
    args+=(-v "$ccache_dir:/ccache")
  else
    args+=(-v "$(cd "$(dirname "$bin")" && pwd):/prebuilt:ro"
      --build-arg "LOOMD_PREBUILT=/prebuilt/$(basename "$bin")"
      --build-arg "LOOMD_PREBUILT_SHA256=$(sha256sum "$bin" | cut -d' ' -f1)")
  fi
  local start=$SECONDS old_id=""
  old_id="$(ct_podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
  # --format docker: the OCI image format has no HEALTHCHECK (buildah would drop it).
  # --layers=false: no cache of intermediate layers to grow with every change of the sources.
  ct_buildah bud --isolation chroot --network host --layers=false --format docker "${LOOM_CT_ULIMITS[@]}" \
    "${args[@]}" "$@" -f "$root/$file" -t "$tag" "$root" >"$work/build-$(basename "$file").log" 2>&1 || {
    tail -n 40 "$work/build-$(basename "$file").log" >&2
    echo "FAIL: building $file (log: $work/build-$(basename "$file").log)" >&2
    exit 1
  }
  echo "deploy: built $tag from $file in $((SECONDS - start))s"
  # The image this one replaced under the same tag.
  if [[ -n "$old_id" && "$old_id" != "$(ct_podman image inspect --format '{{.Id}}' "$tag")" ]]; then
    ct_podman rmi "$old_id" >/dev/null 2>&1 || true
  fi
}

image_mb() {
  echo $(( $(ct_podman image inspect --format '{{.Size}}' "$1") / 1000000 ))
}

work="$root/build/deploy-tests"
mkdir -p "$work"

# --- the CPU image
cpu_image=localhost/loom:cpu-test
build_image deploy/docker/Containerfile "$cpu_image" "$loomd"
cpu_mb=$(image_mb "$cpu_image")
echo "deploy: CPU image size: ${cpu_mb} MB (no model)"
check "CPU image < 300 MB (${cpu_mb} MB)" test "$cpu_mb" -lt 300
image_config() {  # image_config IMAGE FIELD: that field of the image's config, as JSON
  ct_podman image inspect --format "{{json .Config.$2}}" "$1"
}
check "the image has a HEALTHCHECK (loom-healthcheck: GET /readyz)" \
  grep -q loom-healthcheck <<<"$(image_config "$cpu_image" Healthcheck)"
check "the image declares the /models volume" grep -q '"/models"' <<<"$(image_config "$cpu_image" Volumes)"
check "the image runs as user 10001" grep -q '"10001:10001"' <<<"$(image_config "$cpu_image" User)"

port=$(ct_free_port)
cid=$(ct_podman run -d --network host "${LOOM_CT_ULIMITS[@]}" --health-interval disable --read-only \
  -v "$(realpath "$model"):/models/$(basename "$model"):ro" \
  -e LOOM_HOST=127.0.0.1 -e "LOOM_PORT=$port" -e LOOM_THREADS=1 -e LOOM_KV_CACHE_MB=64 \
  -e LOOM_SERVED_MODEL_NAME=smollm2-in-a-box "$cpu_image")
containers+=("$cid")
ct_wait_listening "$cid" 180
check "loomd runs as a non-root user" test "$(ct_podman exec "$cid" id -u)" = 10001
answer=$(curl -sS --max-time 120 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "smollm2-in-a-box", "prompt": "The capital of France is", "max_tokens": 8}' || true)
echo "deploy: completion: $answer"
check "the container serves a completion" grep -q '"text_completion"' <<<"$answer"
check "LOOM_SERVED_MODEL_NAME reached loomd" grep -q '"model":"smollm2-in-a-box"' <<<"$answer"
check "the healthcheck passes" ct_podman healthcheck run "$cid"
# ... and is not trivially true: pointed at a port where nothing listens, it fails.
check "the healthcheck fails when /readyz does not answer" \
  bash -c "! podman --cgroup-manager=cgroupfs --runtime runc exec -e LOOM_PORT=1 '$cid' /usr/local/bin/loom-healthcheck"
start=$SECONDS
ct_podman stop -t 60 "$cid" >/dev/null
exit_code=$(ct_podman inspect --format '{{.State.ExitCode}}' "$cid")
check "SIGTERM drains and exits 0 (exit code $exit_code after $((SECONDS - start))s)" test "$exit_code" = 0

# --- the CPU image with the default model bundled, run with nothing mounted
model_image=localhost/loom:cpu-model-test
build_image deploy/docker/Containerfile "$model_image" "$loomd" --build-arg WITH_DEFAULT_MODEL=1 \
  -v "$(dirname "$(realpath "$model")"):/prebuilt-model:ro" \
  --build-arg "MODEL_PREBUILT=/prebuilt-model/$(basename "$(realpath "$model")")"
echo "deploy: CPU image size with the default model: $(image_mb "$model_image") MB"
port=$(ct_free_port)
cid=$(ct_podman run -d --network host "${LOOM_CT_ULIMITS[@]}" --health-interval disable --read-only \
  -e LOOM_HOST=127.0.0.1 -e "LOOM_PORT=$port" -e LOOM_THREADS=1 -e LOOM_KV_CACHE_MB=64 "$model_image")
containers+=("$cid")
ct_wait_listening "$cid" 180
answer=$(curl -sS --max-time 120 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 4}' || true)
check "with WITH_DEFAULT_MODEL=1 and no volume, the bundled model serves" \
  grep -q '"model":"SmolLM2-135M-Instruct' <<<"$answer"
ct_podman stop -t 60 "$cid" >/dev/null

# --- the CUDA image (its CPU-only behaviour: there is no GPU here)
if [[ -n "$cuda_loomd" ]]; then
  cuda_image=localhost/loom:cuda-test
  toolkit="$(realpath /usr/local/cuda)"
  build_image deploy/docker/Containerfile.cuda "$cuda_image" "$cuda_loomd" \
    -v "$toolkit:/usr/local/cuda:ro" --build-arg CUDA_LIBS_FROM_BASE=0
  cuda_mb=$(image_mb "$cuda_image")
  echo "deploy: CUDA image size: ${cuda_mb} MB (no model; Debian base + the CUDA libraries loomd links)"
  check "CUDA image < 3 GB (${cuda_mb} MB)" test "$cuda_mb" -lt 3000
  log=$(ct_podman run --rm --network host "${LOOM_CT_ULIMITS[@]}" \
    -v "$(realpath "$model"):/models/$(basename "$model"):ro" \
    -e LOOM_BACKEND=cuda -e LOOM_HOST=127.0.0.1 -e "LOOM_PORT=$(ct_free_port)" "$cuda_image" 2>&1) &&
    rc=0 || rc=$?
  echo "deploy: --backend cuda without a GPU: exit $rc: $log"
  check "LOOM_BACKEND=cuda without a GPU fails at start" test "$rc" -ne 0
  check "... with a clear error" grep -q "CUDA backend needs an NVIDIA GPU" <<<"$log"
  port=$(ct_free_port)
  cid=$(ct_podman run -d --network host "${LOOM_CT_ULIMITS[@]}" --health-interval disable \
    -v "$(realpath "$model"):/models/$(basename "$model"):ro" \
    -e LOOM_HOST=127.0.0.1 -e "LOOM_PORT=$port" -e LOOM_THREADS=1 -e LOOM_KV_CACHE_MB=64 "$cuda_image")
  containers+=("$cid")
  ct_wait_listening "$cid" 180
  answer=$(curl -sS --max-time 120 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello", "max_tokens": 8}' || true)
  check "the CUDA image serves with the CPU backend" grep -q '"text_completion"' <<<"$answer"
  check "its healthcheck passes" ct_podman healthcheck run "$cid"
fi

if [[ $failures -ne 0 ]]; then
  echo "image tests: $failures failed" >&2
  exit 1
fi
echo "image tests passed"
