#!/usr/bin/env python3
"""A load-balanced, scraped pair on loopback, drained under load (tests/run.sh's deployment
stage, part b):

  - two loomd instances (processes), nginx (Debian's) in front of them with deploy/nginx/loom.conf,
    and Prometheus (Debian's) scraping both every second with deploy/prometheus's rules loaded;
  - several clients (raw HTTP and the OpenAI Python client, no retries) stream completions
    through nginx without pause; while instance A has streams in flight it gets SIGTERM;
  - every request completes fully: HTTP 200, text chunks, finish_reason "length" with every
    token asked for (ignore_eos; the usage chunk counts them) and `data: [DONE]`; A's in-flight streams finish on A, A exits 0, and the requests
    sent meanwhile are served by B;
  - Prometheus, asked over its HTTP API, has both targets (A down after its exit, B up), loom
    series of both, rules that evaluate, and loom_* names that are exactly what
    server/metrics/*.cc declares.

  python3 tests/deploy/lb_drain_test.py --loomd BIN --model MODEL
"""
import argparse
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

from openai import OpenAI

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import loom_metrics  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_NAME = "loom-pair"
MAX_TOKENS = 24
NUM_CLIENTS = 6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_loomd(binary, model, log_path):
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "--model", model, "--host", "127.0.0.1", "--port", "0",
                             "--threads", "1", "--kv-cache-mb", "64", "--served-model-name",
                             MODEL_NAME, "--drain-timeout-s", "60"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline().strip()
    m = re.fullmatch(r"loomd listening on 127\.0\.0\.1:(\d+)", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"loomd did not start: {line!r}; log: {log_path}")
    return proc, int(m.group(1))


def wait_http(port, path, timeout_s=30):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            status = conn.getresponse().status
            conn.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"127.0.0.1:{port}{path} not answering 200 after {timeout_s}s")


def nginx_config(tmp, lb_port, ports):
    """deploy/nginx/loom.conf with the test's ports, inside a main configuration that keeps every
    file nginx writes in tmp."""
    site = (ROOT / "deploy" / "nginx" / "loom.conf").read_text()
    servers = "".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;\n" for p in ports)
    site, n = re.subn(r"(upstream loom \{\n)(?:    server [^\n]*\n)+", lambda m: m.group(1) + servers, site)
    assert n == 1, "deploy/nginx/loom.conf: no upstream loom block with server lines"
    site, n = re.subn(r"listen 8000;", f"listen 127.0.0.1:{lb_port};", site)
    assert n == 1, "deploy/nginx/loom.conf: no 'listen 8000;'"
    (tmp / "loom.conf").write_text(site)
    temp_paths = "".join(f"    {kind}_temp_path {tmp}/{kind};\n"
                         for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (tmp / "nginx.conf").write_text(f"""daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log {tmp}/nginx-access.log;
{temp_paths}    include {tmp}/loom.conf;
}}
""")
    return tmp / "nginx.conf"


def prometheus_config(tmp, ports):
    rules = ROOT / "deploy" / "prometheus"
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    path = tmp / "prometheus.yml"
    path.write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules / "recording_rules.yml"}
  - {rules / "alert_rules.yml"}
scrape_configs:
  - job_name: loom
    static_configs:
      - targets: [{targets}]
