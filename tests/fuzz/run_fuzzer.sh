#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: run_fuzzer.sh FUZZER SECONDS SEED_DIR WORK_DIR [DICT]
# New inputs go to WORK_DIR/corpus (the committed seeds stay as they are); a finding is written to
# WORK_DIR/ and fails the run. DICT, when given, is a libFuzzer dictionary (tests/fuzz/dict/).
set -euo pipefail
fuzzer="$1" seconds="$2" seeds="$3" work="$4" dict="${5:-}"
dict_args=()
[[ -n "$dict" ]] && dict_args=(-dict="$dict")
mkdir -p "$work/corpus"
[[ -d "$seeds" ]] || { echo "run_fuzzer: no seed corpus at $seeds" >&2; exit 1; }
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/" "${dict_args[@]}" "$work/corpus" "$seeds"
