"""A quarantine child's ``JournalStore``: its task's steps and asks as its parent sent them,
new steps and permits asked of its parent over the pipe.

The child holds nothing of the store (``_quarantine_child``), yet a suspect's run must replay
its task's recorded steps and record new ones under the parent's lease fence (or a step that
booked a table before a crash would book another), and keep to the limits every other run
keeps to. So it asks: a ``step`` frame is answered with the record the parent committed
(``step_ok``), a ``conversation`` frame with the room's conversation the parent read
(``conversation_ok``: on demand, as in-process), a ``permit`` frame with the parent's grant
or wait (``permit_ok``); a ``*_stale`` answer means the run lost its lease and its parent is
about to end it. A release and a pause are told, not answered.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import attrs
import trio

from ..custody._asks import AskRecord
from ..custody._children import ChildView, SpawnError
from ..custody._conversation import Conversation
from ..custody._events import Event
from ..custody._limits import Granted, NoPermit
from ..custody._records import StepRecord
from ..custody._rules import Claim, CustodyState, StaleLease, Task
from ._quarantine_steps import step_from
from ._quarantine_wire import conversation_from, task_fields

ANSWERS: Final = {
    "step_ok": "name",
    "step_stale": "name",
    "permit_ok": "n",
    "permit_stale": "n",
    "conversation_ok": "n",
    "spawn_ok": "n",
    "spawn_stale": "n",
    "children_ok": "n",
    "event_ok": "n",
}
"""The parent's answers, and the field naming the request each answers."""


class _Sends(Protocol):
    def send(self, kind: str, **fields: Any) -> None: ...


@attrs.define(eq=False)
class PipeJournal:
    """What a quarantined run records, through its parent."""

    _pipe: _Sends
    _recorded: list[StepRecord]
    _asks: list[AskRecord] = attrs.field(factory=list)
    clock: Callable[[], float] = time.time
    _waiting: dict[tuple[str, str], tuple[trio.Event, list[dict[str, Any]]]] = attrs.field(
        factory=dict
    )
    _asked: int = 0

    async def steps(self, id: str) -> Sequence[StepRecord]:
        return list(self._recorded)

    async def asks(self, id: str) -> Sequence[AskRecord]:
        return list(self._asks)

    async def record_step(
        self,
        claim: Claim,
        name: str,
        value: str,
        *,
        version: str | None = None,
        fingerprint: str | None = None,
        call: str | None = None,
    ) -> StepRecord:
        """Recorded by the parent under its claim, with its own version (the child's run has
        the parent's: it came with the task)."""
        message = await self._request(
            "step", "name", name, value=value, fingerprint=fingerprint, call=call
        )
        return step_from(message)

    async def spawn(
        self, claim: Claim, name: str, child: Task, *, version: str | None = None
    ) -> StepRecord:
        self._asked += 1
        message = await self._request(
            "spawn", "n", self._asked, name=name, child=task_fields(child)
        )
        if "error" in message:
            raise SpawnError(str(message["error"]))
        return step_from(message)

    async def children(self, parent: str, ids: Sequence[str]) -> Sequence[ChildView | None]:
        self._asked += 1
        message = await self._request("children", "n", self._asked, ids=list(ids))
        return [
            None if row is None else ChildView(row[0], CustodyState(row[1]), row[2], row[3])
            for row in message["children"]
        ]

    async def take_event(self, key: str, taken: Sequence[str]) -> Event | None:
        self._asked += 1
        message = await self._request("event", "n", self._asked, key=key, taken=list(taken))
        found = message.get("event")
        return None if found is None else Event(*found)

    async def acquire_permit(
        self, claim: Claim, key: str, weight: float = 1.0
    ) -> Granted | NoPermit:
        self._asked += 1
        message = await self._request("permit", "n", self._asked, key=key, weight=weight)
        if message["granted"]:
            tokens = message.get("tokens")
            return Granted(message.get("permit"), math.inf if tokens is None else float(tokens))
        return NoPermit(message.get("seconds"), str(message["why"]))

    async def conversation(self) -> Conversation:
        """The run's conversation, read by the parent (its first ``await conversation_of``;
        the child's ``Talk`` asks once)."""
        self._asked += 1
        message = await self._request("conversation", "n", self._asked)
        return conversation_from(message)

    async def release_permit(self, permit: int) -> None:
        self._pipe.send("release", permit=permit)

    async def pause_limit(self, key: str, until: float) -> None:
        self._pipe.send("pause", key=key, until=until)

    async def _request(
        self, kind: str, field: str, tag: str | int, **fields: Any
    ) -> dict[str, Any]:
        """Send a ``kind`` frame naming itself ``tag`` in ``field`` and wait for its answer:
        ``StaleLease`` if the parent's claim is fenced out."""
        key = (field, str(tag))
        done, answer = self._waiting[key] = (trio.Event(), [])
        self._pipe.send(kind, **{field: tag}, **fields)
        try:
            await done.wait()
        finally:
            del self._waiting[key]
        message = answer[0]
        if message["kind"].endswith("_stale"):
            raise StaleLease(str(message.get("reason") or "the run lost its lease"))
        return message

    def answered(self, message: dict[str, Any]) -> None:
        """A frame from the parent: the answer to a step or a permit this child asked for."""
        field = ANSWERS.get(str(message.get("kind")))
        if field is None:
            return
        waiting = self._waiting.get((field, str(message.get(field))))
        if waiting is not None:
            waiting[1].append(message)
            waiting[0].set()
