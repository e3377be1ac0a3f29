#!/usr/bin/env python3
"""The stand-in port served live: an OpenAI-compatible streaming server that really allocates its
cache on the device, with the draft-KV defect switchable (bug 1 as an operator meets it).

    live_port.py --model DIR --draft DIR --max-num-seqs N --max-model-len L
                 --gpu-memory-utilization U --port P [--defects draft-kv-outside-bound]

It sizes one pool as the reference engine's planner does under gpu_memory_utilization (the bound
minus 1 GiB reserved for the CUDA context) and allocates it; with `draft-kv-outside-bound` it also
allocates one draft KV store per batch row beside the pool (max_model_len rounded up to a 16-token
page plus one page, across the draft layers), which the bound does not count. It then serves
/health, /v1/models, /metrics (`vllm:num_requests_running`) and streaming /v1/completions, emitting
tokens at a fixed step time with at most max_num_seqs requests running; the rest wait. Standard
library HTTP server: this is a stand-in, the framework measures it from the outside.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CONTEXT_RESERVE_BYTES = 1 << 30
PAGE_TOKENS = 16
STEP_S = 0.004


def draft_store_bytes(draft_dir: str, max_model_len: int) -> int:
    cfg = json.loads((Path(draft_dir) / "config.json").read_text())
    pages = -(-max_model_len // PAGE_TOKENS) + 1
    return pages * PAGE_TOKENS * cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2


class Engine:
    def __init__(self, args: argparse.Namespace):
        import torch

        self.args = args
        self.running = 0
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(args.max_num_seqs)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        total = torch.cuda.mem_get_info()[1] if device == "cuda" else 8 << 30
        bound = int(args.gpu_memory_utilization * total) if args.gpu_memory_utilization else args.kv_cache_memory_bytes
        pool_bytes = bound - CONTEXT_RESERVE_BYTES if args.gpu_memory_utilization else bound
        self.pool = torch.empty(pool_bytes, dtype=torch.uint8, device=device)
        store = 0
        self.draft_store = None
        if "draft-kv-outside-bound" in args.defects and args.draft:
            store = draft_store_bytes(args.draft, args.max_model_len) * args.max_num_seqs
            self.draft_store = torch.empty(store, dtype=torch.uint8, device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"port plan: bound_bytes={bound} pool_bytes={pool_bytes} draft_store_bytes={store} "
              f"max_num_seqs={args.max_num_seqs} device={device}", flush=True)


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
        eng = self.server.engine
        if self.path == "/health":
            self._send(200, b"", "text/plain")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": self.server.model_id}]}).encode(),
                       "application/json")
        elif self.path == "/metrics":
            with eng.lock:
                running = eng.running
            self._send(200, f"vllm:num_requests_running {running}\n".encode(), "text/plain; version=0.0.4")
        else:
            self._send(404, b"{}", "application/json")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        eng = self.server.engine
        length = int(self.headers.get("Content-Length", "0"))
        if not 0 <= length <= 1 << 20:
            return self._send(413, b'{"error": {"message": "body too large"}}', "application/json")
        body = json.loads(self.rfile.read(length) or b"{}")
        n = int(body.get("max_tokens") or 16)
        with eng.slots:
            with eng.lock:
                eng.running += 1
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(n):
                    time.sleep(STEP_S)
                    self._chunk(("data: " + json.dumps({"object": "text_completion", "model": self.server.model_id,
                                 "choices": [{"index": 0, "text": "x", "finish_reason": "length" if i == n - 1 else None}]})
                                 + "\n\n").encode())
                prompt = len(body.get("prompt") or [])
                self._chunk(("data: " + json.dumps({"object": "text_completion", "choices": [], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}}) + "\n\n").encode())
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            finally:
                with eng.lock:
                    eng.running -= 1


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    engine: Engine
    model_id: str

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--max-num-seqs", type=int, required=True)
    ap.add_argument("--max-model-len", type=int, required=True)
    ap.add_argument("--gpu-memory-utilization", type=float, default=None)
    ap.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--defects", default="none")
    args = ap.parse_args(argv)
    args.defects = [] if args.defects == "none" else args.defects.split(",")
    srv = Server((args.host, args.port), Handler)
    srv.engine = Engine(args)
    srv.model_id = args.served_model_name or Path(args.model).name
    srv.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
