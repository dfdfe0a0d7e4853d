#!/usr/bin/env python3
"""A loopback cluster: `loomd --role=manager` and three instances reporting to it. All load goes
to one instance; the manager pairs it with the idle ones and orders migrations, and every client
stream completes in full while its request moves. Then a drain through the manager moves
everything off an instance, and a manager that dies leaves the instances serving.

  python tests/integration/cluster_loopback_test.py --loomd build/cpu-release/bin/loomd \
      --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import openai

ARGS = None
KEY = "cluster-key"


def start(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    return proc


def wait_line(proc, needle, count=1):
    lines = []
    while len([l for l in lines if needle in l]) < count:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"process ended before printing {needle!r}: {lines!r}")
        lines.append(line)
    return lines


def port_of(line):
    return int(line.strip().rsplit(":", 1)[1])


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.stdout.close()
    return proc.returncode


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    return resp.status, body


def post(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=b"", headers={"Authorization": f"Bearer {KEY}"})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    return resp.status, body


def metric(port, name, label=""):
    _, text = get(port, "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_manager(*extra):
    """A manager: (process, its gRPC address, its HTTP port)."""
    proc = start([ARGS.loomd, "--role", "manager", "--host", "127.0.0.1", "--port", "0",
                  "--grpc-port", "0", "--api-keys", KEY, *extra])
    lines = wait_line(proc, "loom manager listening on")
    grpc_line = next(l for l in lines if "gRPC" in l)
    return proc, f"127.0.0.1:{port_of(grpc_line)}", port_of(lines[-1])


def wait_registered(manager_http, count):
    """Waits (up to 30 s) until `count` instances have registered with the manager."""
    deadline = time.time() + 30
    while time.time() < deadline:
        _, body = get(manager_http, "/v1/instances")
        if len(json.loads(body)["data"]) == count:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{count} instances did not register with the manager within 30 s")


class Instance:
    def __init__(self, manager_grpc, name, *extra):
        self.proc = start([ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
                           "--grpc-port", "0", "--kv-cache-mb", "64", "--threads", "1",
                           "--api-keys", KEY, "--served-model-name", "m",
                           "--instance-id", name, "--cluster-manager", manager_grpc,
                           "--cluster-report-interval-ms", "50", *extra])
        lines = wait_line(self.proc, "listening on", 2)
        self.port = port_of(next(l for l in lines if "listening" in l and "gRPC" not in l))
        self.name = name
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=KEY,
                                    max_retries=0, timeout=300)


def stream(client, max_tokens, on_chunk=None):
    finish, chunks, _ = stream_text(client, max_tokens, on_chunk)
    return finish, chunks


def stream_text(client, max_tokens, on_chunk=None):
    """(finish reason, chunks, text) of a greedy completion; on_chunk(i) after chunk i."""
    text, finish, chunks = "", None, 0
    for chunk in client.completions.create(model="m", prompt="Tell me about the ocean.",
                                           max_tokens=max_tokens, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}):
        c = chunk.choices[0]
        text += c.text or ""
        finish = c.finish_reason or finish
        chunks += 1
        if on_chunk is not None:
            on_chunk(chunks)
    return finish, chunks, text


class LoopbackClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.manager, cls.manager_grpc, cls.manager_http = start_manager(
            "--manager-pair-interval-ms", "100",
            "--manager-dispatch-top-k", "1",
            "--manager-migrate-out-below", "100",
            "--manager-migrate-in-above", "150",
            "--manager-instance-timeout-ms", "1500")
        cls.instances = []
        cls.addClassCleanup(cls.stop_all)
        # All load goes to "hot", which runs what it receives (no dispatch): only migration can
        # spread it. "cold1" runs what it receives too, so that the drain test's streams are on it
        # when it is drained (with dispatch on, the manager could place all three elsewhere and
        # leave nothing to move, as one full ctest run did).
        no_dispatch = ["--cluster-dispatch=false"]
        for name, extra in (("hot", no_dispatch), ("cold1", no_dispatch), ("cold2", [])):
            cls.instances.append(Instance(cls.manager_grpc, name, *extra))
        wait_registered(cls.manager_http, 3)

    @classmethod
    def stop_all(cls):
        for inst in cls.instances:
            stop(inst.proc)
        stop(cls.manager)

    def reference(self, max_tokens):
        """The greedy text of stream_text's prompt, run alone on cold1 (which runs what it
        receives)."""
        if max_tokens not in self.references:
            self.references[max_tokens] = stream_text(self.instances[1].client, max_tokens)[2]
        return self.references[max_tokens]

    references = {}

    def test_1_skewed_load_is_spread_by_migration(self):
        hot = self.instances[0]
        reference = self.reference(300)
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(stream_text, hot.client, 300) for _ in range(6)]
            results = [f.result() for f in futures]
        # Moved or not, every request gives the text it gives alone.
        for finish, _, text in results:
            self.assertEqual(finish, "length")
            self.assertEqual(text, reference)
        committed = metric(hot.port, "loom_migrations_total", 'outcome="committed"')
        self.assertGreaterEqual(committed, 1, "the manager moved nothing off the hot instance")
        self.assertEqual(metric(hot.port, "loom_migrations_total", 'outcome="failed"'), 0)

    def test_2_drain_moves_everything_off(self):
        target = self.instances[1]
        before = metric(target.port, "loom_migrations_total", 'outcome="committed"')
        # Drain once every stream is decoding (a fixed wait let a fast machine finish all three
        # before the drain began, leaving nothing to move).
        decoding = threading.Semaphore(0)

        def on_chunk(i):
            if i == 2:
                decoding.release()

        reference = self.reference(400)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(stream_text, target.client, 400, on_chunk) for _ in range(3)]
            for _ in range(3):
                self.assertTrue(decoding.acquire(timeout=120), "a stream produced no tokens")
            status, body = post(self.manager_http, f"/v1/instances/{target.name}/drain")
            self.assertEqual(status, 200, body)
            results = [f.result() for f in futures]
        for finish, _, text in results:
            self.assertEqual(finish, "length")
            self.assertEqual(text, reference)
        # Everything moved off, none finished where it was: 400 tokens outlast the drain.
        moved = metric(target.port, "loom_migrations_total", 'outcome="committed"') - before
        self.assertEqual(moved, 3)

    def dispatched_in(self):
        """Requests the instances report having taken in from the manager's dispatch."""
        _, body = get(self.manager_http, "/v1/instances")
        return sum(i["load"]["num_dispatched_in"] for i in json.loads(body)["data"])

    def test_3_dispatch_sends_new_requests_to_the_least_loaded(self):
        entry = self.instances[2]
        before = metric(entry.port, "loom_requests_forwarded_total")
        dispatches_before = metric(self.manager_http, "loom_manager_dispatches_total")
        taken_in_before = self.dispatched_in()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            # One at a time, so that each dispatch sees the load the previous ones added: the
            # entry cannot stay the least loaded instance for all four.
            futures = []
            for _ in range(4):
                futures.append(pool.submit(stream, entry.client, 200))
                time.sleep(0.4)
            results = [f.result() for f in futures]
        for finish, _ in results:
            self.assertEqual(finish, "length")
        self.assertGreaterEqual(metric(entry.port, "loom_requests_forwarded_total") - before, 1)
        # Every dispatch shows in the load its instance reports (what ends the manager's charge
        # for it), whether it ran where it arrived or was forwarded.
        dispatches = metric(self.manager_http, "loom_manager_dispatches_total") - dispatches_before
        self.assertEqual(dispatches, 4)
        deadline = time.time() + 10
        while self.dispatched_in() - taken_in_before < dispatches and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.dispatched_in() - taken_in_before, dispatches)

    def test_4_instances_serve_when_the_manager_dies(self):
        stop(self.manager)
        time.sleep(0.5)
        for inst in (self.instances[0], self.instances[2]):
            finish, _ = stream(inst.client, 8)
            self.assertEqual(finish, "length")


