#!/usr/bin/env bash
# The single test command: installs dependencies, configures, builds and runs every test.
#
#   tests/run.sh            CPU release build + all tests; with nvcc present, also the CUDA
#                           preset (compile and link; `gpu` tests skip without a device)
#                           and the text layer's libFuzzer targets (clang) for a bounded time each
#   LOOM_FRESH_MACHINE=0    skip the fresh-machine stage (tests/fresh_machine.sh: install-deps,
#                           build and one completion inside a new minimal Debian 12 root; needs
#                           root and about 10 minutes with a warm compiler cache)
#   LOOM_TEST_SANITIZE=1    additionally build the ASan/UBSan preset and run its tests
#   LOOM_FUZZ_SECONDS=N     seconds per fuzz target (default 60; 0 skips fuzzing)
#   LOOM_DEPLOY_TESTS=0     skip the deployment stage (tests/deploy/run.sh: the monitoring files,
#                           the Kubernetes manifests, two loomd behind nginx drained under load
#                           with Prometheus scraping, the container images built and run; about
#                           4 minutes with warm caches); CI always runs it
#   LOOM_DEPLOY_CUDA_IMAGE=0  in that stage, skip the CUDA image (built when the CUDA preset was)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${LOOM_BUILD_JOBS:-$(nproc)}"

deploy/install-deps.sh
export LOOM_PYTHON="$root/build/venv/bin/python"
# The compiler cache lives outside the work tree so that a new clone on the same machine (CI's)
# starts warm; the base dir makes its entries independent of where the clone is.
export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

# run_preset PRESET [ctest arguments...]
run_preset() {
  local preset="$1"
  shift
  echo "=== $preset: configure"
  cmake --preset "$preset" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DLOOM_PYTHON="$LOOM_PYTHON"
  echo "=== $preset: build"
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: test"
  ctest --preset "$preset" -j "$jobs" "$@"
}

run_preset cpu-release
# The README's set-up command on a new minimal Debian 12 root (tests/fresh_machine.sh). It needs
# root; LOOM_FRESH_MACHINE=0 skips it for quick local runs, and CI always runs it.
fresh="${LOOM_FRESH_MACHINE:-1}"
if [[ "$fresh" != "0" && $(id -u) -ne 0 && "${CI:-}" != "true" && -z "${LOOM_FRESH_MACHINE:-}" ]]; then
  echo "=== fresh machine: skipped (needs root; set LOOM_FRESH_MACHINE=1 to require it)"
  fresh=0
fi
if [[ "$fresh" != "0" ]]; then
  echo "=== fresh machine: deploy/quickstart.sh on a minimal Debian 12"
  tests/fresh_machine.sh
fi
fuzz_seconds="${LOOM_FUZZ_SECONDS:-60}"
if [[ "$fuzz_seconds" != "0" ]]; then
  echo "=== fuzz: configure"
  cmake --preset fuzz -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DLOOM_FUZZ_SECONDS="$fuzz_seconds"
  echo "=== fuzz: build"
  cmake --build --preset fuzz -j "$jobs"
  echo "=== fuzz: run (${fuzz_seconds}s per target)"
  ctest --preset fuzz -j "$jobs"
fi
if [[ "${LOOM_TEST_SANITIZE:-0}" == "1" ]]; then
  run_preset cpu-debug
fi
# The CUDA toolkit's usual home, when its bin folder is not on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v nvcc >/dev/null 2>&1; then
  # The CPU tests already ran above on the same code; here the CUDA kernels' tests (which skip
  # without a device) and the model tests of the CUDA-enabled build.
  run_preset cuda-release -L "gpu|golden"
else
  echo "=== nvcc not found: skipping the CUDA build"
fi
# The deployment files as users run them (tests/deploy/run.sh). LOOM_DEPLOY_TESTS=0 skips it for
# quick local runs; CI always runs it.
if [[ "${LOOM_DEPLOY_TESTS:-1}" != "0" || "${CI:-}" == "true" ]]; then
  echo "=== deploy: images, load balancer, Prometheus, Kubernetes manifests"
  tests/deploy/run.sh
else
  echo "=== deploy: skipped (LOOM_DEPLOY_TESTS=0)"
fi
echo "=== all tests passed"
