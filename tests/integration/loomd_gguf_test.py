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
    def __init__(self):
        cmd = [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
               "--kv-cache-mb", "400", "--threads", "2", "--kv-cache-dtype", "f32"]
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
