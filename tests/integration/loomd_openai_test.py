#!/usr/bin/env python3
"""loomd end to end with real clients: the OpenAI Python client (completions and chat, streamed
and not), raw malformed HTTP, HTTP/1.1 framing on one connection (pipelining, HEAD,
100-continue, HTTP/1.0 streams), client disconnects, Prometheus text checked by promtool, honest
probes, and the SIGTERM drain. After every bad-input case the server still answers a normal request.

  python tests/integration/loomd_openai_test.py --loomd build/cpu-release/bin/loomd --model DIR
"""
import argparse
import http.client
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import openai

ARGS = None
API_KEY = "test-key-1"


class Loomd:
    """A loomd process on a free loopback port."""

    def __init__(self, *extra):
        cmd = [ARGS.loomd, "--model", ARGS.model, "--host", "127.0.0.1", "--port", "0",
               "--kv-cache-mb", "32", "--max-body-bytes", "65536", "--threads", "1",
               "--api-keys", API_KEY + ",other-key", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"loomd did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key=API_KEY, max_retries=0,
                                    timeout=120)

    def raw(self, method, path, body=None, headers=None, key=API_KEY):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        data = body if isinstance(body, (bytes, type(None))) else body.encode()
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), payload

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Loomd()
        cls.model = cls.server.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def assertServing(self):
        out = self.server.client.completions.create(model=self.model, prompt="ok", max_tokens=2,
                                                    temperature=0)
        self.assertEqual(out.usage.completion_tokens, 2)

    def test_models(self):
        models = self.server.client.models.list().data
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0].id, os.path.basename(os.path.normpath(ARGS.model)))

    def test_models_retrieve(self):
        model = self.server.client.models.retrieve(self.model)
        self.assertEqual(model.id, self.model)
        self.assertEqual(model.object, "model")
        with self.assertRaises(openai.NotFoundError) as caught:
            self.server.client.models.retrieve("no-such-model")
        self.assertEqual(caught.exception.body["type"], "not_found_error")
        self.assertIn("no-such-model", caught.exception.body["message"])
        self.assertServing()

    def test_an_empty_tool_list_is_accepted(self):
        out = self.server.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
            temperature=0, tools=[], tool_choice="none")
        self.assertEqual(out.usage.completion_tokens, 2)
        with self.assertRaises(openai.BadRequestError) as caught:
            self.server.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
        self.assertEqual(caught.exception.body["param"], "tools")

    def test_the_bearer_scheme_is_case_insensitive(self):
        for scheme in ("bearer", "BEARER", "Bearer"):
            code, _, _ = self.server.raw("GET", "/v1/models", key=None,
                                         headers={"Authorization": f"{scheme} {API_KEY}"})
            self.assertEqual(code, 200, scheme)
        code, _, _ = self.server.raw("GET", "/v1/models", key=None,
                                     headers={"Authorization": f"Basic {API_KEY}"})
        self.assertEqual(code, 401)

    def test_probes_and_metrics_key(self):
        code, _, payload = self.server.raw("GET", "/livez", key=None)
        self.assertEqual((code, json.loads(payload)), (200, {"status": "ok"}))
        code, _, payload = self.server.raw("GET", "/readyz", key=None)
        self.assertEqual((code, json.loads(payload)), (200, {"status": "ready"}))
        # metrics_require_api_key defaults to true: /metrics is behind the key like the API.
        self.assertEqual(self.server.raw("GET", "/metrics", key=None)[0], 401)
        self.assertEqual(self.server.raw("GET", "/metrics")[0], 200)

    def test_completion_stream_matches_non_stream(self):
        c = self.server.client
        full = c.completions.create(model=self.model, prompt="The weather today", max_tokens=12,
                                    temperature=0, logprobs=2)
        self.assertLessEqual(full.usage.completion_tokens, 12)
        self.assertGreater(full.usage.prompt_tokens, 0)
        self.assertEqual(len(full.choices[0].logprobs.token_logprobs),
                         full.usage.completion_tokens)
        text, usage = "", None
        for chunk in c.completions.create(model=self.model, prompt="The weather today",
                                          max_tokens=12, temperature=0, stream=True,
                                          stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.text
        self.assertEqual(text, full.choices[0].text)
        self.assertEqual(usage.completion_tokens, full.usage.completion_tokens)

    def test_batched_prompts_stream_matches_non_stream(self):
        c = self.server.client
        prompts = ["First prompt", "Second one here", "Third"]
        full = c.completions.create(model=self.model, prompt=prompts, max_tokens=8, temperature=0, n=2)
        want = {ch.index: ch.text for ch in full.choices}
        self.assertEqual(sorted(want), list(range(6)))
        got, finishes = {}, {}
        for chunk in c.completions.create(model=self.model, prompt=prompts, max_tokens=8,
                                          temperature=0, n=2, stream=True):
            for ch in chunk.choices:
                got[ch.index] = got.get(ch.index, "") + ch.text
                if ch.finish_reason:
                    finishes[ch.index] = ch.finish_reason
        self.assertEqual(got, want)
        self.assertEqual(sorted(finishes), list(range(6)))

    def test_chat_stream_matches_non_stream(self):
        c = self.server.client
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Say something about cats."}]
        full = c.chat.completions.create(model=self.model, messages=messages, max_tokens=10,
                                         temperature=0)
        self.assertEqual(full.choices[0].message.role, "assistant")
        chunks = list(c.chat.completions.create(model=self.model, messages=messages,
                                                max_tokens=10, temperature=0, stream=True))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, full.choices[0].message.content)
        self.assertIsNotNone(chunks[-1].choices[0].finish_reason)

    def assertEchoLogprobs(self, logprobs, num_prompt, num_generated):
        """The prompt's tokens then the generated ones; the first has no score; offsets count
        characters (code points) and include the echoed prompt."""
        lp = logprobs
        self.assertEqual(len(lp.tokens), num_prompt + num_generated)
        self.assertEqual(len(lp.token_logprobs), len(lp.tokens))
        self.assertEqual(len(lp.top_logprobs), len(lp.tokens))
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        for score, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
            self.assertIsInstance(score, float)
            self.assertLessEqual(score, 0.0)
            self.assertTrue(top)
        offset = 0
        for token, at in zip(lp.tokens, lp.text_offset):
            self.assertEqual(at, offset)
            offset += len(token)

    def test_echo_with_logprobs_scores_the_prompt(self):
        c = self.server.client
        prompt = "Caf\u00e9 na\u00efve \u65e5\u672c \u2713 ok"  # multi-byte characters
        plain = c.completions.create(model=self.model, prompt=prompt, max_tokens=4,
                                     temperature=0, logprobs=2)
        echo = c.completions.create(model=self.model, prompt=prompt, max_tokens=4,
                                    temperature=0, logprobs=2, echo=True)
        ch = echo.choices[0]
        self.assertEqual(ch.text, prompt + plain.choices[0].text)
        num_prompt = echo.usage.prompt_tokens
        self.assertEqual(echo.usage.completion_tokens, plain.usage.completion_tokens)
        self.assertEchoLogprobs(ch.logprobs, num_prompt, echo.usage.completion_tokens)
        self.assertEqual(ch.logprobs.tokens[num_prompt:], plain.choices[0].logprobs.tokens)
        for a, b in zip(ch.logprobs.token_logprobs[num_prompt:],
                        plain.choices[0].logprobs.token_logprobs):
            self.assertAlmostEqual(a, b, places=4)
        # Position i scores prompt token i after tokens < i: its top tokens are those a request
        # ending before token i sees for its first generated token, and the prompt token's score
        # is theirs when it is among them. (Byte tokens of a split character all read U+FFFD,
        # and collide as keys: they are left out.)
        ids = json.loads(self.server.raw("POST", "/tokenize",
                                         json.dumps({"prompt": prompt}))[2])["tokens"]
        self.assertEqual(len(ids), num_prompt)
        matched = 0
        for i in range(1, num_prompt):
            step = c.completions.create(model=self.model, prompt=ids[:i], max_tokens=1,
                                        temperature=0, logprobs=2)
            top = {k: v for k, v in step.choices[0].logprobs.top_logprobs[0].items()
                   if "\ufffd" not in k}
            echoed = ch.logprobs.top_logprobs[i]
            for k, v in top.items():
                self.assertAlmostEqual(echoed[k], v, places=3)
            token = ch.logprobs.tokens[i]
            if token in top:
                self.assertAlmostEqual(ch.logprobs.token_logprobs[i], top[token], places=3)
                matched += 1
        self.assertGreater(matched, 0)
        self.assertServing()

    def test_echo_with_max_tokens_zero_generates_nothing(self):
        c = self.server.client
        prompt = "Scores only \u00e9t\u00e9"
        full = c.completions.create(model=self.model, prompt=prompt, max_tokens=0, echo=True,
                                    logprobs=1)
        ch = full.choices[0]
        self.assertEqual(ch.text, prompt)
        self.assertEqual(ch.finish_reason, "length")
        self.assertEqual(full.usage.completion_tokens, 0)
        self.assertEchoLogprobs(ch.logprobs, full.usage.prompt_tokens, 0)
        # Without logprobs: the prompt alone, no logprobs.
        bare = c.completions.create(model=self.model, prompt=prompt, max_tokens=0, echo=True)
        self.assertEqual(bare.choices[0].text, prompt)
        self.assertIsNone(bare.choices[0].logprobs)
        self.assertEqual(bare.usage.completion_tokens, 0)
        # Streamed: one chunk carries the prompt and all its scores, then the finish.
        chunks = [ch for chunk in c.completions.create(model=self.model, prompt=prompt,
                                                        max_tokens=0, echo=True, logprobs=1,
                                                        stream=True)
                  for ch in chunk.choices]
        self.assertEqual(chunks[0].text, prompt)
        self.assertEqual(chunks[0].logprobs.tokens, ch.logprobs.tokens)
        self.assertEqual(chunks[0].logprobs.token_logprobs, ch.logprobs.token_logprobs)
        self.assertEqual(chunks[0].logprobs.text_offset, ch.logprobs.text_offset)
        self.assertEqual(chunks[-1].finish_reason, "length")
        # Without echo, max_tokens 0 is still refused.
        code, _, payload = self.server.raw("POST", "/v1/completions", json.dumps(
            {"prompt": prompt, "max_tokens": 0}))
        self.assertEqual(code, 400)
        self.assertEqual(json.loads(payload)["error"]["param"], "max_tokens")
        self.assertServing()

    def test_echo_stream_matches_non_stream(self):
        c = self.server.client
        kw = dict(model=self.model, prompt="Stream \u00e9cho \u2713", max_tokens=6,
                  temperature=0, logprobs=1, echo=True)
        full = c.completions.create(**kw).choices[0]
        text, tokens, scores, offsets, first = "", [], [], [], None
        for chunk in c.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                first = first or ch
                text += ch.text
                if ch.logprobs:
                    tokens += ch.logprobs.tokens
                    scores += ch.logprobs.token_logprobs
                    offsets += ch.logprobs.text_offset
        self.assertTrue(first.text.startswith("Stream \u00e9cho \u2713"))
        self.assertIsNone(first.logprobs.token_logprobs[0])
        self.assertEqual(text, full.text)
        self.assertEqual(tokens, full.logprobs.tokens)
        self.assertEqual(offsets, full.logprobs.text_offset)
        self.assertEqual(len(scores), len(full.logprobs.token_logprobs))
        for a, b in zip(scores[1:], full.logprobs.token_logprobs[1:]):
            self.assertAlmostEqual(a, b, places=4)

    def test_echo_with_n_and_batched_prompts(self):
        c = self.server.client
        prompts = ["One prompt", "A longer second prompt"]
        out = c.completions.create(model=self.model, prompt=prompts, max_tokens=3,
                                   temperature=1.0, seed=3, n=2, logprobs=1, echo=True)
        self.assertEqual(sorted(ch.index for ch in out.choices), [0, 1, 2, 3])
        alone = [c.completions.create(model=self.model, prompt=p, max_tokens=0, logprobs=1,
                                      echo=True).choices[0].logprobs for p in prompts]
        for ch in out.choices:
            prompt, ref = prompts[ch.index // 2], alone[ch.index // 2]
            self.assertTrue(ch.text.startswith(prompt))
            n = len(ref.tokens)
            self.assertEqual(ch.logprobs.tokens[:n], ref.tokens)
            self.assertEqual(ch.logprobs.text_offset[:n], ref.text_offset)
            self.assertIsNone(ch.logprobs.token_logprobs[0])
            for a, b in zip(ch.logprobs.token_logprobs[1:n], ref.token_logprobs[1:]):
                self.assertAlmostEqual(a, b, places=3)  # batched: another reduction order
            self.assertEchoLogprobs(ch.logprobs, n, len(ch.logprobs.tokens) - n)
        # Token-id prompts (what lm-eval sends): echo text is their decoding.
        ids = json.loads(self.server.raw("POST", "/tokenize",
                                         json.dumps({"prompt": prompts[1]}))[2])["tokens"]
        by_ids = c.completions.create(model=self.model, prompt=[ids, ids[:3]], max_tokens=0,
                                      logprobs=1, echo=True)
        self.assertEqual(by_ids.choices[0].logprobs.tokens, alone[1].tokens)
        self.assertEqual(len(by_ids.choices[1].logprobs.tokens), 3)
        self.assertEqual(by_ids.usage.completion_tokens, 0)

    def test_chat_echo_repeats_the_assistant_message(self):
        c = self.server.client
        messages = [{"role": "user", "content": "Tell a story."},
                    {"role": "assistant", "content": "Once upon a time"}]
        extra = {"echo": True, "continue_final_message": True, "add_generation_prompt": False}
        out = c.chat.completions.create(model=self.model, messages=messages, max_tokens=4,
                                        temperature=0, extra_body=extra, logprobs=True)
        plain = c.chat.completions.create(
            model=self.model, messages=messages, max_tokens=4, temperature=0, logprobs=True,
            extra_body={"continue_final_message": True, "add_generation_prompt": False})
        content = plain.choices[0].message.content
        self.assertEqual(out.choices[0].message.content, "Once upon a time" + content)
        # The prompt is not scored in chat: the logprobs are the generated tokens' only.
        self.assertEqual(len(out.choices[0].logprobs.content), out.usage.completion_tokens)
        chunks = list(c.chat.completions.create(model=self.model, messages=messages, max_tokens=4,
                                                temperature=0, extra_body=extra, stream=True))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, "Once upon a time" + content)
        # The last message is the user's: nothing to echo.
        user_last = c.chat.completions.create(model=self.model, messages=messages[:1],
                                              max_tokens=4, temperature=0,
                                              extra_body={"echo": True})
        bare = c.chat.completions.create(model=self.model, messages=messages[:1], max_tokens=4,
                                         temperature=0)
        self.assertEqual(user_last.choices[0].message.content, bare.choices[0].message.content)

    def test_seeded_sampling_with_n_is_reproducible(self):
        c = self.server.client
        kw = dict(model=self.model, prompt="Once upon", max_tokens=8, temperature=1.0, n=3, seed=7)
        a = [ch.text for ch in c.completions.create(**kw).choices]
        b = [ch.text for ch in c.completions.create(**kw).choices]
        self.assertEqual(a, b)
        self.assertEqual(len(a), 3)

    def test_stop_string_cuts_the_text(self):
        c = self.server.client
        free = c.completions.create(model=self.model, prompt="Counting", max_tokens=16,
                                    temperature=0).choices[0].text
        if len(free) < 4:
            self.skipTest("greedy text too short to pick a stop string")
        stop = free[len(free) // 2:len(free) // 2 + 2]
        cut = c.completions.create(model=self.model, prompt="Counting", max_tokens=16,
                                   temperature=0, stop=[stop]).choices[0]
        self.assertEqual(cut.finish_reason, "stop")
        self.assertNotIn(stop, cut.text)
        self.assertTrue(free.startswith(cut.text))

    def test_bad_inputs_get_clear_errors_and_the_server_keeps_serving(self):
        cases = [
            (b"{not json", 400, None),
            (json.dumps({"model": self.model, "prompt": "x", "temperature": "hot"}), 400, "temperature"),
            (json.dumps({"model": self.model, "prompt": "x", "n": 0}), 400, "n"),
            (json.dumps({"model": self.model, "prompt": "x", "max_tokens": -5}), 400, "max_tokens"),
            (json.dumps({"model": self.model, "prompt": "x " * 2000}), 400, "prompt"),
            (json.dumps({"model": "nope", "prompt": "x"}), 404, None),
            (json.dumps({"model": self.model, "prompt": "x", "response_format": {"type": "json_object"}}),
             400, "response_format"),
            (json.dumps({"model": self.model, "prompt": "y" * 70000}), 413, None),
        ]
        for body, status, param in cases:
            code, headers, payload = self.server.raw("POST", "/v1/completions", body)
            self.assertEqual(code, status, payload)
            err = json.loads(payload)["error"]
            self.assertTrue(err["message"])
            self.assertEqual(err["code"], status)
            if param:
                self.assertEqual(err["param"], param)
            self.assertServing()
        code, _, _ = self.server.raw("GET", "/v1/completions")
        self.assertEqual(code, 405)
        code, _, _ = self.server.raw("GET", "/no/such/route")
        self.assertEqual(code, 404)
        code, headers, _ = self.server.raw("GET", "/v1/models", key=None)
        self.assertEqual(code, 401)
        code, _, _ = self.server.raw("GET", "/v1/models", key="wrong-key")
        self.assertEqual(code, 401)
        code, _, _ = self.server.raw("GET", "/v1/models", key="other-key")
        self.assertEqual(code, 200)
        for probe in ("/livez", "/readyz", "/health"):
            self.assertEqual(self.server.raw("GET", probe, key=None)[0], 200)
        self.assertServing()

    def test_context_overflow_message(self):
        code, _, payload = self.server.raw("POST", "/v1/completions",
                                           json.dumps({"prompt": "x " * 2000, "max_tokens": 4}))
        self.assertEqual(code, 400)
        self.assertIn("maximum context length", json.loads(payload)["error"]["message"])

    def test_client_disconnect_mid_stream(self):
        body = json.dumps({"model": self.model, "prompt": "A long story", "max_tokens": 200,
                           "stream": True, "ignore_eos": True}).encode()
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", self.server.port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            got = s.recv(4096)
            self.assertIn(b"200 OK", got)
            s.close()
        self.assertServing()
        # The aborted requests freed their blocks: nothing stays running.
        deadline = time.time() + 30
        while time.time() < deadline:
            _, _, metrics = self.server.raw("GET", "/metrics")
            if b'loom_num_requests_running{model_name="' in metrics and \
                    b'loom_num_requests_running{model_name="' + self.model.encode() + b'"} 0' in metrics:
                break
            time.sleep(0.2)
        self.assertIn(b'finished_reason="abort"', metrics)

    def test_slow_reader_does_not_hold_up_others(self):
        body = json.dumps({"model": self.model, "prompt": "Slow", "max_tokens": 200, "stream": True,
                           "ignore_eos": True}).encode()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        s.connect(("127.0.0.1", self.server.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        # While that client reads nothing, others are served.
        for _ in range(3):
            self.assertServing()
        received = b""
        s.settimeout(60)
        while b"data: [DONE]" not in received:
            piece = s.recv(512)
            if not piece:
                break
            received += piece
            time.sleep(0.001)
        s.close()
        self.assertIn(b"data: [DONE]", received)
        self.assertEqual(received.count(b'"finish_reason":"length"'), 1)

    def test_prefix_cache_hits_show_in_usage(self):
        prompt = " ".join(f"word{i}" for i in range(20))
        first = self.server.client.completions.create(model=self.model, prompt=prompt, max_tokens=2)
        again = self.server.client.completions.create(model=self.model, prompt=prompt, max_tokens=2)
        self.assertEqual(first.usage.prompt_tokens, again.usage.prompt_tokens)
        self.assertGreaterEqual(again.usage.prompt_tokens_details.cached_tokens, 16)
        salted = self.server.client.completions.create(model=self.model, prompt=prompt, max_tokens=2,
                                                       extra_body={"cache_salt": "tenant-b"})
        self.assertEqual(salted.usage.prompt_tokens_details.cached_tokens, 0)

    def test_request_chat_templates_are_off_by_default(self):
        code, _, payload = self.server.raw("POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ 1 }}"}))
        self.assertEqual(code, 400)
        self.assertIn("disabled", json.loads(payload)["error"]["message"])

    def test_tokenize_detokenize_and_version(self):
        code, _, payload = self.server.raw("POST", "/tokenize", json.dumps({"prompt": "hello world"}))
        self.assertEqual(code, 200)
        tokens = json.loads(payload)["tokens"]
        code, _, payload = self.server.raw("POST", "/detokenize", json.dumps({"tokens": tokens}))
        self.assertEqual(code, 200)
        self.assertIn("hello world", json.loads(payload)["prompt"])
        code, _, payload = self.server.raw("GET", "/version")
        self.assertEqual(code, 200)
        self.assertIn("version", json.loads(payload))

    def test_metrics_pass_promtool(self):
        self.assertServing()
        code, headers, payload = self.server.raw("GET", "/metrics")
        self.assertEqual(code, 200)
        self.assertIn(b"loom_e2e_request_latency_seconds_bucket", payload)
        self.assertIn(b'finished_reason="length"', payload)
        for name in (b"loom_request_queue_time_seconds_count", b"loom_request_prefill_time_seconds_count",
                     b"loom_inter_token_latency_seconds_count", b"loom_time_to_first_token_seconds_count"):
            self.assertIn(name, payload)
        # Requests refused before they ran (bad input, a prompt past the context) are counted
        # as rejected, apart from the requests that ran.
        self.server.raw("POST", "/v1/completions", b"{bad")
        self.server.raw("POST", "/v1/completions", json.dumps({"prompt": "x " * 2000}))
        _, _, payload = self.server.raw("GET", "/metrics")
        rejected = re.search(r'loom_request_rejected_total\{model_name="[^"]+",reason="invalid"\} (\d+)',
                             payload.decode())
        self.assertIsNotNone(rejected, payload)
        self.assertGreaterEqual(int(rejected.group(1)), 2)
        self.assertNotIn(b'finished_reason="rejected"', payload)
        promtool = shutil.which("promtool")
        # A missing tool is a broken install, not a reason to pass.
        self.assertIsNotNone(promtool, "promtool not found: deploy/install-deps.sh installs it")
        check = subprocess.run([promtool, "check", "metrics"], input=payload, capture_output=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)


def http_request(method, path, body=None, version="HTTP/1.1", extra=""):
    """The bytes of one request with the API key; `body` is sent as JSON."""
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} {version}\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n{extra}"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return head.encode() + b"\r\n" + data


