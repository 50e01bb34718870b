"""SQLite's retention of turns costs work linear in the rows it removes, whatever a room keeps
(issue #56: the statement before re-walked the ``keep`` newest turns for every row removed, 23
µs a row at keep 100 and 601 at keep 2,000, and a pass of 37,000 turns held the writer 10 s).
Counted in SQLite's virtual machine steps, which no busy machine changes."""

from __future__ import annotations

from pathlib import Path

from support.vm_steps import vm_steps
from tether.bridge import SqliteStore, Task

REMOVED = 300


async def _steps_to_prune(tmp_path: Path, keep: int) -> int:
    """VM steps (in hundreds) of one call removing ``REMOVED`` turns of a room of ``keep +
    REMOVED``."""
    async with await SqliteStore.open(tmp_path / f"keep{keep}.db") as store:
        total = keep + REMOVED
        for start in range(0, total, 500):
            await store.ingest_many(
                [
                    Task(f"m{i}", f"message {i}", room="r")
                    for i in range(start, min(total, start + 500))
                ]
            )
        async with vm_steps(store.db.writer, every=100) as steps:
            assert await store.prune_turns(keep=keep, limit=REMOVED) == REMOVED
        view = await store.room("r", limit=1)
        assert view is not None
        assert view.turn_count == keep
        assert [t.text for t in view.turns] == [f"message {total - 1}"]
        return steps[0]


async def test_pruning_turns_costs_the_same_whatever_the_room_keeps(tmp_path: Path) -> None:
    small = await _steps_to_prune(tmp_path, 100)
    large = await _steps_to_prune(tmp_path, 2000)
    assert large < 1.5 * small, (small, large)
