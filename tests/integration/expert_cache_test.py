#!/usr/bin/env python3
"""loomd serving a mixture-of-experts model behind an expert cache (--expert-cache-mb): the
start-up log states the memory split, every loom_expert_* series is exported before the first
request and passes promtool, completions move the counters (loads, hits, prefetches), the
greedy tokens (as logprobs report them) equal those of the same model with every expert
resident, each policy starts and serves, a dense model exports no expert series, and bad
settings exit 2.

  python tests/integration/expert_cache_test.py --loomd BIN --models DIR
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys


def start(loomd, model, *extra):
    proc = subprocess.Popen([loomd, "--model", model, "--host", "127.0.0.1", "--port", "0",
                             "--kv-cache-mb", "8", "--threads", "1", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if "listening" not in line:
        proc.kill()
        raise AssertionError(f"loomd did not start: {line!r} {proc.stderr.read()}")
    return proc, int(line.rsplit(":", 1)[1])


def stop(proc):
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def request(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request(method, path, json.dumps(body) if body is not None else None,
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def metrics(port):
    status, body = request(port, "GET", "/metrics")
    assert status == 200, status
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("loom_expert"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out, body


def greedy(port, prompt):
    status, body = request(port, "POST", "/v1/completions",
                           {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 2})
    assert status == 200, body
    choice = json.loads(body)["choices"][0]
    return choice["logprobs"]["token_logprobs"], choice["logprobs"]["top_logprobs"]


PROMPTS = [[5, 6, 7, 8], [100, 3, 42, 9, 17, 250], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--models", required=True, help="tests/golden/models")
    args = p.parse_args()
    moe = os.path.join(args.models, "qwen2_moe")
    promtool = shutil.which("promtool")
    if promtool is None:
        print("FAIL: promtool not found: deploy/install-deps.sh installs it", file=sys.stderr)
        return 1

    # The reference: every expert resident.
    proc, port = start(args.loomd, moe)
    want = [greedy(port, prompt) for prompt in PROMPTS]
    resident, _ = metrics(port)
    stop(proc)
    assert not resident, f"no cache, no expert series: {resident}"

    for policy in ("activation", "lru", "lfu"):
        proc, port = start(args.loomd, moe, "--expert-cache-mb", "1",
                           "--expert-cache-policy", policy)
        before, text = metrics(port)
        names = {re.sub(r"\{.*", "", k) for k in before}
        for family in ("loom_expert_cache_hits_total", "loom_expert_cache_misses_total",
                       "loom_expert_cache_evictions_total", "loom_expert_prefetches_total",
                       "loom_expert_cache_loaded_bytes_total", "loom_expert_cache_slots",
                       "loom_expert_cache_resident_experts"):
            assert family in names, f"{policy}: {family} missing before the first request"
        total = lambda m, name: sum(v for k, v in m.items() if k.startswith(name + "{"))
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
        assert check.returncode == 0, check.stdout + check.stderr
        got = [greedy(port, prompt) for prompt in PROMPTS]
        assert got == want, f"{policy}: outputs differ from the all-resident run"
        after, _ = metrics(port)
        value = lambda name: total(after, name)
        assert value("loom_expert_cache_misses_total") > 0, after
        # The requests' steps went through the cache (start-up's warm-up step counts before).
        used = lambda m: total(m, "loom_expert_cache_hits_total") + total(
            m, "loom_expert_cache_misses_total")
        assert used(after) > used(before), (before, after)
        assert value("loom_expert_cache_loaded_bytes_total") > 0, after
        assert value("loom_expert_cache_resident_experts") <= value("loom_expert_cache_slots")
        err = stop(proc)
        assert "memory split" in err, f"{policy}: no memory split in the log"
        print(f"ok {policy}: {int(value('loom_expert_cache_hits_total'))} hits, "
              f"{int(value('loom_expert_cache_misses_total'))} misses")

    for bad in (["--expert-cache-policy", "fifo"], ["--expert-cache-mb", "-1"]):
        result = subprocess.run([args.loomd, "--model", moe, "--port", "0", *bad],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (bad, result.returncode, result.stderr)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
