#!/usr/bin/env python3
"""The expert-cache benchmark: loomd serving a MoE checkpoint made by make_moe_checkpoint.py,
with the expert cache at several sizes and policies, on a workload with skewed topics.

Per configuration (a fresh loomd each, the page cache dropped first when this runs as root):
  1. warm-up: --warmup requests one at a time, so the cache holds something and the activation
     policy has past requests' traces;
  2. latency: --requests requests one at a time; per-token latency is the gap between streamed
     tokens, TTFT the first one;
  3. throughput (with --concurrency > 0): --requests more, that many at a time; output tokens/s.
Each request takes a topic (Zipf over the checkpoint's topics, --topic-zipf), a prompt of
--prompt-len tokens of that topic, and samples --output-len tokens at temperature 1 with its own
seed, so every configuration runs the same requests; the tokens of phase 2 are compared across
configurations (misses must be lossless). The expert-cache counters come from /metrics, per phase:
hit ratio = hits / (hits + misses); prefetch accuracy = used / issued.

With --llamacpp (the llamacpp_generate binary from bench/engine/build_llamacpp.sh) the same
warm-up and latency requests also run through llama.cpp on the same GGUF file (mmap, one process,
page cache dropped first), after the loom configurations, for the larger-than-RAM comparison.

    expert_cache_bench.py --loomd build/cpu-release/bin/loomd --model DIR_OR_GGUF \\
        --configs resident,activation:100,activation:50,lru:50,... --out-json F --out-md F
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
import http.client
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
import cluster_lib as lib  # noqa: E402

COUNTERS = {
    "hits": "loom_expert_cache_hits_total", "misses": "loom_expert_cache_misses_total",
    "evictions": "loom_expert_cache_evictions_total",
    "loaded_bytes": "loom_expert_cache_loaded_bytes_total",
    "load_seconds": "loom_expert_cache_load_seconds_total",
    "wait_seconds": "loom_expert_cache_wait_seconds_total",
}
OUTCOMES = ("issued", "used", "wasted", "cancelled", "dropped")


def routing(model):
    path = os.path.join(model, "routing.json") if os.path.isdir(model) else model + ".routing.json"
    with open(path) as f:
        return json.load(f)


def expert_bytes(model):
    """Bytes of one routed expert (gate, up and down)."""
    if os.path.isdir(model):
        with open(os.path.join(model, "config.json")) as f:
            c = json.load(f)
        width = {"bfloat16": 2, "float16": 2, "float32": 4}[c.get("torch_dtype", "bfloat16")]
        return 3 * c["hidden_size"] * c["intermediate_size"] * width
    import gguf
    reader = gguf.GGUFReader(model)
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_up_exps.weight")
    experts = int(t.shape[-1])
    return 3 * int(t.n_bytes) // experts


def make_requests(info, count, args, seed):
    rng = random.Random(seed)
    topics = info["num_topics"]
    weights = [1.0 / (t + 1) ** args.topic_zipf for t in range(topics)]
    order = list(range(topics))
    random.Random(args.seed).shuffle(order)  # which topic is most popular
    first = info["first_plain_token"]
    out = []
    for i in range(count):
        topic = order[rng.choices(range(topics), weights)[0]]
        prompt = [rng.randrange(first // topics + 1, info["vocab_size"] // topics) * topics + topic
                  for _ in range(args.prompt_len)]
        out.append({"topic": topic, "prompt": prompt, "seed": seed * 100003 + i})
    return out


def stream(port, request, args):
    """One streamed completion; its token ids and arrival times."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    body = json.dumps({"model": "m", "prompt": request["prompt"], "max_tokens": args.output_len,
                       "temperature": 1.0, "seed": request["seed"], "stream": True,
                       "logprobs": 0, "ignore_eos": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                                   "Authorization": f"Bearer {lib.KEY}"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    times, tokens = [], []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            raise RuntimeError(event["error"])
        for choice in event.get("choices", []):
            lp = choice.get("logprobs") or {}
            for tok in lp.get("tokens", []):
                tokens.append(tok)
                times.append(time.perf_counter())
    conn.close()
    return {"ttft": times[0] - t0, "gaps": [b - a for a, b in zip(times, times[1:])],
            "tokens": tokens}


