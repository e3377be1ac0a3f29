"""The streaming client's failure modes and the client worker processes (real sockets, real processes)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from conformance.loadgen import LoadgenSettings, MetricNames, Workload, run_ladder
from conformance.loadgen.client import Connection, completion_body, encode_request
from conformance.loadgen.stub_server import StubServer
from conformance.loadgen.workers import split_closed, split_open


def _stream(port: int, path: str = "/v1/completions", timeout_s: float = 5.0):
    req = encode_request("127.0.0.1", port, path, completion_body("stub", [2, 3], 4, 0.0))

    async def go():
        conn = Connection("127.0.0.1", port, 5.0)
        try:
            return await conn.stream(req, 0, timeout_s)
        finally:
            conn.close()
    return asyncio.run(go())


def test_a_full_stream_is_counted() -> None:
    with StubServer(tokens_per_step=2) as srv:
        r = _stream(int(srv.base_url.rsplit(":", 1)[1]))
    assert r.ok and r.num_output_tokens == 4 and len(r.chunk_times_s) == 2 and r.num_prompt_tokens == 2
    assert 0 < r.ttft_s <= r.e2e_s


def test_http_errors_refusals_and_timeouts_are_records_not_exceptions() -> None:
    with StubServer(step_delay_s=0.5) as srv:
        port = int(srv.base_url.rsplit(":", 1)[1])
        not_found = _stream(port, "/v1/nowhere")
        slow = _stream(port, timeout_s=0.2)
    assert not_found.error.startswith("HTTP 404")
    assert "timed out after 0.2 s" in slow.error
    refused = _stream(port)   # the server is gone
    assert "refused" in refused.error.lower()


def test_a_stream_cut_mid_way_is_an_error() -> None:
    lsock = socket.create_server(("127.0.0.1", 0))

    def serve_half() -> None:
        conn, _ = lsock.accept()
        conn.recv(65536)
        event = b'data: {"choices":[{"text":"a"}]}\n\n'
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(event), event))
        conn.close()

    t = threading.Thread(target=serve_half)
    t.start()
    r = _stream(lsock.getsockname()[1])
    t.join()
    lsock.close()
    assert not r.ok and "closed" in r.error and len(r.chunk_times_s) == 1


def test_chunks_are_counted_as_vllm_bench_counts_them() -> None:
    # an empty-text first chunk (a special token) and an empty finish chunk count, as in vLLM's bench;
    # the usage chunk and [DONE] do not; the output length is usage's
    lsock = socket.create_server(("127.0.0.1", 0))
    events = [b'{"choices":[{"text":""}]}', b'{"choices":[{"text":"ab"}]}',
              b'{"choices":[{"text":"","finish_reason":"length"}]}',
              b'{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}', b"[DONE]"]

    def serve_slowly() -> None:
        conn, _ = lsock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for e in events:
            data = b"data: " + e + b"\n\n"
            conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            threading.Event().wait(0.05)
        conn.sendall(b"0\r\n\r\n")
        conn.close()

    t = threading.Thread(target=serve_slowly)
    t.start()
    r = _stream(lsock.getsockname()[1])
    t.join()
    lsock.close()
    assert r.ok and len(r.chunk_times_s) == 3 and r.num_output_tokens == 3
    assert r.ttft_s == pytest.approx(r.chunk_times_s[0] - r.start_s)
    assert r.last_chunk_s < r.e2e_s   # TPOT stops at the finish chunk, before the usage chunk and [DONE]
    assert r.tpot_s == pytest.approx((r.chunk_times_s[-1] - r.chunk_times_s[0]) / 2)


def test_a_malformed_chunked_body_is_an_error() -> None:
    lsock = socket.create_server(("127.0.0.1", 0))

    def serve_garbage() -> None:
        conn, _ = lsock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n")
        conn.recv(10)
        conn.close()

    t = threading.Thread(target=serve_garbage)
    t.start()
    r = _stream(lsock.getsockname()[1])
    lsock.close()
    t.join()
    assert "malformed chunked body" in r.error


def test_split_closed_gives_every_request_to_exactly_one_slot() -> None:
    parts = split_closed(range(23), 5, 2)
    assert [slots for _, slots in parts] == [3, 2]
    assert sorted(i for idx, _ in parts for i in idx) == list(range(23))
    assert split_closed(range(4), 1, 4) == [([0, 1, 2, 3], 1)]
    o = split_open(list(range(5)), [0.0, 0.1, 0.2, 0.3, 0.4], 3, 2)
    assert [(idx, cap) for idx, _, cap in o] == [([0, 2, 4], 2), ([1, 3], 1)]


@pytest.mark.parametrize("open_loop", [False, True])
def test_two_client_processes_share_one_clock_and_merge_their_records(open_loop: bool) -> None:
    w = Workload(num_requests=16, prompt_tokens=8, output_tokens=6, seed=5, vocab_size=64)
    extra = dict(request_rates_per_s=(400.0,), arrival="constant") if open_loop else {}
    s = LoadgenSettings(concurrencies=(4,), num_warmup_waves=0, min_requests_per_slot=1, num_client_processes=2,
                        **extra)
    with StubServer() as srv:
        (r,) = run_ladder(srv.base_url, w, s, MetricNames()).rungs
        prompts = srv.state.prompts
    assert r["status"] == "ok", r["message"]
    assert r["client"]["num_processes"] == 2 and r["num_requests"] == 16
    assert sorted(d["index"] for d in r["records"]) == list(range(16))
    assert {d["worker"] for d in r["records"]} == {0, 1}
    # one clock: every record starts after the common t0 and within the rung's wall time
    assert all(0 <= d["start_ms"] <= r["wall_s"] * 1e3 for d in r["records"])
    tag = "rate400-r0" if open_loop else "c4-r0"
    assert sorted(map(tuple, prompts)) == sorted(tuple(w.prompt_token_ids(tag, i)) for i in range(16))