class ForwardAtRelayLimitTest(unittest.TestCase):
    """An entry instance whose relays are all taken runs a request the manager sends elsewhere
    itself, rather than refusing it or waiting: the client sees one complete stream either way."""

    def test_a_forward_beyond_the_relay_limit_runs_at_the_entry(self):
        manager, manager_grpc, manager_http = start_manager(
            "--manager-dispatch-top-k", "1", "--manager-instance-timeout-ms", "1500")
        instances = []
        try:
            # The entry's KV cache is an eighth of the other's, so the manager always finds the
            # other instance less loaded and dispatches every request there.
            entry = Instance(manager_grpc, "entry", "--max-relays", "1", "--kv-cache-mb", "8")
            instances.append(entry)
            instances.append(Instance(manager_grpc, "target"))
            wait_registered(manager_http, 2)
            reference = stream_text(instances[1].client, 120)
            before = metric(entry.port, "loom_requests_forwarded_total")
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                first_started = threading.Event()

                def on_chunk(i):
                    if i == 8:
                        first_started.set()

                # The first is forwarded and its relay runs until it ends; the second comes
                # while it does and finds the only relay taken.
                first = pool.submit(stream_text, entry.client, 120, on_chunk)
                self.assertTrue(first_started.wait(120))
                second = pool.submit(stream_text, entry.client, 120)
                got = [first.result(), second.result()]
            # The same finish and text; not the same chunk count: a stream whose reader lags may
            # carry two tokens in one chunk.
            self.assertEqual([(f, text) for f, _, text in got],
                             [(reference[0], reference[2])] * 2)
            self.assertEqual(metric(entry.port, "loom_requests_forwarded_total") - before, 1)
        finally:
            for inst in instances:
                self.assertEqual(stop(inst.proc), 0)
            stop(manager)


