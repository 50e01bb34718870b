"""Ask the person (issue #36): ``answer = await run.ask(text, timeout=...)`` in a handler.

The first run to reach an ask ends there (``Parked``): its worker records the question and
parks the task in ``waiting`` in one fenced transaction, the bridge posts the question once it
is durable, and the room's next message from the asking message's sender is the answer (or
from the senders the ask names, or anyone's: issue #48). The handler then runs again from the
top (replay, as for ``run.sleep``): this ask returns the answer, or raises ``AskTimeout`` or
``AskUnsupported``, the same in every later run. See docs/guide/asking.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..custody._asks import (
    ASK_PREFIX,
    SENDER_HEADER,
    AskRecord,
    check_answer_from,
    check_ask_timeout,
    check_question,
)
from ..custody._steps import StepError, check_step_name
from ._journal import Journal, ParkedAsk


class AskTimeout(Exception):
    """No answer came before the ask's timeout (recorded: a later run of the task raises it
    again at the same ask)."""


class AskUnsupported(Exception):
    """The question cannot reach the person: the gateway has no messages route (404), or the
    run is not a worker's (a handler called by hand has nobody to ask)."""


def answer_from(
    task_headers: Mapping[str, str], from_anyone: bool, from_senders: Sequence[str] | None
) -> tuple[str, ...] | None:
    """Who may answer an ask: the senders named, anyone, or by default the asking message's
    own sender (a task with no sender, as a schedule's, takes anyone's answer)."""
    if from_anyone and from_senders is not None:
        raise ValueError("run.ask takes from_anyone or from_senders, not both")
    if from_senders is not None:
        return check_answer_from(from_senders)
    sender = task_headers.get(SENDER_HEADER)
    return None if from_anyone or sender is None else (sender,)


@attrs.define(eq=False)
class Asking:
    """A run's asks: how many it made and the task's recorded ones (read at the first)."""

    made: int = 0
    used: set[str] = attrs.field(factory=set)
    recorded: dict[str, AskRecord] | None = None

    async def ask(
        self,
        journal: Journal,
        text: str,
        timeout: float,  # noqa: ASYNC109 - a durable deadline, not a cancel scope
        name: str | None,
        senders: tuple[str, ...] | None,
    ) -> str:
        check_question(text)
        seconds = check_ask_timeout(timeout)
        task = journal.task
        self.made += 1
        key = f"{ASK_PREFIX}{self.made}" if name is None else check_step_name(name)
        if key in self.used:
            raise StepError(
                f"ask {key!r} was asked twice in one run of task {task.id!r}: ask names are "
                "unique per task"
            )
        self.used.add(key)
        store = journal.store
        if store is None or not journal.durable:
            raise AskUnsupported(
                f"task {task.id!r}: only a worker's run can ask the person (this run is "
                "detached: called outside a worker)"
            )
        if self.recorded is None:
            found = await store.asks(task.id)
            self.recorded = {record.name: record for record in found}
        record = self.recorded.get(key)
        if record is not None:
            if record.status == "answered":
                assert record.answer is not None
                return record.answer
            if record.status == "timeout":
                raise AskTimeout(f"task {task.id!r}: no answer to ask {key!r} in time")
            if record.status == "unsupported":
                raise AskUnsupported(
                    f"task {task.id!r}: the gateway cannot show questions (ask {key!r})"
                )
        # not asked yet, or asked and still open (the run that asked ended before its park)
        until = journal.now() + seconds if record is None else record.deadline
        asked = ParkedAsk(key, text, until, senders)
        raise journal.park(until, f"asked the person ({key}): {text[:120]}", asked)


def parked_fields(parked: ParkedAsk | None) -> dict[str, Any]:
    """A parked quarantine child's ask as its ``parked`` frame carries it to the parent."""
    return {} if parked is None else {"ask": attrs.asdict(parked)}


def parked_from(message: Mapping[str, Any]) -> ParkedAsk | None:
    """The parent's side of ``parked_fields``."""
    fields = message.get("ask")
    return None if not isinstance(fields, dict) else ParkedAsk(**fields)


def asks_fields(records: Sequence[AskRecord]) -> list[dict[str, Any]]:
    """Recorded asks as the ``task`` frame carries them to a quarantine child."""
    return [attrs.asdict(record) for record in records]


def asks_from(fields: Sequence[dict[str, Any]] | None) -> list[AskRecord]:
    """The child's side of ``asks_fields``."""
    return [AskRecord(**record) for record in fields or ()]
