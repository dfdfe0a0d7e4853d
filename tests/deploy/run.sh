#!/usr/bin/env bash
# The deployment stage of tests/run.sh: the files of deploy/ tested as they will be used.
#
#   tests/deploy/run.sh
#
#   monitoring   deploy/prometheus and deploy/grafana: promtool check/test, metric names
#   k8s          deploy/k8s rendered and validated against the Kubernetes schemas
#   lb-drain     two loomd behind nginx, Prometheus scraping, one drained under streaming load
#   image        the CPU image built (buildah, debootstrap base) and run (podman); the CUDA image
#                too when build/cuda-release/bin/loomd exists (LOOM_DEPLOY_CUDA_IMAGE=0 skips it)
#
# Needs build/cpu-release/bin/loomd, the venv and the default model (tests/run.sh makes them),
# and root for the images (buildah and podman as root; without root that part is skipped unless
# CI=true). Each part runs under a time limit; the whole takes about 3-4 minutes with warm caches
# (the first image build installs the build stage's packages, a few minutes more).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
python="${LOOM_PYTHON:-$root/build/venv/bin/python}"
loomd="$root/build/cpu-release/bin/loomd"
cuda_loomd="$root/build/cuda-release/bin/loomd"
model="$root/build/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -x "$loomd" ]] || { echo "deploy: $loomd not built (tests/run.sh builds it)" >&2; exit 1; }
[[ -f "$model" ]] || { echo "deploy: $model missing (deploy/install-deps.sh fetches it)" >&2; exit 1; }

passed=0
failed=()
# part NAME TIMEOUT_S COMMAND...: runs one part under a time limit, its output prefixed.
part() {
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS rc=0
  echo "=== deploy: $name"
  timeout --kill-after=30 "$limit" "$@" 2>&1 | sed -u "s/^/[$name] /" || rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then
    echo "=== deploy: $name passed in $((SECONDS - start))s"
    passed=$((passed + 1))
  else
    [[ $rc -eq 124 ]] && echo "=== deploy: $name timed out after ${limit}s" >&2
    echo "=== deploy: $name FAILED (exit $rc)" >&2
    failed+=("$name")
  fi
}

part monitoring 300 "$python" tests/deploy/monitoring_test.py
part k8s 300 "$python" tests/deploy/k8s_test.py
part lb-drain 300 "$python" tests/deploy/lb_drain_test.py --loomd "$loomd" --model "$model"
if [[ $(id -u) -ne 0 && "${CI:-}" != "true" ]]; then
  echo "=== deploy: image: skipped (buildah and podman need root here)"
else
  image_args=(--loomd "$loomd" --model "$model")
  if [[ -x "$cuda_loomd" && "${LOOM_DEPLOY_CUDA_IMAGE:-1}" != "0" ]]; then
    image_args+=(--cuda-loomd "$cuda_loomd")
  fi
  part image 1200 tests/deploy/image_test.sh "${image_args[@]}"
fi
echo "deploy: ${passed} passed, ${#failed[@]} failed${failed:+ (${failed[*]})}"
[[ ${#failed[@]} -eq 0 ]]
