#!/usr/bin/env python3
"""loomd's gRPC API with grpcio: streamed generation (text and token ids), the same tokens as the
HTTP API, abort (only of the caller's own requests), cancellation by the client, model/server/load
info, API keys, the HTTP API's validation rules, unparsable messages, grpc.health.v1 (also while
draining) and server reflection (v1alpha and v1).

  python tests/integration/loomd_grpc_test.py --loomd build/cpu-release/bin/loomd --model DIR
"""
import argparse
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

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = None
KEY = "grpc-key"
OTHER_KEY = "another-tenant"
GENERATION = "loom.v1.Generation"
REFLECTION_V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"


def compile_stubs(out_dir):
    rc = protoc.main(["protoc", f"-I{ROOT}/proto", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", f"{ROOT}/proto/loom/v1/generation.proto"])
    assert rc == 0
    sys.path.insert(0, out_dir)


STUBS = tempfile.TemporaryDirectory()


def setUpModule():
    compile_stubs(STUBS.name)
    global pb, pb_grpc
    from loom.v1 import generation_pb2 as pb, generation_pb2_grpc as pb_grpc  # noqa: E402


def tearDownModule():
    STUBS.cleanup()


def start_loomd(*extra):
    """loomd on loopback ports; returns (process, gRPC port, HTTP port)."""
    proc = subprocess.Popen(
        [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
         "--grpc-port", "0", "--kv-cache-mb", "32", "--threads", "1", *extra],
        stdout=subprocess.PIPE, stderr=None, text=True)  # loomd's log goes to the test log
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    grpc_line = next(l for l in lines if "gRPC" in l)
    http_line = next(l for l in lines if "gRPC" not in l)
    return proc, int(grpc_line.strip().rsplit(":", 1)[1]), int(http_line.strip().rsplit(":", 1)[1])


def stop_loomd(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()


def finish_reasons(call):
    return [m.completion.finish_reason for m in call if m.HasField("completion")]


def check_abort_isolation(test, owner_stub, owner_md, foreign_stub, foreign_md):
    """A second caller cannot abort the owner's request (and learns nothing from trying), while
    the owner's own abort works. Two identical requests run side by side: the foreign caller
    aborts the first, then the owner aborts the second; the second ending in "abort" shows both
    were still running when the foreign abort came."""
    def start(rid):
        call = owner_stub.Generate(pb.GenerateRequest(request_id=rid, text="Go", max_tokens=250,
                                                      n=8, ignore_eos=True),
                                   metadata=owner_md, timeout=60)
        test.assertEqual(next(call).request_id, rid)
        return call
    victim, control = start("victim-1"), start("control-1")
    answers = [foreign_stub.Abort.with_call(pb.AbortRequest(request_id=rid), metadata=foreign_md,
                                            timeout=10)
               for rid in ("victim-1", "no-such-request")]
    # Somebody else's id and an unknown id get exactly the same answer.
    test.assertEqual([(r.SerializeToString(), c.code()) for r, c in answers],
                     [(b"", grpc.StatusCode.OK)] * 2)
    owner_stub.Abort(pb.AbortRequest(request_id="control-1"), metadata=owner_md, timeout=10)
    test.assertEqual(finish_reasons(control), ["abort"] * 8)
    test.assertEqual(finish_reasons(victim), ["length"] * 8)


class GrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.grpc_port, cls.http_port = start_loomd("--api-keys", f"{KEY},{OTHER_KEY}")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.stub = pb_grpc.GenerationStub(cls.channel)
        cls.auth = [("authorization", f"Bearer {KEY}")]

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        stop_loomd(cls.proc)

    def generate(self, **kw):
        chunks, completions = [], []
        for msg in self.stub.Generate(pb.GenerateRequest(**kw), metadata=self.auth, timeout=60):
            self.assertFalse(msg.HasField("error"), msg.error.message)
            if msg.HasField("chunk"):
                chunks.append(msg.chunk)
            elif msg.HasField("completion"):
                completions.append(msg.completion)
        return chunks, completions

    def test_text_generation_matches_http(self):
        chunks, completions = self.generate(text="Hello there", max_tokens=10,
                                            sampling=pb.SamplingParams(temperature=0),
                                            skip_special_tokens=True)
        text = "".join(c.text for c in chunks)
        ids = [i for c in chunks for i in c.token_ids]
        self.assertEqual(len(completions), 1)
        self.assertEqual(completions[0].completion_tokens, len(ids))
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        conn.request("POST", "/v1/completions",
                     json.dumps({"prompt": "Hello there", "max_tokens": 10, "temperature": 0}),
                     {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        body = json.loads(conn.getresponse().read())
        conn.close()
        self.assertEqual(body["choices"][0]["text"], text)

    def test_token_ids_n_and_logprobs(self):
        chunks, completions = self.generate(token_ids=pb.TokenIds(ids=[1, 2, 3, 4]), max_tokens=6,
                                            n=2, logprobs=2, ignore_eos=True,
                                            sampling=pb.SamplingParams(temperature=1.0, seed=3))
        self.assertEqual(sorted(c.index for c in completions), [0, 1])
        for c in completions:
            self.assertEqual(c.finish_reason, "length")
            self.assertEqual(c.completion_tokens, 6)
            self.assertEqual(c.prompt_tokens, 4)
        lps = [lp for c in chunks for lp in c.logprobs]
        self.assertEqual(len(lps), 12)
        self.assertTrue(all(len(lp.top) == 2 for lp in lps))

    def test_invalid_requests_are_statuses(self):
        with self.assertRaises(grpc.RpcError) as e:
            list(self.stub.Generate(pb.GenerateRequest(token_ids=pb.TokenIds(ids=[10**6])),
                                    metadata=self.auth, timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as e:
            list(self.stub.Generate(pb.GenerateRequest(text="x", max_tokens=100000),
                                    metadata=self.auth, timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as e:
            list(self.stub.Generate(pb.GenerateRequest(text="x"), timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.generate(text="still serving", max_tokens=2)

    def test_abort_and_client_cancel(self):
        call = self.stub.Generate(pb.GenerateRequest(request_id="long-1", text="Go", max_tokens=240,
                                                     ignore_eos=True), metadata=self.auth, timeout=60)
        first = next(call)
        self.assertEqual(first.request_id, "long-1")
        self.stub.Abort(pb.AbortRequest(request_id="long-1"), metadata=self.auth, timeout=10)
        finish = [m.completion.finish_reason for m in call if m.HasField("completion")]
        self.assertIn(finish, (["abort"], ["length"]))  # it may have finished first
        call = self.stub.Generate(pb.GenerateRequest(text="Go", max_tokens=240, ignore_eos=True),
                                  metadata=self.auth, timeout=60)
        next(call)
        call.cancel()
        self.generate(text="after cancel", max_tokens=2)

    def test_info_load_health_and_reflection(self):
        info = self.stub.GetModelInfo(pb.GetModelInfoRequest(), metadata=self.auth, timeout=10)
        self.assertEqual(info.id, os.path.basename(os.path.normpath(ARGS.model)))
        self.assertGreater(info.vocab_size, 0)
        server = self.stub.GetServerInfo(pb.GetServerInfoRequest(), metadata=self.auth, timeout=10)
        self.assertGreater(server.kv_num_blocks, 0)
        load = self.stub.GetLoad(pb.GetLoadRequest(), metadata=self.auth, timeout=10)
        self.assertFalse(load.draining)
        health = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(),
                                                                  timeout=10)
        self.assertEqual(health.status, health_pb2.HealthCheckResponse.SERVING)
        reflection = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        responses = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        names = [s.name for r in responses for s in r.list_services_response.service]
        self.assertIn("loom.v1.Generation", names)

    def assert_invalid(self, request, field, words=""):
        with self.assertRaises(grpc.RpcError) as e:
            list(self.stub.Generate(request, metadata=self.auth, timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, e.exception.details())
        self.assertIn(field, e.exception.details())
        self.assertIn(words, e.exception.details())

    def test_request_id_is_bounded(self):
        # Each streamed message repeats the id: a long one would multiply the output.
        for rid in ("x" * 257, "x" * (1 << 20), "two words", "new\nline"):
            self.assert_invalid(pb.GenerateRequest(request_id=rid, text="x", max_tokens=2),
                                "request_id", "256")
        rid = "r" * 256
        for msg in self.stub.Generate(pb.GenerateRequest(request_id=rid, text="x", max_tokens=2),
                                      metadata=self.auth, timeout=30):
            self.assertEqual(msg.request_id, rid)

    def test_assigned_ids_are_random(self):
        ids = [next(self.stub.Generate(pb.GenerateRequest(text="x", max_tokens=1),
                                       metadata=self.auth, timeout=30)).request_id
               for _ in range(3)]
        for rid in ids:
            self.assertRegex(rid, r"^grpc-[0-9a-f]{32}$")
        self.assertEqual(len(set(ids)), 3)

    def test_abort_reaches_only_the_callers_requests(self):
        check_abort_isolation(self, self.stub, self.auth, self.stub,
                              [("authorization", f"Bearer {OTHER_KEY}")])

    def test_same_validation_as_http(self):
        ids = pb.TokenIds(ids=[1, 2, 3])
        self.assert_invalid(pb.GenerateRequest(token_ids=ids, max_tokens=-5), "max_tokens")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids, n=-1), "'n'", "[1, 128]")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids, logprobs=-1), "logprobs", "[0, 20]")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids, max_tokens=4, min_tokens=9),
                            "min_tokens", "must not exceed")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids, priority=2000000000), "priority")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids, priority=-2000000000), "priority")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids,
                                               sampling=pb.SamplingParams(temperature=-1)),
                            "sampling.temperature", "[0, 2]")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids,
                                               sampling=pb.SamplingParams(top_p=float("nan"))),
                            "sampling.top_p")
        self.assert_invalid(pb.GenerateRequest(token_ids=ids,
                                               sampling=pb.SamplingParams(logit_bias={1: 500})),
                            "sampling.logit_bias", "[-100, 100]")
        self.assert_invalid(pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1, -4])), "token_ids")
        # The same body over HTTP is refused the same way.
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": [1, 2, 3], "n": -1}),
                     {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        response = conn.getresponse()
        self.assertEqual(response.status, 400)
        self.assertEqual(json.loads(response.read())["error"]["param"], "n")
        conn.close()
        self.generate(text="still serving", max_tokens=2)

    def test_unparsable_messages_are_invalid_argument(self):
        garbage = b"\xff\xff\xff\xff"  # a truncated field with a bad tag
        for method in ("Abort", "GetModelInfo", "GetServerInfo", "GetLoad"):
            with self.assertRaises(grpc.RpcError) as e:
                self.channel.unary_unary(f"/{GENERATION}/{method}")(garbage, metadata=self.auth,
                                                                    timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, method)
            self.assertIn("does not parse", e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            list(self.channel.unary_stream(f"/{GENERATION}/Generate")(garbage, metadata=self.auth,
                                                                      timeout=10))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("loom.v1.GenerateRequest", e.exception.details())
        # Without a key the answer is still UNAUTHENTICATED, whatever the bytes.
        with self.assertRaises(grpc.RpcError) as e:
            self.channel.unary_unary(f"/{GENERATION}/GetLoad")(garbage, timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.generate(text="still serving", max_tokens=2)

    def test_health_knows_the_api(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        for service in ("", GENERATION):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            self.assertEqual(answer.status, health_pb2.HealthCheckResponse.SERVING, service)

    def test_reflection_v1_answers_as_v1alpha(self):
        # grpcio-reflection has no v1 client: v1's messages are v1alpha's under a new package,
        # so the v1alpha classes speak v1 on the wire.
        v1 = self.channel.stream_stream(
            REFLECTION_V1, request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        v1alpha = reflection_pb2_grpc.ServerReflectionStub(self.channel).ServerReflectionInfo
        R = reflection_pb2.ServerReflectionRequest
        requests = [
            R(list_services=""),
            R(file_containing_symbol=GENERATION),
            R(file_containing_symbol="loom.v1.GenerateRequest"),
            R(file_containing_symbol="grpc.reflection.v1.ServerReflection"),
            R(file_containing_symbol="no.such.Symbol"),
            R(file_by_filename="loom/v1/generation.proto", host="h"),
            R(file_by_filename="no/such.proto"),
            R(all_extension_numbers_of_type="loom.v1.GenerateRequest"),
            R(all_extension_numbers_of_type="no.such.Type"),
            R(file_containing_extension=reflection_pb2.ExtensionRequest(
                containing_type="loom.v1.GenerateRequest", extension_number=100)),
            R(),
        ]
        got = list(v1(iter(requests), timeout=10))
        # One request per v1alpha stream: gRPC 1.51's v1alpha keeps appending the files of earlier
        # answers on the same stream to later ones; v1 answers each request on its own.
        want = [next(v1alpha(iter([r]), timeout=10)) for r in requests]
        self.assertEqual(len(got), len(requests))
        names = sorted(s.name for s in got[0].list_services_response.service)
        self.assertEqual(names, sorted(s.name for s in want[0].list_services_response.service))
        self.assertIn(GENERATION, names)
        self.assertIn("grpc.reflection.v1.ServerReflection", names)
        for g, w in zip(got[1:], want[1:]):
            self.assertEqual(g, w)
        self.assertEqual(len(got[1].file_descriptor_response.file_descriptor_proto), 1)
        self.assertEqual(got[4].error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])


class GrpcKeylessTest(unittest.TestCase):
    """Without API keys, a request belongs to the connection that started it."""

    def test_abort_reaches_only_the_same_connection(self):
        proc, port, _ = start_loomd()
        try:
            # A channel of its own: not the shared connection grpcio would otherwise reuse.
            with grpc.insecure_channel(f"127.0.0.1:{port}") as mine, \
                 grpc.insecure_channel(f"127.0.0.1:{port}",
                                       options=[("grpc.use_local_subchannel_pool", 1)]) as theirs:
                check_abort_isolation(self, pb_grpc.GenerationStub(mine), [],
                                      pb_grpc.GenerationStub(theirs), [])
        finally:
            stop_loomd(proc)

    def test_health_is_not_serving_while_draining(self):
        proc, port, _ = start_loomd("--drain-timeout-s", "60")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            stub = pb_grpc.GenerationStub(channel)
            # A large request keeps the drain waiting (and its unread output stalls the stream).
            call = stub.Generate(pb.GenerateRequest(text="Go", max_tokens=250, n=128, logprobs=20,
                                                    ignore_eos=True), timeout=120)
            next(call)
            proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 10
            statuses = {}
            while time.time() < deadline:
                statuses = {s: health.Check(health_pb2.HealthCheckRequest(service=s), timeout=10).status
                            for s in ("", GENERATION)}
                if set(statuses.values()) == {health_pb2.HealthCheckResponse.NOT_SERVING}:
                    break
                time.sleep(0.02)
            self.assertEqual(statuses, {"": health_pb2.HealthCheckResponse.NOT_SERVING,
                                        GENERATION: health_pb2.HealthCheckResponse.NOT_SERVING})
            with self.assertRaises(grpc.RpcError) as e:
                list(stub.Generate(pb.GenerateRequest(text="x", max_tokens=1), timeout=10))
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(set(finish_reasons(call)), {"length"})
        self.assertEqual(proc.wait(timeout=60), 0)
        proc.stdout.close()


class GrpcTlsTest(unittest.TestCase):
    def test_tls_with_a_self_signed_certificate(self):
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                            "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                            "-addext", "subjectAltName=DNS:localhost"],
                           check=True, capture_output=True)
            proc = subprocess.Popen(
                [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
                 "--grpc-port", "0", "--grpc-tls-cert-file", cert, "--grpc-tls-key-file", key,
                 "--kv-cache-mb", "16", "--threads", "1"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                line = proc.stdout.readline()
                self.assertIn("gRPC", line)
                port = int(line.strip().rsplit(":", 1)[1])
                creds = grpc.ssl_channel_credentials(root_certificates=open(cert, "rb").read())
                with grpc.secure_channel(f"localhost:{port}", creds) as channel:
                    info = pb_grpc.GenerationStub(channel).GetModelInfo(pb.GetModelInfoRequest(),
                                                                         timeout=30)
                    self.assertGreater(info.vocab_size, 0)
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    with self.assertRaises(grpc.RpcError):
                        pb_grpc.GenerationStub(channel).GetModelInfo(pb.GetModelInfoRequest(),
                                                                     timeout=5)
            finally:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=60), 0)
                proc.stdout.close()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
