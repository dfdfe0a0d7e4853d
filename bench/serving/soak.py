#!/usr/bin/env python3
"""Soak and chaos test for loomd: many concurrent clients of every kind for a bounded time.

Each of --concurrency workers repeats, until --duration seconds have passed, one client picked at
random from these kinds (weights in KINDS):

  stream      a streamed completion read to its [DONE]
  chat        a chat completion, not streamed
  disconnect  a streamed completion dropped (connection reset) after 0-5 events
  pipelined   three completions written at once on one keep-alive connection, answered in order
  slow        a streamed completion read a few bytes at a time, slowly
  bad         a request the server must refuse with a 4xx (malformed JSON, out-of-range numbers,
              integers past int64, a prompt longer than the context, an oversized body, ...)

It reports, as JSON: the outcome of every kind (successes, the intended 4xx answers, and every
error by message: a 5xx, a broken connection, a wrong answer), the server's resident memory every
second (and its growth after warm-up), and whether the running/waiting/KV-usage gauges of /metrics
returned to 0 once the load stopped. Exit status 1 when there was any error, a gauge stayed above
0, or memory grew by more than --max-rss-growth after warm-up.

  python3 bench/serving/soak.py --loomd build/cpu-release/bin/loomd \\
      --model tests/golden/models/llama3_gqa --concurrency 256 --duration 600 --out soak.json

With --url instead of --loomd it loads a server that is already running (--pid P for memory).
Standard library only.
"""
import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadgen import WORDS, body_chunks, machine, read_headers, rss_kib  # noqa: E402

KINDS = {"stream": 30, "chat": 10, "disconnect": 15, "pipelined": 15, "slow": 10, "bad": 20}
GAUGES = ("loom_num_requests_running", "loom_num_requests_waiting", "loom_kv_cache_usage_perc")


class Outcomes:
    def __init__(self):
        self.by_kind = {k: {"ok": 0, "refused_4xx": 0, "errors": {}} for k in KINDS}

    def ok(self, kind):
        self.by_kind[kind]["ok"] += 1

    def refused(self, kind):
        self.by_kind[kind]["refused_4xx"] += 1

    def error(self, kind, message):
        errors = self.by_kind[kind]["errors"]
        message = message[:160]
        errors[message] = errors.get(message, 0) + 1

    def num_errors(self):
        return sum(sum(v["errors"].values()) for v in self.by_kind.values())


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def request_bytes(server, path, body, extra_headers="", keep_alive=False):
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n{extra_headers}")
    if server.api_key:
        head += f"Authorization: Bearer {server.api_key}\r\n"
    return head.encode() + b"\r\n" + payload


async def read_body(reader, headers):
    data = b""
    async for piece in body_chunks(reader, headers):
        data += piece
    return data


def sse_events(data):
    """The data: payloads of an SSE body, in order."""
    return [line[5:].strip() for line in data.split(b"\n") if line.startswith(b"data:")]


async def open_connection(server):
    return await asyncio.wait_for(asyncio.open_connection(server.host, server.port), 30)


async def client_stream(server, rng, outcomes, slow=False):
    kind = "slow" if slow else "stream"
    max_tokens = rng.randint(1, 48)
    body = {"prompt": words(rng, rng.randint(1, server.prompt_words)), "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": rng.choice([0.0, 0.8]),
            "stream_options": {"include_usage": True}}
    reader, writer = await open_connection(server)
    try:
        writer.write(request_bytes(server, "/v1/completions", body))
        await writer.drain()
        status, headers = await read_headers(reader)
        if slow:
            # A few bytes at a time, with pauses: the server must buffer or wait, never block others.
            data = b""
            while True:
                piece = await reader.read(rng.randint(16, 256))
                if not piece:
                    break
                data += piece
                await asyncio.sleep(rng.uniform(0.01, 0.2))
            raw = data
            data = b""
            # De-chunk what was read raw.
            while raw:
                size_line, _, rest = raw.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    break
                data += rest[:size]
                raw = rest[size + 2:]
        else:
            data = await read_body(reader, headers)
        if status != 200:
            outcomes.error(kind, f"HTTP {status}: {data[:120]!r}")
            return
        events = sse_events(data)
        if not events or events[-1] != b"[DONE]":
            outcomes.error(kind, "stream did not end with [DONE]")
            return
        usage = [json.loads(e)["usage"] for e in events[:-1] if b'"usage"' in e]
        usage = [u for u in usage if u]
        if not usage or usage[-1]["completion_tokens"] != max_tokens:
            outcomes.error(kind, f"usage {usage[-1:]} after max_tokens {max_tokens} with ignore_eos")
            return
        outcomes.ok(kind)
    finally:
        writer.close()


