#!/bin/bash
# The image's entry point: picks the model when LOOM_MODEL is not set, then becomes loomd (exec,
# so loomd is PID 1 and receives the container's SIGTERM itself: readiness fails, in-flight
# requests finish within LOOM_DRAIN_TIMEOUT_S, exit 0).
#
# Without LOOM_MODEL: a Hugging Face folder mounted at /models (it has config.json), else the one
# .gguf file in /models, else the default model bundled at build time (WITH_DEFAULT_MODEL=1).
# Every other setting is a LOOM_* variable (configs/README.md) or a flag given to the container.
set -euo pipefail

if [[ -z "${LOOM_MODEL:-}" ]]; then
  shopt -s nullglob
  ggufs=(/models/*.gguf)
  bundled=(/opt/loom/models/*.gguf)
  if [[ -f /models/config.json ]]; then
    export LOOM_MODEL=/models
  elif [[ ${#ggufs[@]} -eq 1 ]]; then
    export LOOM_MODEL="${ggufs[0]}"
  elif [[ ${#ggufs[@]} -gt 1 ]]; then
    echo "loom: /models holds ${#ggufs[@]} .gguf files; set LOOM_MODEL to the one to serve" >&2
    exit 2
  elif [[ ${#bundled[@]} -ge 1 ]]; then
    export LOOM_MODEL="${bundled[0]}"
  else
    echo "loom: no model: mount a Hugging Face folder or a .gguf file at /models, or set LOOM_MODEL" >&2
    exit 2
  fi
fi
exec /usr/local/bin/loomd "$@"
