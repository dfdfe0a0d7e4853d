#!/usr/bin/env python3
"""Prints the tables of README.md from the JSON files of run.sh: python3 summ.py [DIR]."""
import glob
import json
import os
import statistics
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def loom(path):
    return {x["threads"]: x["prefill_tokens_per_s"] for x in json.load(open(path))["results"]}


def llamacpp(path):
    return {x["n_threads"]: x["avg_ts"] for x in json.load(open(path)) if x["n_prompt"] > 0}


def cell(values):
    return f"{max(values):.1f} ({statistics.median(values):.1f})"


print("| file | threads | loom (f32) | loom --fast-bf16-matmul | llama.cpp | fast / llama.cpp |")
print("|---|---:|---:|---:|---:|---:|")
for name in sorted({os.path.basename(p)[len("llamacpp-"):].rsplit("-", 1)[0]
                    for p in glob.glob(f"{D}/llamacpp-*.json")}):
    for t in (1, 2):
        exact = [loom(f)[t] for f in sorted(glob.glob(f"{D}/loom-{name}-*.json"))]
        fast = [loom(f)[t] for f in sorted(glob.glob(f"{D}/loom-fast-{name}-*.json"))]
        peer = [llamacpp(f)[t] for f in sorted(glob.glob(f"{D}/llamacpp-{name}-*.json"))]
        print(f"| {name} | {t} | {cell(exact)} | {cell(fast)} | {cell(peer)} | "
              f"{max(fast) / max(peer):.2f}x |")
print()
print("| weights | shape | threads | GFLOP/s, f32 panel GEMM | GFLOP/s, vdpbf16ps |")
print("|---|---|---:|---:|---:|")
rows = {}
for b in json.load(open(f"{D}/gemm.json"))["benchmarks"]:
    label = b["label"].split()
    rows.setdefault((label[0], label[1], label[3]), {})[label[4]] = b["GFLOP/s"]
for (fmt, shape, threads), v in rows.items():
    print(f"| {fmt} | {shape} | {threads.split('=')[1]} | {v.get('highest', 0):.0f} | "
          f"{v.get('bf16', 0):.0f} |")