def counters(port):
    out = {k: lib.metric_sum(port, name) for k, name in COUNTERS.items()}
    for o in OUTCOMES:
        out["prefetch_" + o] = lib.metric_sum(port, "loom_expert_prefetches_total", f'outcome="{o}"')
    return out


def delta(after, before):
    d = {k: after[k] - before[k] for k in after}
    lookups = d["hits"] + d["misses"]
    d["hit_ratio"] = d["hits"] / lookups if lookups else float("nan")
    d["prefetch_accuracy"] = (d["prefetch_used"] / d["prefetch_issued"]
                              if d["prefetch_issued"] else float("nan"))
    return d


def drop_page_cache():
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def latency_summary(results):
    gaps = [g for r in results for g in r["gaps"]]
    return {"per_token_ms_mean": 1e3 * sum(gaps) / len(gaps),
            "per_token_ms_p50": 1e3 * lib.percentile(gaps, 50),
            "per_token_ms_p90": 1e3 * lib.percentile(gaps, 90),
            "ttft_ms_mean": 1e3 * sum(r["ttft"] for r in results) / len(results),
            "tokens": len(gaps)}


def run_loom(args, config, info, warmup, measured, throughput):
    policy, _, pct = config.partition(":")
    extra = ["--threads", str(args.threads)] if args.threads else []
    extra += args.loomd_arg
    if policy == "resident":
        cache_mb, pct = 0, 100
    else:
        pct = float(pct)
        total = info["num_layers"] * info["num_experts"]
        slots = max(1, math.ceil(total * pct / 100.0))
        # A slot rounds each of the expert's 3 parts out to whole pages (ExpertStore).
        cache_mb = math.ceil(slots * (args.expert_bytes + 3 * 8192) / 2**20)
        extra += ["--expert-cache-policy", policy]
    dropped = drop_page_cache()
    started = time.perf_counter()
    proc = lib.start_instance(args.loomd, args.model, "--expert-cache-mb", str(cache_mb),
                              *extra)
    load_s = time.perf_counter() - started
    out = {"config": config, "policy": policy, "residency_pct": pct, "expert_cache_mb": cache_mb,
           "page_cache_dropped": dropped, "start_s": round(load_s, 2)}
    try:
        if policy != "resident":
            # Whole MiB of budget can hold more slots than asked for: report what it holds.
            slots = lib.metric_sum(proc.port, "loom_expert_cache_slots")
            out["slots"] = int(slots)
            out["residency_pct"] = round(100.0 * slots / (info["num_layers"] * info["num_experts"]), 1)
        for r in warmup:
            stream(proc.port, r, args)
        before = counters(proc.port)
        results = [stream(proc.port, r, args) for r in measured]
        out["latency"] = latency_summary(results)
        out["latency_cache"] = delta(counters(proc.port), before)
        out["tokens"] = [r["tokens"] for r in results]
        if throughput:
            before = counters(proc.port)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                done = list(pool.map(lambda r: stream(proc.port, r, args), throughput))
            wall = time.perf_counter() - t0
            out["throughput"] = {"concurrency": args.concurrency,
                                 "output_tokens_per_s": sum(len(r["tokens"]) for r in done) / wall,
                                 "wall_s": wall}
            out["throughput_cache"] = delta(counters(proc.port), before)
    finally:
        proc.stop()
    return out


def run_llamacpp(args, warmup, measured):
    """The warm-up and latency requests through one llamacpp_generate process (one model load)."""
    dropped = drop_page_cache()
    lines = "".join(f"{r['seed']} {args.output_len} {' '.join(map(str, r['prompt']))}\n"
                    for r in warmup + measured)
    done = subprocess.run([args.llamacpp, args.model, str(args.threads or os.cpu_count()), "1.0"],
                          input=lines, capture_output=True, text=True, check=True)
    results = [json.loads(l) for l in done.stdout.splitlines() if l.startswith("{")]
    assert len(results) == len(warmup) + len(measured), done.stderr[-2000:]
    results = [{"ttft": r["prefill_s"], "gaps": r["token_s"]} for r in results[len(warmup):]]
    return {"config": "llama.cpp (mmap)", "page_cache_dropped": dropped,
            "latency": latency_summary(results)}


