"""Hostile requests against a real gateway (issue 22): each is a 4xx naming what is wrong,
never a 500 or a traceback, and nothing it carried is stored."""

from __future__ import annotations

import io
import json
import logging
import socket

import httpx
import pytest
import trio

from support.gateway_fixtures import StartGateway
from tether._plumbing._logging import make_handler
from tether._protocol._bounds import MAX_VERSION_CHARS
from tether.gateway import AppLimits

JSON = {"Content-Type": "application/json"}
BEAT = {"client": "b1", "protocol_version": 1, "inflight": 0}

HOSTILE = [
    # (method, path, raw body, status, words the error must contain)
    ("POST", "/v1/messages", b'{"a":' * 10_000 + b"1" + b"}" * 10_000, 400, "nested"),
    ("POST", "/v1/messages", b"[" * 100 + b"]" * 100, 400, "nested"),
    ("POST", "/v1/heartbeat", b'{"inflight": ' + b"9" * 5000 + b"}", 400, "integer"),
    ("GET", "/v1/messages?room=r&limit=%C2%B2", b"", 400, "'limit'"),
    ("GET", "/v1/tasks?limit=%D9%A1", b"", 400, "'limit'"),
    ("GET", "/v1/tasks?wait=%D9%A1", b"", 400, "'wait'"),
    ("GET", "/v1/tasks?wait=1_0", b"", 400, "'wait'"),
    ("GET", "/v1/tasks?limit=" + "1" * 5000, b"", 400, "'limit'"),
    (
        "POST",
        "/v1/heartbeat",
        json.dumps({**BEAT, "inflight": 2**64}).encode(),
        400,
        "inflight",
    ),
    (
        "POST",
        "/v1/heartbeat",
        json.dumps({**BEAT, "protocol_version": -(2**70)}).encode(),
        400,
        "protocol_version",
    ),
    # non-finite numbers (item 4): Python's json reads these, strict parsers do not
    (
        "POST",
        "/v1/heartbeat",
        b'{"client":"b1","protocol_version":1,"inflight":0,"uptime_s":Infinity}',
        400,
        "Infinity",
    ),
    (
        "POST",
        "/v1/heartbeat",
        b'{"client":"b1","protocol_version":1,"inflight":0,"uptime_s":NaN}',
        400,
        "NaN",
    ),
    (
        "POST",
        "/v1/heartbeat",
        b'{"client":"b1","protocol_version":1,"inflight":0,"uptime_s":1e999}',
        400,
        "uptime_s",
    ),
    (
        "POST",
        "/v1/heartbeat",
        b'{"client":"b1","protocol_version":1,"inflight":0,"uptime_s":-1}',
        400,
        "uptime_s",
    ),
    # free text bounded (item 6)
    (
        "POST",
        "/v1/heartbeat",
        json.dumps({**BEAT, "version": "v" * (MAX_VERSION_CHARS + 1)}).encode(),
        400,
        "version",
    ),
    (
        "POST",
        "/v1/heartbeat",
        json.dumps({**BEAT, "version": "1.0\n2026-01-01 forged line"}).encode(),
        400,
        "version",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "needle"),
    HOSTILE,
    ids=[f"{m} {p[:40]} {n}" for m, p, _, _, n in HOSTILE],
)
async def test_a_hostile_request_is_a_4xx_naming_the_field_and_stores_nothing(
    start_gateway: StartGateway,
    http: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    body: bytes,
    status: int,
    needle: str,
) -> None:
    gateway = await start_gateway()
    with caplog.at_level(logging.INFO):
        response = await http.request(
            method, f"{gateway.url}{path}", content=body, headers={**gateway.headers(), **JSON}
        )
    assert response.status_code == status, response.text[:300]
    assert needle in response.json()["error"], response.text[:300]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    stats = await gateway.stats()
    assert sum(stats["tasks"].values()) == 0
    assert stats["clients"] == []


async def test_stats_stay_strict_json_and_small_after_heartbeats(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    """A heartbeat the gateway accepts leaves /v1/stats parseable by a strict parser."""
    gateway = await start_gateway()
    beat = {**BEAT, "version": "v" * MAX_VERSION_CHARS, "uptime_s": 1e300}
    response = await http.post(f"{gateway.url}/v1/heartbeat", json=beat, headers=gateway.headers())
    assert response.status_code == 200, response.text
    raw = (await http.get(f"{gateway.url}/v1/stats", headers=gateway.headers())).text

    def refuse(constant: str) -> None:
        raise AssertionError(f"/v1/stats holds {constant}")

    stats = json.loads(raw, parse_constant=refuse)
    assert [c["version"] for c in stats["clients"]] == [beat["version"]]
    assert len(raw) < 4096


async def test_a_body_that_never_arrives_is_answered_408(
    start_gateway: StartGateway,
) -> None:
    """Headers of an authenticated POST, then silence: the gateway answers 408 and closes
    rather than holding the request open (the test waits for the answer itself)."""
    gateway = await start_gateway(limits=AppLimits(body_timeout=0.5))
    port = int(gateway.url.rsplit(":", 1)[1])
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.connect(("127.0.0.1", port))
    head = (
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {gateway.token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n"
    )
    await sock.send(head.encode())
    answer = b""
    with trio.fail_after(60):
        while b"\r\n\r\n" not in answer:
            chunk = await sock.recv(4096)
            assert chunk, f"connection closed without an answer: {answer!r}"
            answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


async def test_a_reject_reason_cannot_forge_a_gateway_log_line(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    """Item 5 through a real server: the reason is logged on one line, its controls escaped."""
    stream = io.StringIO()
    handler = make_handler("text", stream)
    logger = logging.getLogger("tether.gateway")
    logger.addHandler(handler)
    try:
        gateway = await start_gateway()
        task_id = await gateway.submit("hello")
        polled = await http.get(f"{gateway.url}/v1/tasks", headers=gateway.headers())
        assert [t["id"] for t in polled.json()["tasks"]] == [task_id]
        reason = "bad\n2026-12-01 00:00:00,000 INFO tether.gateway: forged \x07\x1b[2J"
        response = await http.post(
            f"{gateway.url}/v1/tasks/{task_id}/reject",
            json={"id": task_id, "reason": reason},
            headers=gateway.headers(),
        )
        assert response.status_code == 200, response.text
    finally:
        logger.removeHandler(handler)
    (line,) = [x for x in stream.getvalue().splitlines() if "rejected task" in x]
    assert line.endswith("bad\\n2026-12-01 00:00:00,000 INFO tether.gateway: forged \\x07\\x1b[2J")
    assert not [x for x in stream.getvalue().splitlines() if "forged" in x and x != line]