async def client_chat(server, rng, outcomes):
    body = {"messages": [{"role": "user", "content": words(rng, rng.randint(1, server.prompt_words))}],
            "max_tokens": rng.randint(1, 32)}
    reader, writer = await open_connection(server)
    try:
        writer.write(request_bytes(server, "/v1/chat/completions", body))
        await writer.drain()
        status, headers = await read_headers(reader)
        data = await read_body(reader, headers)
        if status != 200:
            outcomes.error("chat", f"HTTP {status}: {data[:120]!r}")
            return
        answer = json.loads(data)
        if answer["choices"][0]["message"]["role"] != "assistant":
            outcomes.error("chat", "no assistant message")
            return
        outcomes.ok("chat")
    finally:
        writer.close()


async def client_disconnect(server, rng, outcomes):
    body = {"prompt": words(rng, rng.randint(1, server.prompt_words)), "max_tokens": 48, "stream": True,
            "ignore_eos": True}
    reader, writer = await open_connection(server)
    writer.write(request_bytes(server, "/v1/completions", body))
    await writer.drain()
    events_to_read = rng.randint(0, 5)
    try:
        if events_to_read:
            status, _ = await read_headers(reader)
            if status != 200:
                outcomes.error("disconnect", f"HTTP {status}")
                return
            seen = 0
            while seen < events_to_read:
                line = await reader.readline()
                if not line:
                    break
                seen += line.startswith(b"data:")
        outcomes.ok("disconnect")
    finally:
        writer.transport.abort()  # a reset, not a polite close


async def client_pipelined(server, rng, outcomes):
    lengths = [rng.randint(1, 16) for _ in range(3)]
    requests = b""
    for i, n in enumerate(lengths):
        body = {"prompt": words(rng, rng.randint(1, server.prompt_words)), "max_tokens": n, "ignore_eos": True}
        requests += request_bytes(server, "/v1/completions", body, keep_alive=i < 2)
    reader, writer = await open_connection(server)
    try:
        writer.write(requests)  # all three at once: the server must answer them in order
        await writer.drain()
        for i, n in enumerate(lengths):
            status, headers = await read_headers(reader)
            data = await read_body(reader, headers)
            if status != 200:
                outcomes.error("pipelined", f"HTTP {status} for request {i}: {data[:100]!r}")
                return
            got = json.loads(data)["usage"]["completion_tokens"]
            if got != n:
                outcomes.error("pipelined", f"answer {i} has {got} tokens, asked {n}: out of order")
                return
        outcomes.ok("pipelined")
    except (ConnectionError, asyncio.IncompleteReadError) as e:
        outcomes.error("pipelined", f"{type(e).__name__}: {e}")
    finally:
        writer.close()


def bad_request(server, rng):
    """(request bytes, what it is) for a request that must get a 4xx."""
    choices = [
        (b"{not json", "malformed JSON"),
        ({"prompt": [9223372036854775808], "max_tokens": 4}, "token id past int64"),
        ({"prompt": "x", "stop_token_ids": [18446744073709551616]}, "stop id past uint64"),
        ({"prompt": "x", "max_tokens": -5}, "negative max_tokens"),
        ({"prompt": "x", "temperature": 1e400}, "infinite temperature"),
        ({"prompt": "x", "n": 100000}, "n too large"),
        ({"prompt": words(rng, server.context_words)}, "prompt longer than the context"),
        ({"messages": "hi"}, "messages not an array"),
        ({"prompt": "x", "logit_bias": {"-1": 1}}, "logit_bias outside the vocabulary"),
        ("\xff\xfe".encode("latin-1"), "invalid UTF-8"),
        (b'{"prompt": "' + b"x" * (server.max_body_bytes + 1) + b'"}', "oversized body"),
    ]
    body, what = rng.choice(choices)
    path = "/v1/chat/completions" if what == "messages not an array" else "/v1/completions"
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request_bytes(server, path, payload), what


