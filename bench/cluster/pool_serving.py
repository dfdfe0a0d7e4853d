#!/usr/bin/env python3
"""Pools the per-request records of several skewed_serving.py runs (different seeds of one
setting) and prints each mode's TTFT and TPOT over all of them.

The P99 of one 160-request run is decided by its second-worst request, so a single burst can
turn a comparison around. Pooled over several seeds, the P99 rests on a few requests from
different runs. Runs must have the same modes; their settings should differ only in the seed
(the script says where they differ).

  python3 bench/cluster/pool_serving.py bench/results/cluster/serving_a.json \
      bench/results/cluster/serving_b.json [--out pooled.json]

A run given as FILE::TAG has TAG appended to its modes' names, so that runs of two builds (or
settings) can be pooled side by side: `old.json::before new.json::after`.
"""
import argparse
import json
import statistics
import sys

import cluster_lib as lib

# Settings that may differ between the runs of one pool.
PER_RUN_SETTINGS = ("seed", "out", "logs", "modes")


def shared_settings(report):
    return {k: v for k, v in report["settings"].items() if k not in PER_RUN_SETTINGS}


def pool(reports, tags):
    modes = {}
    for report, tag in zip(reports, tags):
        for row in report["rows"]:
            name = f"{row['mode']} {tag}" if tag else row["mode"]
            m = modes.setdefault(name, {"ttft": [], "tpot": [], "failed": 0, "preemptions": 0.0,
                                        "migrations": 0.0, "per_run_ttft_p99_s": []})
            ok = [r for r in row["requests"] if r["ok"] and r["chunks"] > 0]
            m["ttft"] += [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
            m["tpot"] += [r["tpot_ms"] for r in ok if r["tpot_ms"] is not None]
            m["failed"] += row["failed"]
            m["preemptions"] += row.get("preemptions", 0.0)
            m["migrations"] += row.get("migrations", 0.0)
            m["per_run_ttft_p99_s"].append(row["ttft_p99_s"])
    out = []
    for mode, m in modes.items():
        out.append({
            "mode": mode,
            "runs": len(m["per_run_ttft_p99_s"]),
            "completed": len(m["ttft"]),
            "failed": m["failed"],
            "ttft_mean_s": statistics.mean(m["ttft"]) if m["ttft"] else float("nan"),
            "ttft_p99_s": lib.percentile(m["ttft"], 99),
            "ttft_p95_s": lib.percentile(m["ttft"], 95),
            "tpot_mean_ms": statistics.mean(m["tpot"]) if m["tpot"] else float("nan"),
            "tpot_p99_ms": lib.percentile(m["tpot"], 99),
            "preemptions": m["preemptions"],
            "migrations": m["migrations"],
            "per_run_ttft_p99_s": m["per_run_ttft_p99_s"],
        })
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+", help="JSON files written by skewed_serving.py --out")
    p.add_argument("--out")
    args = p.parse_args()
    reports, tags, paths = [], [], []
    for spec in args.runs:
        path, _, tag = spec.partition("::")
        with open(path, encoding="utf-8") as f:
            reports.append(json.load(f))
        tags.append(tag)
        paths.append(path)
    args.runs = paths
    base = shared_settings(reports[0])
    for path, report in zip(args.runs, reports):
        other = shared_settings(report)
        # A key one run lacks (an older script) is not a difference.
        diff = sorted(k for k in base.keys() & other.keys() if base[k] != other[k])
        if diff:
            print(f"warning: {path} differs from {args.runs[0]} in {', '.join(diff)}",
                  file=sys.stderr)
    rows = pool(reports, tags)
    first = rows[0]["ttft_p99_s"] if rows else float("nan")
    for row in rows:
        per_run = ", ".join(f"{x:.2f}" for x in row["per_run_ttft_p99_s"])
        print(f"{row['mode']:20s} {row['completed']:4d} requests ({row['failed']} failed) | TTFT "
              f"mean {row['ttft_mean_s']:5.2f} s  P95 {row['ttft_p95_s']:5.2f} s  P99 "
              f"{row['ttft_p99_s']:5.2f} s (x{first / row['ttft_p99_s']:.2f} against the first "
              f"mode; per run {per_run}) | TPOT mean {row['tpot_mean_ms']:5.1f} ms  P99 "
              f"{row['tpot_p99_ms']:5.1f} ms | preemptions {row['preemptions']:.0f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"runs": [{"file": path.rsplit("/", 1)[-1], "tag": tag,
                                 "seed": r["settings"].get("seed"),
                                 "commit": r["machine"].get("commit")}
                                for path, tag, r in zip(args.runs, tags, reports)],
                       "settings": base, "machine": reports[0]["machine"], "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
