#!/usr/bin/env python3
"""A live OpenAI-compatible server that answers one thing wrong on purpose (issue 28 item 9), and
writes its pid to a file (item 7: a test checks it does not outlive the run).

    _hostile_server.py --port P --pid-file F --attack none|usage-many|models-null|startup-figure|
                       counter-inf|gauge-huge

none: a sane server (streamed completions with a usage chunk, /metrics with vLLM's names);
usage-many: usage.completion_tokens "many"; models-null: /v1/models answers {"data": [null]};
startup-figure: prints `max_concurrency=1.2.3` at startup; counter-inf: the accepted-tokens
counter reads +Inf; gauge-huge: the running-requests gauge reads 1e999 on its first scrapes, then
the real count. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STEP_S = 0.002
HUGE_SCRAPES = 4


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "Server"

    def log_message(self, *a: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        srv = self.server
        if self.path == "/health":
            self._send(200, b"", "text/plain")
        elif self.path == "/v1/models":
            data = [None] if srv.attack == "models-null" else [{"id": "hostile", "object": "model"}]
            self._send(200, json.dumps({"object": "list", "data": data}).encode(), "application/json")
        elif self.path == "/metrics":
            with srv.lock:
                srv.scrapes += 1
                running = "1e999" if srv.attack == "gauge-huge" and srv.scrapes <= HUGE_SCRAPES else str(srv.running)
                accepted = "+Inf" if srv.attack == "counter-inf" else str(srv.accepted)
                drafts = srv.drafts
            text = (f"vllm:num_requests_running {running}\nvllm:num_requests_waiting 0\n"
                    f"vllm:spec_decode_num_drafts_total {drafts}\n"
                    f"vllm:spec_decode_num_draft_tokens_total {drafts * 4}\n"
                    f"vllm:spec_decode_num_accepted_tokens_total {accepted}\n")
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"{}", "application/json")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        n = int(body.get("max_tokens") or 16)
        with srv.lock:
            srv.running += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                time.sleep(STEP_S)
                self._chunk(("data: " + json.dumps({"object": "text_completion", "model": "hostile", "choices": [
                    {"index": 0, "text": " 1", "finish_reason": "length" if i == n - 1 else None}]}) + "\n\n").encode())
            with srv.lock:
                srv.drafts += n
                srv.accepted += 2 * n
            completion = "many" if srv.attack == "usage-many" else n
            prompt = len(body.get("prompt") or [])
            self._chunk(("data: " + json.dumps({"object": "text_completion", "choices": [], "usage": {
                "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + n}}) + "\n\n").encode())
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        finally:
            with srv.lock:
                srv.running -= 1


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, addr: tuple[str, int], attack: str):
        super().__init__(addr, Handler)
        self.attack, self.lock = attack, threading.Lock()
        self.running = self.scrapes = self.drafts = self.accepted = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid-file", required=True)
    ap.add_argument("--attack", default="none")
    args = ap.parse_args()
    with open(args.pid_file, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    srv = Server(("127.0.0.1", args.port), args.attack)
    figure = "1.2.3" if args.attack == "startup-figure" else "4"
    print(f"hostile server: max_concurrency={figure} port={srv.server_address[1]}", flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
