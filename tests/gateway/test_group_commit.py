"""The gateway's store commits the operations queued together once (group commit), and an
operation that fails in such a batch is undone alone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from tether._plumbing._sqlite_writer import jobs_in_flight
from tether.gateway._store import Conflict, GatewayStore


async def _hold_the_writer(store: GatewayStore, nursery: trio.Nursery) -> threading.Event:
    """Park the store's writer thread on an event; returns it (set it to go on). Returns once
    the thread runs the parking job, not merely once it is queued: a job queued before the
    thread took it would join the same batch as the ones the test queues next."""
    gate, entered = threading.Event(), threading.Event()

    def park(_db: object) -> None:
        entered.set()
        gate.wait()

    nursery.start_soon(store._writer.run, park)
    with trio.fail_after(30):
        while not entered.is_set():  # noqa: ASYNC110 (an event of another thread)
            await trio.sleep(0.001)
    return gate


async def _queued(n: int) -> None:
    """Until ``n`` jobs wait on the writer (their callers parked: no event to wait on)."""
    with trio.fail_after(30):
        while jobs_in_flight() < n:  # noqa: ASYNC110 (a count kept by another thread)
            await trio.sleep(0.001)


async def test_submissions_queued_during_a_commit_share_the_next_one(tmp_path: Path) -> None:
    store = await GatewayStore.open(tmp_path / "gateway.db")
    try:
        async with trio.open_nursery() as nursery:
            gate = await _hold_the_writer(store, nursery)
            commits = store._writer.commits
            for i in range(32):
                nursery.start_soon(store.submit, f"room-{i % 4}", "user", f"hi {i}", 1.0, f"m{i}")
            await _queued(33)
            gate.set()
        assert store._writer.commits == commits + 2  # the held job's, then all 32 in one
        for i in range(32):
            task = await store.get(f"m{i}")
            assert task is not None
            assert (task.state, task.body) == ("queued", f"hi {i}")
    finally:
        store.close()
    reopened = await GatewayStore.open(tmp_path / "gateway.db")  # committed, not just cached
    try:
        assert (await reopened.stats()).tasks.get("queued") == 32
    finally:
        reopened.close()


async def test_a_refused_operation_in_a_batch_is_undone_alone(tmp_path: Path) -> None:
    store = await GatewayStore.open(tmp_path / "gateway.db")
    try:
        await store.submit("lobby", "user", "first body", 1.0, "dup")
        outcomes: dict[str, object] = {}

        async def submit(id: str, body: str) -> None:
            try:
                outcomes[id] = await store.submit("lobby", "user", body, 2.0, id)
            except Conflict as exc:
                outcomes[id] = exc

        async with trio.open_nursery() as nursery:
            gate = await _hold_the_writer(store, nursery)
            nursery.start_soon(submit, "before", "a")
            await _queued(2)
            nursery.start_soon(submit, "dup", "another body")  # the same id, another body
            await _queued(3)
            nursery.start_soon(submit, "after", "b")
            await _queued(4)
            gate.set()
        assert isinstance(outcomes["dup"], Conflict)
        for id, body in (("before", "a"), ("after", "b"), ("dup", "first body")):
            task = await store.get(id)
            assert task is not None
            assert task.body == body
    finally:
        store.close()


async def test_a_closed_store_refuses_new_operations(tmp_path: Path) -> None:
    store = await GatewayStore.open(tmp_path / "gateway.db")
    store.close()
    store.close()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await store.get("anything")
