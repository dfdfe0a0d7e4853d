#!/usr/bin/env python3
"""loomd serving the default model, SmolLM2-135M-Instruct as a GGUF Q4_1 file, through the OpenAI
Python client: the tokenizer and chat template come from the file's metadata, the weights run in
their quantized formats, and the answers are the ones transformers gives for the same file
(recorded below with AutoModelForCausalLM/AutoTokenizer.from_pretrained(dir, gguf_file=...),
float32, greedy).

  python tests/integration/loomd_gguf_test.py --loomd build/cpu-release/bin/loomd \
      --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import os
import subprocess
import sys
import unittest

from openai import OpenAI

ARGS = None

# transformers 5.24, torch 2.15, float32, greedy, from the same GGUF file.
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
CHAT_PROMPT_TOKENS = 37
CHAT_ANSWER = "The capital of France is Paris."


class Loomd:
    def __init__(self, *extra):
        cmd = [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
               "--kv-cache-mb", "400", "--threads", "2", "--kv-cache-dtype", "f32", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"loomd did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line.strip().rsplit(":", 1)[1])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode


class GgufServingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Loomd()
        cls.client = OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key="unused")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_model_is_listed_without_the_extension(self):
        ids = [m.id for m in self.client.models.list().data]
        self.assertEqual(ids, ["SmolLM2-135M-Instruct.Q4_1"])

    def test_chat_answer_matches_transformers(self):
        out = self.client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                  messages=CHAT, temperature=0, max_tokens=24)
        self.assertEqual(out.usage.prompt_tokens, CHAT_PROMPT_TOKENS)
        self.assertEqual(out.choices[0].message.content, CHAT_ANSWER)
        self.assertEqual(out.choices[0].finish_reason, "stop")  # <|im_end|> ends the turn

    def test_streamed_chat_is_the_same(self):
        stream = self.client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                     messages=CHAT, temperature=0, max_tokens=24,
                                                     stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        self.assertEqual(text, CHAT_ANSWER)


class LowBitKvServingTest(unittest.TestCase):
    """The same model with an int4 KV cache (K per channel over 32-token blocks, Hadamard-rotated,
    a 128-token bf16 window): it serves, answers as transformers does on this short chat, reports the format's
    capacity in its metrics, and refuses a prompt longer than the context cleanly."""

    @classmethod
    def setUpClass(cls):
        cls.server = Loomd("--kv-cache-dtype", "int4", "--kv-residual-tokens", "128")
        cls.client = OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key="unused")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_chat_answer(self):
        out = self.client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                                  messages=CHAT, temperature=0, max_tokens=24)
        self.assertEqual(out.choices[0].message.content, CHAT_ANSWER)

    def test_long_generation_crosses_packed_blocks(self):
        # 300 tokens: several 32-token blocks are packed while the sequence keeps decoding.
        out = self.client.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                             prompt="The history of the printing press",
                                             temperature=0, max_tokens=300)
        self.assertEqual(out.usage.completion_tokens, 300)
        words = out.choices[0].text.split()
        self.assertGreater(len(set(words)), 40, out.choices[0].text)  # not a degenerate loop

    def test_metrics_show_the_format_and_its_capacity(self):
        import urllib.request
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{self.server.port}/metrics", timeout=30).read().decode()
        lines = [l for l in text.splitlines() if l.startswith("loom_kv_cache_")]
        capacity = [l for l in lines if l.startswith("loom_kv_cache_capacity_tokens{")]
        per_token = [l for l in lines if l.startswith("loom_kv_cache_bytes_per_token{")]
        self.assertEqual(len(capacity), 1, lines)
        self.assertIn('kv_cache_dtype="int4"', capacity[0])
        # SmolLM2: 30 layers x 3 KV heads; int4 K per channel over 32 tokens, V per token:
        # (32 + 4 * 64 / 32) + (32 + 4) = 76 bytes per head and token, 6840 per token.
        self.assertEqual(float(per_token[0].rsplit(" ", 1)[1]), 6840.0)
        # 400 MiB less 64 sequences x 3.5 MiB of bf16 tails (5 blocks of 32 tokens each).
        self.assertGreater(float(capacity[0].rsplit(" ", 1)[1]), 15000)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--loomd", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    if not os.path.isfile(ARGS.model):
        sys.exit(f"no {ARGS.model}: deploy/install-deps.sh fetches the default model")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
