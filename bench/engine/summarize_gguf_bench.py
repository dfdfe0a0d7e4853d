#!/usr/bin/env python3
"""Markdown table of a gguf_vs_llamacpp.sh run: loom and llama.cpp per file and thread count,
prefill and decode tokens/s (batch-1 decode after the prompt in both engines when the run has
llama.cpp's llamacpp-depth-*.json; older runs compared it with llama.cpp's decode from an empty
context), loom's decode as a fraction of the bandwidth roofline (quantized bytes
read per step / measured bandwidth) and loom / llama.cpp ratios.

    python bench/engine/summarize_gguf_bench.py OUT_DIR
"""
import glob
import json
import os
import sys


def loom_rows(path):
    text = open(path, encoding="utf-8").read()
    doc = json.loads(text[text.index("{\n"):]) if "{\n" in text else json.loads(text)
    return doc, {(r["threads"], r["batch"]): r for r in doc["results"]}


def main():
    out = sys.argv[1]
    print(open(os.path.join(out, "machine.txt"), encoding="utf-8").read().strip().replace("\n", "  \n"))
    print()
    print("| file | threads | loom prefill | llama.cpp prefill | ratio | loom decode b1 | "
          "llama.cpp decode b1 | ratio | loom b1 / roofline | loom decode b8 | llama.cpp decode b8 | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b1 in sorted(glob.glob(os.path.join(out, "loom-*-b1.json"))):
        name = os.path.basename(b1)[len("loom-"):-len("-b1.json")]
        doc1, r1 = loom_rows(b1)
        _, r8 = loom_rows(os.path.join(out, f"loom-{name}-b8.json"))
        peer = json.load(open(os.path.join(out, f"llamacpp-{name}.json"), encoding="utf-8"))
        depth_path = os.path.join(out, f"llamacpp-depth-{name}.json")
        depth = json.load(open(depth_path, encoding="utf-8")) if os.path.exists(depth_path) else None
        if depth is None:
            print(f"({name}: llama.cpp's batch-1 decode from an empty context, loom's after its prompt)\n")
        for threads in sorted({t for t, _ in r1}):
            pp = next((p["avg_ts"] for p in peer if p["n_threads"] == threads and p["n_gen"] == 0), 0)
            tg = next((p["avg_ts"] for p in peer if p["n_threads"] == threads and p["n_prompt"] == 0), 0)
            if depth is not None:  # the peer's decode after as many tokens as loom's prompt,
                # the faster of its flash-attention settings
                tg = max((p["avg_ts"] for p in depth if p["n_threads"] == threads and
                          p["n_depth"] == r1[(threads, 1)]["prompt_len"]), default=0)
            tg8 = 0.0
            batched = os.path.join(out, f"llamacpp-batched-{name}-t{threads}.jsonl")
            if os.path.exists(batched):
                for line in open(batched, encoding="utf-8"):
                    if not line.strip().startswith("{"):
                        continue
                    row = json.loads(line)
                    if row.get("pl") == 8:
                        tg8 = row["speed_tg"]
            a, b = r1[(threads, 1)], r8.get((threads, 8), {})
            ratio = lambda x, y: f"{x / y:.2f}x" if y else "-"
            print(f"| {name} | {threads} | {a['prefill_tokens_per_s']:.1f} | {pp:.1f} | "
                  f"{ratio(a['prefill_tokens_per_s'], pp)} | {a['decode_tokens_per_s']:.1f} | {tg:.1f} | "
                  f"{ratio(a['decode_tokens_per_s'], tg)} | {a['decode_fraction_of_roofline']:.2f} | "
                  f"{b.get('decode_tokens_per_s', 0):.1f} | {tg8:.1f} | "
                  f"{ratio(b.get('decode_tokens_per_s', 0), tg8)} |")
        bw = doc1.get("memory_bandwidth", {})
        if bw:
            print(f"\n{name}: loom's bandwidth probe {json.dumps(bw)}, "
                  f"decode bytes/step {a['decode_bytes_per_step'] / 1e6:.0f} MB\n")


if __name__ == "__main__":
    main()
