#!/usr/bin/env python3
"""Checks bench/serving/loadgen.py against a small fake OpenAI streaming server: every request
is counted, the latency figures are present and plausible, and failures are reported, not
fatal."""
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOADGEN = os.path.join(ROOT, "bench", "serving", "loadgen.py")
TOKEN_GAP_S = 0.01


class FakeOpenAI(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with FakeOpenAI.lock:
            FakeOpenAI.calls += 1
            n = FakeOpenAI.calls
        if n % 10 == 0:  # every tenth request is refused
            payload = b'{"error":{"message":"busy","type":"overloaded_error","param":null,"code":503}}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj):
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for i in range(body["max_tokens"]):
            time.sleep(TOKEN_GAP_S)
            chunk({"choices": [{"index": 0, "text": f" t{i}"}]})
        chunk({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": body["max_tokens"]}})
        chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        proc = subprocess.run([sys.executable, LOADGEN, "--url", f"http://127.0.0.1:{server.server_port}",
                               "--num-requests", "30", "--concurrency", "6", "--output-len", "fixed:5",
                               "--prompt-len", "uniform:3-9", "--pid", str(os.getpid()), "--out", out],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        doc = json.load(open(out))
    server.shutdown()
    assert doc["requests"] == 30, doc
    assert doc["failed"] == 3 and doc["completed"] == 27, doc
    assert any("HTTP 503" in e for e in doc["errors"]), doc["errors"]
    assert doc["completion_tokens"] == 27 * 5, doc
    assert doc["ttft_s"]["count"] == 27 and doc["ttft_s"]["p50"] >= TOKEN_GAP_S, doc["ttft_s"]
    assert doc["itl_s"]["count"] == 27 * 4, doc["itl_s"]
    assert TOKEN_GAP_S * 0.5 <= doc["itl_s"]["p50"] < 1.0, doc["itl_s"]
    assert doc["tpot_s"]["count"] == 27, doc["tpot_s"]
    assert doc["throughput"]["output_tokens_per_s"] > 0, doc["throughput"]
    assert doc["server_rss_kib"]["first"] > 0, doc.get("server_rss_kib")
    assert doc["settings"]["concurrency"] == 6 and doc["settings"]["output_len"] == "fixed:5"
    print("loadgen test passed:", json.dumps(doc["itl_s"]))


if __name__ == "__main__":
    main()
