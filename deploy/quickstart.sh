#!/usr/bin/env bash
# Installs the dependencies, builds loom (CPU, release) and runs it on the bundled default model
# (a tiny random-weight Llama-3-shaped checkpoint under tests/golden/models), printing the
# generated tokens and the prefill/decode speed. Extra arguments go to `loom generate`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
deploy/install-deps.sh
export CCACHE_DIR="${CCACHE_DIR:-$root/build/ccache}"
cmake --preset cpu-release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build --preset cpu-release --target loom -j "$(nproc)"
model="${LOOM_MODEL:-$root/tests/golden/models/llama3_gqa}"
echo "=== loom generate on $model"
exec build/cpu-release/bin/loom generate --model "$model" --prompt-ids 1,15,27,300,42 --max-tokens 24 "$@"
