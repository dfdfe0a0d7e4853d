#!/bin/bash
# One round of the side-by-side: batch-1 decode with int8 activations, loom before and after the
# kernel change (two loom_engine_bench binaries), then llama-bench, file by file.
#   run.sh BEFORE_BENCH AFTER_BENCH LLAMA_CPP_BIN_DIR OUT_DIR ROUND FILE.gguf...
set -euo pipefail
before=$1 after=$2 llama=$3 out=$4 round=$5
shift 5
for f in "$@"; do
  n=$(basename "$f" .gguf)
  for v in before after; do
    bin=$before
    [[ $v == after ]] && bin=$after
    "$bin" run --model "$f" --threads 1,2 --batch 1 --prompt-len 64 --gen-len 64 --repeat 2 \
      --quant-activations int8 --out "$out/loom-$v-$n-$round.json" > /dev/null
  done
  LD_LIBRARY_PATH="$llama" "$llama/llama-bench" -m "$f" -p 0 -n 64 -t 1,2 -r 2 -o json \
    > "$out/llamacpp-$n-$round.json"
done
