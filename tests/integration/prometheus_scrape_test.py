#!/usr/bin/env python3
"""A real Prometheus server (Debian's) scrapes loomd's /metrics with its API key: the target is
up and loom's series are queryable.

  python tests/integration/prometheus_scrape_test.py --loomd BIN --model DIR
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

KEY = "scrape-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    args = p.parse_args()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        # A missing tool is a broken install, not a reason to pass.
        print("FAIL: prometheus not found: deploy/install-deps.sh installs it", file=sys.stderr)
        return 1
    loomd = subprocess.Popen([args.loomd, "--model", args.model, "--host", "127.0.0.1", "--port", "0",
                              "--kv-cache-mb", "32", "--threads", "1", "--api-keys", KEY,
                              "--metrics-compat", "vllm"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(loomd.stdout.readline().strip().rsplit(":", 1)[1])
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: loomd
    metrics_path: /metrics
    authorization:
      credentials: {KEY}
    static_configs:
      - targets: ["127.0.0.1:{port}"]
""")
        prom_port = free_port()
        prom = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp}/data",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # One request, so the request histograms have samples.
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps({"prompt": "hi", "max_tokens": 3}),
                         {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
            assert conn.getresponse().status == 200
            conn.close()
            wanted = {"up": None, "loom_request_success_total": None,
                      'vllm:e2e_request_latency_seconds_count': None}
            deadline = time.time() + 60
            while time.time() < deadline and any(v is None for v in wanted.values()):
                for query in wanted:
                    if wanted[query] is not None:
                        continue
                    try:
                        status, body = get(prom_port, "/api/v1/query?query=" + urllib.parse.quote(query))
                    except OSError:
                        break
                    if status == 200:
                        result = json.loads(body)["data"]["result"]
                        if result:
                            wanted[query] = float(result[0]["value"][1])
                time.sleep(0.5)
            print("scraped:", wanted)
            assert wanted["up"] == 1.0, wanted
            assert wanted["loom_request_success_total"] >= 1.0, wanted
            assert wanted["vllm:e2e_request_latency_seconds_count"] >= 1.0, wanted
        finally:
            prom.send_signal(signal.SIGTERM)
            prom.wait(timeout=30)
            loomd.send_signal(signal.SIGTERM)
            assert loomd.wait(timeout=60) == 0
            loomd.stdout.close()
    print("prometheus scrape test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
