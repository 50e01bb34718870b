"""What an operator sees of durable runs (issue #35): ``tether store show`` lists a task's
steps and what a waiting task waits for; ``store status``, ``store list --state waiting`` and
the admin reading count the parked runs and the next wake-up; ``store retry --fresh``
forgets the steps that a plain re-drive keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import SqliteStore, Task
from tether.bridge.service._admin import read_custody


async def _parked(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("sleeper", "remind me"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.record_step(claim, "lookup", '{"city":"Oslo"}')
        await store.record_step(claim, "~sleep:1", "1764000000.5")
        await store.park(claim, store.clock() + 3600, "sleeping until later (step ~sleep:1)")
        reading = await read_custody(store)
        assert reading.counts is not None
        assert reading.counts["waiting"] == 1
        assert reading.in_flight == 1
        assert reading.next_wake_in_s is not None
        assert 3590 < reading.next_wake_in_s <= 3600


def test_show_lists_the_steps_and_what_a_waiting_task_waits_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_parked, path)
    assert main(["store", "show", "sleeper", "--store", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "task sleeper: waiting, attempt 1"
    assert "  waits for   sleeping until later (step ~sleep:1)" in out
    assert any(line.startswith("  wakes       in ") for line in out)
    steps = out[out.index("steps: 2 recorded, 27 bytes") + 1 :][:2]
    assert [line.split(" ago  ", 1)[1] for line in steps] == [
        "lookup  attempt 1  15 bytes",
        "~sleep:1  attempt 1  12 bytes",
    ]
    assert main(["store", "show", "sleeper", "--store", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in doc["steps"]] == ["lookup", "~sleep:1"]
    assert main(["store", "status", "--store", str(path)]) == 0
    status = capsys.readouterr().out
    assert "parked runs waiting to wake: 1, the next is due in 60.0m" in status
    assert main(["store", "list", "--state", "waiting", "--store", str(path)]) == 0
    assert "sleeper" in capsys.readouterr().out


async def _dead_with_steps(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        for id in ("keep", "fresh"):
            await store.ingest(Task(id, "x"))
            claim = await store.claim("w1", leaderless=True)
            assert claim is not None
            await store.record_step(claim, "paid", '"receipt"')
            await store.fail(claim, "boom", permanent=True)


async def _steps(path: Path, id: str) -> list[str]:
    async with await SqliteStore.open(path) as store:
        return [s.name for s in await store.steps(id)]


def test_retry_keeps_the_steps_and_retry_fresh_forgets_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_dead_with_steps, path)
    assert main(["store", "retry", "keep", "--store", str(path)]) == 0
    assert main(["store", "retry", "fresh", "--fresh", "--store", str(path)]) == 0
    capsys.readouterr()
    assert trio.run(_steps, path, "keep") == ["paid"]
    assert trio.run(_steps, path, "fresh") == []
