#!/usr/bin/env python3
"""Prints the decode table of this folder's JSON files: tokens/s per file, threads and engine,
one figure per round."""
import collections
import glob
import json
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(folder, "loom-*.json"))):
    parts = os.path.basename(path)[:-5].split("-")
    version, name = parts[1], "-".join(parts[2:-1])
    for r in json.load(open(path))["results"]:
        rows[(name, r["threads"], "loom " + version)].append(r["decode_tokens_per_s"])
for path in sorted(glob.glob(os.path.join(folder, "llamacpp-*.json"))):
    name = "-".join(os.path.basename(path)[:-5].split("-")[1:-1])
    for r in json.load(open(path)):
        if r["n_gen"] > 0:
            rows[(name, r["n_threads"], "llama.cpp")].append(r["avg_ts"])
print("| file | threads | loom before | loom after | llama.cpp | after / llama.cpp |")
print("|---|---:|---:|---:|---:|---:|")
for name, threads in sorted({(k[0], k[1]) for k in rows}):
    get = lambda engine: rows.get((name, threads, engine), [])
    before, after, peer = get("loom before"), get("loom after"), get("llama.cpp")
    fmt = lambda v: ", ".join(f"{x:.1f}" for x in v)
    ratio = f"{max(after) / max(peer):.2f}x" if after and peer else "-"
    print(f"| {name} | {threads} | {fmt(before)} | {fmt(after)} | {fmt(peer)} | {ratio} |")