async def client_bad(server, rng, outcomes):
    request, what = bad_request(server, rng)
    reader, writer = await open_connection(server)
    try:
        writer.write(request)
        await writer.drain()
        status, headers = await read_headers(reader)
        data = await read_body(reader, headers)
        if 400 <= status < 500:
            if b'"error"' not in data:
                outcomes.error("bad", f"{what}: {status} without an error object")
            else:
                outcomes.refused("bad")
        else:
            outcomes.error("bad", f"{what}: HTTP {status}")
    except (ConnectionError, asyncio.IncompleteReadError) as e:
        # The server may close after answering an oversized body; no answer at all is an error.
        outcomes.error("bad", f"{what}: {type(e).__name__}")
    finally:
        writer.close()


async def worker(server, rng, outcomes, deadline):
    kinds = list(KINDS)
    weights = [KINDS[k] for k in kinds]
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        try:
            if kind in ("stream", "slow"):
                await client_stream(server, rng, outcomes, slow=kind == "slow")
            elif kind == "chat":
                await client_chat(server, rng, outcomes)
            elif kind == "disconnect":
                await client_disconnect(server, rng, outcomes)
            elif kind == "pipelined":
                await client_pipelined(server, rng, outcomes)
            else:
                await client_bad(server, rng, outcomes)
        except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the run
            outcomes.error(kind, f"{type(e).__name__}: {e}")


async def scrape(server):
    reader, writer = await open_connection(server)
    try:
        head = f"GET /metrics HTTP/1.1\r\nHost: {server.host}\r\nConnection: close\r\n"
        if server.api_key:
            head += f"Authorization: Bearer {server.api_key}\r\n"
        writer.write(head.encode() + b"\r\n")
        await writer.drain()
        status, headers = await read_headers(reader)
        text = (await read_body(reader, headers)).decode()
    finally:
        writer.close()
    values = {}
    for name in GAUGES:
        m = re.search(rf"^{name}{{[^}}]*}} ([0-9.eE+-]+)$", text, re.M)
        values[name] = float(m.group(1)) if m else None
    return status, values


async def sample_rss(pid, samples, stop, t0):
    while not stop.is_set():
        samples.append([round(time.monotonic() - t0, 1), rss_kib(pid)])
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass


