"""Protocol v1's optional progress endpoint, the message views that show it, and a client that
degrades quietly on a gateway without it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from client.test_client import FakeGateway, client_for
from support.gateway import RunningGateway
from support.gateway_fixtures import StartGateway
from tether._protocol._progress import (
    MAX_PARTIAL_CHARS,
    MAX_STATUS_CHARS,
    ProgressRequest,
    fit_progress,
)
from tether.bridge import GatewayClient
from tether.bridge.client import GatewayRequestError, GatewayUnavailable
from tether.gateway._progress import ProgressBoard


async def acked_task(
    gateway: RunningGateway, client: GatewayClient, http: httpx.AsyncClient
) -> str:
    task_id = await gateway.submit("tell me a story")
    [task] = await client.poll_tasks(wait=0)
    assert task.id == task_id
    await client.ack(task_id)
    return task_id


def update(task_id: str, seq: int, **fields: Any) -> ProgressRequest:
    values: dict[str, Any] = {"attempt": 1, "running_s": 2.0, "worker": "w1"}
    values.update(fields)
    return ProgressRequest(id=task_id, seq=seq, **values)


async def test_progress_shows_in_the_message_view_until_the_reply_replaces_it(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        task_id = await acked_task(gateway, client, http)
        quiet = await gateway.message(task_id)
        assert (quiet["status"], quiet["progress"], quiet["partial"]) == ("acked", None, None)
        assert quiet["working_since"] is None

        before = trio.current_time()
        assert await client.progress(update(task_id, 3, status="searching...", running_s=5.0))
        shown = await gateway.message(task_id)
        assert (shown["progress"], shown["partial"], shown["attempt"]) == ("searching...", None, 1)
        # the run began running_s ago by the gateway's clock (time.time here)
        assert shown["working_since"] == pytest.approx(time.time() - 5.0, abs=3.0)
        assert shown["rev"] != quiet["rev"]

        assert await client.progress(update(task_id, 5, status="writing", partial="Once upon"))
        # a late, older update changes nothing
        assert await client.progress(update(task_id, 4, status="stale", partial="O"))
        shown2 = await gateway.message(task_id)
        assert (shown2["progress"], shown2["partial"]) == ("writing", "Once upon")
        assert shown2["working_since"] == shown["working_since"]  # the same run
        assert trio.current_time() - before < 30

        # a new attempt starts over (its seq may be lower)
        assert await client.progress(update(task_id, 1, attempt=2, partial="Once", running_s=0))
        retried = await gateway.message(task_id)
        assert (retried["attempt"], retried["partial"], retried["progress"]) == (2, "Once", None)

        await client.post_result(task_id, "Once upon a time.", worker="w1")
        answered = await gateway.message(task_id)
        assert (answered["reply"], answered["progress"], answered["partial"]) == (
            "Once upon a time.",
            None,
            None,
        )
        # progress for a finished message is taken and dropped
        assert await client.progress(update(task_id, 9, partial="late"))
        assert (await gateway.message(task_id))["partial"] is None


async def test_a_message_poll_with_seen_answers_as_soon_as_the_view_changes(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        task_id = await acked_task(gateway, client, http)
        rev = (await gateway.message(task_id))["rev"]
        seen: list[Any] = []

        async def follow() -> None:
            response = await http.get(
                f"{gateway.url}/v1/messages/{task_id}",
                params={"wait": 30, "seen": rev},
                headers=gateway.headers(),
            )
            seen.append((trio.current_time(), response.json()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await trio.sleep(0.3)
            assert seen == []  # nothing changed: it waits
            sent = trio.current_time()
            assert await client.progress(update(task_id, 1, partial="Once"))
        at, view = seen[0]
        assert view["partial"] == "Once"
        assert at - sent < 10  # woken by the update, not by the 30 s wait

        # a stall notice is a change too, and shows in the view
        rev = view["rev"]
        async with trio.open_nursery() as nursery:
            seen.clear()
            nursery.start_soon(follow)
            await trio.sleep(0.3)
            assert await client.notice(task_id, 42.5)
        stalled = seen[0][1]
        assert stalled["stalled_s"] == 42.5
        assert stalled["stalled_at"] is not None
        assert stalled["rev"] != rev


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"id": "other", "attempt": 1, "seq": 1, "running_s": 1}, "does not match"),
        ({"id": "ID", "attempt": 1, "seq": -1, "running_s": 1}, "must be >= 0"),
        ({"id": "ID", "attempt": 1, "seq": 1, "running_s": -1}, "running_s"),
        ({"id": "ID", "attempt": 1, "seq": 1, "running_s": 1, "status": "x" * 1001}, "limit"),
        ({"id": "ID", "attempt": 1, "seq": 1, "running_s": 1, "partial": "a\x00"}, "NUL"),
        ({"id": "ID", "attempt": 1, "seq": 1, "running_s": 1, "extra": 1}, "extra"),
        ({"id": "ID", "attempt": "1", "seq": 1, "running_s": 1}, "attempt"),
    ],
)
async def test_a_bad_progress_request_is_refused_naming_what_is_wrong(
    start_gateway: StartGateway,
    client_token_file: Path,
    http: httpx.AsyncClient,
    body: dict[str, Any],
    problem: str,
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        task_id = await acked_task(gateway, client, http)
    body = {k: (task_id if v == "ID" else v) for k, v in body.items()}
    response = await http.post(
        f"{gateway.url}/v1/tasks/{task_id}/progress", json=body, headers=gateway.headers()
    )
    assert response.status_code == 400
    assert problem in response.json()["error"]
    assert (await gateway.message(task_id))["partial"] is None


async def test_progress_for_an_unknown_task_is_a_409_and_needs_the_worker_token(
    start_gateway: StartGateway, tmp_path: Path, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        with pytest.raises(GatewayRequestError) as refused:
            await client.progress(update("nope", 1, status="x"))
        assert refused.value.status == 409
        assert client.progress_supported  # a refusal is not a missing endpoint
    response = await http.post(
        f"{gateway.url}/v1/tasks/nope/progress",
        json={"id": "nope", "attempt": 1, "seq": 1, "running_s": 1},
    )
    assert response.status_code == 401


async def test_a_gateway_without_the_endpoint_is_asked_once_and_logged_once(
    mock_clock: MockClock, token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway(lambda n, r: httpx.Response(404, json={"error": "no such endpoint"}))
    caplog.set_level(logging.INFO, logger="tether.bridge.gateway")
    async with client_for(fake, token_path) as client:
        assert not await client.progress(update("t1", 1, status="x"))
        assert not await client.progress(update("t1", 2, status="y"))
        assert not client.progress_supported
    assert len(fake.calls) == 1
    assert len([r for r in caplog.records if "no progress endpoint" in r.message]) == 1


async def test_progress_is_not_retried_when_the_gateway_is_down(
    mock_clock: MockClock, token_path: Path
) -> None:
    fake = FakeGateway(lambda n, r: httpx.Response(503))
    async with client_for(fake, token_path) as client:
        with pytest.raises(GatewayUnavailable):
            await client.progress(update("t1", 1, status="x"))
    assert len(fake.calls) == 1


def test_the_sender_cuts_texts_to_the_limits_keeping_the_status_start_and_partial_end() -> None:
    long = update(
        "t1",
        1,
        status="s" * (MAX_STATUS_CHARS + 50),
        partial="a" * MAX_PARTIAL_CHARS + "THE END",
    )
    fitted = fit_progress(long)
    assert fitted.status is not None
    assert fitted.partial is not None
    assert len(fitted.status) == MAX_STATUS_CHARS
    assert fitted.status.endswith("…")
    assert len(fitted.partial) == MAX_PARTIAL_CHARS
    assert fitted.partial.startswith("…")
    assert fitted.partial.endswith("THE END")
    odd = fit_progress(update("t1", 1, status="a\ud800b", partial="x\x00y"))
    assert (odd.status, odd.partial) == ("a\\ud800b", "xy")
    assert fit_progress(update("t1", 1)) == update("t1", 1)


def test_the_board_keeps_the_newest_update_and_stays_bounded() -> None:
    board = ProgressBoard(max_entries=3, max_chars=100)
    assert board.update(update("a", 2, partial="x" * 10), now=100.0)
    assert not board.update(update("a", 1, partial="older"), now=101.0)
    live = board.get("a")
    assert live is not None
    assert (live.seq, live.working_since) == (2, 98.0)
    for name in "bcd":
        board.update(update(name, 1, status="s"), now=102.0)
    assert board.get("a") is None
    assert len(board) == 3
    board.update(update("e", 1, partial="y" * 100), now=103.0)
    assert len(board) == 1
    assert board.get("e") is not None
    board.forget("e")
    assert len(board) == 0


def test_the_protocol_docs_list_the_progress_endpoint_and_its_version_rules() -> None:
    from tether.gateway import _app

    docs = (Path(__file__).parents[2] / "docs" / "guide" / "gateway.md").read_text()
    assert "`POST /v1/tasks/<id>/progress`" in docs
    assert "### Progress (optional)" in docs
    assert "seen=REV" in docs
    assert _app.__doc__ is not None
    assert "POST    /v1/tasks/<id>/progress" in _app.__doc__
