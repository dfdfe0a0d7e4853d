#!/usr/bin/env python3
"""Serving under skewed, bursty load: round-robin behind a balancer, against load-aware dispatch
through the manager, against dispatch plus live migration (Llumnix's comparison).

--instances loomd instances on loopback ports (one thread and a small KV cache each, so memory
runs out and requests queue or are preempted; each pinned to its own core, so that an idle
instance's compute is not lent to a busy one, as with separate machines), and one workload
replayed identically in every mode:
Gamma inter-arrival times (coefficient of variation --cv: bursts), prompt lengths and output
lengths from long-tailed (Pareto) distributions. The client sends request i to the same instance
in every mode, as a round-robin balancer would: per request (i mod --instances), or, with
--clients N, per connection (N clients of Zipf-skewed shares, client c's connection on instance
c mod --instances: an L4 balancer or one HTTP/2 channel per client). What differs is what the
instances do with it:
  round-robin  instances alone (no manager): each runs what it receives;
  dispatch     with a manager: the receiving instance asks it where to run each new request
               (least loaded by freeness among the top k), no load-balancing migration;
  migration    the same, plus the manager pairing overloaded instances with free ones and
               moving running requests (and freeing preempted ones) live.
Reported per mode: TTFT mean and P99, TPOT mean and P99, end-to-end P99, failures, preemptions,
migrations committed, requests forwarded.

  python3 bench/cluster/skewed_serving.py --loomd build/cpu-release/bin/loomd \
      --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf --requests 120 --rate 1.5 \
      --out bench/results/cluster_serving.json
"""
import argparse
import concurrent.futures
import json
import math
import os
import random
import statistics
import threading
import time

import cluster_lib as lib

WORDS = ("sea ship light keeper storm night harbour wave rock lamp tide wind coast fog bell "
         "island rope gull sail anchor").split()


def workload(args):
    rng = random.Random(args.seed)
    shape = 1.0 / (args.cv ** 2)  # Gamma: CV = 1 / sqrt(shape)
    scale = 1.0 / (args.rate * shape)
    t = 0.0
    reqs = []
    for _ in range(args.requests):
        t += rng.gammavariate(shape, scale)
        prompt_words = min(args.max_prompt, int(args.min_prompt * rng.paretovariate(args.alpha)))
        out = min(args.max_output, int(args.min_output * rng.paretovariate(args.alpha)))
        prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
        reqs.append({"at": t, "prompt": prompt, "max_tokens": max(out, 1)})
    # Where the balancer sends each request. Per request (--clients 0): i mod instances. Per
    # connection (--clients N): request i comes from client c with probability proportional to
    # 1 / (c + 1)^skew, over that client's one connection, which the balancer placed on instance
    # c mod instances (an L4 balancer, or gRPC's HTTP/2 channel, balances connections, not
    # requests). Drawn from their own generator, so the lengths and times do not depend on it.
    if args.clients > 0:
        crng = random.Random(args.seed + 1)
        weights = [1.0 / (c + 1) ** args.client_skew for c in range(args.clients)]
        for r in reqs:
            r["client"] = crng.choices(range(args.clients), weights)[0]
    for i, r in enumerate(reqs):
        r["to"] = (r["client"] if args.clients > 0 else i) % args.instances
    return reqs


def finite(value, digits):
    return round(value, digits) if math.isfinite(value) else None


def poll_loads(port, path, start, stop):
    """Writes the manager's view of every instance (GET /v1/instances: its load as last
    reported, with the charges of dispatches since) every 0.1 s, one JSON line each, with the
    time since the first arrival."""
    with open(path, "w", encoding="utf-8") as out:
        while not stop.wait(0.1):
            try:
                view = lib.get_json(port, "/v1/instances")
            except (OSError, ValueError):  # not answering, or not JSON (stopping)
                continue
            out.write(json.dumps({"t": round(time.perf_counter() - start, 3), **view}) + "\n")


