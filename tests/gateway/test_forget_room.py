"""Protocol v1's optional forget route (issue #53): ``POST /v1/rooms/<room>/forget`` erases
the reference gateway's copy of a room (its messages, replies, questions, rejections, notices
and progress) and leaves no copy of their text in its files; other rooms are untouched; a
room it holds nothing of is a 200 with 0. The bridge's client reads a gateway without the
route (a 404) as "cannot forget"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from support.gateway import free_port
from support.gateway_fixtures import StartGateway
from tether._http._asgi import hypercorn_config, start_hypercorn
from tether._protocol._progress import ProgressRequest
from tether.bridge import GatewayClient

SECRET = "the-code-is-ZQX4321"
KEPT = "the-other-room-KPT7788"


def _files_hold(db: Path, text: str) -> bool:
    return any(text.encode() in f.read_bytes() for f in db.parent.glob(db.name + "*"))


async def test_forget_erases_the_rooms_messages_and_leaves_no_copy_in_the_files(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    ids = [await gateway.submit(f"{SECRET} {i}", room="r") for i in range(3)]
    other = await gateway.submit(KEPT, room="s")
    async with GatewayClient(gateway.url, client_token_file) as client:
        polled = await client.poll_tasks(wait=0)
        assert sorted(t.id for t in polled) == sorted([*ids, other])
        await client.ack_many([t.id for t in polled])
        await client.post_result(ids[0], f"reply {SECRET}", worker="w1")
        await client.post_result(other, f"reply {KEPT}", worker="w1")
        assert await client.post_message(ids[1], 1, f"question {SECRET}?")
        assert await client.progress(
            ProgressRequest(ids[1], 1, 1, 0.5, status="typing", partial=f"partial {SECRET}")
        )
        assert await client.reject(ids[2], f"cannot take {SECRET}")
        assert await client.notice(ids[1], 12.0)
        await client.post_result("sched-1", f"{SECRET} on a schedule", room="a b/c", worker="w1")
        assert _files_hold(gateway.db, SECRET)

        assert await client.forget_room("r") == 3
        assert await client.forget_room("a b/c") == 1  # a room of any text, "/" too
        assert await client.forget_room("r") == 0  # again: nothing left, nothing changed
        assert await client.forget_room("never-seen") == 0

    for id in ids:
        gone = await http.get(f"{gateway.url}/v1/messages/{id}", headers=gateway.headers())
        assert gone.status_code == 404
    history = await http.get(
        f"{gateway.url}/v1/messages", params={"room": "r"}, headers=gateway.headers()
    )
    assert history.json()["messages"] == []
    kept = await gateway.message(other)
    assert (kept["text"], kept["reply"]) == (KEPT, f"reply {KEPT}")
    assert not _files_hold(gateway.db, SECRET)
    assert _files_hold(gateway.db, KEPT)


async def test_the_route_is_the_bridges_and_checks_the_room_it_names(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    await gateway.submit(SECRET, room="r")
    url = f"{gateway.url}/v1/rooms/r/forget"
    anonymous = await http.post(url, json={"room": "r"})
    assert anonymous.status_code == 401
    other = await http.post(url, json={"room": "s"}, headers=gateway.headers())
    assert other.status_code == 400
    assert "does not match the room in the path" in other.json()["error"]
    assert (await http.get(url, headers=gateway.headers())).status_code == 405
    assert _files_hold(gateway.db, SECRET)  # nothing refused was erased
    done = await http.post(url, json={"room": "r"}, headers=gateway.headers())
    assert done.json() == {"room": "r", "forgotten": 1}
    too_long = "x" * 300
    refused = await http.post(
        f"{gateway.url}/v1/rooms/{too_long}/forget",
        json={"room": too_long},
        headers=gateway.headers(),
    )
    assert refused.status_code == 400
    assert "room name of 1 to 256 characters" in refused.json()["error"]
    async with GatewayClient(gateway.url, client_token_file) as client:
        with pytest.raises(ValueError, match="room name"):  # refused before it is sent
            await client.forget_room(too_long)


async def _no_routes(scope: Any, receive: Any, send: Any) -> None:
    """A gateway older than the route: every request is a 404."""
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"].removeprefix("lifespan.")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b'{"error": "no such endpoint"}'})


async def test_a_gateway_without_the_route_cannot_forget(client_token_file: Path) -> None:
    config = hypercorn_config("127.0.0.1", free_port(), graceful_timeout=0.5, errorlog="t.http")
    async with trio.open_nursery() as nursery:
        port, _, stop = await start_hypercorn(nursery, _no_routes, config, what="an old gateway")
        async with GatewayClient(f"http://127.0.0.1:{port}", client_token_file) as client:
            assert await client.forget_room("r") is None
        stop.set()
