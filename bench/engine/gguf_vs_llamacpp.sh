#!/usr/bin/env bash
# loom and llama.cpp side by side on the same GGUF files, on this machine, in one run: prefill of
# a 512-token prompt and decode at batch 1 after it, decode at batch 8 (64-token prompts), 1 and 2 threads,
# alternating the two engines file by file so both see the same machine state. Raw JSON goes to OUT_DIR; loom's JSON
# includes its bandwidth probe, the decode bytes per step and the fraction of the roofline.
#
#   bench/engine/gguf_vs_llamacpp.sh LLAMA_CPP_BIN_DIR OUT_DIR FILE.gguf...
#
# LLAMA_CPP_BIN_DIR holds llama-bench and llama-batched-bench, built from the llama.cpp sources
# that the llama-cpp-python sdist vendors (CMake Release, default GGML_NATIVE). Environment:
# THREADS (default "1,2"), PROMPT (512), GEN (32), REPEAT (2), LOOM_BENCH (the loom binary),
# LOOM_FLAGS (extra flags for loom's runs, e.g. "--quant-activations int8").
set -euo pipefail
bin="$1" out="$2"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
loom_bench="${LOOM_BENCH:-$root/build/cpu-release/bench/loom_engine_bench}"
threads="${THREADS:-1,2}" prompt="${PROMPT:-512}" gen="${GEN:-32}" repeat="${REPEAT:-2}"
read -r -a loom_flags <<<"${LOOM_FLAGS:-}"
mkdir -p "$out"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "loom commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo -dirty)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
  echo "flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_tile' | sort -u | xargs)"
  echo "llama.cpp: $("$bin/llama-bench" --version 2>&1 | head -2 | xargs)"
  echo "settings: threads=$threads prompt=$prompt gen=$gen repeat=$repeat loom_flags=${LOOM_FLAGS:-}"
} | tee "$out/machine.txt"
for file in "$@"; do
  name="$(basename "$file" .gguf)"
  echo "== $name: loom"
  "$loom_bench" run --model "$file" --threads "$threads" --batch 1 --prompt-len "$prompt" \
    --gen-len "$gen" --repeat "$repeat" "${loom_flags[@]}" --out "$out/loom-$name-b1.json" >/dev/null
  "$loom_bench" run --model "$file" --threads "$threads" --batch 8 --prompt-len 64 \
    --gen-len "$gen" --repeat "$repeat" "${loom_flags[@]}" --out "$out/loom-$name-b8.json" >/dev/null
  echo "== $name: llama.cpp (llama-bench: prefill $prompt, decode $gen at batch 1)"
  "$bin/llama-bench" -m "$file" -p "$prompt" -n "$gen" -t "$threads" -r "$repeat" -o json \
    >"$out/llamacpp-$name.json"
  # llama-bench's tg test decodes from an empty context, loom's batch-1 run after its prompt: the
  # decode that is compared starts at the same depth (the prompt's length) in both engines, and
  # llama.cpp runs with flash attention off and on (the summary takes the faster).
  echo "== $name: llama.cpp (llama-bench: decode $gen at batch 1 after $prompt tokens)"
  "$bin/llama-bench" -m "$file" -p 0 -n "$gen" -d "$prompt" -fa 0,1 -t "$threads" -r "$repeat" -o json \
    >"$out/llamacpp-depth-$name.json"
  echo "== $name: llama.cpp (llama-batched-bench: decode at batch 1 and 8)"
  for t in ${threads//,/ }; do
    "$bin/llama-batched-bench" -m "$file" -c 4096 -b 2048 -ub 512 -npp 64 -ntg "$gen" \
      -npl 1,8 -t "$t" --output-format jsonl 2>/dev/null >"$out/llamacpp-batched-$name-t$t.jsonl"
  done
done
echo "results in $out"
