"""Streaming requests seen on the wire: a loopback packet capture, the yardstick neither client controls.

    with LoopbackCapture(port, cpu=1) as cap:
        ... one client's run against 127.0.0.1:port ...
    requests = cap.requests()      # [WireRequest(post_s, chunk_s), ...] in the order they were sent

Contract: a capture process (`python benchmarks/loopback_capture.py PORT OUT`, pinned to `cpu`)
reads the loopback interface through a raw packet socket filtered in the kernel to TCP on `port`
(classic BPF), timestamped by the kernel (SO_TIMESTAMPNS) on arrival, and records each segment a
client sends that starts an HTTP POST and each segment the server sends with the number of SSE
completion chunks carrying choices in it. `requests()` pairs them per connection: one `WireRequest`
per POST, its send instant and the instant of every chunk with choices that followed on that
connection, so TTFT and TPOT can be read off the wire for the same requests a client timed. Times
are CLOCK_REALTIME seconds, comparable only with each other. Needs CAP_NET_RAW (root): without it
`LoopbackCapture.available()` is False and callers go without. Linux only.
"""

from __future__ import annotations

import bisect
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35
ETH_P_ALL = 0x0003
CHUNK_MARKS = (b'"choices": [{', b'"choices":[{')   # a completion chunk with choices: the reference, the stub


class WireRequest(NamedTuple):
    post_s: float
    chunk_s: tuple[float, ...]

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_s[0] - self.post_s if self.chunk_s else None

    def tpot_s(self, num_output_tokens: int) -> float | None:
        if not self.chunk_s or num_output_tokens < 2:
            return None
        return (self.chunk_s[-1] - self.chunk_s[0]) / (num_output_tokens - 1)


def turnarounds_s(reqs: list[WireRequest], measured: list[WireRequest]) -> list[float]:
    """For each of `measured` (a tail of `reqs`), how long after the latest stream end before its POST
    (the last chunk of any of `reqs`) it was sent: in a closed loop, how fast the client turned a
    finished stream into the next request. Requests with no stream ended before them are left out."""
    ends = sorted(r.chunk_s[-1] for r in reqs if r.chunk_s)
    out = []
    for r in measured:
        i = bisect.bisect_left(ends, r.post_s)
        if i:
            out.append(r.post_s - ends[i - 1])
    return out


def _tcp_port_filter(port: int) -> bytes:
    """Classic BPF for `ip and tcp and (src port P or dst port P)`, unfragmented, on an Ethernet-framed interface."""
    prog = [(0x28, 0, 0, 12), (0x15, 0, 10, 0x0800), (0x30, 0, 0, 23), (0x15, 0, 8, 6), (0x28, 0, 0, 20),
            (0x45, 6, 0, 0x1FFF), (0xB1, 0, 0, 14), (0x48, 0, 0, 14), (0x15, 2, 0, port), (0x48, 0, 0, 16),
            (0x15, 0, 1, port), (0x06, 0, 0, 0x40000), (0x06, 0, 0, 0)]
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)


def _open_socket(port: int) -> tuple[socket.socket, ctypes.Array]:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    code = _tcp_port_filter(port)
    buf = ctypes.create_string_buffer(code, len(code))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(code) // 8, ctypes.addressof(buf)))
    s.bind(("lo", 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    return s, buf


def _capture(port: int, out: Path) -> int:
    """The capture process: events until SIGTERM, then one JSON list [[t_s, "post" | "chunks", conn_port, n]]."""
    sock, _keep = _open_socket(port)
    sock.settimeout(0.2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    events: list[list] = []
    print("ready", flush=True)
    while not stop:
        try:
            data, anc, _, addr = sock.recvmsg(1 << 16, 64)
        except (socket.timeout, InterruptedError):
            continue
        if addr[2] == socket.PACKET_OUTGOING:   # loopback shows every packet twice
            continue
        t = next((a + b * 1e-9 for lvl, typ, d in anc if typ == SO_TIMESTAMPNS
                  for a, b in [struct.unpack("qq", d[:16])]), time.time())
        ip = data[14:]
        tcp = ip[(ip[0] & 15) * 4:]
        src, dst = struct.unpack("!HH", tcp[:4])
        payload = tcp[(tcp[12] >> 4) * 4:]
        if not payload:
            continue
        if dst == port and payload.startswith(b"POST "):
            events.append([t, "post", src, 1])
        elif src == port and (n := sum(payload.count(mark) for mark in CHUNK_MARKS)):
            events.append([t, "chunks", dst, n])
    out.write_text(json.dumps(events))
    return 0


class LoopbackCapture:
    def __init__(self, port: int, cpu: int | None = None) -> None:
        self.port, self.cpu = port, cpu
        self.out = Path(tempfile.mkstemp(prefix="loopback-capture-", suffix=".json")[1])

    @staticmethod
    def available() -> bool:
        try:
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL)).close()
            return True
        except (PermissionError, AttributeError, OSError):
            return False

    def __enter__(self) -> "LoopbackCapture":
        argv = [sys.executable, __file__, str(self.port), str(self.out)]
        if self.cpu is not None:
            argv = ["taskset", "-c", str(self.cpu), *argv]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("loopback capture did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)

    def requests(self) -> list[WireRequest]:
        events = json.loads(self.out.read_text())
        self.out.unlink()
        open_: dict[int, tuple[float, list[float]]] = {}
        done: list[tuple[float, list[float]]] = []
        for t, kind, conn, n in events:
            if kind == "post":
                open_[conn] = (t, [])
                done.append(open_[conn])
            elif conn in open_:
                open_[conn][1].extend([t] * n)
        return [WireRequest(post, tuple(chunks)) for post, chunks in done]


if __name__ == "__main__":
    raise SystemExit(_capture(int(sys.argv[1]), Path(sys.argv[2])))