class ResponseReader:
    """Reads the responses on one connection one after another with http.client's parser."""

    class _File(io.BufferedReader):
        def close(self):  # http.client closes it after each body; the next response follows
            pass

    def __init__(self, sock):
        self.file = ResponseReader._File(socket.SocketIO(sock, "rb"))

    def makefile(self, *args, **kwargs):
        return self.file

    def next(self, method):
        response = http.client.HTTPResponse(self, method=method)
        response.begin()
        return response


class HttpFramingTest(unittest.TestCase):
    """HTTP/1.1 on one connection, as aiohttp, curl and raw-socket clients use it."""

    @classmethod
    def setUpClass(cls):
        cls.server = Loomd()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=60)
        self.addCleanup(sock.close)
        return sock, ResponseReader(sock)

    def test_pipelined_completions_are_answered_in_order(self):
        # The second sent while the first is being generated: it waits for the first answer.
        sock, reader = self.connect()
        sock.sendall(http_request("POST", "/v1/completions",
                                  {"prompt": "A long story", "max_tokens": 200, "ignore_eos": True}))
        time.sleep(0.005)
        sock.sendall(http_request("POST", "/v1/completions",
                                  {"prompt": "next", "max_tokens": 1}))
        for num_tokens in (200, 1):
            response = reader.next("POST")
            self.assertEqual(response.status, 200)
            self.assertEqual(json.loads(response.read())["usage"]["completion_tokens"], num_tokens)
        # Both at once: the answers come in the order asked.
        sock.sendall(http_request("POST", "/v1/completions",
                                  {"prompt": "one", "max_tokens": 5, "ignore_eos": True}) +
                     http_request("POST", "/v1/completions",
                                  {"prompt": "two", "max_tokens": 2, "ignore_eos": True}))
        for num_tokens in (5, 2):
            response = reader.next("POST")
            self.assertEqual(response.status, 200)
            self.assertEqual(json.loads(response.read())["usage"]["completion_tokens"], num_tokens)
        # The second sent while the first streams (between two of its events): the stream runs
        # to its end, then the answer comes.
        sock.sendall(http_request("POST", "/v1/completions",
                                  {"prompt": "A long story", "max_tokens": 200, "ignore_eos": True,
                                   "stream": True}))
        streamed = reader.next("POST")
        self.assertEqual(streamed.status, 200)
        body = streamed.read1()
        sock.sendall(http_request("POST", "/v1/completions",
                                  {"prompt": "after", "max_tokens": 3, "ignore_eos": True}))
        body += streamed.read()
        self.assertEqual(body.count(b'"finish_reason":"length"'), 1, body)
        self.assertTrue(body.endswith(b"data: [DONE]\n\n"))
        after = reader.next("POST")
        self.assertEqual(json.loads(after.read())["usage"]["completion_tokens"], 3)

    def test_head_then_get_on_one_connection(self):
        sock, reader = self.connect()
        sock.sendall(http_request("HEAD", "/v1/models") + http_request("GET", "/v1/models"))
        head = reader.next("HEAD")
        self.assertEqual(head.status, 200)
        self.assertEqual(head.read(), b"")
        get = reader.next("GET")
        payload = get.read()
        self.assertEqual(get.status, 200)
        self.assertEqual(int(head.getheader("Content-Length")), len(payload))
        self.assertEqual(json.loads(payload)["data"][0]["object"], "model")
        # A wrong method is a 405 naming the right ones; the connection goes on.
        sock.sendall(http_request("HEAD", "/v1/completions") + http_request("POST", "/v1/models", {}) +
                     http_request("HEAD", "/health"))
        refused = reader.next("HEAD")
        self.assertEqual((refused.status, refused.getheader("Allow")), (405, "POST"))
        self.assertEqual(refused.read(), b"")
        refused = reader.next("POST")
        self.assertEqual((refused.status, refused.getheader("Allow")), (405, "GET, HEAD"))
        self.assertEqual(json.loads(refused.read())["error"]["code"], 405)
        self.assertEqual(reader.next("HEAD").status, 200)

    def test_expect_100_continue(self):
        sock, reader = self.connect()
        body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                     API_KEY.encode() + b"\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() +
                     b"\r\n\r\n")
        sock.settimeout(5)
        self.assertEqual(reader.file.readline(), b"HTTP/1.1 100 Continue\r\n")
        self.assertEqual(reader.file.readline(), b"\r\n")
        sock.sendall(body)
        response = reader.next("POST")
        self.assertEqual(response.status, 200)
        self.assertEqual(json.loads(response.read())["usage"]["completion_tokens"], 2)
        # Over the body limit (65536 here): refused before the body is sent.
        sock2, reader2 = self.connect()
        sock2.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Length: 100000\r\n\r\n")
        self.assertEqual(reader2.next("POST").status, 413)

    def test_http10_stream_is_close_delimited(self):
        sock, _ = self.connect()
        sock.sendall(http_request("POST", "/v1/completions",
                                  {"prompt": "old client", "max_tokens": 8, "ignore_eos": True,
                                   "stream": True}, version="HTTP/1.0"))
        received = b""
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
        head, _, body = received.partition(b"\r\n\r\n")
        self.assertNotIn(b"Transfer-Encoding", head)
        self.assertIn(b"Connection: close", head)
        self.assertTrue(body.startswith(b"data: {"), body)
        self.assertTrue(body.endswith(b"data: [DONE]\n\n"), body)
        self.assertEqual(body.count(b'"finish_reason":"length"'), 1)


