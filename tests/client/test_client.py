"""GatewayClient's retry, auth and degradation rules, with the network faked and time mocked."""

from __future__ import annotations

import json
import logging
import random
import re
import ssl
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from trio.testing import MockClock

from tether.bridge import (
    GatewayClient,
    write_token,
)
from tether.bridge.client import GatewayAuthError, GatewayRequestError
from tether.bridge.client._connection import _tls_context

URL = "http://gateway.test"


class ConstantRandom(random.Random):
    """An rng whose ``random()`` is fixed, so backoff delays are exact."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@attrs.define
class Call:
    at: float
    request: httpx.Request

    @property
    def token(self) -> str:
        return self.request.headers["authorization"].removeprefix("Bearer ")


@attrs.define
class FakeGateway:
    """An ``httpx.MockTransport`` handler answering from a script, recording each call."""

    answer: Callable[[int, httpx.Request], httpx.Response]
    calls: list[Call] = attrs.field(factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(Call(trio.current_time(), request))
        return self.answer(len(self.calls), request)

    def gaps(self) -> list[float]:
        return [b.at - a.at for a, b in zip(self.calls, self.calls[1:], strict=False)]


def ok_tasks(tasks: list[dict[str, Any]] | None = None) -> httpx.Response:
    return httpx.Response(200, json={"tasks": tasks or []})


def refuse_connection(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def client_for(fake: FakeGateway, token_path: Path, **kwargs: Any) -> GatewayClient:
    return GatewayClient(URL, token_path, transport=httpx.MockTransport(fake), **kwargs)


async def test_transient_errors_back_off_exactly_from_1_to_60_seconds(
    mock_clock: MockClock, token_path: Path, tmp_path: Path
) -> None:
    status_file = tmp_path / "status.json"
    seen_during_outage: list[dict[str, Any]] = []

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n == 3:
            seen_during_outage.append(json.loads(status_file.read_text()))
        if n <= 9:
            return refuse_connection(request)
        return ok_tasks()

    fake = FakeGateway(answer)
    client = client_for(fake, token_path, rng=ConstantRandom(0.0), status_file=status_file)
    async with client:
        assert await client.poll_tasks(wait=0) == []

    assert fake.gaps() == pytest.approx([1, 2, 4, 8, 16, 32, 60, 60, 60], abs=1e-9)
    outage = seen_during_outage[0]
    assert (outage["connected"], outage["backoff_s"]) == (False, 2.0)
    assert "ConnectError: connection refused" in outage["error"]
    after = json.loads(status_file.read_text())
    assert (after["connected"], after["error"], after["backoff_s"]) == (True, None, None)
    assert after["last_ok"] is not None


async def test_jitter_only_shortens_delays_within_a_fifth(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: refuse_connection(r) if n <= 8 else ok_tasks())
    async with client_for(fake, token_path, rng=random.Random(1234)) as client:
        await client.poll_tasks(wait=0)
    nominal = [1, 2, 4, 8, 16, 32, 60, 60]
    gaps = fake.gaps()
    assert all(0.8 * n - 1e-9 <= g <= n + 1e-9 for g, n in zip(gaps, nominal, strict=True))
    assert len({round(g / n, 6) for g, n in zip(gaps, nominal, strict=True)}) > 1, "no jitter"

    # the same seed gives the same schedule: the rng is the only source of randomness
    again = FakeGateway(lambda n, r: refuse_connection(r) if n <= 8 else ok_tasks())
    async with client_for(again, token_path, rng=random.Random(1234)) as client:
        await client.poll_tasks(wait=0)
    assert again.gaps() == pytest.approx(gaps, abs=1e-9)


@pytest.mark.parametrize(
    ("failure", "expected_gap"),
    [
        (httpx.Response(503, json={"error": "overloaded"}), 1.0),
        (httpx.Response(500, text="<html>boom</html>"), 1.0),
        (httpx.Response(429, headers={"Retry-After": "7"}, json={"error": "slow down"}), 7.0),
        (httpx.Response(408), 1.0),
    ],
)
async def test_5xx_408_and_429_are_retried(
    mock_clock: MockClock, token_path: Path, failure: httpx.Response, expected_gap: float
) -> None:
    fake = FakeGateway(lambda n, r: failure if n == 1 else ok_tasks())
    async with client_for(fake, token_path, rng=ConstantRandom(0.0)) as client:
        await client.poll_tasks(wait=0)
    assert fake.gaps() == pytest.approx([expected_gap])


async def test_a_4xx_is_raised_with_the_gateways_reason_and_not_retried(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: httpx.Response(409, json={"error": "never delivered"}))
    async with client_for(fake, token_path) as client:
        with pytest.raises(GatewayRequestError, match="HTTP 409: never delivered") as info:
            await client.ack("t-1")
    assert info.value.status == 409
    assert len(fake.calls) == 1


async def test_401_rereads_the_token_file_once_then_fails(
    mock_clock: MockClock, token_path: Path
) -> None:
    def answer(n: int, request: httpx.Request) -> httpx.Response:
        write_token(token_path, "rotated-token")  # someone rotates it, but to a wrong one
        return httpx.Response(401, json={"error": "invalid bearer token"})

    fake = FakeGateway(answer)
    async with client_for(fake, token_path) as client:
        with pytest.raises(GatewayAuthError, match="after re-reading it") as info:
            await client.poll_tasks(wait=0)
    assert [call.token for call in fake.calls] == ["sekrit-token", "rotated-token"]
    assert "\n" not in str(info.value)
    assert "invalid bearer token" in str(info.value)


async def test_403_with_an_unchanged_token_file_fails_at_once(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: httpx.Response(403, json={"error": "forbidden"}))
    async with client_for(fake, token_path) as client:
        with pytest.raises(GatewayAuthError, match="file is unchanged"):
            await client.post_result("t-1", "hi")
    assert len(fake.calls) == 1


async def test_401_then_success_with_the_new_token(mock_clock: MockClock, token_path: Path) -> None:
    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if request.headers["authorization"] == "Bearer new-token":
            return ok_tasks()
        write_token(token_path, "new-token")
        return httpx.Response(401)

    fake = FakeGateway(answer)
    async with client_for(fake, token_path) as client:
        assert await client.poll_tasks(wait=0) == []
        assert await client.poll_tasks(wait=0) == []
    assert [call.token for call in fake.calls] == ["sekrit-token", "new-token", "new-token"]


async def test_long_poll_read_timeout_is_wait_plus_margin(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: ok_tasks())
    async with client_for(fake, token_path, timeout_margin=10.0, poll_limit=5) as client:
        await client.poll_tasks(wait=25)
        await client.poll_tasks()  # the default wait
    first, second = (call.request for call in fake.calls)
    assert first.extensions["timeout"]["read"] == 35.0
    assert dict(first.url.params) == {"wait": "25", "limit": "5"}
    assert second.extensions["timeout"]["read"] == 40.0


async def test_tasks_with_bad_ids_are_rejected_once_and_unknown_fields_tolerated(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = [
        {"id": "../../etc/passwd", "body": "x", "room": "r"},
        {"id": "good-1", "body": "hello", "room": "r", "priority": "from a newer gateway"},
        {"id": "no-body", "room": "r"},
        {"body": "no id at all"},
    ]
    rejects: list[Any] = []

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/rejects":
            body = json.loads(request.content)
            rejects.append(body)
            return httpx.Response(
                200, json={"items": [{"id": r["id"], "status": 200} for r in body["rejects"]]}
            )
        return ok_tasks(tasks)

    fake = FakeGateway(answer)
    caplog.set_level(logging.INFO, logger="tether.bridge.gateway")
    async with client_for(fake, token_path) as client:
        for _ in range(3):  # the gateway ignores the rejection and offers them again
            got = await client.poll_tasks(wait=0)
            assert [(t.id, t.body) for t in got] == [("good-1", "hello")]
        assert client.rejected_tasks == 9
    [sent] = rejects  # once, with the reasons, the bad id in the body
    assert [r["id"] for r in sent["rejects"]] == ["../../etc/passwd", "no-body"]
    assert "'..'" in sent["rejects"][0]["reason"]
    assert "body" in sent["rejects"][1]["reason"]
    lines = [r.getMessage() for r in caplog.records if "cannot take" in r.getMessage()]
    assert len(lines) == 3, lines  # one per task, not one per poll


async def test_a_gateway_without_the_rejects_route_is_asked_once(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/rejects":
            return httpx.Response(404, json={"error": "no such endpoint"})
        return ok_tasks([{"id": "../evil", "body": "x", "room": "r"}, {"id": "a.b/c"}])

    fake = FakeGateway(answer)
    caplog.set_level(logging.INFO, logger="tether.bridge.gateway")
    async with client_for(fake, token_path) as client:
        for _ in range(3):
            assert await client.poll_tasks(wait=0) == []
    paths = [c.request.url.path for c in fake.calls]
    assert paths.count("/v1/rejects") == 1
    assert all("evil" not in p for p in paths)
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 3, loud  # one per id, one for the missing route


async def test_a_poll_answered_with_more_than_asked_takes_only_the_limit(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    many = [{"id": f"t{i}", "body": "b", "room": "r"} for i in range(500)]
    fake = FakeGateway(lambda n, r: ok_tasks(many))
    async with client_for(fake, token_path, poll_limit=10) as client:
        got = await client.poll_tasks(wait=0)
    assert [t.id for t in got] == [f"t{i}" for i in range(10)]
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "with 500" in line
    assert "other 490 are not acked" in line


async def test_an_answer_over_the_cap_is_refused_unread_and_the_next_poll_asks_for_fewer(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tether.bridge.client._connection import MAX_TASK_WIRE_BYTES

    cap = 2 * MAX_TASK_WIRE_BYTES
    huge = {"tasks": [{"id": "t", "body": "x" * (cap + 10), "room": "r"}]}
    reads: list[int] = []

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n == 1:
            encoded = json.dumps(huge).encode()

            async def chunks() -> Any:  # no Content-Length: the cap is found while streaming
                for at in range(0, len(encoded), 1 << 20):
                    reads.append(at)
                    yield encoded[at : at + (1 << 20)]

            return httpx.Response(200, content=chunks())
        return ok_tasks([{"id": "t2", "body": "b", "room": "r"}])

    fake = FakeGateway(answer)
    async with client_for(fake, token_path, poll_bytes_max=cap) as client:
        got = await client.poll_tasks(wait=0)
    assert [t.id for t in got] == ["t2"]
    assert len(reads) <= cap // (1 << 20) + 2  # stopped at the cap, did not read it all
    limits = [c.request.url.params["limit"] for c in fake.calls]
    assert limits == ["100", "2"]
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "over this client's limit" in loud[0]


async def test_answers_outside_protocol_v1_are_retried_with_one_line_per_incident(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = [
        httpx.Response(200, text="<html>captive portal</html>"),
        httpx.Response(200, json=["not", "an", "object"]),
        httpx.Response(200, json={"tasks": "no"}),
        httpx.Response(200, content=b"x" * 200),
    ]

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n <= len(garbage):
            return garbage[n - 1]
        return ok_tasks([{"id": "t1", "body": "hi", "room": "r"}])

    fake = FakeGateway(answer)
    caplog.set_level(logging.DEBUG, logger="tether.bridge.gateway")
    async with client_for(fake, token_path, poll_bytes_max=7 << 20) as client:
        with trio.fail_after(600):
            got = await client.poll_tasks(wait=0)
    assert [t.id for t in got] == ["t1"]
    assert len(fake.calls) == 5
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 2, loud  # the incident begins, and ends
    assert "answers outside protocol v1" in loud[0]
    assert "not JSON" in loud[0]
    assert "answers again" in loud[1]
    assert not any(r.exc_info for r in caplog.records)


async def test_missing_heartbeat_endpoint_is_logged_once_and_never_called_again(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway(lambda n, r: httpx.Response(404, json={"error": "no such endpoint"}))
    caplog.set_level(logging.INFO, logger="tether.bridge.gateway")
    async with client_for(fake, token_path) as client:
        assert not await client.heartbeat(inflight=1)
        assert not await client.heartbeat(inflight=1)
        await client.run_heartbeat(lambda: 0)  # returns at once: nothing to do
        assert client.status.heartbeat == "unsupported"
    assert len(fake.calls) == 1
    assert len([r for r in caplog.records if "no heartbeat endpoint" in r.message]) == 1


async def test_heartbeat_loop_beats_every_interval_through_failures(
    mock_clock: MockClock, token_path: Path
) -> None:
    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n == 2:
            return httpx.Response(503)
        return httpx.Response(200, json={"ok": True})

    fake = FakeGateway(answer)
    inflight = iter(range(10))
    async with client_for(fake, token_path) as client, trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(client.run_heartbeat, lambda: next(inflight))
        await trio.sleep(181)
        nursery.cancel_scope.cancel()
    assert [call.at - start for call in fake.calls] == pytest.approx([0, 60, 120, 180])
    bodies = [json.loads(call.request.content) for call in fake.calls]
    assert [b["inflight"] for b in bodies] == [0, 1, 2, 3]
    assert {(b["client"], b["protocol_version"]) for b in bodies} == {("tether-bridge", 1)}
    assert client.status.heartbeat == "ok"


async def test_status_file_is_private_redacted_and_replaced_atomically(
    mock_clock: MockClock, token_path: Path, tmp_path: Path
) -> None:
    status_file = tmp_path / "state" / "status.json"
    status_file.parent.mkdir()
    during_outage: list[str] = []

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if n == 1:
            raise httpx.ConnectError("proxy echoed sekrit-token back", request=request)
        during_outage.append(status_file.read_text())
        return ok_tasks()

    fake = FakeGateway(answer)
    async with client_for(fake, token_path, status_file=status_file) as client:
        await client.poll_tasks(wait=0)

    assert "sekrit-token" not in during_outage[0]
    outage = json.loads(during_outage[0])
    assert outage["error"] == "the task poll: ConnectError: proxy echoed [token] back"
    assert outage["connected"] is False
    assert "sekrit-token" not in status_file.read_text()
    assert status_file.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in status_file.parent.iterdir()] == ["status.json"]
    assert json.loads(status_file.read_text())["gateway"] == URL


async def test_invalid_calls_fail_locally_before_any_request(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: ok_tasks())
    async with client_for(fake, token_path) as client:
        with pytest.raises(ValueError, match="no_send=true"):
            await client.post_result("t-1", "")
        with pytest.raises(ValueError, match="not a valid task id"):
            await client.ack("a/b")
        with pytest.raises(ValueError, match=r"metadata\.worker"):
            await client.post_result("t-1", "hi", worker="two words")
    assert fake.calls == []


async def test_a_gateway_under_a_path_prefix_is_reached_there(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: ok_tasks())
    transport = httpx.MockTransport(fake)
    async with GatewayClient(f"{URL}/chat/", token_path, transport=transport) as client:
        await client.poll_tasks(wait=0)
    assert fake.calls[0].request.url.path == "/chat/v1/tasks"


def test_tls_is_verified_with_one_context_per_process() -> None:
    context = _tls_context()
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded
    assert _tls_context() is context  # loaded once (~17 ms), not per client


async def test_an_outage_marks_a_good_heartbeat_failing_and_the_next_beat_follows_recovery(
    mock_clock: MockClock, token_path: Path
) -> None:
    """Issue 21.9: the status (and so the status file, which writes every changed status)
    kept ``"heartbeat": "ok"`` through a gateway outage, the next beat being up to a heartbeat
    interval away, while /healthz already said 503. (No status file here: its writes run in
    threads, during which the mock clock would jump.)"""
    down = False

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        if down:
            return refuse_connection(request)
        if request.url.path == "/v1/heartbeat":
            return httpx.Response(200, json={"ok": True})
        return ok_tasks()

    fake = FakeGateway(answer)
    client = client_for(fake, token_path, rng=ConstantRandom(0.0))
    async with client, trio.open_nursery() as nursery:
        await nursery.start(client.run_heartbeat, lambda: 0)
        await trio.sleep(10)
        assert client.status.heartbeat == "ok"
        down = True
        nursery.start_soon(partial(client.poll_tasks, wait=0))  # retries at 11, 13, 17, 25
        await trio.sleep(2)  # t = 12: unreachable for 2 s
        assert (client.status.connected, client.status.heartbeat) == (False, "failing")
        await trio.sleep(8)  # t = 20
        down = False
        await trio.sleep(10)  # the poll got through at 25
        assert client.status.connected
        beats = [c.at for c in fake.calls if c.request.url.path == "/v1/heartbeat"]
        assert beats == pytest.approx([0, 25])  # at once after the recovery, not at 60
        assert client.status.heartbeat == "ok"
        await trio.sleep(40)
        beats = [c.at for c in fake.calls if c.request.url.path == "/v1/heartbeat"]
        assert beats == pytest.approx([0, 25, 60])  # then on its own schedule again
        nursery.cancel_scope.cancel()


def test_a_gateway_url_with_credentials_is_refused_without_showing_them(
    token_path: Path,
) -> None:
    """httpx would send a user and password as Basic auth (replacing the bearer token); a
    query would be glued to every request path; and httpx logs each request URL at INFO."""
    for url, needle in (
        ("http://user:gwPass-99@127.0.0.1:9", "must not carry a user or password"),
        ("https://gwPass-99@gw.example/base", "must not carry a user or password"),
        ("http://gw.example/base?access_token=gwPass-99", "must not carry a query"),
    ):
        with pytest.raises(ValueError, match=needle) as caught:
            GatewayClient(url, token_path)
        assert "gwPass-99" not in str(caught.value)
        assert "[redacted]" in str(caught.value)


async def test_an_outage_is_logged_once_with_the_next_try_and_its_end_with_its_length(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32.5: one warning, then silence (43 s of it), and no line when the gateway came
    back. Now: a warning when an outage begins (however many requests fail in it), with the
    next try's time; a line when it ends, with how long it lasted."""
    caplog.set_level(logging.INFO, logger="tether.bridge.gateway")
    down = True

    def answer(n: int, request: httpx.Request) -> httpx.Response:
        return refuse_connection(request) if down else ok_tasks()

    fake = FakeGateway(answer)
    async with client_for(fake, token_path, rng=ConstantRandom(0.0)) as client:
        async with trio.open_nursery() as nursery:
            for _ in range(3):  # three requests fail in the one outage: tries at 0, 1, 3, 7, 15
                nursery.start_soon(partial(client.poll_tasks, wait=0))
            await trio.sleep(10)
            down = False
        lines = [(r.levelno, r.getMessage()) for r in caplog.records]
        assert len(lines) == 2, lines
        assert lines[0][0] == logging.WARNING
        assert re.fullmatch(
            r"gateway http://gateway\.test unreachable \(the task poll: ConnectError: connection "
            r"refused\); next try at \d\d:\d\d:\d\d \(in 1\.0 s\), then less often \(at most "
            r"60 s apart\); a line says when it answers again",
            lines[0][1],
        ), lines[0][1]
        assert lines[1] == (
            logging.WARNING,  # at the outage's level: whoever saw it begin sees it end
            "gateway http://gateway.test answers again after 15 s unreachable",
        )
        caplog.clear()
        down = True  # a second outage is a second warning
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(client.poll_tasks, wait=0))
            await trio.sleep(2.5)
            down = False
        assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
        assert caplog.records[1].getMessage().endswith("answers again after 3.0 s unreachable")
