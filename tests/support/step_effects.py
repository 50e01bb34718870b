"""The effect log of ``support.agents.steps`` read back against the store's step records.

Each step's function appends one line (task, step, nonce, pid) and the step records the nonce.
A step never runs again once its record was returned to the run: for each (task, step) the
recorded nonce is the LAST line the log holds for it. An earlier line for it is a repeat in the
window between an effect and its record (the process died there), which the durable-runs guide
allows; ``recorded_steps_hold`` counts them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.bridge.custody import JournalStore

STEPS = ("one", "two", "three")


def effect_lines(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [line.split() for line in log.read_text().splitlines() if line.strip()]


async def recorded_steps_hold(store: JournalStore, ids: Sequence[str], log: Path) -> int:
    """Every task recorded every step and none ran after its record; the number of repeats."""
    nonces: dict[tuple[str, str], list[str]] = {}
    for task_id, step, nonce, _pid in effect_lines(log):
        nonces.setdefault((task_id, step), []).append(nonce)
    repeats = 0
    for id in ids:
        steps = await store.steps(id)
        assert [s.name for s in steps] == list(STEPS)
        for record in steps:
            lines = nonces[(id, record.name)]
            recorded: Any = json.loads(record.value)
            assert lines[-1] == recorded, (id, record.name, lines, recorded)
            repeats += len(lines) - 1
    return repeats
