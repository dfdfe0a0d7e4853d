#!/usr/bin/env python3
"""Checks tests/gpu/ncu_summary.py on a CSV in Nsight Compute's layout: messages before the
header skipped, durations in mixed units and with thousands separators summed per kernel name,
other metrics ignored, and a file without the header refused."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "gpu", "ncu_summary.py")

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')


def row(launch, kernel, metric, unit, value):
    return (f'"{launch}","7","loom_engine_bench","127.0.0.1","{kernel}","1","13","(128, 1, 1)",'
            f'"(64, 1, 1)","0","9.0","Command line profiler metrics","{metric}","{unit}","{value}"')


def run(path, *extra):
    return subprocess.run([sys.executable, SCRIPT, path, *extra], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = os.path.join(tmp, "ncu.csv")
        lines = ["==PROF== Connected to process 7", HEADER,
                 row(0, "RmsNorm(float const*, int)", "gpu__time_duration.sum", "usecond", "3.5"),
                 row(1, "gemm_bf16_tn", "gpu__time_duration.sum", "nsecond", "12,500"),
                 row(1, "gemm_bf16_tn", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%",
                     "80"),
                 row(2, "RmsNorm(float const*, int)", "gpu__time_duration.sum", "nsecond", "2,500"),
                 row(3, "gemm_bf16_tn", "gpu__time_duration.sum", "msecond", "0.0125")]
        with open(csv_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        json_path = os.path.join(tmp, "out.json")
        result = run(csv_path, "--steps", "2", "--out-json", json_path)
        assert result.returncode == 0, result.stderr
        assert "4 kernel launches, 31.0 us of GPU time" in result.stdout, result.stdout
        assert "per step: 15.5 us, 2.0 launches" in result.stdout, result.stdout
        with open(json_path) as f:
            report = json.load(f)
        kernels = report["kernels"]
        assert [k["kernel"] for k in kernels] == ["gemm_bf16_tn", "RmsNorm(float const*, int)"]
        assert abs(kernels[0]["total_us"] - 25.0) < 1e-9 and kernels[0]["launches"] == 2
        assert abs(kernels[1]["mean_us"] - 3.0) < 1e-9 and kernels[1]["launches"] == 2
        # The table lists the largest first.
        table = [line for line in result.stdout.splitlines() if line.startswith("| ")]
        assert table[1].startswith("| gemm_bf16_tn | 25.0 | 80.6% | 2 | 12.50 |"), table

        bad = os.path.join(tmp, "bad.csv")
        with open(bad, "w") as f:
            f.write("==PROF== no kernels were profiled\n")
        result = run(bad)
        assert result.returncode == 1 and "no ncu CSV header" in result.stderr, result
        odd = os.path.join(tmp, "odd.csv")
        with open(odd, "w") as f:
            f.write(HEADER + "\n" + row(0, "k", "gpu__time_duration.sum", "cycle", "5") + "\n")
        result = run(odd)
        assert result.returncode == 1 and "unknown duration unit" in result.stderr, result
    print("ncu_summary_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
