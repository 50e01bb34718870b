"""An agent that records how each room's messages ran, for the room-policy tests."""

from __future__ import annotations

import collections
import random
from typing import Any

import attrs
import trio

from tether.bridge import Task


@attrs.define(eq=False)
class RoomRecorder:
    """Runs each task for ``run_s`` seconds (plus up to ``jitter_s``) and records, per room,
    the bodies in the order their runs started, how often two runs of one room overlapped,
    and how many runs each agent (``factory(label)``) made."""

    run_s: float = 0.0
    jitter_s: float = 0.003
    started: dict[str, list[str]] = attrs.field(factory=lambda: collections.defaultdict(list))
    running: collections.Counter[str] = attrs.field(factory=collections.Counter)
    overlaps: int = 0
    runs_by: collections.Counter[str] = attrs.field(factory=collections.Counter)
    _rng: random.Random = attrs.field(factory=lambda: random.Random(17))

    def factory(self, label: str) -> Any:
        def install(session: Any) -> None:
            async def handle(task: Task) -> str:
                room = task.room or ""
                self.running[room] += 1
                if self.running[room] > 1:
                    self.overlaps += 1
                self.started[room].append(task.body)
                self.runs_by[label] += 1
                try:
                    await trio.sleep(self.run_s + self._rng.random() * self.jitter_s)
                finally:
                    self.running[room] -= 1
                return f"reply to {task.body}"

            session.add_handler("task", handle)

        return install
