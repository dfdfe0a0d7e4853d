#!/usr/bin/env python3
"""loomd's echoed prompt log-probabilities against Hugging Face transformers.

Sends every request of this folder's lm-eval tasks the way lm-evaluation-harness's
`local-completions` model does (token-id prompts in batches, echo, logprobs 1, max_tokens 1,
temperature 0) and compares each prompt position's score with reference.json, which
make_reference.py computed with transformers in float32. Also checks the lm-eval metrics those
scores make, and that max_tokens 0 and streaming give the same scores. Needs only the standard
library (no torch, no lm-eval).

  python tests/integration/lm_eval/echo_reference_test.py --loomd build/cpu-release/bin/loomd \
      --model tests/golden/models/llama3_gqa
"""
import argparse
import http.client
import json
import math
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_eval_requests as lr  # noqa: E402  (no torch needed for metrics)

ARGS = None
# With a float32 KV cache loomd computes what torch computes in float32, up to reduction order:
# per-token scores agree to about 1e-5 (the default bf16 KV cache rounds K and V, which moves
# them by up to a few 1e-2). The sums and metrics lm-eval reports must agree to 1e-3 relative.
TOKEN_ATOL = 1e-3
SUM_RTOL = 1e-3


class Loomd:
    def __init__(self):
        cmd = [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
               "--kv-cache-mb", "32", "--threads", "1", "--kv-cache-dtype", "f32"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"loomd did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line.strip().rsplit(":", 1)[1])

    def post(self, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read().decode()
        conn.close()
        if resp.status != 200:
            raise AssertionError(f"HTTP {resp.status}: {payload}")
        return payload

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode


class EchoReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(lr.HERE, "reference.json"), encoding="utf-8") as f:
            cls.ref = json.load(f)["requests"]
        cls.server = Loomd()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def lm_eval_batch(self, reqs, **extra):
        """One request as lm-eval's local-completions sends a batch; choices by index."""
        body = {"prompt": [r["ids"] for r in reqs], "temperature": 0, "max_tokens": 1,
                "logprobs": 1, "seed": 1234, "echo": True, **extra}
        out = json.loads(self.server.post(body))
        choices = sorted(out["choices"], key=lambda c: c["index"])
        self.assertEqual(len(choices), len(reqs))
        return [c["logprobs"] for c in choices]

    def assertScores(self, logprobs, ref, generated):
        n = len(ref["ids"])
        self.assertEqual(len(logprobs["token_logprobs"]), n + generated)
        self.assertIsNone(logprobs["token_logprobs"][0])
        self.assertIsNone(logprobs["top_logprobs"][0])
        got = logprobs["token_logprobs"][1:n]
        worst = max(abs(a - b) for a, b in zip(got, ref["logprobs"]))
        self.assertLessEqual(worst, TOKEN_ATOL, ref["text"])
        return worst

    def test_batched_lm_eval_requests_match_transformers(self):
        lls, greedy, worst = [], [], 0.0
        for start in range(0, len(self.ref), 8):
            batch = self.ref[start:start + 8]
            for logprobs, r in zip(self.lm_eval_batch(batch), batch):
                worst = max(worst, self.assertScores(logprobs, r, 1))
                # What lm-eval's parse_logprobs takes: the continuation, without the generated
                # token.
                ctx = r["ctxlen"]
                scores = logprobs["token_logprobs"][ctx:-1]
                tops = logprobs["top_logprobs"][ctx:-1]
                ll = sum(scores)
                ref_ll = sum(r["logprobs"][ctx - 1:])
                self.assertLessEqual(abs(ll - ref_ll), SUM_RTOL * abs(ref_ll), r["text"])
                lls.append(ll)
                greedy.append(all(s == max(t.values()) for s, t in zip(scores, tops)))
        ref_lls = [sum(r["logprobs"][r["ctxlen"] - 1:]) for r in self.ref]
        ref_greedy = [all(r["greedy"][r["ctxlen"] - 1:]) for r in self.ref]
        got, want = lr.metrics(self.ref, lls, greedy), lr.metrics(self.ref, ref_lls, ref_greedy)
        for task, values in want.items():
            for name, value in values.items():
                self.assertLessEqual(abs(got[task][name] - value), SUM_RTOL * abs(value) + 1e-12,
                                     f"{task} {name}: loomd {got[task][name]} vs {value}")
        # Perplexity 1 and bits per byte 0 are what a server that scores nothing gives.
        self.assertGreater(got["loom_echo_perplexity"]["bits_per_byte"], 1.0)
        print(f"\nworst per-token difference {worst:.2e}; metrics loomd {got} "
              f"transformers {want}", file=sys.stderr)

    def test_max_tokens_zero_and_streaming_give_the_same_scores(self):
        batch = self.ref[:4] + self.ref[-4:]
        for logprobs, r in zip(self.lm_eval_batch(batch, max_tokens=0), batch):
            self.assertScores(logprobs, r, 0)
        r = self.ref[-1]
        payload = self.server.post({"prompt": r["ids"], "max_tokens": 0, "logprobs": 1,
                                    "echo": True, "stream": True})
        events = [json.loads(line[6:]) for line in payload.splitlines()
                  if line.startswith("data: {")]
        first = events[0]["choices"][0]
        self.assertScores(first["logprobs"], r, 0)
        self.assertEqual(events[-1]["choices"][0]["finish_reason"], "length")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
