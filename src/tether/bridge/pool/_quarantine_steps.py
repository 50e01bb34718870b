"""A quarantine child's steps: recorded by its parent, asked for over the pipe.

The child holds nothing of the store (``_quarantine_child``), yet a suspect's run must replay
its task's recorded steps and record new ones under the parent's lease fence, or a step that
booked a table before a crash would book another. So the parent sends the recorded steps with
the task, and the child's ``Run`` records a new step by asking its parent (a ``step`` frame)
and waiting for the record it committed (``step_ok``) or the refusal (``step_stale``: the run
lost its lease, and its parent is about to end it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import attrs
import trio

from ..custody._asks import AskRecord
from ..custody._records import StepRecord
from ..custody._rules import Claim, StaleLease


class _Sends(Protocol):
    def send(self, kind: str, **fields: Any) -> None: ...


def steps_fields(records: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """Recorded steps as the ``task`` frame carries them to the child."""
    return [attrs.asdict(record) for record in records]


def steps_from(fields: Sequence[dict[str, Any]] | None) -> list[StepRecord]:
    """The child's side of ``steps_fields``."""
    return [StepRecord(**record) for record in fields or ()]


@attrs.define(eq=False)
class PipeSteps:
    """A quarantine child's steps and asks: reads what the parent sent, records by asking the
    parent. Parks are the parent's (it moves the task to ``waiting``)."""

    _pipe: _Sends
    _recorded: list[StepRecord]
    _asks: list[AskRecord] = attrs.field(factory=list)
    _waiting: dict[str, tuple[trio.Event, list[dict[str, Any]]]] = attrs.field(factory=dict)

    def clock(self) -> float:
        return time.time()

    async def steps(self, id: str) -> Sequence[StepRecord]:
        return list(self._recorded)

    async def asks(self, id: str) -> Sequence[AskRecord]:
        return list(self._asks)

    async def record_step(self, claim: Claim, name: str, value: str) -> StepRecord:
        done, answer = self._waiting[name] = (trio.Event(), [])
        self._pipe.send("step", name=name, value=value)
        try:
            await done.wait()
        finally:
            del self._waiting[name]
        message = answer[0]
        if message["kind"] != "step_ok":
            raise StaleLease(str(message.get("reason") or "the run lost its lease"))
        return StepRecord(
            message["name"], message["value"], message["at"], message["attempt"], message["size"]
        )

    def answered(self, message: dict[str, Any]) -> None:
        """A frame from the parent: the answer to a step this child asked to record."""
        if message.get("kind") in ("step_ok", "step_stale"):
            waiting = self._waiting.get(str(message.get("name")))
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