def run_mode(mode, reqs, args):
    manager = None
    instances = []
    common = ["--threads", "1", "--kv-cache-mb", str(args.kv_cache_mb),
              "--max-num-seqs", str(args.max_num_seqs)]
    try:
        if mode != "round-robin":
            manager = lib.start_manager(
                args.loomd, "--manager-pair-interval-ms", "200",
                "--manager-dispatch-top-k", str(args.top_k),
                "--manager-migrate-out-below", str(args.migrate_out_below),
                "--manager-migrate-in-above", str(args.migrate_in_above),
                f"--manager-migration={'true' if mode == 'migration' else 'false'}",
                log=f"{args.logs}-{mode}-manager.log" if args.logs else None)
            common += ["--cluster-manager", f"127.0.0.1:{manager.grpc_port}",
                       "--cluster-report-interval-ms", "50"]
        cores = os.cpu_count() or 1
        for i in range(args.instances):
            instances.append(lib.start_instance(args.loomd, args.model, *common,
                                                "--instance-id", f"i{i}",
                                                cpu=i % cores if args.pin else None,
                                                log=f"{args.logs}-{mode}-i{i}.log"
                                                if args.logs else None))
        time.sleep(0.5)  # first load reports
        results = [None] * len(reqs)
        start = time.perf_counter()
        stop_polling = threading.Event()
        if manager is not None and args.logs:
            threading.Thread(target=poll_loads, daemon=True,
                             args=(manager.port, f"{args.logs}-{mode}-loads.jsonl", start,
                                   stop_polling)).start()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(reqs)) as pool:
            futures = []
            for i, r in enumerate(reqs):
                delay = start + r["at"] - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                port = instances[r["to"]].port
                futures.append((i, pool.submit(lib.timed_stream, port, r["prompt"],
                                               r["max_tokens"])))
            for i, f in futures:
                results[i] = f.result()
        wall = time.perf_counter() - start
        stop_polling.set()
        stats = {
            "preemptions": sum(lib.metric_sum(x.port, "loom_num_preemptions_total")
                               for x in instances),
            "migrations": sum(lib.metric_sum(x.port, "loom_migrations_total",
                                             'outcome="committed"') for x in instances),
            "migrations_aborted": sum(lib.metric_sum(x.port, "loom_migrations_total",
                                                     'outcome="aborted"') for x in instances),
            "forwarded": sum(lib.metric_sum(x.port, "loom_requests_forwarded_total")
                             for x in instances),
        }
    finally:
        for x in instances:
            x.stop()
        if manager is not None:
            manager.stop()
    ok = [r for r in results if r["ok"] and r["chunks"] > 0]
    ttft = [r["ttft"] for r in ok]
    tpot = [r["tpot"] for r in ok if r["tpot"] == r["tpot"]]
    e2e = [r["times"][-1] - r["times"][0] + r["ttft"] for r in ok]
    return {
        "mode": mode,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "wall_s": wall,
        "ttft_mean_s": statistics.mean(ttft),
        "ttft_p99_s": lib.percentile(ttft, 99),
        "tpot_mean_ms": 1e3 * statistics.mean(tpot),
        "tpot_p99_ms": 1e3 * lib.percentile(tpot, 99),
        "e2e_p99_s": lib.percentile(e2e, 99),
        **stats,
        # Per request, in arrival order: where it was sent, its lengths and its timings.
        # A timing the request never had (it failed, or produced one token) is null.
        "requests": [{"at_s": round(r["at"], 3), "sent_to": r["to"],
                      "prompt_words": len(r["prompt"].split()), "max_tokens": r["max_tokens"],
                      "ok": x["ok"], "chunks": x["chunks"], "ttft_s": finite(x["ttft"], 4),
                      "tpot_ms": finite(1e3 * x["tpot"], 2)}
                     for r, x in zip(reqs, results)],
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--pin", type=int, default=1, help="pin instance i to core i mod cores")
    p.add_argument("--requests", type=int, default=120)
    p.add_argument("--rate", type=float, default=1.5, help="requests per second (mean)")
    p.add_argument("--cv", type=float, default=3.0, help="of the Gamma inter-arrival times")
    p.add_argument("--alpha", type=float, default=1.5, help="Pareto shape of the lengths")
    p.add_argument("--min-prompt", type=int, default=16, help="words")
    p.add_argument("--max-prompt", type=int, default=600, help="words")
    p.add_argument("--min-output", type=int, default=24)
    p.add_argument("--max-output", type=int, default=600)
    p.add_argument("--kv-cache-mb", type=int, default=24)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--top-k", type=int, default=1, help="the manager's dispatch top-k")
    p.add_argument("--migrate-out-below", type=float, default=3.0)
    p.add_argument("--migrate-in-above", type=float, default=10.0)
    p.add_argument("--modes", default="round-robin,dispatch,migration")
    p.add_argument("--clients", type=int, default=0,
                   help="0: the balancer spreads requests; N: N clients, one connection each")
    p.add_argument("--client-skew", type=float, default=1.0,
                   help="Zipf exponent of the clients' shares of the requests")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out")
    p.add_argument("--logs", help="write each process's log to LOGS-<mode>-<process>.log, and "
                   "the manager's view of the instances' load every 0.1 s to "
                   "LOGS-<mode>-loads.jsonl")
    args = p.parse_args()
    reqs = workload(args)
    rows = []
    for mode in args.modes.split(","):
        row = run_mode(mode, reqs, args)
        rows.append(row)
        print(f"{mode:12s} TTFT mean {row['ttft_mean_s']:6.2f} s  P99 {row['ttft_p99_s']:6.2f} s | "
              f"TPOT mean {row['tpot_mean_ms']:6.1f} ms  P99 {row['tpot_p99_ms']:6.1f} ms | "
              f"e2e P99 {row['e2e_p99_s']:6.1f} s | failed {row['failed']} | preemptions "
              f"{row['preemptions']:.0f} | migrations {row['migrations']:.0f} | forwarded "
              f"{row['forwarded']:.0f}", flush=True)
    report = {"machine": lib.machine(), "settings": lib.settings(args), "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
