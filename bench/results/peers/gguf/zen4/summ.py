#!/usr/bin/env python3
"""Prints the tables of README.md from the JSON files of run.sh: python3 summ.py [DIR]."""
import glob
import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def engine(path):
    d = json.load(open(path))
    runs = d["results"] if "results" in d else d["runs"]
    return {x["threads"]: x["decode_tokens_per_s"] for x in runs}


def llamacpp(path):
    return {x["n_threads"]: x["avg_ts"] for x in json.load(open(path)) if x["n_gen"] > 0}


for name in sorted({os.path.basename(p)[len("llamacpp-"):-len("-1.json")]
                    for p in glob.glob(f"{D}/llamacpp-*-1.json")}):
    for t in (1, 2):
        row = {}
        for tag in ("A", "D", "A-int8", "D-int8"):
            files = sorted(glob.glob(f"{D}/eng-{tag}-{name}-*.json"))
            row[tag] = [round(engine(f)[t], 1) for f in files]
        peer = [round(llamacpp(f)[t], 1) for f in sorted(glob.glob(f"{D}/llamacpp-{name}-*.json"))]
        print(name, f"threads={t}", row, "llama.cpp", peer)
for path in sorted(glob.glob(f"{D}/mq-*.json")):
    rates = [f"{b['name'].split('/')[1]}/{b['name'].split('/')[2]}:{b.get('GB/s', 0):.1f}"
             for b in json.load(open(path))["benchmarks"] if "Sweep" in b["name"]]
    print(os.path.basename(path), " ".join(rates))
