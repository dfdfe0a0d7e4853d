#!/usr/bin/env python3
"""Live migration between two loomd instances (proto/loom/v1/cluster.proto): a request moved
while it streams gives its client exactly the tokens it would have got without the move (greedy
and seeded sampling; HTTP and gRPC clients; decode and prompt phase), and the faults leave one
owner: a destination that is gone before the move leaves the request running at home; one killed
after the commit ends the client's stream with a clear error while the source keeps serving. At
the relay limit (max_relays), at a destination without room, and when the source's engine loop
answers too late, a move is given up and the request goes on at home, its stream unbroken.

  python tests/integration/cluster_migration_test.py --loomd build/cpu-release/bin/loomd \
      --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
import openai
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = None
KEY = "cluster-key"
PROMPT = "Write a long story about a lighthouse keeper and the sea."
STUBS = tempfile.TemporaryDirectory()


def setUpModule():
    rc = protoc.main(["protoc", f"-I{ROOT}/proto", f"--python_out={STUBS.name}",
                      f"--grpc_python_out={STUBS.name}", f"{ROOT}/proto/loom/v1/cluster.proto",
                      f"{ROOT}/proto/loom/v1/generation.proto"])
    assert rc == 0
    sys.path.insert(0, STUBS.name)
    global cpb, cpb_grpc, gpb, gpb_grpc
    from loom.v1 import cluster_pb2 as cpb, cluster_pb2_grpc as cpb_grpc  # noqa: E402
    from loom.v1 import generation_pb2 as gpb, generation_pb2_grpc as gpb_grpc  # noqa: E402


def tearDownModule():
    STUBS.cleanup()


class Loomd:
    """One instance on loopback ports."""

    def __init__(self, *extra):
        cmd = [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
               "--grpc-port", "0", "--kv-cache-mb", "64", "--threads", "1",
               "--api-keys", KEY, "--served-model-name", "m", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
        lines = [self.proc.stdout.readline(), self.proc.stdout.readline()]
        if not all("listening on" in l for l in lines):
            self.proc.kill()
            raise RuntimeError(f"loomd did not start: {lines!r}")
        self.grpc_port = int(next(l for l in lines if "gRPC" in l).strip().rsplit(":", 1)[1])
        self.port = int(next(l for l in lines if "gRPC" not in l).strip().rsplit(":", 1)[1])
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=KEY,
                                    max_retries=0, timeout=300)
        self.channel = grpc.insecure_channel(self.grpc_address)
        self.cluster = cpb_grpc.InstanceStub(self.channel)
        self.generation = gpb_grpc.GenerationStub(self.channel)
        self.md = [("authorization", f"Bearer {KEY}")]

    def migrate_out(self, destination, max_requests=0):
        return self.cluster.MigrateOut(
            cpb.MigrateOutRequest(destination_address=destination, max_requests=max_requests),
            metadata=self.md, timeout=120)

    def stop(self, sig=signal.SIGTERM):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


def stream_completion(server, on_chunk=None, **kw):
    """Streams a completion; calls on_chunk(i) after chunk i. Returns (text, finish_reason)."""
    args = dict(model="m", prompt=PROMPT, max_tokens=160, temperature=0, stream=True,
                extra_body={"ignore_eos": True})
    args.update(kw)
    text, finish = "", None
    for i, chunk in enumerate(server.client.completions.create(**args)):
        c = chunk.choices[0]
        text += c.text or ""
        finish = c.finish_reason or finish
        if on_chunk is not None:
            on_chunk(i)
    return text, finish


class MigrationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = Loomd("--instance-id", "a")
        cls.b = Loomd("--instance-id", "b")

    @classmethod
    def tearDownClass(cls):
        assert cls.a.stop() == 0
        assert cls.b.stop() == 0

    def migrate_during_stream(self, after_chunks=8, **kw):
        """The reference (run alone on b), then the same request on a, moved to b after
        `after_chunks` chunks. Returns (reference, migrated, migration results)."""
        reference = stream_completion(self.b, **kw)
        results = []
        started = threading.Event()

        def on_chunk(i):
            if i == after_chunks:
                started.set()

        def migrate():
            started.wait(120)
            results.extend(self.a.migrate_out(self.b.grpc_address).results)

        t = threading.Thread(target=migrate)
        t.start()
        migrated = stream_completion(self.a, on_chunk=on_chunk, **kw)
        t.join()
        return reference, migrated, results

    def test_greedy_decode_phase(self):
        reference, migrated, results = self.migrate_during_stream()
        self.assertEqual(len(results), 1, results)
        self.assertEqual(results[0].outcome, "committed", results[0].reason)
        self.assertGreaterEqual(results[0].stages, 2)
        self.assertGreater(results[0].blocks_copied, 0)
        self.assertEqual(migrated, reference)
        self.assertEqual(migrated[1], "length")
        # The downtime's parts are the consecutive spans it is made of.
        r = results[0]
        parts = (r.export_step_ms, r.resume_ms, r.first_output_ms)
        self.assertTrue(all(p >= 0 for p in parts), r)
        self.assertGreater(r.downtime_ms, 0, r)
        self.assertAlmostEqual(sum(parts), r.downtime_ms, delta=1.0, msg=r)

    def test_seeded_sampling(self):
        reference, migrated, results = self.migrate_during_stream(temperature=0.9, seed=1234,
                                                                  top_p=0.95)
        self.assertEqual([r.outcome for r in results], ["committed"])
        self.assertEqual(migrated, reference)

    def test_grpc_client_stream_continues(self):
        req = gpb.GenerateRequest(token_ids=gpb.TokenIds(ids=list(range(100, 140))),
                                  max_tokens=150, ignore_eos=True,
                                  sampling=gpb.SamplingParams(temperature=0))

        def tokens(stub, on_msg=None):
            out = []
            for i, msg in enumerate(stub.Generate(req, metadata=self.a.md, timeout=300)):
                self.assertFalse(msg.HasField("error"), msg.error.message)
                if msg.HasField("chunk"):
                    out.extend(msg.chunk.token_ids)
                if on_msg:
                    on_msg(i)
            return out

        reference = tokens(self.b.generation)
        results = []

        def on_msg(i):
            if i == 10:
                threading.Thread(target=lambda: results.extend(
                    self.a.migrate_out(self.b.grpc_address).results)).start()

        migrated = tokens(self.a.generation, on_msg)
        for _ in range(100):
            if results:
                break
            time.sleep(0.1)
        self.assertEqual([r.outcome for r in results], ["committed"])
        self.assertEqual(migrated, reference)

    def test_nothing_to_move(self):
        self.assertEqual(len(self.a.migrate_out(self.b.grpc_address).results), 0)


class LowBitMigrationTest(unittest.TestCase):
    """An int4 KV cache with a bf16 residual tail: the packed blocks, their scales and zeros and
    the tail all move, and the request continues exactly."""

    def test_int4_with_residual_tail(self):
        extra = ("--kv-cache-dtype", "int4", "--kv-residual-tokens", "48", "--max-num-seqs", "4")
        a, b = Loomd(*extra), Loomd(*extra)
        try:
            reference = stream_completion(b, max_tokens=120)
            results = []

            def on_chunk(i):
                if i == 20:
                    threading.Thread(target=lambda: results.extend(
                        a.migrate_out(b.grpc_address).results)).start()

            got = stream_completion(a, on_chunk=on_chunk, max_tokens=120)
            deadline = time.time() + 30
            while not results and time.time() < deadline:
                time.sleep(0.1)
            self.assertEqual([r.outcome for r in results], ["committed"], results)
            self.assertEqual(got, reference)
            # Another layout is refused, and the request stays home.
            c = Loomd("--kv-cache-dtype", "int8", "--max-num-seqs", "4")
            try:
                results.clear()

                def on_chunk_c(i):
                    if i == 10:
                        results.extend(a.migrate_out(c.grpc_address).results)

                got = stream_completion(a, on_chunk=on_chunk_c, max_tokens=60)
                self.assertEqual([r.outcome for r in results], ["aborted"])
                self.assertIn("layouts differ", results[0].reason)
                self.assertEqual(got, stream_completion(b, max_tokens=60))
            finally:
                self.assertEqual(c.stop(), 0)
        finally:
            self.assertEqual(a.stop(), 0)
            self.assertEqual(b.stop(), 0)


class RelayLimitTest(unittest.TestCase):
    """max_relays bounds the threads that relay moved requests' outputs to their clients: at the
    limit a move is refused before it begins, and the request it would have moved goes on at
    home, its stream unbroken."""

    def test_a_move_beyond_the_relay_limit_stays_home(self):
        a, b = Loomd("--max-relays", "1"), Loomd()
        try:
            reference = stream_completion(b, max_tokens=120)
            got = [None, None]
            started = [threading.Event(), threading.Event()]

            def run(k):
                def on_chunk(i):
                    if i == 8:
                        started[k].set()
                got[k] = stream_completion(a, on_chunk=on_chunk, max_tokens=120)

            threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
            for t in threads:
                t.start()
            for e in started:
                self.assertTrue(e.wait(120))
            # One at a time: the first move commits and its relay runs until that request ends,
            # so the second finds the limit reached.
            results = list(a.migrate_out(b.grpc_address).results)
            for t in threads:
                t.join()
            self.assertEqual(sorted(r.outcome for r in results), ["aborted", "committed"],
                             results)
            aborted = next(r for r in results if r.outcome == "aborted")
            self.assertIn("relay limit", aborted.reason)
            self.assertEqual(got, [reference, reference])
            # Still serving, and a move is possible again once the relay has ended (its thread
            # gave its place back).
            again = []

            def on_chunk(i):
                if i == 8:
                    again.extend(a.migrate_out(b.grpc_address).results)

            self.assertEqual(stream_completion(a, on_chunk=on_chunk, max_tokens=60)[1], "length")
            self.assertEqual([r.outcome for r in again], ["committed"], again)
        finally:
            self.assertEqual(a.stop(), 0)
            self.assertEqual(b.stop(), 0)


class FaultTest(unittest.TestCase):
    def test_destination_gone_before_the_move_keeps_the_request_home(self):
        a, b = Loomd(), Loomd()
        try:
            reference = stream_completion(a, max_tokens=80)
            b_address = b.grpc_address
            self.assertEqual(b.stop(signal.SIGKILL), -signal.SIGKILL)
            results = []

            def on_chunk(i):
                if i == 5:
                    results.extend(a.migrate_out(b_address).results)

            got = stream_completion(a, on_chunk=on_chunk, max_tokens=80)
            self.assertEqual([r.outcome for r in results], ["aborted"])
            self.assertEqual(got, reference)
            # Still serving.
            self.assertEqual(stream_completion(a, max_tokens=5)[1], "length")
        finally:
            self.assertEqual(a.stop(), 0)

    def test_destination_killed_after_the_commit_fails_the_stream_clearly(self):
        a, b = Loomd(), Loomd()
        try:
            results = []
            killed = threading.Event()

            def on_chunk(i):
                if i == 5:
                    results.extend(a.migrate_out(b.grpc_address).results)
                    b.proc.send_signal(signal.SIGKILL)
                    killed.set()

            with self.assertRaises(Exception) as ctx:
                stream_completion(a, on_chunk=on_chunk, max_tokens=2000)
            self.assertTrue(killed.is_set())
            self.assertEqual([r.outcome for r in results], ["committed"])
            self.assertIn("migration", str(ctx.exception).lower() + repr(ctx.exception).lower())
            self.assertEqual(stream_completion(a, max_tokens=5)[1], "length")
        finally:
            self.assertEqual(a.stop(), 0)
            b.stop()

    def test_source_killed_after_the_commit_frees_the_destination(self):
        a, b = Loomd(), Loomd()
        try:
            results = []

            def on_chunk(i):
                if i == 5:
                    results.extend(a.migrate_out(b.grpc_address).results)
                    a.proc.send_signal(signal.SIGKILL)

            with self.assertRaises(Exception):
                stream_completion(a, on_chunk=on_chunk, max_tokens=2000)
            self.assertEqual([r.outcome for r in results], ["committed"])
            # The destination notices its owner is gone and aborts the request: its blocks free.
            deadline = time.time() + 30
            load = None
            while time.time() < deadline:
                load = b.generation.GetLoad(gpb.GetLoadRequest(), metadata=b.md, timeout=10)
                if load.num_running_requests == 0:
                    break
                time.sleep(0.2)
            self.assertEqual(load.num_running_requests, 0)
            self.assertEqual(stream_completion(b, max_tokens=5)[1], "length")
        finally:
            a.stop()
            self.assertEqual(b.stop(), 0)


class PromptPhaseTest(unittest.TestCase):
    """A request moved while its prompt is still being computed (in chunks of 64 tokens): the
    blocks of the prompt computed so far move, the destination computes the rest, and the client
    gets exactly the tokens of a run without the move."""

    def test_a_request_moves_in_its_prompt_phase(self):
        extra = ("--max-num-batched-tokens", "64", "--kv-cache-mb", "128")
        a, b = Loomd(*extra), Loomd(*extra)
        try:
            prompt = [100 + (i * 7) % 4000 for i in range(800)]  # 50 blocks, 13 steps
            req = gpb.GenerateRequest(token_ids=gpb.TokenIds(ids=prompt), max_tokens=40,
                                      ignore_eos=True, sampling=gpb.SamplingParams(temperature=0))

            def tokens(server, first_at=None):
                out = []
                for msg in server.generation.Generate(req, metadata=server.md, timeout=300):
                    self.assertFalse(msg.HasField("error"), msg.error.message)
                    if msg.HasField("chunk") and msg.chunk.token_ids:
                        if first_at is not None and not first_at:
                            first_at.append(time.time())
                        out.extend(msg.chunk.token_ids)
                return out

            reference = tokens(b)
            got, first_at = [], []
            t = threading.Thread(target=lambda: got.extend(tokens(a, first_at)))
            t.start()
            time.sleep(0.3)  # admitted, and a few chunks of the prompt computed
            called_at = time.time()
            results = list(a.migrate_out(b.grpc_address).results)
            t.join()
            self.assertEqual([r.outcome for r in results], ["committed"], results)
            # Frozen before the prompt was done: fewer blocks than the whole prompt's moved.
            self.assertLess(results[0].blocks_copied, len(prompt) // 16, results)
            self.assertGreater(first_at[0], called_at)
            self.assertEqual(got, reference)
        finally:
            self.assertEqual(a.stop(), 0)
            self.assertEqual(b.stop(), 0)


class RefusedMoveTest(unittest.TestCase):
    def test_a_destination_without_room_refuses_and_the_request_stays_home(self):
        # 2 MiB of KV cache hold 91 tokens (5 blocks); the request holds more than that when
        # the move starts.
        a, b = Loomd(), Loomd("--kv-cache-mb", "2")
        try:
            reference = stream_completion(a, max_tokens=200)
            results = []

            def on_chunk(i):
                if i == 100:
                    results.extend(a.migrate_out(b.grpc_address).results)

            got = stream_completion(a, on_chunk=on_chunk, max_tokens=200)
            self.assertEqual([r.outcome for r in results], ["aborted"], results)
            self.assertIn("refused", results[0].reason)
            self.assertEqual(got, reference)
            # Both still serve, and the destination holds nothing for the move.
            self.assertEqual(stream_completion(b, max_tokens=20)[1], "length")
            load = b.generation.GetLoad(gpb.GetLoadRequest(), metadata=b.md, timeout=10)
            self.assertEqual(load.num_running_requests, 0)
        finally:
            self.assertEqual(a.stop(), 0)
            self.assertEqual(b.stop(), 0)


class LateLoopTest(unittest.TestCase):
    """The source's engine loop answers the freezing export after migration_timeout_ms: another
    request's prompt is computed in steps much longer than that. The move is given up, but the
    export still runs when the loop gets to it, freezes the request and takes its stream; the
    abort must give both back, so the request finishes at home and its client gets every
    token."""
    PAUSE = 1.2
    TIMEOUT_MS = 300

    def test_an_export_answered_too_late_gives_the_stream_back(self):
        extra = ("--max-num-batched-tokens", "2048", "--kv-cache-mb", "128")
        a = Loomd("--migration-timeout-ms", str(self.TIMEOUT_MS), "--migration-stage-pause-ms",
                  str(int(self.PAUSE * 1000)), *extra)
        b = Loomd(*extra)
        # A hang here is the failure: the client must not wait the default 300 s.
        a.client = a.client.with_options(timeout=60)
        try:
            reference = stream_completion(a, max_tokens=120)
            long_prompt = gpb.GenerateRequest(
                token_ids=gpb.TokenIds(ids=[100 + (i * 11) % 4000 for i in range(4000)]),
                max_tokens=1, sampling=gpb.SamplingParams(temperature=0))
            results, neighbour = [], []

            def start_neighbour():
                # After the first stage (a few blocks, copied at once), late in the pause, so
                # that the freeze comes early in the first of the prompt's steps of 2048 tokens
                # (over 1 s each even on a Zen 5 core): the export waits far longer than the
                # timeout. With steps of 512 tokens and the start at a third of the pause, a
                # Zen 5 core finished the step within the timeout and the move committed.
                neighbour.extend(a.generation.Generate(long_prompt, metadata=a.md, timeout=300))

            def on_chunk(i):
                if i == 5:
                    threading.Thread(target=lambda: results.extend(
                        a.migrate_out(b.grpc_address, max_requests=1).results)).start()
                    threading.Timer(self.PAUSE * 0.75, start_neighbour).start()

            got = stream_completion(a, on_chunk=on_chunk, max_tokens=120)
            deadline = time.time() + 30
            while not results and time.time() < deadline:
                time.sleep(0.1)
            self.assertEqual([r.outcome for r in results], ["aborted"], results)
            # The first stage was done; the freezing one is the one that timed out.
            self.assertEqual(results[0].stages, 1, results)
            self.assertIn("did not answer", results[0].reason)
            self.assertEqual(got, reference)
            deadline = time.time() + 60
            while not neighbour and time.time() < deadline:
                time.sleep(0.1)
            self.assertTrue(neighbour, "the other request did not finish")
            self.assertEqual(stream_completion(a, max_tokens=5)[1], "length")
        finally:
            self.assertEqual(a.stop(), 0)
            self.assertEqual(b.stop(), 0)


class PreemptedDuringTheMoveTest(unittest.TestCase):
    """The request is preempted on the source between two stages (one sequence at a time, and a
    more important request arrives): the blocks already copied are stale, so the move is given
    up, the destination's reservation is freed, and the request finishes at home once it runs
    again, its stream unbroken."""

    def test_a_preempted_request_stays_home(self):
        a = Loomd("--max-num-seqs", "1", "--migration-stage-pause-ms", "1500",
                  "--migration-last-stage-blocks", "100000")
        b = Loomd()
        try:
            free_b = b.generation.GetLoad(gpb.GetLoadRequest(), metadata=b.md,
                                          timeout=10).num_free_blocks
            low = {"extra_body": {"ignore_eos": True, "priority": 10}}
            # Long enough that the request is still running when the intruder comes 0.7 s into
            # the move: 150 tokens took less than that on a Zen 5 core.
            tokens = 800
            reference = stream_completion(a, max_tokens=tokens, **low)
            results, intruder = [], []

            def on_chunk(i):
                if i == 5:
                    threading.Thread(target=lambda: results.extend(
                        a.migrate_out(b.grpc_address, max_requests=1).results)).start()
                    # Inside the pause after the first stage.
                    threading.Timer(0.7, lambda: intruder.append(stream_completion(
                        a, max_tokens=20, extra_body={"ignore_eos": True, "priority": 0}))).start()

            got = stream_completion(a, on_chunk=on_chunk, max_tokens=tokens, **low)
            deadline = time.time() + 30
            while not (results and intruder) and time.time() < deadline:
                time.sleep(0.1)
            self.assertEqual([r.outcome for r in results], ["aborted"], results)
            self.assertIn("rescheduled", results[0].reason)
            self.assertEqual(intruder[0][1], "length")
            self.assertEqual(got, reference)
            deadline = time.time() + 10
            while time.time() < deadline:
                load = b.generation.GetLoad(gpb.GetLoadRequest(), metadata=b.md, timeout=10)
                if load.num_free_blocks == free_b:
                    break
                time.sleep(0.1)
            self.assertEqual(load.num_free_blocks, free_b, "the reservation was not freed")
        finally:
            self.assertEqual(a.stop(), 0)
            self.assertEqual(b.stop(), 0)


class StagedMove:
    """Two instances for moves whose stages take known times: the source pauses PAUSE seconds
    after every stage (the last included, when the request is frozen)."""
    PAUSE = 1.5
    # A killed source's reservation expires after this long.
    RESERVATION_MS = 2000

    def setUp(self):
        self.a = Loomd("--migration-stage-pause-ms", str(int(self.PAUSE * 1000)),
                       "--migration-last-stage-blocks", "100000")
        self.b = Loomd("--reservation-timeout-ms", str(self.RESERVATION_MS))
        self.free_b = self.b.generation.GetLoad(gpb.GetLoadRequest(), metadata=self.b.md,
                                                timeout=10).num_free_blocks

    def tearDown(self):
        self.a.stop(signal.SIGKILL)
        self.b.stop(signal.SIGKILL)

    def run_with_kill(self, victim, at, max_tokens=400):
        """Streams on a, starts the move after 5 chunks and kills `victim` `at` seconds later.
        Returns (the stream's (text, finish) or the exception, the migration results)."""
        results, errors = [], []

        def migrate():
            try:
                results.extend(self.a.migrate_out(self.b.grpc_address).results)
            except grpc.RpcError as e:
                errors.append(e)

        def on_chunk(i):
            if i == 5:
                threading.Thread(target=migrate).start()
                threading.Timer(at, lambda: victim.proc.send_signal(signal.SIGKILL)).start()

        try:
            got = stream_completion(self.a, on_chunk=on_chunk, max_tokens=max_tokens)
        except Exception as e:  # the client's connection to a killed source
            got = e
        deadline = time.time() + 30
        while not results and not errors and time.time() < deadline:
            time.sleep(0.1)
        return got, results

    def assert_destination_frees_everything(self):
        deadline = time.time() + 20
        load = None
        while time.time() < deadline:
            load = self.b.generation.GetLoad(gpb.GetLoadRequest(), metadata=self.b.md, timeout=10)
            if load.num_free_blocks == self.free_b and load.num_running_requests == 0:
                break
            time.sleep(0.2)
        self.assertEqual(load.num_free_blocks, self.free_b, "the reservation was not freed")
        self.assertEqual(load.num_running_requests, 0)


class StageFaultTest(StagedMove, unittest.TestCase):
    """Each side killed at each stage. A kill lands inside a known stage: at t0 + PAUSE / 2 the
    blocks of the pre-copy stage are on the destination and the request still runs at the
    source; at t0 + 1.5 PAUSE it is frozen, its last blocks copied, and Resume not yet
    called."""

    def test_destination_killed_during_precopy(self):
        reference = stream_completion(self.a, max_tokens=400)
        got, results = self.run_with_kill(self.b, self.PAUSE / 2)
        self.assertEqual([r.outcome for r in results], ["aborted"])
        self.assertEqual(got, reference, "the request must finish at home, exactly")

    def test_destination_killed_while_frozen(self):
        reference = stream_completion(self.a, max_tokens=400)
        got, results = self.run_with_kill(self.b, self.PAUSE * 1.5)
        self.assertEqual([r.outcome for r in results], ["aborted"])
        self.assertEqual(got, reference, "the request must resume at home, exactly")

    def test_source_killed_during_precopy(self):
        got, _ = self.run_with_kill(self.a, self.PAUSE / 2)
        self.assertIsInstance(got, Exception)
        self.assert_destination_frees_everything()

    def test_source_killed_while_frozen(self):
        got, _ = self.run_with_kill(self.a, self.PAUSE * 1.5)
        self.assertIsInstance(got, Exception)
        self.assert_destination_frees_everything()


class ClientLeavesDuringTheMoveTest(StagedMove, unittest.TestCase):
    """The client closes its connection in the middle of a move: the request ends at home, the
    move is given up and nothing is left running or reserved on either side, whether the
    request was still running (pre-copy) or frozen (its stream is then off the engine loop, and
    the client's going is what ends the move)."""
    RESERVATION_MS = 600000  # freed by the source at once, not by expiry

    def leave_at(self, at):
        results = []
        conn = http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({
            "model": "m", "prompt": PROMPT, "max_tokens": 400, "temperature": 0,
            "stream": True, "ignore_eos": True}),
            {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        chunks = 0
        try:
            for line in resp:
                if not line.startswith(b"data: {"):
                    continue
                chunks += 1
                if chunks == 5:
                    threading.Thread(target=lambda: results.extend(
                        self.a.migrate_out(self.b.grpc_address).results)).start()
                    # A FIN now (closing the socket would wait for the blocked read).
                    threading.Timer(at, lambda: conn.sock.shutdown(socket.SHUT_RDWR)).start()
        except (OSError, http.client.HTTPException):
            pass
        conn.close()
        deadline = time.time() + 30
        while not results and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual([r.outcome for r in results], ["aborted"], results)
        self.assert_destination_frees_everything()
        self.assertEqual(stream_completion(self.a, max_tokens=5)[1], "length")
        load = self.a.generation.GetLoad(gpb.GetLoadRequest(), metadata=self.a.md, timeout=10)
        self.assertEqual(load.num_running_requests, 0)
        return results[0]

    def test_client_leaves_during_precopy(self):
        self.leave_at(self.PAUSE / 2)

    def test_client_leaves_while_frozen(self):
        self.assertIn("went away", self.leave_at(self.PAUSE * 1.5).reason)


class FinishedDuringTheMoveTest(StagedMove, unittest.TestCase):
    """The request ends at home between two stages. Its reservation on the destination is given
    back at once, not when it expires (here after 10 minutes)."""
    RESERVATION_MS = 600000

    def test_request_finishing_during_the_move_stays_finished(self):
        reference = stream_completion(self.a, max_tokens=30)
        results = []

        def on_chunk(i):
            if i == 5:
                threading.Thread(target=lambda: results.extend(
                    self.a.migrate_out(self.b.grpc_address).results)).start()

        got = stream_completion(self.a, on_chunk=on_chunk, max_tokens=30)
        deadline = time.time() + 30
        while not results and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(got, reference)
        self.assertEqual([r.outcome for r in results], ["aborted"])
        self.assert_destination_frees_everything()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--loomd", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