class ClusterTlsTest(unittest.TestCase):
    """A cluster whose gRPC servers present certificates: with cluster_tls_ca_file the instances'
    reports and dispatch calls to the manager and a forwarded request's calls to the other
    instance use TLS (and the API key); an instance without it cannot join; a CA file that is
    not one stops loomd at start."""

    def test_reports_and_forwards_over_tls(self):
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                            key, "-out", cert, "-days", "1", "-subj", "/CN=loom-cluster",
                            "-addext", "subjectAltName=IP:127.0.0.1"],
                           check=True, capture_output=True)
            tls = ("--grpc-tls-cert-file", cert, "--grpc-tls-key-file", key)
            manager, manager_grpc, manager_http = start_manager(
                "--manager-dispatch-top-k", "1", *tls)
            instances = []
            try:
                # The entry's KV cache is an eighth of the other's: the manager sends its
                # requests to the other instance.
                entry = Instance(manager_grpc, "entry", "--kv-cache-mb", "8",
                                 "--cluster-tls-ca-file", cert, *tls)
                instances.append(entry)
                instances.append(Instance(manager_grpc, "target", "--cluster-tls-ca-file", cert,
                                          *tls))
                wait_registered(manager_http, 2)
                # Plaintext to a TLS manager: never registers.
                instances.append(Instance(manager_grpc, "plain", *tls))
                time.sleep(1.0)
                _, body = get(manager_http, "/v1/instances")
                self.assertEqual(sorted(i["instance_id"] for i in json.loads(body)["data"]),
                                 ["entry", "target"])
                reference = stream_text(instances[1].client, 40)
                before = metric(entry.port, "loom_requests_forwarded_total")
                self.assertEqual(stream_text(entry.client, 40), reference)
                self.assertEqual(metric(entry.port, "loom_requests_forwarded_total") - before, 1)
            finally:
                for inst in instances:
                    self.assertEqual(stop(inst.proc), 0)
                stop(manager)
            with open(os.path.join(tmp, "not-a-cert.pem"), "w") as f:
                f.write("hello\n")
            for ca in (os.path.join(tmp, "not-a-cert.pem"), os.path.join(tmp, "missing.pem")):
                run = subprocess.run([ARGS.loomd, "--model", ARGS.model, "--port", "0",
                                      "--cluster-tls-ca-file", ca],
                                     capture_output=True, text=True, timeout=60)
                self.assertEqual(run.returncode, 2, run.stderr)
                self.assertIn("cluster_tls_ca_file", run.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--loomd", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
