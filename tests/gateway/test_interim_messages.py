"""Protocol v1's optional messages route (issue #36): a question to the person before the
reply, shown in the message view and its room, idempotent by (id, seq); and the bridge's
question poster against it, and against a gateway without it (404: the ask ends unsupported,
said in one log line)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from client.test_client import FakeGateway, client_for
from support.gateway_fixtures import StartGateway
from tether.bridge import GatewayClient, SqliteStore, Task
from tether.bridge.client import GatewayRequestError
from tether.bridge.service._questions import QuestionPoster


async def test_a_question_shows_in_the_view_and_a_repost_of_its_seq_is_absorbed(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        task_id = await gateway.submit("a table for 4", room="r")
        [task] = await client.poll_tasks(wait=0)
        await client.ack(task.id)
        before = await gateway.message(task_id)
        assert before["messages"] == []
        url = f"{gateway.url}/v1/tasks/{task_id}/messages"
        headers = gateway.headers()
        first = await http.post(url, json={"seq": 1, "body": "8 pm, book it?"}, headers=headers)
        assert first.json() == {"id": task_id, "seq": 1, "duplicate": False}
        again = await http.post(url, json={"seq": 1, "body": "8 pm, book it?"}, headers=headers)
        assert again.json() == {"id": task_id, "seq": 1, "duplicate": True}
        assert await client.post_message(task_id, 2, "a cake too?")
        shown = await gateway.message(task_id)
        assert [(m["seq"], m["body"]) for m in shown["messages"]] == [
            (1, "8 pm, book it?"),
            (2, "a cake too?"),
        ]
        assert shown["rev"] != before["rev"]  # a live view sees it
        room = await http.get(f"{gateway.url}/v1/messages", params={"room": "r"}, headers=headers)
        [in_room] = room.json()["messages"]
        assert len(in_room["messages"]) == 2
        bad = await http.post(url, json={"seq": 0, "body": "x"}, headers=headers)
        assert bad.status_code == 400
        assert "seq" in bad.json()["error"]
        unknown = f"{gateway.url}/v1/tasks/nope/messages"
        missing = await http.post(unknown, json={"seq": 1, "body": "x"}, headers=headers)
        assert missing.status_code == 409  # not 404: that means "no such route"
        with pytest.raises(GatewayRequestError):
            await client.post_message("nope", 1, "x")


async def _asked(store: SqliteStore) -> None:
    await store.ingest(Task("t1", "book it", room="r"), room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.ask(claim, "~ask:1", "confirm?", store.clock() + 60, "asked")


async def test_the_poster_posts_once_and_marks_the_question_posted(
    start_gateway: StartGateway, client_token_file: Path, tmp_path: Path
) -> None:
    gateway = await start_gateway()
    await gateway.submit("book it", room="r", id="t1")
    store = await SqliteStore.open(tmp_path / "custody.db")
    try:
        await _asked(store)
        async with GatewayClient(gateway.url, client_token_file) as client:
            poster = QuestionPoster(store, client)
            assert await poster.run_once() == 1
            assert await poster.run_once() == 0
        assert poster.posted == 1
        shown = await gateway.message("t1")
        assert [m["body"] for m in shown["messages"]] == ["confirm?"]
        [ask] = await store.asks("t1")
        assert ask.posted
    finally:
        await store.aclose()


async def test_a_gateway_without_the_route_ends_the_ask_unsupported_with_one_log_line(
    token_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeGateway(lambda n, r: httpx.Response(404, json={"error": "no such endpoint"}))
    store = await SqliteStore.open(tmp_path / "custody.db")
    try:
        await _asked(store)
        await store.ingest(Task("t2", "and another", room="r2"), room_policy="serial")
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.ask(claim, "~ask:1", "sure?", store.clock() + 60, "asked")
        woken: list[int] = []
        caplog.set_level(logging.INFO, logger="tether.bridge.questions")
        async with client_for(fake, token_path) as client:
            poster = QuestionPoster(store, client, on_woken=lambda: woken.append(1))
            assert await poster.run_once() == 2
            assert await poster.run_once() == 0
        assert (poster.unsupported, woken) == (2, [1, 1])
        assert [a.status for a in await store.asks("t1")] == ["unsupported"]
        assert await store.state("t1") is not None
        lines = [r for r in caplog.records if r.name == "tether.bridge.questions"]
        assert len(lines) == 1
        assert "no messages route" in lines[0].getMessage()
    finally:
        await store.aclose()
