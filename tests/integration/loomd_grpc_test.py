#!/usr/bin/env python3
"""loomd's gRPC API with grpcio: streamed generation (text and token ids), the same tokens as the
HTTP API, abort, cancellation by the client, model/server/load info, API keys, grpc.health.v1 and
server reflection.

  python tests/integration/loomd_grpc_test.py --loomd build/cpu-release/bin/loomd --model DIR
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = None
KEY = "grpc-key"


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


class GrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc = subprocess.Popen(
            [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
             "--grpc-port", "0", "--kv-cache-mb", "32", "--threads", "1", "--api-keys", KEY],
            stdout=subprocess.PIPE, stderr=None, text=True)  # loomd's log goes to the test log
        lines = [cls.proc.stdout.readline(), cls.proc.stdout.readline()]
        grpc_line = next(l for l in lines if "gRPC" in l)
        http_line = next(l for l in lines if "gRPC" not in l)
        cls.grpc_port = int(grpc_line.strip().rsplit(":", 1)[1])
        cls.http_port = int(http_line.strip().rsplit(":", 1)[1])
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.stub = pb_grpc.GenerationStub(cls.channel)
        cls.auth = [("authorization", f"Bearer {KEY}")]

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proc.send_signal(signal.SIGTERM)
        assert cls.proc.wait(timeout=60) == 0
        cls.proc.stdout.close()

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