class AdmissionAndOptionsTest(unittest.TestCase):
    """A server with one sequence at a time and room for one waiting request."""

    @classmethod
    def setUpClass(cls):
        cls.server = Loomd("--max-num-seqs", "1", "--max-waiting-requests", "1",
                           "--allow-request-chat-template", "--retry-after-s", "2",
                           "--metrics-require-api-key=false")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_a_full_queue_answers_503_with_retry_after(self):
        results = []
        lock = threading.Lock()

        def one():
            r = self.server.raw("POST", "/v1/completions", json.dumps(
                {"prompt": "Fill", "max_tokens": 200, "ignore_eos": True}))
            with lock:
                results.append(r)

        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        # While the waiting queue is at its cap the server is not ready (a balancer should send
        # new requests elsewhere); it is live all along.
        probes = []
        while any(t.is_alive() for t in threads):
            code, _, payload = self.server.raw("GET", "/readyz", key=None)
            probes.append((code, payload))
            self.assertEqual(self.server.raw("GET", "/livez", key=None)[0], 200)
            if code == 503:
                break
            time.sleep(0.005)
        for t in threads:
            t.join(timeout=300)
        full = [json.loads(p)["error"]["message"] for c, p in probes if c == 503]
        self.assertTrue(full, probes)
        self.assertIn("waiting queue is full", full[0])
        self.assertEqual(self.server.raw("GET", "/readyz", key=None)[0], 200)
        codes = sorted(code for code, _, _ in results)
        self.assertIn(503, codes)
        self.assertIn(200, codes)
        self.assertEqual(set(codes), {200, 503})
        for code, headers, payload in results:
            if code == 503:
                self.assertEqual(headers.get("Retry-After"), "2")
                self.assertEqual(json.loads(payload)["error"]["type"], "overloaded_error")
        code, _, _ = self.server.raw("POST", "/v1/completions", json.dumps({"prompt": "ok", "max_tokens": 2}))
        self.assertEqual(code, 200)

    def test_metrics_open_when_configured(self):
        code, _, payload = self.server.raw("GET", "/metrics", key=None)
        self.assertEqual(code, 200)
        self.assertIn(b"loom_num_requests_running", payload)
        self.assertEqual(self.server.raw("GET", "/v1/models", key=None)[0], 401)

    def test_timeout_ends_with_deadline(self):
        code, _, payload = self.server.raw("POST", "/v1/completions", json.dumps(
            {"prompt": "Long", "max_tokens": 240, "ignore_eos": True, "timeout": 0.001}))
        self.assertEqual(code, 200, payload)
        self.assertEqual(json.loads(payload)["choices"][0]["finish_reason"], "deadline")

    def test_request_chat_template_when_allowed(self):
        code, _, payload = self.server.raw("POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
             "chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"}))
        self.assertEqual(code, 200, payload)
        code, _, payload = self.server.raw("POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "chat_template": "{% if %}"}))
        self.assertEqual(code, 400)
        self.assertEqual(json.loads(payload)["error"]["param"], "chat_template")


class DrainTest(unittest.TestCase):
    def test_sigterm_finishes_in_flight_requests_and_refuses_new_ones(self):
        # One sequence at a time, so the accepted requests queue and take a while to finish.
        server = Loomd("--drain-timeout-s", "120", "--max-num-seqs", "1")
        model = server.client.models.list().data[0].id
        results = []
        started = threading.Semaphore(0)

        def long_request():
            text, finish = "", None
            stream = server.client.completions.create(model=model, prompt="Tell me", max_tokens=200,
                                                      stream=True, extra_body={"ignore_eos": True})
            started.release()  # the response has started: the request was accepted
            for chunk in stream:
                for choice in chunk.choices:
                    text += choice.text
                    finish = choice.finish_reason or finish
            results.append(finish)

        threads = [threading.Thread(target=long_request) for _ in range(24)]
        for t in threads:
            t.start()
        for _ in threads:
            self.assertTrue(started.acquire(timeout=60))
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        code, headers, _ = server.raw("POST", "/v1/completions", json.dumps({"prompt": "x"}))
        self.assertEqual(code, 503)
        self.assertIn("Retry-After", headers)
        self.assertEqual(server.raw("GET", "/readyz", key=None)[0], 503)
        for t in threads:
            t.join(timeout=300)
        self.assertEqual(results, ["length"] * len(threads))
        server.proc.wait(timeout=60)
        self.assertEqual(server.stop(), 0)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
