"""Attacks and careless requests against a real running server (`python -m engine_under_test.serve`,
tiny shapes): each test sends the bad request, checks the answer (an OpenAI-style JSON error with
the field named, or a closed connection for bytes that are not HTTP), then checks that the same
server still answers a normal completion and is still healthy (one request never stops the
engine thread)."""

from __future__ import annotations

import json
import os
import signal
import socket
from urllib.parse import urlparse

import httpx
import pytest

from tests.engine_under_test.serve.test_server import _argv, _start

NORMAL = {"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-robust") / "server.log"
    proc, url = _start(_argv(**{"served_model_name": "tiny"}), log)
    yield url, proc, log
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _post(url: str, body) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60, trust_env=False)


def _still_serves(server) -> None:
    url, proc, log = server
    r = _post(url, NORMAL)
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"][0]["token_ids"]) == 4
    assert httpx.get(f"{url}/health", timeout=10, trust_env=False).status_code == 200
    assert proc.poll() is None, log.read_text()[-2000:]


def _raw(url: str, data: bytes, read_s: float = 10.0) -> bytes:
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=read_s) as s:
        s.sendall(data)
        chunks = []
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        except socket.timeout:
            pass
    return b"".join(chunks)


def _json_error(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body[body.index(b"{"):body.rindex(b"}") + 1])


@pytest.mark.parametrize("field,value", [
    ("seed", "abc"), ("seed", 1.5), ("seed", True), ("seed", 2 ** 70),
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", -1), ("temperature", "hot"),
    ("max_tokens", 0), ("max_tokens", 2.0), ("top_p", 0), ("top_k", -5), ("ignore_eos", "yes"),
    ("stream", "x"), ("stream_options", "x"), ("stream_options", {"include_usage": "x"}),
    ("n", 2), ("n", 1000), ("best_of", 3), ("stop_token_ids", [5]), ("stop", ["\n"]), ("logprobs", 2), ("echo", True),
])
def test_bad_field_is_a_400_naming_it_and_the_server_goes_on(server, field, value) -> None:
    body = dict(NORMAL, **{field: value})
    text = json.dumps(body, allow_nan=True)          # NaN / Infinity as Python's json writes them
    r = httpx.post(f"{server[0]}/v1/completions", content=text, headers={"Content-Type": "application/json"},
                   timeout=60, trust_env=False)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and field in err["message"] and err["type"] == "invalid_request_error"
    _still_serves(server)


def test_tiny_temperature_is_greedy_not_a_crash(server) -> None:
    greedy = _post(server[0], NORMAL).json()["choices"][0]["token_ids"]
    r = _post(server[0], dict(NORMAL, temperature=1e-320))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["token_ids"] == greedy
    _still_serves(server)


def test_unknown_model_is_404(server) -> None:
    r = _post(server[0], dict(NORMAL, model="gpt-4"))
    assert r.status_code == 404 and "gpt-4" in r.json()["error"]["message"]
    assert _post(server[0], dict(NORMAL, model="tiny")).status_code == 200
    _still_serves(server)


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe\x00garbage", b"[" * 100000 + b"]" * 100000, b"[1, 2]"])
def test_unparsable_body_is_a_json_400(server, body) -> None:
    r = httpx.post(f"{server[0]}/v1/completions", content=body, timeout=60, trust_env=False)
    assert r.status_code == 400 and "body" in r.json()["error"]["message"]
    _still_serves(server)


def test_body_over_the_limit_is_413_without_reading_it_all(server) -> None:
    from engine_under_test.serve.http_api import MAX_BODY_BYTES

    r = httpx.post(f"{server[0]}/v1/completions", content=b"[" + b"1," * (MAX_BODY_BYTES // 2) + b"1]",
                   timeout=60, trust_env=False)
    assert r.status_code == 413 and r.json()["error"]["code"] == 413
    _still_serves(server)


def test_garbage_bytes_get_a_json_400_and_the_connection_closes(server) -> None:
    status, err = _json_error(_raw(server[0], b"\x16\x03\x01\x02\x00garbage that is not HTTP\r\n\r\n"))
    assert status == 400 and "malformed HTTP request" in err["error"]["message"]
    _still_serves(server)


def test_content_length_with_transfer_encoding_is_refused_not_smuggled(server) -> None:
    smuggled = json.dumps(NORMAL).encode()
    inner = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: " + str(len(smuggled)).encode() + b"\r\n\r\n" + smuggled)
    chunked = f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n"
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    raw = _raw(server[0], req)
    status, err = _json_error(raw)
    assert status == 400 and raw.count(b"HTTP/1.") == 1, raw[:400]      # one answer: nothing smuggled ran
    _still_serves(server)


def test_negative_content_length_is_refused(server) -> None:
    status, _ = _json_error(_raw(server[0], b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"))
    assert status == 400
    _still_serves(server)


def test_half_sent_and_unread_requests_do_not_block_a_normal_one(server) -> None:
    u = urlparse(server[0])
    held = []
    try:
        for i in range(100):                      # headers never finished
            s = socket.create_connection((u.hostname, u.port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len")
            held.append(s)
        stream = json.dumps(dict(NORMAL, max_tokens=64, stream=True)).encode()
        for i in range(20):                       # streams never read
            s = socket.create_connection((u.hostname, u.port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(stream)).encode() + b"\r\n\r\n" + stream)
            held.append(s)
        _still_serves(server)
    finally:
        for s in held:
            s.close()
    _still_serves(server)


def test_unknown_route_is_a_json_404(server) -> None:
    r = httpx.get(f"{server[0]}/v1/nothing", timeout=10, trust_env=False)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    _still_serves(server)
