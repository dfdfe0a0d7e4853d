#!/usr/bin/env bash
# The run recorded in this folder: prefill of GGUF files by loom (default f32 arithmetic, and
# --fast-bf16-matmul) and by llama.cpp, alternated in the same minutes, plus the kernel-level
# quantized GEMM at both precisions.
#
#   run.sh LOOM_BIN_DIR LLAMA_CPP_BIN_DIR OUT_DIR ROUNDS FILE.gguf...
#
# LOOM_BIN_DIR holds the cpu-release build's matmul_quant_bench and loom_engine_bench;
# LLAMA_CPP_BIN_DIR holds llama-bench (bench/engine/build_llamacpp.sh).
set -euo pipefail
bin="$1" llama="$2" out="$3" rounds="$4"
shift 4
mkdir -p "$out"
"$bin/matmul_quant_bench" --benchmark_filter='BM_QuantGemm/[0-57]/0/[12]/[01]' \
  --benchmark_out="$out/gemm.json" --benchmark_out_format=json >/dev/null
for file in "$@"; do
  n="$(basename "$file" .gguf)"
  for r in $(seq 1 "$rounds"); do
    "$bin/loom_engine_bench" run --model "$file" --threads 1,2 --batch 1 --prompt-len 512 \
      --gen-len 1 --repeat 2 --out "$out/loom-$n-$r.json" >/dev/null
    "$bin/loom_engine_bench" run --model "$file" --threads 1,2 --batch 1 --prompt-len 512 \
      --gen-len 1 --repeat 2 --fast-bf16-matmul --out "$out/loom-fast-$n-$r.json" >/dev/null
    "$llama/llama-bench" -m "$file" -p 512 -n 0 -t 1,2 -r 2 -o json >"$out/llamacpp-$n-$r.json"
  done
done
