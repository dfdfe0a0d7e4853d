#!/usr/bin/env python3
"""Serving load generator for loomd or any OpenAI-compatible server.

Sends streaming /v1/completions or /v1/chat/completions requests with Poisson or fixed-rate
arrivals (or as fast as N concurrent streams allow), prompt and output lengths drawn from given
distributions, and reports throughput, TTFT, TPOT, ITL and end-to-end latency percentiles as
JSON, with the machine, the settings and, when --pid is given, the server's resident memory over
time. Standard library only (asyncio sockets; HTTP/1.1 with chunked SSE parsing), so it runs in
any Python 3.9+.

  python3 bench/serving/loadgen.py --url http://127.0.0.1:8000 --concurrency 64 --duration 120 \
      --prompt-len uniform:64-256 --output-len fixed:128 --out result.json

Output lengths are enforced with max_tokens plus ignore_eos (a vLLM extension loom supports;
other servers may stop earlier at EOS, which the report then shows in completion_tokens).
"""
import argparse
import asyncio
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
import urllib.parse

WORDS = ("time person year way day thing man world life hand part child eye woman place work "
         "week case point government company number group problem fact").split()


def parse_dist(text):
    """fixed:N | uniform:A-B | normal:MEAN,STD -> a function rng -> int >= 1."""
    kind, _, arg = text.partition(":")
    if kind == "fixed":
        n = int(arg)
        return lambda rng: n
    if kind == "uniform":
        lo, hi = (int(x) for x in arg.split("-"))
        return lambda rng: rng.randint(lo, hi)
    if kind == "normal":
        mean, std = (float(x) for x in arg.split(","))
        return lambda rng: max(1, int(round(rng.gauss(mean, std))))
    raise argparse.ArgumentTypeError(f"bad distribution '{text}' (fixed:N, uniform:A-B, normal:M,S)")


def percentiles(values):
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "count": 0}
    s = sorted(values)

    def pick(q):
        return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]

    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "mean": sum(s) / len(s),
            "count": len(s)}


class Result:
    def __init__(self):
        self.start = 0.0
        self.first = None
        self.arrivals = []   # time of every chunk that carried text
        self.end = 0.0
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self.error = None
        self.status = 0


