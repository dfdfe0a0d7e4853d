#!/usr/bin/env python3
"""Summarises a tests/gpu/run.sh run: summary.md (a table to paste) and summary.json.

Reads, from the output folder: every Google Benchmark JSON file (those with a "benchmarks" list;
the CUDA benchmarks add the counters GBps, copy_fraction and MiB_per_launch and the context keys
device, sm_count and copy_GBps) and ctest-gpu.xml, the JUnit report of `ctest -L gpu`.
Standard library only: the GPU machine's python3 is whatever its image holds.
"""
import argparse
import datetime
import json
import pathlib
import sys
import xml.etree.ElementTree as ET


def read_tests(out, ctest_status):
    tests = {"ctest_status": ctest_status, "total": None, "failed": None, "skipped": None}
    report = out / "ctest-gpu.xml"
    if report.is_file():
        suite = ET.parse(report).getroot()
        for key, attr in (("total", "tests"), ("failed", "failures"), ("skipped", "skipped")):
            tests[key] = int(suite.get(attr, "0"))
        tests["passed"] = tests["total"] - tests["failed"] - tests["skipped"]
    return tests


def read_benchmarks(out):
    context, rows = {}, []
    for path in sorted(out.glob("*.json")):
        if path.name == "summary.json":
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            print(f"summarize: skipping {path.name}: {error}", file=sys.stderr)
            continue
        if not isinstance(data, dict) or "benchmarks" not in data:
            continue
        context.update(data.get("context", {}))
        for bench in data["benchmarks"]:
            if bench.get("run_type", "iteration") != "iteration" or "error_message" in bench:
                continue
            rows.append({
                "file": path.name,
                "name": bench["name"].removesuffix("/manual_time"),
                "time": bench.get("real_time"),
                "time_unit": bench.get("time_unit", "ns"),
                "GBps": bench.get("GBps"),
                "copy_fraction": bench.get("copy_fraction"),
                "MiB_per_launch": bench.get("MiB_per_launch"),
            })
    return context, rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def markdown(summary):
    tests, ctx = summary["tests"], summary["context"]
    lines = [f"# loom GPU run: {ctx.get('device', 'no device')}", ""]
    lines.append(f"- date: {summary['date']}")
    if "copy_GBps" in ctx:
        lines.append(f"- device-to-device copy: {float(ctx['copy_GBps']):.0f} GB/s "
                     "(bytes read + written; the reference for `of copy`)")
    if tests["total"] is not None:
        lines.append(f"- `ctest -L gpu`: {tests['passed']} passed, {tests['failed']} failed, "
                     f"{tests['skipped']} skipped (status {tests['ctest_status']})")
    else:
        lines.append(f"- `ctest -L gpu`: no report (status {tests['ctest_status']})")
    lines += ["", "| benchmark | time | GB/s | of copy | MiB/launch |", "|---|---:|---:|---:|---:|"]
    for row in summary["benchmarks"]:
        lines.append(f"| {row['name']} | {fmt(row['time'], '.1f')} {row['time_unit']} | "
                     f"{fmt(row['GBps'], '.0f')} | {fmt(row['copy_fraction'], '.0%')} | "
                     f"{fmt(row['MiB_per_launch'], '.1f')} |")
    if not summary["benchmarks"]:
        lines.append("| (no benchmark results) | | | | |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--ctest-status", type=int, default=None)
    args = parser.parse_args()
    context, rows = read_benchmarks(args.out)
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "context": {k: context[k] for k in ("device", "sm_count", "copy_GBps", "host_name",
                                            "num_cpus", "library_build_type") if k in context},
        "tests": read_tests(args.out, args.ctest_status),
        "benchmarks": rows,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary)
    (args.out / "summary.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
