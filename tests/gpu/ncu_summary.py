#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations by kernel name: where a profiled window's GPU time goes.

    ncu_summary.py NCU_CSV [--steps N] [--out-json F]

NCU_CSV is what `ncu --csv --metrics gpu__time_duration.sum ...` writes (its "details" page: one
row per kernel launch and metric, with the columns "ID", "Kernel Name", "Metric Name",
"Metric Unit" and "Metric Value"). Prints a table of kernels by total time, with launches and the
mean, and, with --steps, the time and launches per step of the profiled window. Standard library
only: the GPU machine's python3 is whatever its image holds.
"""
import argparse
import csv
import json
import sys

# Nanoseconds per unit of the duration metric, as ncu names its units.
UNITS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
         "second": 1e9, "s": 1e9}


def read_durations(path):
    """Returns [(kernel name, nanoseconds)] per launch, in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    # ncu prints its own messages ("==PROF== ...") before the table.
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    launches = {}
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "nsecond")
        if unit not in UNITS:
            raise ValueError(f"{path}: unknown duration unit {unit!r}")
        value = float(row["Metric Value"].replace(",", "")) * UNITS[unit]
        launches[int(row["ID"])] = (row["Kernel Name"], value)
    return [launches[i] for i in sorted(launches)]


def summarize(durations):
    by_name = {}
    for name, ns in durations:
        total, count = by_name.get(name, (0.0, 0))
        by_name[name] = (total + ns, count + 1)
    rows = [{"kernel": name, "total_us": total / 1e3, "launches": count,
             "mean_us": total / count / 1e3}
            for name, (total, count) in by_name.items()]
    rows.sort(key=lambda r: (-r["total_us"], r["kernel"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--steps", type=int, default=0,
                        help="engine steps in the profiled window (per-step figures)")
    parser.add_argument("--out-json")
    args = parser.parse_args()
    try:
        durations = read_durations(args.csv)
    except (OSError, ValueError) as error:
        print(f"ncu_summary: {error}", file=sys.stderr)
        return 1
    rows = summarize(durations)
    total_us = sum(r["total_us"] for r in rows)
    print(f"{len(durations)} kernel launches, {total_us:.1f} us of GPU time")
    if args.steps > 0:
        print(f"per step: {total_us / args.steps:.1f} us, {len(durations) / args.steps:.1f} launches")
    print("| kernel | total us | share | launches | mean us |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        share = r["total_us"] / total_us if total_us > 0 else 0.0
        name = r["kernel"] if len(r["kernel"]) <= 80 else r["kernel"][:77] + "..."
        print(f"| {name} | {r['total_us']:.1f} | {share:.1%} | {r['launches']} | "
              f"{r['mean_us']:.2f} |")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"launches": len(durations), "total_us": total_us, "steps": args.steps,
                       "kernels": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
