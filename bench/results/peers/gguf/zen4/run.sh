#!/usr/bin/env bash
# The run recorded in this folder: two builds of loom ("A" before, "D" after) alternated, with
# llama.cpp beside them, on the same GGUF files.
#
#   run.sh A_BIN_DIR D_BIN_DIR LLAMA_CPP_BIN_DIR OUT_DIR FILE.gguf...
#
# A_BIN_DIR and D_BIN_DIR hold each build's matmul_quant_bench and loom_engine_bench;
# LLAMA_CPP_BIN_DIR holds llama-bench (bench/engine/build_llamacpp.sh).
set -euo pipefail
a="$1" d="$2" llama="$3" out="$4"
shift 4
mkdir -p "$out"
for r in 1 2; do
  for x in A D; do
    bin="$a"; [[ "$x" == D ]] && bin="$d"
    "$bin/matmul_quant_bench" --benchmark_filter='BM_Roofline|BM_QuantGemvSweep/[0-7]/[12]/1/0' \
      --benchmark_out="$out/mq-$x-$r.json" \
      --benchmark_out_format=json >/dev/null
  done
done
for file in "$@"; do
  n="$(basename "$file" .gguf)"
  for r in 1 2; do
    for x in A D; do
      bin="$a"; [[ "$x" == D ]] && bin="$d"
      "$bin/loom_engine_bench" run --model "$file" --threads 1,2 --batch 1 --prompt-len 64 \
        --gen-len 64 --repeat 2 --out "$out/eng-$x-$n-$r.json" >/dev/null
      "$bin/loom_engine_bench" run --model "$file" --threads 1,2 --batch 1 --prompt-len 64 \
        --gen-len 64 --repeat 2 --quant-activations int8 --out "$out/eng-$x-int8-$n-$r.json" \
        >/dev/null
    done
    "$llama/llama-bench" -m "$file" -p 64 -n 64 -t 1,2 -r 2 -o json >"$out/llamacpp-$n-$r.json"
  done
done
