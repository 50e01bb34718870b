"""The client keeps one connection to the gateway across its requests (issue #49: a request
is most of a reply batch's CPU, and a new TCP connection per request would add to it), and
its hot paths reach a gateway under a path prefix, as every other path does."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import attrs
import httpx
import trio

from support.gateway_fixtures import StartGateway
from tether._protocol._messages import ResultMetadata, ResultRequest
from tether.bridge import GatewayClient


@attrs.define
class CountingRelay:
    """A TCP relay on 127.0.0.1 in front of a server: counts the connections it accepts."""

    target_port: int
    accepted: int = 0

    async def handle(self, downstream: trio.SocketStream) -> None:
        self.accepted += 1
        upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)

        async def pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
            try:
                async for chunk in source:
                    await sink.send_all(chunk)
                await sink.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

        async with downstream, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pipe, downstream, upstream)
            nursery.start_soon(pipe, upstream, downstream)


async def test_poll_ack_and_many_reply_batches_share_one_connection(
    start_gateway: StartGateway, client_token_file: Path, nursery: trio.Nursery
) -> None:
    gateway = await start_gateway()
    ids = [await gateway.submit(f"message {i}", room=f"room-{i % 3}") for i in range(12)]
    relay = CountingRelay(gateway.settings.port)
    listeners = await nursery.start(partial(trio.serve_tcp, relay.handle, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]

    async with GatewayClient(f"http://127.0.0.1:{port}", client_token_file) as client:
        polled = await client.poll_tasks(wait=0)
        assert sorted(t.id for t in polled) == sorted(ids)
        assert await client.ack_many(ids) == []
        for start in range(0, len(ids), 4):  # three reply batches, one request each
            batch = [
                ResultRequest(id=i, body=f"reply to {i}", metadata=ResultMetadata(worker="w-1"))
                for i in ids[start : start + 4]
            ]
            answers = await client.post_results(batch)
            assert [getattr(a, "id", a) for a in answers] == ids[start : start + 4]
        await client.heartbeat(inflight=0)

    assert relay.accepted == 1, f"{relay.accepted} connections for 6 requests in a row"
    assert (await gateway.stats())["tasks"]["answered"] == len(ids)


async def test_hot_paths_reach_a_gateway_under_a_path_prefix(token_path: Path) -> None:
    """Polls, acks and reply batches use URLs built once per client: the prefix stays."""
    paths: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path.endswith("/v1/tasks"):
            return httpx.Response(200, json={"tasks": []})
        return httpx.Response(200, json={"items": [{"id": "t1", "status": 200}]})

    transport = httpx.MockTransport(answer)
    async with GatewayClient("http://gateway.test/chat/", token_path, transport=transport) as c:
        for _ in range(2):
            await c.poll_tasks(wait=0)
            await c.ack_many(["t1"])
            await c.post_results([ResultRequest(id="t1", body="hi")])
    assert paths == ["/chat/v1/tasks", "/chat/v1/acks", "/chat/v1/results/batch"] * 2
