"""Shared by the cluster benchmarks: start loomd instances and a manager on loopback ports,
stream completions and time them, read metrics, and describe the machine."""
import http.client
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "bench-key"
_STUBS = tempfile.mkdtemp(prefix="loom-cluster-stubs-")


def stubs():
    """(cluster_pb2, cluster_pb2_grpc), compiled from proto/ on first use."""
    if _STUBS not in sys.path:
        rc = protoc.main(["protoc", f"-I{ROOT}/proto", f"--python_out={_STUBS}",
                          f"--grpc_python_out={_STUBS}", f"{ROOT}/proto/loom/v1/cluster.proto"])
        assert rc == 0
        sys.path.insert(0, _STUBS)
    from loom.v1 import cluster_pb2, cluster_pb2_grpc  # noqa: E402
    return cluster_pb2, cluster_pb2_grpc


def _wait_lines(proc, needle, count):
    lines = []
    while len([l for l in lines if needle in l]) < count:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"process ended before printing {needle!r}: {lines!r}")
        lines.append(line)
    return lines


class Process:
    def __init__(self, cmd, needle, count, log=None):
        # The log (stderr) goes to the file `log` when given, else nowhere.
        self.log = open(log, "w") if log else None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=self.log or subprocess.DEVNULL, text=True)
        lines = _wait_lines(self.proc, needle, count)
        self.grpc_port = next((int(l.strip().rsplit(":", 1)[1]) for l in lines if "gRPC" in l),
                              None)
        self.port = int([l for l in lines if "gRPC" not in l and needle in l][-1]
                        .strip().rsplit(":", 1)[1])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        if self.log:
            self.log.close()


def start_instance(loomd, model, *extra, cpu=None, log=None):
    """A serving loomd; with `cpu`, pinned to that core (taskset), so that instances do not
    borrow each other's idle compute, as separate machines would not; with `log`, its log
    written to that file."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    return Process([*pin, loomd, "--model", model, "--host", "127.0.0.1", "--port", "0",
                    "--grpc-port", "0", "--api-keys", KEY, "--served-model-name", "m",
                    *extra], "listening on", 2, log=log)


def start_manager(loomd, *extra, log=None):
    return Process([loomd, "--role", "manager", "--host", "127.0.0.1", "--port", "0",
                    "--grpc-port", "0", "--api-keys", KEY, *extra], "loom manager listening", 1,
                   log=log)


def get_json(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
        return json.loads(conn.getresponse().read().decode())
    finally:
        conn.close()


def metric_sum(port, name, label=""):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    text = conn.getresponse().read().decode()
    conn.close()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "commit": commit}


def settings(args):
    """The command's settings for a report, with file arguments as bare names (no local paths)."""
    out = dict(vars(args))
    for key in ("loomd", "model", "out", "logs"):
        if out.get(key):
            out[key] = os.path.basename(out[key])
    return out


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def timed_stream(port, prompt, max_tokens, on_chunk=None, timeout=600):
    """Streams one completion; returns dict(ttft, tpot, chunks, ok, gaps) in seconds."""
    import openai
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0,
                           timeout=timeout)
    t0 = time.perf_counter()
    times = []
    ok = True
    try:
        for i, chunk in enumerate(client.completions.create(
                model="m", prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
                extra_body={"ignore_eos": True})):
            if chunk.choices and chunk.choices[0].text is not None:
                times.append(time.perf_counter())
            if on_chunk is not None:
                on_chunk(i)
    except Exception:  # noqa: BLE001 - a failed request is counted, not raised
        ok = False
    ttft = times[0] - t0 if times else float("nan")
    tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"ttft": ttft, "tpot": tpot, "chunks": len(times), "ok": ok, "gaps": gaps,
            "times": times}
