"""A hostile gateway (issue 33) over real HTTP on 127.0.0.1 against the bridge's real ingest and
a real SQLite store: garbage, an oversized answer, more tasks than asked and invalid ids each end
in one log line per incident, nothing is over-ingested, and an invalid id is rejected once."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from support.gateway import free_port
from support.service import BridgeProcess, gateway_client
from support.waiting import wait_until
from tether._http._asgi import hypercorn_config, start_hypercorn
from tether.bridge import SqliteStore, write_token
from tether.bridge.client._connection import MAX_TASK_WIRE_BYTES
from tether.bridge.service._ingest import Ingest

Answer = Callable[[int], "bytes | Iterable[bytes]"]


@attrs.define(eq=False)
class ScriptedGateway:
    """A protocol v1 gateway that answers the n-th poll with ``polls(n)`` (raw bytes, streamed
    in 1 MiB chunks without a Content-Length) and records acks and rejects."""

    polls: Answer
    polled: int = 0
    acked: list[str] = attrs.field(factory=list)
    rejects: list[dict[str, Any]] = attrs.field(factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                kind = event["type"].removeprefix("lifespan.")
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        path = scope["path"]
        answer: bytes | Iterable[bytes]
        if path == "/v1/tasks":
            self.polled += 1
            answer = self.polls(self.polled)
        elif path == "/v1/acks":
            ids = json.loads(body)["ids"]
            self.acked.extend(ids)
            answer = json.dumps({"items": [{"id": i, "status": 200} for i in ids]}).encode()
        elif path == "/v1/rejects":
            entries = json.loads(body)["rejects"]
            self.rejects.extend(entries)
            items = [{"id": e["id"], "status": 404} for e in entries]
            answer = json.dumps({"items": items}).encode()
        else:
            answer = b'{"error": "no such endpoint"}'
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": answer})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        chunks = (
            (answer[at : at + (1 << 20)] for at in range(0, len(answer), 1 << 20))
            if isinstance(answer, bytes)
            else answer
        )
        try:
            for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except Exception:
            return


def tasks(*ids: str) -> bytes:
    return json.dumps({"tasks": [{"id": i, "body": f"hi {i}", "room": "r"} for i in ids]}).encode()


async def run_against(
    script: ScriptedGateway, store: SqliteStore, tmp_path: Path, rounds: int, **client: Any
) -> Ingest:
    token = tmp_path / "token"
    write_token(token, "hostile-gateway-token-1")
    config = hypercorn_config("127.0.0.1", free_port(), graceful_timeout=0.5, errorlog="t.http")
    async with trio.open_nursery() as nursery:
        port, _, stop = await start_hypercorn(nursery, script, config, what="the fake gateway")
        url = f"http://127.0.0.1:{port}"
        async with gateway_client(url, token, **client) as gateway:
            ingest = Ingest(store, gateway, poll_wait=0, release_on_exit=False)
            with trio.fail_after(20):
                for _ in range(rounds):
                    await ingest.run_once(wait=0)
        stop.set()
    return ingest


def loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_garbage_and_an_oversized_answer_are_one_line_each_and_ingest_nothing(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    oversized = b'{"tasks": [{"id": "big", "room": "r", "body": "' + b"x" * (8 << 20) + b'"}]}'
    answers = [b"<html>garbage", b'{"tasks": 7}', oversized, oversized]

    def polls(n: int) -> bytes:
        return answers[n - 1] if n <= len(answers) else tasks("ok-1")

    script = ScriptedGateway(polls)
    caplog.set_level(logging.INFO)
    await run_against(script, store, tmp_path, rounds=1, poll_bytes_max=MAX_TASK_WIRE_BYTES)
    assert script.acked == ["ok-1"]
    assert await store.get("big") is None
    lines = loud(caplog)
    assert len([line for line in lines if "outside protocol v1" in line]) == 1, lines
    assert len(lines) == 2, lines  # the incident, and its end
    assert not any(r.exc_info for r in caplog.records)


async def test_more_tasks_than_asked_and_invalid_ids(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    many = [f"t{i}" for i in range(50)]
    answers = [tasks(*many), tasks("../evil", "x-1"), tasks("../evil", "x-2")]
    script = ScriptedGateway(lambda n: answers[min(n, len(answers)) - 1])
    caplog.set_level(logging.INFO)
    ingest = await run_against(script, store, tmp_path, rounds=4, poll_limit=5)
    assert script.acked == [*many[:5], "x-1", "x-2", "x-2"]  # never more than asked
    assert ingest.stats.ingested == 7
    assert await store.get("t5") is None
    assert [e["id"] for e in script.rejects] == ["../evil"]  # once, with its reason
    assert "'..'" in script.rejects[0]["reason"]
    lines = loud(caplog)
    assert len([line for line in lines if "with 50" in line]) == 1, lines
    assert len([line for line in lines if "../evil" in line]) == 1, lines


def streamed_oversized(megabytes: int) -> Iterable[bytes]:
    """A valid-looking answer of ``megabytes`` MiB, made as it is sent (never held whole)."""
    yield b'{"tasks": [{"id": "big", "room": "r", "body": "'
    for _ in range(megabytes):
        yield b"x" * (1 << 20)
    yield b'"}]}'


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB: now, and the most it ever held."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


@pytest.mark.slow
async def test_a_real_bridge_stays_within_its_poll_cap_against_a_hostile_gateway(
    tmp_path: Path, token_file: Path
) -> None:
    """A real ``tether bridge run`` process: answers of 200 MiB, 5,000 tasks for a poll of
    100 and an invalid id; its peak memory grows by less than the 32 MiB cap and change,
    it takes at most what it asked for, and it rejects the invalid id once."""
    phase = ["quiet"]
    many = [f"m{i}" for i in range(5000)]

    def polls(n: int) -> bytes | Iterable[bytes]:
        if phase[0] == "quiet":
            return tasks()
        if phase[0] == "oversized":
            return streamed_oversized(200)
        if phase[0] == "many":
            phase[0] = "quiet"
            return tasks(*many)
        return tasks("../evil")

    script = ScriptedGateway(polls)
    config = hypercorn_config("127.0.0.1", free_port(), graceful_timeout=0.5, errorlog="t.http")
    async with trio.open_nursery() as nursery:
        port, _, stop = await start_hypercorn(nursery, script, config, what="the fake gateway")
        bridge = await BridgeProcess.start(
            f"http://127.0.0.1:{port}",
            token_file,
            tmp_path / "store" / "custody.db",
            tmp_path / "bridge.log",
            workers=1,
        )
        with trio.fail_after(60):
            await wait_until(lambda: _at_least(script, 2), step=0.05)
            _, baseline = peak_rss_mb(bridge.process.pid)
            phase[0] = "oversized"
            start = script.polled
            await wait_until(lambda: _at_least(script, start + 3), step=0.05)
            _, peak = peak_rss_mb(bridge.process.pid)
            phase[0] = "many"
            await wait_until(lambda: _acked_any(script), step=0.05)
            phase[0] = "invalid"
            start = script.polled
            await wait_until(lambda: _at_least(script, start + 3), step=0.05)
        assert await bridge.stop() == 0
        stop.set()
    print(f"bridge peak RSS {baseline:.0f} MiB before, {peak:.0f} MiB after 200 MiB answers")
    assert peak - baseline < 32 + 48, (baseline, peak)
    assert len(script.acked) <= 100
    assert script.acked == many[: len(script.acked)]
    assert [e["id"] for e in script.rejects] == ["../evil"]
    log = (tmp_path / "bridge.log").read_text()
    assert log.count("outside protocol v1") == 1, log[-3000:]
    assert log.count("with 5000") == 1, log[-3000:]
    assert log.count("cannot take: id '../evil'") == 1, log[-3000:]
    assert "Traceback" not in log


async def _at_least(script: ScriptedGateway, polls: int) -> bool:
    return script.polled >= polls


async def _acked_any(script: ScriptedGateway) -> bool:
    return bool(script.acked)
