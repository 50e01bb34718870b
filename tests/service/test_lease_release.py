"""A stopping bridge gives its unacked gateway leases back, so nobody waits out the lease.

The window: the gateway answered a poll (the tasks are leased to this bridge) but the stop cut
the request before the bridge read the answer. Here an interposed transport makes that window
certain: it forwards the poll to the real gateway, then never hands the answer on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import attrs
import httpx
import pytest
import trio

from support.gateway import RunningGateway
from support.service import gateway_client
from support.waiting import wait_until
from tether import ChildSpec, open_supervisor
from tether.bridge import CustodyState, SqliteStore
from tether.bridge.client._connection import LEASE_RELEASE_TIMEOUT
from tether.bridge.service._config import BridgeConfig
from tether.bridge.service._ingest import Ingest
from tether.bridge.service._service import BridgeService

LEASE = 30.0
"""The gateway's lease here: long, so a task handed out again within seconds was released."""

ReleaseEndpoint = Literal["present", "missing", "silent"]


@attrs.define(eq=False)
class Interposer(httpx.AsyncBaseTransport):
    """The real network, except what a test cuts: a poll answer carrying tasks (read by
    nobody), acks (never sent), or the release endpoint (missing, or never answering)."""

    release: ReleaseEndpoint = "present"
    swallow_polls: bool = False
    swallow_acks: bool = False
    swallowed: trio.Event = attrs.field(factory=trio.Event)
    ack_held: trio.Event = attrs.field(factory=trio.Event)
    release_calls: int = 0
    _inner: httpx.AsyncHTTPTransport = attrs.field(factory=httpx.AsyncHTTPTransport)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/leases/release":
            self.release_calls += 1
            if self.release == "missing":
                return httpx.Response(404, json={"error": f"no such endpoint: {path}"})
            if self.release == "silent":
                await trio.sleep_forever()
        if self.swallow_acks and (path == "/v1/acks" or path.endswith("/ack")):
            self.ack_held.set()
            await trio.sleep_forever()  # cut by the stop before it left
        response = await self._inner.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
        if self.swallow_polls and path == "/v1/tasks" and json.loads(body)["tasks"]:
            self.swallowed.set()  # the gateway leased them to us; we never read the answer
            await trio.sleep_forever()
        return httpx.Response(response.status_code, headers=response.headers, content=body)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
async def gateway(
    nursery: trio.Nursery, tmp_path: Path, token_file: Path, http: httpx.AsyncClient
) -> AsyncIterator[RunningGateway]:
    """The real reference gateway with a production-sized lease (30 s)."""
    db = tmp_path / "gateway" / "gateway.db"
    gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=LEASE)
    await gateway.start()
    yield gateway
    await gateway.stop()


async def poll_as_another_bridge(
    gateway: RunningGateway, token_file: Path, wait: float
) -> list[tuple[str, int]]:
    async with gateway_client(gateway.url, token_file, client_name="next-bridge") as other:
        return [(t.id, t.delivery) for t in await other.poll_tasks(wait=wait)]


def small_bridge(gateway: RunningGateway, token_file: Path, tmp_path: Path) -> BridgeConfig:
    return BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(tmp_path / "custody.db"),
        workers=1,
        poll_wait=1.0,
        grace=1.0,
    )


@pytest.mark.parametrize("release", ["present", "missing", "silent"])
async def test_a_poll_answered_as_the_bridge_stops_is_handed_out_again_at_once(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, release: ReleaseEndpoint
) -> None:
    interposer = Interposer(release=release, swallow_polls=True)
    config = small_bridge(gateway, token_file, tmp_path)
    service = BridgeService(config, gateway_options={"transport": interposer})
    async with open_supervisor(name="test") as supervisor:
        await supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        task_id = await gateway.submit("hello across a deploy")
        with trio.fail_after(10):
            await interposer.swallowed.wait()
        assert (await gateway.message(task_id))["status"] == "leased"
        stop_requested = trio.current_time()
    # leaving the block stopped the bridge softly
    stopped_in = trio.current_time() - stop_requested
    assert interposer.release_calls == 1
    assert service.ingest is not None
    if release == "present":
        assert service.ingest.stats.released == 1
        assert await poll_as_another_bridge(gateway, token_file, wait=0) == [(task_id, 2)]
        assert trio.current_time() - stop_requested < 3  # not the 30 s lease
        assert (await gateway.stats())["released"] == 1
    else:
        # the bridge still stops promptly and cleanly; the task waits out its lease
        bound = 2.0 if release == "missing" else LEASE_RELEASE_TIMEOUT + 2.0
        assert stopped_in < bound
        assert service.ingest.stats.released == 0
        assert await poll_as_another_bridge(gateway, token_file, wait=1.0) == []
        assert (await gateway.message(task_id))["status"] == "leased"


async def test_an_aborted_bridge_gives_its_unacked_leases_back_too(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    interposer = Interposer(swallow_polls=True)
    config = small_bridge(gateway, token_file, tmp_path)
    service = BridgeService(config, gateway_options={"transport": interposer})
    async with open_supervisor(name="test") as supervisor:
        await supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        task_id = await gateway.submit("hello across a crash-stop")
        with trio.fail_after(10):
            await interposer.swallowed.wait()
        aborted = trio.current_time()
        supervisor.abort("the second signal")  # no soft stop: every child cancelled now
    assert await poll_as_another_bridge(gateway, token_file, wait=0) == [(task_id, 2)]
    assert trio.current_time() - aborted < 3


async def test_acked_tasks_are_kept_and_a_committed_unacked_one_comes_back_as_a_replay(
    gateway: RunningGateway, token_file: Path, store: SqliteStore
) -> None:
    interposer = Interposer()
    async with gateway_client(gateway.url, token_file, transport=interposer) as client:
        ingest = Ingest(store, client, poll_wait=0.5)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ingest.run)
            acked = await gateway.submit("acked before the stop")

            async def acked_at_gateway() -> bool:
                return str((await gateway.message(acked))["status"]) == "acked"

            await wait_until(acked_at_gateway)
            interposer.swallow_acks = True
            committed = await gateway.submit("committed, its ack cut by the stop")
            with trio.fail_after(10):
                await interposer.ack_held.wait()
            assert await store.state(committed) == CustodyState.PENDING
            nursery.cancel_scope.cancel()
    assert ingest.stats.released == 1
    assert (await gateway.message(acked))["status"] == "acked"  # in custody: never released
    assert (await gateway.message(committed))["status"] == "queued"

    async with gateway_client(gateway.url, token_file) as client:
        replay = await Ingest(store, client).run_once(wait=0)
    assert (replay.ingested, replay.replays) == ((), (committed,))  # absorbed by the store
    assert (await gateway.message(committed))["status"] == "acked"
    assert (await store.counts())[CustodyState.PENDING] == 2
