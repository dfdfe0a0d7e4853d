#!/usr/bin/env python3
"""Summarises a tests/gpu/run.sh run: summary.md (a table to paste) and summary.json.

Reads, from the output folder: every Google Benchmark JSON file (those with a "benchmarks" list;
the CUDA benchmarks add counters such as GBps, copy_fraction, TFLOPs and MiB_per_launch and the
context keys device, sm_count and copy_GBps), the engine benchmark's reports (JSON with
"benchmark": "engine"), sdpa.json (PyTorch's attention on the same shapes) and ctest-gpu.xml,
the JUnit report of `ctest -L gpu`.
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
        if path.name == "summary.json" or path.name.startswith("engine-") or path.name == "sdpa.json":
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
            standard = {"name", "family_index", "per_family_instance_index", "run_name", "run_type",
                        "repetitions", "repetition_index", "threads", "iterations", "real_time",
                        "cpu_time", "time_unit", "label"}
            rows.append({
                "file": path.name,
                "name": bench["name"].removesuffix("/manual_time"),
                "time": bench.get("real_time"),
                "time_unit": bench.get("time_unit", "ns"),
                "GBps": bench.get("GBps"),
                "copy_fraction": bench.get("copy_fraction"),
                "MiB_per_launch": bench.get("MiB_per_launch"),
                "counters": {k: v for k, v in bench.items()
                             if k not in standard and isinstance(v, (int, float))},
            })
    return context, rows


def read_engine(out):
    """Rows of every engine benchmark report in the folder."""
    rows = []
    for path in sorted(out.glob("engine-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for result in data.get("results", []):
            rows.append({"file": path.name, "model": data.get("settings", {}).get("model"),
                         "commit": data.get("commit"), **result})
    return rows


def read_sdpa(out):
    path = out / "sdpa.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
    extra = [r for r in summary["benchmarks"] if r["counters"]]
    if extra:
        lines += ["", "| benchmark | counters |", "|---|---|"]
        for row in extra:
            counters = ", ".join(f"{k}={v:.4g}" for k, v in sorted(row["counters"].items()))
            lines.append(f"| {row['name']} | {counters} |")
    if summary["engine"]:
        lines += ["", "| engine run | batch | prompt | decode tok/s | of roofline | "
                  "prefill tok/s | prefill TFLOP/s | of peak |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in summary["engine"]:
            if "error" in r:
                lines.append(f"| {r['file']} | error: {r['error']} | | | | | | |")
                continue
            lines.append(f"| {r['file']} | {r.get('batch')} | {r.get('prompt_len')} | "
                         f"{fmt(r.get('decode_tokens_per_s'), '.1f')} | "
                         f"{fmt(r.get('decode_fraction_of_roofline'), '.0%')} | "
                         f"{fmt(r.get('prefill_tokens_per_s'), '.0f')} | "
                         f"{fmt(r.get('prefill_matmul_tflops'), '.0f')} | "
                         f"{fmt(r.get('prefill_fraction_of_peak'), '.0%')} |")
    moe = [r for r in summary["engine"] if r["file"].startswith("engine-moe-") and "error" not in r]
    if moe:
        # Per-token latency against the all-resident run of the same batch (engine-moe-0-never:
        # grouped experts and graphs; engine-moe-0-host-routed is the same model routed on the
        # host expert by expert, without graphs).
        resident = {r.get("batch"): r.get("decode_step_ms") for r in moe
                    if r["file"].startswith("engine-moe-0-never")}
        lines += ["", "| expert cache run | batch | decode ms/step | x all-resident | hits | "
                  "misses | on host | GB loaded |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in moe:
            cache = r.get("expert_cache") or {}
            base = resident.get(r.get("batch"))
            step = r.get("decode_step_ms")
            ratio = step / base if step and base else None
            loaded = cache.get("bytes_loaded")
            lines.append(f"| {r['file']} | {r.get('batch')} | {fmt(step, '.2f')} | "
                         f"{fmt(ratio, '.2f')} | {cache.get('hits', '-')} | "
                         f"{cache.get('misses', '-')} | {cache.get('computed_on_host', '-')} | "
                         f"{fmt(loaded / 1e9 if loaded is not None else None, '.2f')} |")
    sdpa = summary["sdpa"]
    if sdpa:
        lines += ["", f"PyTorch {sdpa.get('torch')} scaled_dot_product_attention ({sdpa.get('gqa')}):",
                  "", "| shape | ms | GB/s | TFLOP/s |", "|---|---:|---:|---:|"]
        for r in sdpa.get("decode", []):
            lines.append(f"| decode batch {r.get('batch')} context {r.get('context')} | "
                         f"{fmt(r.get('ms'), '.3f')} | {fmt(r.get('GBps'), '.0f')} | - |")
        for r in sdpa.get("prefill", []):
            lines.append(f"| prefill batch {r.get('batch')} seq {r.get('seq_len')} | "
                         f"{fmt(r.get('ms'), '.3f')} | - | {fmt(r.get('TFLOPs'), '.0f')} |")
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
        "engine": read_engine(args.out),
        "sdpa": read_sdpa(args.out),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary)
    (args.out / "summary.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
