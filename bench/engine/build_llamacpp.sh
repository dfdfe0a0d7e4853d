#!/usr/bin/env bash
# Builds the peer for the side-by-side benchmarks: llama.cpp from the sources that the
# llama-cpp-python sdist on PyPI vendors (CMake Release, default GGML_NATIVE CPU backend), only
# the tools the benchmarks use: llama-bench, llama-batched-bench and llama-quantize, plus
# bench/peers/llamacpp_generate.cc linked against its library.
#
#   bench/engine/build_llamacpp.sh WORK_DIR [VERSION]      # VERSION of llama-cpp-python, 0.3.36
#
# Prints the folder holding the binaries. Needs the repository's venv (deploy/install-deps.sh)
# for pip, and cmake + a C++ compiler (also from install-deps.sh).
set -euo pipefail
work="$1" version="${2:-0.3.36}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$work"
sdist="$work/llama_cpp_python-$version.tar.gz"
if [[ ! -f "$sdist" ]]; then
  "$root/build/venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$work" "llama-cpp-python==$version"
fi
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[[ -d "$src" ]] || tar -xzf "$sdist" -C "$work"
cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_SERVER=OFF >/dev/null
cmake --build "$src/build" -j "$(nproc)" --target llama-bench llama-batched-bench llama-quantize \
  >/dev/null
"${CXX:-g++}" -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" \
  "$root/bench/peers/llamacpp_generate.cc" -o "$src/build/bin/llamacpp_generate" \
  -L"$src/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$src/build/bin"
echo "$src/build/bin"