async def read_headers(reader):
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed before the response")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def body_chunks(reader, headers):
    """Yields the body in pieces as they arrive (chunked or content-length)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    else:
        n = int(headers.get("content-length", "0"))
        if n:
            yield await reader.readexactly(n)


async def one_request(args, rng, result):
    url = urllib.parse.urlparse(args.url)
    prompt_len = args.prompt_dist(rng)
    output_len = args.output_dist(rng)
    prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_len))
    body = {"model": args.model, "max_tokens": output_len, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": args.temperature}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.endpoint == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        path = "/v1/completions"
        body["prompt"] = prompt
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n")
    if args.api_key:
        head += f"Authorization: Bearer {args.api_key}\r\n"
    result.start = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(url.hostname, url.port or 80)
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        result.status, headers = await read_headers(reader)
        buffer = b""
        async for piece in body_chunks(reader, headers):
            if result.status != 200:
                buffer += piece
                continue
            buffer += piece
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                handle_event(event, result)
        if result.status != 200:
            result.error = f"HTTP {result.status}: {buffer[:200].decode(errors='replace')}"
        writer.close()
    except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
        result.error = f"{type(e).__name__}: {e}"
    result.end = time.perf_counter()


def handle_event(event, result):
    for line in event.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        msg = json.loads(data)
        if "error" in msg:
            result.error = json.dumps(msg["error"])[:200]
            return
        usage = msg.get("usage")
        if usage:
            result.completion_tokens = usage.get("completion_tokens", 0)
            result.prompt_tokens = usage.get("prompt_tokens", 0)
        for choice in msg.get("choices", []):
            text = choice.get("text")
            if text is None:
                text = (choice.get("delta") or {}).get("content")
            if text:
                now = time.perf_counter()
                if result.first is None:
                    result.first = now
                result.arrivals.append(now)


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def sample_rss(pid, samples, stop):
    t0 = time.perf_counter()
    while not stop.is_set():
        samples.append([round(time.perf_counter() - t0, 2), rss_kib(pid)])
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass


async def run(args):
    rng = random.Random(args.seed)
    results = []
    semaphore = asyncio.Semaphore(args.concurrency)
    tasks = []
    stop_rss = asyncio.Event()
    rss = []
    rss_task = asyncio.create_task(sample_rss(args.pid, rss, stop_rss)) if args.pid else None
    t0 = time.perf_counter()

    async def guarded(result, request_rng):
        async with semaphore:
            await one_request(args, request_rng, result)

    i = 0
    while True:
        elapsed = time.perf_counter() - t0
        if args.num_requests and i >= args.num_requests:
            break
        if args.duration and elapsed >= args.duration:
            break
        r = Result()
        results.append(r)
        tasks.append(asyncio.create_task(guarded(r, random.Random(rng.random()))))
        i += 1
        if args.rate > 0:
            gap = rng.expovariate(args.rate) if args.arrival == "poisson" else 1.0 / args.rate
            await asyncio.sleep(gap)
        else:
            # As fast as the streams allow: wait for a free slot before creating the next one.
            while semaphore.locked():
                await asyncio.sleep(0.001)
            await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    if rss_task:
        stop_rss.set()
        await rss_task
    return results, wall, rss


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                                check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "commit": commit}


def report(args, results, wall, rss):
    ok = [r for r in results if r.error is None]
    ttft = [r.first - r.start for r in ok if r.first is not None]
    e2e = [r.end - r.start for r in ok]
    itl, tpot = [], []
    for r in ok:
        itl += [b - a for a, b in zip(r.arrivals, r.arrivals[1:])]
        n = r.completion_tokens or len(r.arrivals)
        if r.first is not None and n > 1:
            tpot.append((r.end - r.first) / (n - 1))
    out_tokens = sum(r.completion_tokens or len(r.arrivals) for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    errors = {}
    for r in results:
        if r.error is not None:
            errors[r.error] = errors.get(r.error, 0) + 1
    settings = {k: v for k, v in vars(args).items() if not callable(v) and k != "api_key"}
    doc = {
        "benchmark": "serving", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(), "settings": settings,
        "requests": len(results), "completed": len(ok), "failed": len(results) - len(ok),
        "errors": errors, "wall_s": wall,
        "throughput": {"requests_per_s": len(ok) / wall, "output_tokens_per_s": out_tokens / wall,
                       "total_tokens_per_s": (in_tokens + out_tokens) / wall},
        "prompt_tokens": in_tokens, "completion_tokens": out_tokens,
        "ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot), "itl_s": percentiles(itl),
        "e2e_s": percentiles(e2e),
    }
    if rss:
        values = [kib for _, kib in rss if kib is not None]
        doc["server_rss_kib"] = {"samples": rss, "first": values[0] if values else None,
                                 "max": max(values) if values else None,
                                 "last": values[-1] if values else None}
    return doc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="default")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""))
    p.add_argument("--num-requests", type=int, default=0, help="stop after this many (0 = use --duration)")
    p.add_argument("--duration", type=float, default=0, help="seconds of arrivals")
    p.add_argument("--concurrency", type=int, default=16, help="most requests in flight")
    p.add_argument("--rate", type=float, default=0, help="arrivals per second (0 = as fast as --concurrency allows)")
    p.add_argument("--arrival", choices=["poisson", "fixed"], default="poisson")
    p.add_argument("--prompt-len", default="fixed:128", help="words per prompt: fixed:N, uniform:A-B, normal:M,S")
    p.add_argument("--output-len", default="fixed:64", help="max_tokens per request, same forms")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pid", type=int, default=0, help="server process whose RSS to sample each second")
    p.add_argument("--out", default="", help="write the JSON here too")
    args = p.parse_args(argv)
    if not args.num_requests and not args.duration:
        p.error("give --num-requests or --duration")
    try:
        args.prompt_dist = parse_dist(args.prompt_len)
        args.output_dist = parse_dist(args.output_len)
    except (ValueError, argparse.ArgumentTypeError) as e:
        p.error(str(e))
    results, wall, rss = asyncio.run(run(args))
    doc = report(args, results, wall, rss)
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if doc["completed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
