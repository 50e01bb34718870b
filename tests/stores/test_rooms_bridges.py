"""Rooms across bridges: two in-process ``BridgeService``s share one PostgreSQL custody store
behind one real reference gateway.

- Order: 50 messages to each of 20 rooms, through 4 workers in 2 bridges under the default
  ``serial`` policy: every room's messages run one at a time in the order they were sent, and
  its replies reach the gateway in that order.
- Affinity is a preference: with 20 rooms' backlogs under way on one bridge, a second bridge
  started late takes its fair share of the runs (within 2x), though every room had a keeper
  on the first.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from support.agents.rooms import RoomRecorder
from support.gateway import RunningGateway
from support.service import answered_count
from support.waiting import wait_until
from tether import ChildSpec, open_supervisor
from tether.bridge import BridgeConfig, BridgeService, CustodyState, PostgresStore, write_token


@pytest.fixture
async def gateway(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    token_file = tmp_path / "gateway" / "token"
    token_file.parent.mkdir(mode=0o700)
    write_token(token_file, "rooms-token")
    async with httpx.AsyncClient(timeout=30) as http:
        db = tmp_path / "gateway" / "gateway.db"
        gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=2.0)
        await gateway.start()
        yield gateway
        await gateway.stop()


def _config(gateway: RunningGateway, name: str, **overrides: Any) -> BridgeConfig:
    fields: dict[str, Any] = {
        "gateway": gateway.url,
        "token_file": gateway.token_file,
        "client_name": name,
        "workers": 2,
        "concurrency": 4,
        "poll_wait": 0.5,
        "grace": 1.0,
        "log_level": "WARNING",
    }
    fields.update(overrides)
    return BridgeConfig(**fields)


@asynccontextmanager
async def _bridges(
    dsn: str, schema: str, configs: Sequence[BridgeConfig], recorder: RoomRecorder
) -> AsyncIterator[tuple[Any, list[BridgeService]]]:
    """Yields ``(start, services)``: ``await start(i)`` starts bridge ``i`` (its own store
    connection pool on the shared schema); leaving stops them all softly."""
    services: list[BridgeService] = []
    async with open_supervisor(name="rooms-test") as supervisor:

        async def start(i: int) -> BridgeService:
            store = await PostgresStore.open(dsn, schema=schema, lease_s=10.0)
            config = configs[i]
            service = BridgeService(
                config, store=store, factory=recorder.factory(config.client_name), freeze_gc=False
            )
            services.append(service)
            await supervisor.start_child(
                ChildSpec(config.client_name, service.run, shutdown_grace=service.stop_grace)
            )
            return service

        yield start, services
    for service in services:
        assert service.store is not None
        await service.store.aclose()


async def _send(gateway: RunningGateway, rooms: int, per_room: int) -> dict[str, list[str]]:
    """Send ``per_room`` messages to each room, each room's in order (rooms in parallel)."""
    sent: dict[str, list[str]] = {f"room-{r:02d}": [] for r in range(rooms)}

    async def room(name: str) -> None:
        for i in range(per_room):
            body = f"{name} message {i:03d}"
            sent[name].append(await gateway.submit(body, room=name, id=f"{name}-{i:03d}"))

    async with trio.open_nursery() as nursery:
        for name in sent:
            nursery.start_soon(room, name)
    return sent


@pytest.mark.slow
async def test_two_bridges_and_four_workers_keep_every_rooms_order(
    postgres_dsn: str, gateway: RunningGateway
) -> None:
    rooms, per_room = 20, 50
    schema = f"rooms_{secrets.token_hex(4)}"
    recorder = RoomRecorder()
    configs = [_config(gateway, "bridge-a"), _config(gateway, "bridge-b")]
    async with _bridges(postgres_dsn, schema, configs, recorder) as (start, _):
        await start(0)
        await start(1)
        sent = await _send(gateway, rooms, per_room)

        async def all_answered() -> bool:
            return await answered_count(gateway) == rooms * per_room

        await wait_until(all_answered, within=240, step=0.2)
    assert recorder.overlaps == 0  # never two runs of one room at once
    for name, ids in sent.items():
        bodies = [f"{name} message {i:03d}" for i in range(per_room)]
        assert recorder.started[name] == bodies  # each ran once, in send order
        views = [await gateway.message(id) for id in ids]
        assert [v["reply"] for v in views] == [f"reply to {b}" for b in bodies]
        arrived = [v["answered_at"] for v in views]
        assert arrived == sorted(arrived), f"{name}: replies arrived out of order"
        assert len(set(arrived)) == per_room
    assert set(recorder.runs_by) == {"bridge-a", "bridge-b"}
    watch = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)
    try:
        counts = await watch.counts()
        assert counts[CustodyState.DELIVERED] == sum(counts.values()) == rooms * per_room
    finally:
        await watch.aclose()


@pytest.mark.slow
async def test_a_bridge_started_late_takes_a_fair_share_of_the_rooms(
    postgres_dsn: str, gateway: RunningGateway
) -> None:
    """Every room has a keeper on bridge A when bridge B starts; affinity is a preference,
    so B's workers still get rooms (a room moves while nothing of it is in flight)."""
    rooms, per_room = 20, 30
    schema = f"rooms_{secrets.token_hex(4)}"
    recorder = RoomRecorder(run_s=0.02, jitter_s=0.01)
    configs = [_config(gateway, "bridge-a"), _config(gateway, "bridge-b")]
    async with _bridges(postgres_dsn, schema, configs, recorder) as (start, _):
        await start(0)
        await _send(gateway, rooms, per_room)

        async def a_started_every_room() -> bool:
            return len(recorder.started) == rooms and await answered_count(gateway) >= 2 * rooms

        await wait_until(a_started_every_room, within=60, step=0.05)
        before = recorder.runs_by.copy()
        await start(1)

        async def all_answered() -> bool:
            return await answered_count(gateway) == rooms * per_room

        await wait_until(all_answered, within=240, step=0.2)
    after = recorder.runs_by - before
    a, b = after["bridge-a"], after["bridge-b"]
    print(f"\nruns once bridge B was up: bridge A {a}, bridge B {b} (A alone before: {before})")
    assert a + b == rooms * per_room - sum(before.values())
    assert b > 0
    assert max(a, b) <= 2 * min(a, b), f"unfair split: A {a}, B {b}"
    assert recorder.overlaps == 0
    for name, bodies in recorder.started.items():
        assert bodies == [f"{name} message {i:03d}" for i in range(per_room)]
