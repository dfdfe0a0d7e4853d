#!/usr/bin/env bash
# Installs the dependencies, builds loom (CPU, release) and starts the server, loomd, on the
# bundled default model (a tiny random-weight Llama-3-shaped checkpoint with a tokenizer and a
# chat template, under tests/golden/models) at http://127.0.0.1:8000. Extra arguments go to
# loomd (e.g. --model DIR, --port N, --api-keys KEY); LOOM_* variables work too.
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
exec build/cpu-release/bin/loomd --host 127.0.0.1 --port 8000 "$@"
