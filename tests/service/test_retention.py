"""A retention pass is many small writer jobs (issue #56): each pruner removes at most a slice
per call and is called again until less than a slice is left, so whatever else waits for the
writer (a beat, a claim, an ack) runs between two slices instead of behind one long job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.clock import FakeClock
from tether.bridge import SqliteStore, Task
from tether.bridge.service import _retention
from tether.bridge.service._retention import retention_pass


async def test_a_pass_prunes_everything_due_in_slices_no_larger_than_a_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_retention, "TASKS_PER_SLICE", 4)
    monkeypatch.setattr(_retention, "TOMBSTONES_PER_SLICE", 5)
    monkeypatch.setattr(_retention, "TURNS_PER_SLICE", 6)
    clock = FakeClock(1000.0)
    async with await SqliteStore.open(tmp_path / "c.db", clock=clock) as store:
        tasks = [Task(f"t{i}", f"q{i}", room=f"r{i % 2}") for i in range(10)]
        await store.ingest_many(tasks, room_policy="concurrent")  # all ten claimed at once
        await store.beat("w1", "worker", 10)
        claims = await store.claim_many("w1", 10, leaderless=True)
        for claim in claims:
            await store.complete(claim, "a")
        await store.mark_delivered_many([c.task.id for c in claims])
        clock.now += 100
        removed: dict[str, list[int]] = {}

        def recorded(name: str) -> Any:
            real = getattr(store, name)

            async def prune(*args: Any, **kwargs: Any) -> int:
                n: int = await real(*args, **kwargs)
                bound: int = kwargs["pages"] if name == "reclaim_space" else kwargs["limit"]
                assert n <= bound
                removed.setdefault(name, []).append(n)
                return n

            return prune

        names = (
            "prune_delivered",
            "prune_tombstones",
            "prune_turns",
            "prune_rooms",
            "prune_workers",
            "prune_waiters",
        )
        for name in (*names, "reclaim_space"):
            monkeypatch.setattr(store, name, recorded(name))
        done = await retention_pass(
            store, retention=50.0, tombstone_retention=10_000.0, room_keep=1
        )
        assert removed["prune_delivered"] == [4, 4, 2]
        assert removed["prune_tombstones"] == [0]
        assert removed["prune_turns"] == [6, 6, 6, 0]  # 20 turns in 2 rooms, each keeps 1
        assert (done.tasks, done.tombstones, done.turns) == (10, 0, 18)
        assert removed["prune_rooms"] == [2]  # the rooms' affinities, noted at their claims
        assert done.rooms == 2
        assert removed["prune_workers"] == [1]  # w1's last beat, 100 s ago
        assert removed["prune_waiters"] == [0]  # no limit was waited for
        assert done.slices == 11 + len(removed["reclaim_space"])
        assert await store.state("t0") is None
        assert (await store.conversation_counts()).turns == 2
