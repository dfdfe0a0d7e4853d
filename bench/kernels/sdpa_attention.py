#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on the shapes of loom's attention benchmarks.

The comparison point for bench/kernels/cuda_decode_attention_bench.cc (decode) and for a future
prefill kernel. Llama-3-8B heads: 32 query heads, 8 kv heads, head_dim 128, bf16.

  decode   q [batch, 32, 1, 128] over contiguous K/V [batch, 8, context, 128], batch 1/8/64/256 x
           context 1K/8K/32K (combinations over 8 GiB of K/V left out), is_causal=False (one
           query row sees every key; torch's causal mask is top-left aligned, which would hide
           all but key 0). GQA through enable_gqa=True (PyTorch >= 2.5); on older versions the
           kv heads are repeated beforehand (outside the timing), which makes SDPA read 4x the
           bytes: the JSON says which ("gqa": "enable_gqa" or "repeat_kv"). GB/s counts the
           logical bytes, as the C++ benchmark does: K + V (bf16) + q + out (bf16 here).
           When one call reads less than twice the L2, calls cycle through several K/V copies.
  prefill  causal self-attention, sequence 512/2K/4K/8K, batch 8192 // sequence (8K tokens per
           call), TFLOP/s with FLOPs = 4 * q_len * kv_len * head_dim * heads * batch / 2.

Each shape: `--warmup` calls, then `--iters` calls timed one by one with CUDA events; the median
is reported. Writes JSON to --out and prints one line per shape.

  python3 bench/kernels/sdpa_attention.py --out sdpa.json
"""

import argparse
import json
import math
import statistics
import sys

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
MAX_KV_BYTES = 8 * 2**30


def time_calls(torch, fn, warmup, iters):
    """Median milliseconds of fn(i) over `iters` calls, each timed with its own CUDA events."""
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(i)
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(stop) for start, stop in zip(starts, stops))


def sdpa_supports_enable_gqa(torch, sdpa):
    q = torch.zeros(1, 4, 1, 64, device="cuda", dtype=torch.bfloat16)
    kv = torch.zeros(1, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
    try:
        sdpa(q, kv, kv, enable_gqa=True)
        return True
    except TypeError:
        return False


def bench_decode(torch, sdpa, args, l2_bytes, gqa_native):
    results = []
    for batch in (1, 8, 64, 256):
        for context in (1024, 8192, 32768):
            kv_bytes = 2 * batch * KV_HEADS * context * HEAD_DIM * 2
            if kv_bytes > MAX_KV_BYTES:
                continue
            copies = max(1, min(64, math.ceil(2 * l2_bytes / kv_bytes)))
            q = torch.randn(batch, HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            ks, vs = [], []
            for _ in range(copies):
                k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device="cuda",
                                dtype=torch.bfloat16)
                v = torch.randn_like(k)
                if not gqa_native:
                    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
                    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
                ks.append(k)
                vs.append(v)

            def call(i):
                c = i % copies
                if gqa_native:
                    return sdpa(q, ks[c], vs[c], is_causal=False, enable_gqa=True)
                return sdpa(q, ks[c], vs[c], is_causal=False)

            ms = time_calls(torch, call, args.warmup, args.iters)
            bytes_moved = kv_bytes + 2 * batch * HEADS * HEAD_DIM * 2
            row = {"batch": batch, "context": context, "ms": ms,
                   "GBps": bytes_moved / (ms * 1e-3) / 1e9, "MiB": bytes_moved / 2**20,
                   "copies": copies, "gqa": "enable_gqa" if gqa_native else "repeat_kv"}
            results.append(row)
            print(f"decode  batch {batch:4d} context {context:6d}: {ms:8.4f} ms "
                  f"{row['GBps']:8.1f} GB/s", flush=True)
            del q, ks, vs
            torch.cuda.empty_cache()
    return results


def bench_prefill(torch, sdpa, args, gqa_native):
    results = []
    for seq in (512, 2048, 4096, 8192):
        batch = max(1, 8192 // seq)
        q = torch.randn(batch, HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, KV_HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        if not gqa_native:
            k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)

        def call(_):
            if gqa_native:
                return sdpa(q, k, v, is_causal=True, enable_gqa=True)
            return sdpa(q, k, v, is_causal=True)

        ms = time_calls(torch, call, args.warmup, args.iters)
        flops = 4.0 * seq * seq * HEAD_DIM * HEADS * batch / 2
        row = {"batch": batch, "seq_len": seq, "tokens": batch * seq, "ms": ms,
               "TFLOPs": flops / (ms * 1e-3) / 1e12,
               "gqa": "enable_gqa" if gqa_native else "repeat_kv"}
        results.append(row)
        print(f"prefill batch {batch:4d} seq_len {seq:6d}: {ms:8.4f} ms "
              f"{row['TFLOPs']:8.1f} TFLOP/s", flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()

    import torch  # imported here so --help works without torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("sdpa_attention.py: no CUDA device; nothing to measure")
        return 0
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 50 * 2**20)
    sdpa = F.scaled_dot_product_attention
    gqa_native = sdpa_supports_enable_gqa(torch, sdpa)
    report = {
        "device": props.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": "bf16",
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "gqa": "enable_gqa" if gqa_native else "repeat_kv",
        "warmup": args.warmup,
        "iters": args.iters,
        "statistic": "median",
    }
    with torch.inference_mode():
        report["decode"] = bench_decode(torch, sdpa, args, l2_bytes, gqa_native)
        report["prefill"] = bench_prefill(torch, sdpa, args, gqa_native)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