""")
    return path


class Outcome:
    def __init__(self, client, index):
        self.client, self.index = client, index
        self.start = time.monotonic()
        self.end = None
        self.upstream = ""
        self.chunks = 0  # chunks that carried text
        self.usage = None
        self.finish_reason = None
        self.done = False
        self.error = None

    def complete(self):
        # Chunks are not tokens (a chunk may hold several, e.g. the bytes of one character):
        # the usage chunk counts what was generated, the text chunks show it was streamed.
        return (self.error is None and self.done and self.finish_reason == "length"
                and self.usage == MAX_TOKENS and self.chunks > 0)


def raw_stream(lb_port, outcome):
    """One streamed completion over raw HTTP/1.1, SSE parsed here; records the upstream."""
    body = json.dumps({"model": MODEL_NAME, "prompt": f"Story {outcome.index}: once upon a time",
                       "max_tokens": MAX_TOKENS, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", lb_port, timeout=120)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        outcome.upstream = resp.getheader("X-Loom-Upstream", "")
        if resp.status != 200:
            outcome.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                outcome.done = True
                break
            event = json.loads(data)
            if "error" in event:
                outcome.error = f"error event: {data}"
                return
            for choice in event.get("choices", []):
                outcome.chunks += 1 if choice.get("text") else 0
                if choice.get("finish_reason"):
                    outcome.finish_reason = choice["finish_reason"]
            if event.get("usage"):
                outcome.usage = event["usage"]["completion_tokens"]
    except Exception as e:  # noqa: BLE001 -- any failure is the test's finding
        outcome.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
        outcome.end = time.monotonic()


def openai_stream(client, outcome):
    """One streamed completion with the OpenAI Python client (max_retries=0: nothing hidden)."""
    try:
        response = client.completions.with_raw_response.create(
            model=MODEL_NAME, prompt=f"Story {outcome.index}: in a land far away",
            max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True})
        outcome.upstream = response.headers.get("X-Loom-Upstream", "")
        for chunk in response.parse():
            for choice in chunk.choices:
                outcome.chunks += 1 if choice.text else 0
                if choice.finish_reason:
                    outcome.finish_reason = choice.finish_reason
            if chunk.usage:
                outcome.usage = chunk.usage.completion_tokens
        outcome.done = True  # the client's iterator ends only at data: [DONE]
    except Exception as e:  # noqa: BLE001
        outcome.error = f"{type(e).__name__}: {e}"
    finally:
        outcome.end = time.monotonic()


def prom_query(port, query):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/api/v1/query?query=" + urllib.parse.quote(query))
    body = json.loads(conn.getresponse().read())
    conn.close()
    assert body["status"] == "success", body
    return body["data"]["result"]


def prom_get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    body = json.loads(conn.getresponse().read())
    conn.close()
    return body["data"]


def wait_for(what, predicate, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--load-seconds", type=float, default=8.0, help="load before the SIGTERM")
    args = p.parse_args()
    for tool in ("nginx", "prometheus"):
        if shutil.which(tool) is None:
            print(f"FAIL: {tool} not found: deploy/install-deps.sh installs it", file=sys.stderr)
            return 1
    procs = []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="loom-lb-"))
    ok = False
    try:
        a, a_port = start_loomd(args.loomd, args.model, tmp / "loomd-a.log")
        procs.append(a)
        b, b_port = start_loomd(args.loomd, args.model, tmp / "loomd-b.log")
        procs.append(b)
        lb_port = free_port()
        nginx = subprocess.Popen(["nginx", "-c", str(nginx_config(tmp, lb_port, [a_port, b_port]))],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(nginx)
        prom_port = free_port()
        prom = subprocess.Popen(["prometheus", f"--config.file={prometheus_config(tmp, [a_port, b_port])}",
                                 f"--storage.tsdb.path={tmp}/prometheus",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "w"))
        procs.append(prom)
        wait_http(lb_port, "/readyz")
        wait_http(prom_port, "/-/ready")
        wait_for("Prometheus to scrape both instances up",
                 lambda: len([r for r in prom_query(prom_port, 'up{job="loom"} == 1')]) == 2, 60)
        print(f"pair up: A=:{a_port} B=:{b_port} nginx=:{lb_port} prometheus=:{prom_port}")

        # The load: NUM_CLIENTS threads, each sending streamed requests back to back.
        outcomes, lock, stop = [], threading.Lock(), threading.Event()
        client = OpenAI(base_url=f"http://127.0.0.1:{lb_port}/v1", api_key="unused", max_retries=0,
                        timeout=120)

        def worker(n):
            i = 0
            while not stop.is_set():
                outcome = Outcome("openai" if n % 2 else "raw", n * 10000 + i)
                with lock:
                    outcomes.append(outcome)
                if n % 2:
                    openai_stream(client, outcome)
                else:
                    raw_stream(lb_port, outcome)
                i += 1

        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(NUM_CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(args.load_seconds)
        # SIGTERM to A while it has streams in flight.
        a_addr = f"127.0.0.1:{a_port}"
        # A stream that started on A just now, so that it is still running when the signal lands.
        wait_for("a stream in flight on A", lambda: any(
            o.end is None and o.upstream == a_addr and time.monotonic() - o.start < 0.5
            for o in list(outcomes)), 30)
        sigterm_at = time.monotonic()
        a.send_signal(signal.SIGTERM)
        a_rc = a.wait(timeout=90)
        a_exit_at = time.monotonic()
        print(f"A drained and exited with {a_rc} after {a_exit_at - sigterm_at:.1f}s")
        time.sleep(3)  # requests keep coming after A is gone
        stop.set()
        for t in threads:
            t.join(timeout=150)

        failed = [o for o in outcomes if not o.complete()]
        for o in failed[:10]:
            print(f"INCOMPLETE: {o.client} #{o.index} via {o.upstream!r}: chunks={o.chunks} "
                  f"usage={o.usage} finish={o.finish_reason} done={o.done} error={o.error}")
        drained = [o for o in outcomes if o.upstream == a_addr and o.start < sigterm_at < o.end]
        # Sent after loomd has surely taken the signal (it flips to draining within
        # microseconds; the margin keeps the test off that race).
        after = [o for o in outcomes if o.start > sigterm_at + 0.2]
        retried = [o for o in outcomes if "," in o.upstream]
        on_b_after = [o for o in after if o.upstream.endswith(f"127.0.0.1:{b_port}")]
        print(f"requests: {len(outcomes)} total, {len(failed)} incomplete; {len(drained)} in flight on A "
              f"at SIGTERM and finished there; {len(after)} sent after SIGTERM (+0.2 s), {len(on_b_after)} "
              f"answered by B; {len(retried)} passed from A to B by nginx")
        assert a_rc == 0, f"A exited with {a_rc} (log: {tmp}/loomd-a.log)"
        assert not failed, f"{len(failed)} of {len(outcomes)} requests did not complete"
        assert drained, "no stream was in flight on A at SIGTERM: the drain was not exercised"
        assert after and len(on_b_after) == len(after), "requests sent after SIGTERM not all served by B"

        # What Prometheus saw.
        wait_for("Prometheus to see A down", lambda: prom_query(prom_port, f'up{{job="loom", instance="{a_addr}"}} == 0'), 30)
        targets = {t["labels"]["instance"]: t["health"] for t in prom_get(prom_port, "/api/v1/targets")["activeTargets"]}
        print(f"prometheus targets: {targets}")
        assert set(targets) == {a_addr, f"127.0.0.1:{b_port}"}, targets
        assert targets[f"127.0.0.1:{b_port}"] == "up", targets
        served = prom_query(prom_port, 'sum by (instance) (last_over_time(loom_request_success_total{job="loom"}[10m]))')
        per_instance = {r["metric"]["instance"]: float(r["value"][1]) for r in served}
        print(f"requests finished per instance, as scraped: {per_instance}")
        assert set(per_instance) == set(targets) and all(v > 0 for v in per_instance.values()), per_instance
        rules = prom_get(prom_port, "/api/v1/rules")["groups"]
        # "unknown" is a rule not evaluated yet (the SLO group runs every 30 s); "err" a failure.
        unhealthy = [(r["name"], r.get("lastError")) for g in rules for r in g["rules"] if r["health"] == "err"]
        assert rules and not unhealthy, f"rules that do not evaluate: {unhealthy}"
        wait_for("a recorded series", lambda: prom_query(prom_port, "instance:loom_requests:rate1m"), 30)
        # The names Prometheus scraped are the ones the dashboard/rule test reads from the sources.
        scraped = {n for n in prom_get(prom_port, "/api/v1/label/__name__/values") if n.startswith("loom_")}
        declared = loom_metrics.series_names(loom_metrics.exported_metrics(ROOT))
        assert scraped <= declared, f"scraped but not found in server/metrics/: {sorted(scraped - declared)}"
        # loom_request_rejected_total appears with the first refusal only; loom_expert_* only for a
        # mixture-of-experts model with an expert cache (tests/integration/expert_cache_test.py).
        lazy = {"loom_request_rejected_total", "loom_expert_"}
        missing = {n for n in declared - scraped if not any(n.startswith(l) for l in lazy)}
        assert not missing, f"declared in server/metrics/ but never scraped: {sorted(missing)}"
        ok = True
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs kept in {tmp}", file=sys.stderr)
    print("load-balanced drain test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