def rss_summary(samples, duration, warmup_fraction):
    """Median RSS (KiB) just after warm-up and at the end, and the growth between them."""
    values = [(t, v) for t, v in samples if v is not None and t <= duration]
    after = [v for t, v in values if t >= warmup_fraction * duration]
    if len(after) < 4:
        return {"after_warmup_kib": None, "end_kib": None, "growth": None}
    third = max(1, len(after) // 3)
    first = sorted(after[:third])[third // 2]
    last = sorted(after[-third:])[third // 2]
    return {"after_warmup_kib": first, "end_kib": last, "growth": round(last / first - 1, 4)}


async def run(args, server):
    outcomes = Outcomes()
    t0 = time.monotonic()
    deadline = t0 + args.duration
    samples = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_rss(server.pid, samples, stop, t0)) if server.pid else None
    rng = random.Random(args.seed)
    workers = [worker(server, random.Random(rng.random()), outcomes, deadline)
               for _ in range(args.concurrency)]
    await asyncio.gather(*workers)
    load_s = time.monotonic() - t0
    # The gauges must come back to 0 once nothing runs.
    gauges = {}
    settle_deadline = time.monotonic() + args.settle
    while True:
        status, gauges = await scrape(server)
        if status == 200 and all(v == 0 for v in gauges.values()):
            break
        if time.monotonic() > settle_deadline:
            break
        await asyncio.sleep(0.5)
    stop.set()
    if sampler:
        await sampler
    return outcomes, gauges, samples, load_s


class Server:
    def __init__(self, args):
        self.proc = None
        self.api_key = args.api_key
        self.max_body_bytes = args.max_body_bytes
        self.context_words = args.context_words
        self.prompt_words = args.prompt_words
        if args.loomd:
            cmd = [args.loomd, "--model", args.model, "--host", "127.0.0.1", "--port", "0",
                   "--threads", str(args.threads), "--max-body-bytes", str(args.max_body_bytes)]
            cmd += args.loomd_arg
            if args.api_key:
                cmd += ["--api-keys", args.api_key]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)
            line = self.proc.stdout.readline()
            if "listening on" not in line:
                self.proc.kill()
                raise SystemExit(f"loomd did not start: {line!r}")
            self.host = "127.0.0.1"
            self.port = int(line.strip().rsplit(":", 1)[1])
            self.pid = self.proc.pid
        else:
            url = urllib.parse.urlparse(args.url)
            self.host, self.port, self.pid = url.hostname, url.port or 80, args.pid

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--loomd", help="start this loomd (with --model) on a free loopback port")
    p.add_argument("--model", help="model folder for --loomd")
    p.add_argument("--loomd-arg", action="append", default=[], help="extra loomd argument")
    p.add_argument("--threads", type=int, default=2, help="--threads for the started loomd")
    p.add_argument("--url", help="an already running server instead of --loomd")
    p.add_argument("--pid", type=int, help="that server's process id (memory samples)")
    p.add_argument("--api-key", default="")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--duration", type=float, default=600, help="seconds of load")
    p.add_argument("--settle", type=float, default=60,
                   help="seconds the gauges may take to return to 0 after the load")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20,
                   help="the server's body limit (the oversized-body request exceeds it)")
    p.add_argument("--prompt-words", type=int, default=24,
                   help="most words in a prompt (prompt + 48 tokens must fit the context)")
    p.add_argument("--context-words", type=int, default=400,
                   help="words in a prompt that must exceed the model's context")
    p.add_argument("--warmup", type=float, default=0.2, help="fraction of the run before RSS counts")
    p.add_argument("--max-rss-growth", type=float, default=0.10,
                   help="allowed RSS growth from just after warm-up to the end")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="write the JSON report here too")
    args = p.parse_args(argv)
    if bool(args.loomd) == bool(args.url) or (args.loomd and not args.model):
        p.error("give --loomd with --model, or --url")
    server = Server(args)
    try:
        outcomes, gauges, samples, load_s = asyncio.run(run(args, server))
        alive = server.proc is None or server.proc.poll() is None
    finally:
        server.stop()
    rss = rss_summary(samples, args.duration, args.warmup)
    failures = []
    if outcomes.num_errors():
        failures.append(f"{outcomes.num_errors()} errors")
    if any(v != 0 for v in gauges.values()):
        failures.append(f"gauges did not return to 0: {gauges}")
    if rss["growth"] is not None and rss["growth"] > args.max_rss_growth:
        failures.append(f"RSS grew {rss['growth']:.1%} after warm-up")
    if not alive:
        failures.append("loomd exited during the run")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__)), check=False)
    report = {
        "machine": machine(), "commit": commit.stdout.strip(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("api_key",)},
        "load_s": round(load_s, 1),
        "outcomes": outcomes.by_kind,
        "errors": outcomes.num_errors(),
        "gauges_after": gauges,
        "rss": rss, "rss_samples_kib": samples,
        "passed": not failures, "failures": failures,
    }
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    summary = {k: report[k] for k in ("load_s", "errors", "gauges_after", "rss", "passed", "failures")}
    summary["outcomes"] = {k: {"ok": v["ok"], "refused_4xx": v["refused_4xx"],
                               "errors": sum(v["errors"].values())} for k, v in outcomes.by_kind.items()}
    print(json.dumps(summary, indent=1))
    for kind, v in outcomes.by_kind.items():
        for message, count in v["errors"].items():
            print(f"error [{kind}] x{count}: {message}", file=sys.stderr)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