def fmt(x, digits=1):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown(report):
    rows = report["runs"]
    base = next((r["latency"]["per_token_ms_mean"] for r in rows if r["config"] == "resident"), None)
    lines = ["| configuration | experts resident | per-token ms (mean / p50 / p90) | × all-resident "
             "| TTFT ms | tok/s at concurrency | hit ratio | prefetches issued / used / wasted "
             "| prefetch accuracy | GB read | tokens = all-resident |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat, cache = r["latency"], r.get("latency_cache")
        tp = r.get("throughput")
        ratio = lat["per_token_ms_mean"] / base if base else None
        pf = (f"{cache['prefetch_issued']:.0f} / {cache['prefetch_used']:.0f} / "
              f"{cache['prefetch_wasted']:.0f}" if cache else "–")
        lines.append(
            f"| {r['config']} | {fmt(r.get('residency_pct'), 0)} % | "
            f"{fmt(lat['per_token_ms_mean'])} / {fmt(lat['per_token_ms_p50'])} / "
            f"{fmt(lat['per_token_ms_p90'])} | {fmt(ratio, 2)} | {fmt(lat['ttft_ms_mean'], 0)} | "
            f"{fmt(tp['output_tokens_per_s'], 2) if tp else '–'} | "
            f"{fmt(cache['hit_ratio'], 3) if cache else '–'} | {pf} | "
            f"{fmt(cache['prefetch_accuracy'], 2) if cache else '–'} | "
            f"{fmt(cache['loaded_bytes'] / 1e9, 2) if cache else '–'} | {r.get('identical', '–')} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True, help="folder or .gguf from make_moe_checkpoint.py")
    p.add_argument("--configs", default="resident,activation:100,lru:100,lfu:100,activation:50,"
                   "lru:50,lfu:50,activation:25,lru:25,lfu:25",
                   help="resident (no expert cache) or POLICY:PERCENT_OF_EXPERTS, comma-separated")
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--requests", type=int, default=12)
    p.add_argument("--concurrency", type=int, default=4, help="0 skips the throughput phase")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--topic-zipf", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=0, help="compute threads (0: loomd's default)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--loomd-arg", action="append", default=[],
                   help="one more loomd argument, repeatable (--loomd-arg=--kv-cache-mb=256)")
    p.add_argument("--llamacpp", default="", help="llamacpp_generate binary (GGUF models)")
    p.add_argument("--out-json", default="")
    p.add_argument("--out-md", default="")
    args = p.parse_args()
    info = routing(args.model)
    args.expert_bytes = expert_bytes(args.model)
    warmup = make_requests(info, args.warmup, args, args.seed)
    measured = make_requests(info, args.requests, args, args.seed + 1)
    throughput = make_requests(info, args.requests, args, args.seed + 2) if args.concurrency else []
    runs = []
    for config in filter(None, args.configs.split(",")):
        run = run_loom(args, config, info, warmup, measured, throughput)
        runs.append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "tokens"}), flush=True)
    reference = next((r["tokens"] for r in runs if r["config"] == "resident"),
                     runs[0]["tokens"] if runs else None)
    for r in runs:
        r["identical"] = "yes" if r["tokens"] == reference else "NO"
    if args.llamacpp:
        run = run_llamacpp(args, warmup, measured)
        runs.append(run)
        print(json.dumps(run), flush=True)
    settings = lib.settings(args)
    for key in ("out_json", "out_md", "llamacpp"):
        settings[key] = os.path.basename(settings[key])
    report = {"machine": lib.machine(), "settings": settings,
              "expert_bytes": args.expert_bytes,
              "experts": info["num_layers"] * info["num_experts"], "runs": runs}
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(report, f, indent=1)
    table = markdown(report)
    if args.out_md:
        with open(args.out_md, "w") as f:
            f.write(table)
    print(table)


if __name__ == "__main__":
    main()
