#!/usr/bin/env python3
"""The expert-cache benchmark's tools on a tiny Mixtral-shaped checkpoint:
make_moe_checkpoint.py writes it (safetensors and Q4_0 GGUF), its router is topical as described
(a request of one topic mostly uses that topic's highest-weight experts), and
expert_cache_bench.py runs loomd with no cache and with small caches under two policies, gets the
same tokens from each, and reports the cache's counters."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE = os.path.join(ROOT, "bench", "experts", "make_moe_checkpoint.py")
BENCH = os.path.join(ROOT, "bench", "experts", "expert_cache_bench.py")


def check_topical_router(folder):
    """Layer 0's router on the embeddings alone: each topic's tokens go mostly to the experts the
    routing description weights highest for that topic."""
    info = json.load(open(os.path.join(folder, "routing.json")))
    raw = np.memmap(os.path.join(folder, "model.safetensors"), dtype=np.uint8, mode="r")
    n = int(np.frombuffer(raw[:8].tobytes(), dtype="<u8")[0])
    header = json.loads(raw[8:8 + n].tobytes())

    def tensor(name):
        begin, end = header[name]["data_offsets"]
        bits = raw[8 + n + begin:8 + n + end].view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(header[name]["shape"])

    embed = tensor("model.embed_tokens.weight")
    x = embed / np.sqrt((embed ** 2).mean(axis=1, keepdims=True))
    topics, k = info["num_topics"], info["top_k"]
    logw = np.array(info["log_weights"])
    shares = []
    for layer in range(info["num_layers"]):
        router = tensor(f"model.layers.{layer}.block_sparse_moe.gate.weight")
        top = np.argsort(-(x @ router.T), axis=1)[:, :k]
        for t in range(topics):
            favoured = np.argsort(-logw[layer, t])[:k]
            picks = top[np.arange(len(top)) % topics == t].ravel()
            shares.append(np.isin(picks, favoured).mean())
    # Routing blind to the structure would put k / num_experts (here 0.5) of the picks there.
    assert np.mean(shares) > 0.62, shares


def run_bench(loomd, model, out):
    subprocess.run([sys.executable, BENCH, "--loomd", loomd, "--model", model,
                    "--configs", "resident,activation:50,lru:25", "--warmup", "2",
                    "--requests", "2", "--concurrency", "2", "--prompt-len", "8",
                    "--output-len", "6", "--threads", "1", "--out-json", out],
                   check=True, stdout=subprocess.DEVNULL)
    report = json.load(open(out))
    runs = report["runs"]
    assert [r["config"] for r in runs] == ["resident", "activation:50", "lru:25"]
    for r in runs:
        assert r["identical"] == "yes", r["config"]
        assert r["latency"]["tokens"] == 2 * 5
        assert r["throughput"]["output_tokens_per_s"] > 0
    for r in runs[1:]:
        cache = r["latency_cache"]
        assert cache["hits"] + cache["misses"] > 0
        assert 0 <= cache["hit_ratio"] <= 1
    # 25 % of 8 experts is 2 slots: lookups miss and load.
    assert runs[1]["slots"] == 4 and runs[2]["slots"] == 2
    assert runs[2]["latency_cache"]["misses"] > 0 and runs[2]["latency_cache"]["loaded_bytes"] > 0
    assert report["experts"] == 2 * 4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "tiny")
        gguf_file = os.path.join(tmp, "tiny-q4_0.gguf")
        for fmt, out in (("safetensors", folder), ("gguf-q4_0", gguf_file)):
            subprocess.run([sys.executable, MAKE, "--shape", "mixtral-tiny", "--format", fmt,
                            "--out", out], check=True, stdout=subprocess.DEVNULL)
        check_topical_router(folder)
        run_bench(args.loomd, folder, os.path.join(tmp, "st.json"))
        run_bench(args.loomd, gguf_file, os.path.join(tmp, "gguf.json"))
    print("ok")


if __name__ == "__main__":
    main()
