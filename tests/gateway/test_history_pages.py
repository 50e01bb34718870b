"""A room's history is a bounded page (issue #48): one read held every body whole (38 MB for
200 long messages). Long texts, replies and questions are cut in the page and marked; the
message's own route has them whole; a page stops at its byte budget and ``before`` reads the
older ones, so every message is still reachable."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from support.gateway import RunningGateway
from support.gateway_fixtures import StartGateway
from tether.gateway import _history
from tether.gateway._history import SHOWN_CHARS, SHOWN_QUESTIONS


async def _answer(gateway: RunningGateway, http: httpx.AsyncClient, body: str) -> None:
    """Play the worker side: lease the next message, ack it, post ``body`` as its reply."""
    headers = gateway.headers()
    polled = await http.get(f"{gateway.url}/v1/tasks", params={"wait": 0}, headers=headers)
    for task in polled.json()["tasks"]:
        ack = {"id": task["id"], "durable": True}
        await http.post(f"{gateway.url}/v1/tasks/{task['id']}/ack", json=ack, headers=headers)
        result = {"id": task["id"], "body": body}
        answered = await http.post(f"{gateway.url}/v1/results", json=result, headers=headers)
        assert answered.status_code == 200, answered.text


async def _page(gateway: RunningGateway, http: httpx.AsyncClient, **params: Any) -> httpx.Response:
    query = {"room": "r", **params}
    return await http.get(f"{gateway.url}/v1/messages", params=query, headers=gateway.headers())


async def test_long_messages_are_cut_in_the_history_and_whole_on_their_own_route(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    long_id = await gateway.submit("é" * 5_000, room="r")
    await _answer(gateway, http, "r" * 10_000)
    url = f"{gateway.url}/v1/tasks/{long_id}/messages"
    for seq in range(1, SHOWN_QUESTIONS + 3):
        asked = await http.post(
            url, json={"seq": seq, "body": f"{seq}?"}, headers=gateway.headers()
        )
        assert asked.status_code == 200, asked.text
    short_id = await gateway.submit("hi", room="r")
    await _answer(gateway, http, "hello")
    page = (await _page(gateway, http)).json()
    assert page["more"] is False
    cut, short = page["messages"]
    assert (cut["id"], short["id"]) == (long_id, short_id)
    assert (cut["text"], cut["reply"]) == ("é" * SHOWN_CHARS, "r" * SHOWN_CHARS)
    assert [m["seq"] for m in cut["messages"]] == list(range(3, SHOWN_QUESTIONS + 3))  # newest
    assert cut["truncated"] is True
    assert (short["text"], short["reply"], short["truncated"]) == ("hi", "hello", False)
    whole = await gateway.message(long_id)
    assert (whole["text"], whole["reply"]) == ("é" * 5_000, "r" * 10_000)
    assert len(whole["messages"]) == SHOWN_QUESTIONS + 2
    assert whole["truncated"] is False


async def test_a_page_stops_at_its_budget_and_before_reads_every_older_message(
    start_gateway: StartGateway, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_history, "PAGE_BUDGET_BYTES", 3 * 2 * SHOWN_CHARS)
    gateway = await start_gateway()
    ids = []
    for i in range(8):
        ids.append(await gateway.submit(f"{i}" * 3_000, room="r"))
        await _answer(gateway, http, "x" * 3_000)
    seen: list[str] = []
    before = None
    while True:
        params = {"limit": 200} if before is None else {"limit": 200, "before": before}
        answer = await _page(gateway, http, **params)
        assert len(answer.content) < 3 * 2 * SHOWN_CHARS + 4_000  # the budget, and the JSON
        page = answer.json()
        assert 1 <= len(page["messages"]) <= 3
        seen = [m["id"] for m in page["messages"]] + seen
        if not page["more"]:
            break
        before = page["messages"][0]["id"]
    assert seen == ids  # every message, once, in order
    limited = (await _page(gateway, http, limit=1)).json()
    assert ([m["id"] for m in limited["messages"]], limited["more"]) == ([ids[-1]], True)


async def test_before_must_name_a_message_of_the_room(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    other = await gateway.submit("elsewhere", room="s")
    for before, said in (("nope", "'before' names no message"), (other, "no message of room")):
        refused = await _page(gateway, http, before=before)
        assert refused.status_code == 400
        assert said in refused.json()["error"]
    bad = await _page(gateway, http, before="a/b")
    assert bad.status_code == 400
    assert "before" in bad.json()["error"]
