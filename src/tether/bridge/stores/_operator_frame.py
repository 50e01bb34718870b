"""The operator's moves (``OperatorStore``), framed as ``_frame`` frames custody: check the
arguments, run the backend part's ``_name`` operation, log each move.

A fresh re-drive first has the steps part forget the dead runs' steps, then re-drives.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import attrs

from ..custody import _log as _clog
from ..custody._conversation import check_room
from ..custody._records import OperatorOutcome
from ..custody._rules import OPERATOR_PREFIX, CustodyState, TaskRecord
from ..custody._steps import check_step_name
from ..custody._versions import fork_refusal, no_such_step, rewind_reason
from ._common import check_limit, check_reason
from ._frame import Moves
from ._host import Host
from ._operator import (
    CANCELLED_PREFIX,
    cancel_outcomes,
    cancel_reason,
    check_contains,
    check_ids,
    redrive_outcomes,
    redrive_reason,
)
from ._steps_frame import StepsFrame


@attrs.define(eq=False)
class OperatorFrame(abc.ABC):
    """``OperatorStore``'s methods around a backend part's operations."""

    host: Host
    steps: StepsFrame
    """The steps part, which forgets a dead run's steps before a fresh re-drive."""

    async def redrive(
        self, ids: Sequence[str], *, reason: str | None = None, fresh: bool = False
    ) -> Sequence[OperatorOutcome]:
        if check_fresh(fresh):
            await self.steps.forget_dead_steps(check_ids(ids), None, 0)
        checked = check_ids(ids)
        why = self.host.stored_text(redrive_reason(reason))
        erased = await self._forgotten(checked)
        movable = [id for id in checked if id not in erased]
        moved, seen = await self._redrive(movable, why, self.host.clock()) if movable else ({}, {})
        for id in moved:
            _clog.moved(id, CustodyState.DEAD, CustodyState.PENDING, reason=why)
        outcomes = iter(redrive_outcomes(movable, moved, seen))
        return [forgotten_refusal(id) if id in erased else next(outcomes) for id in checked]

    @abc.abstractmethod
    async def _redrive(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        """dead -> pending for those of ``ids`` that are dead: (moved, seen)."""

    @abc.abstractmethod
    async def _forgotten(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` dead because their room was forgotten (``FORGOTTEN_REASON``):
        their text is erased, a re-drive would run nothing. Reads only."""

    async def redrive_dead(
        self,
        *,
        reason_contains: str | None = None,
        reason: str | None = None,
        limit: int = 10_000,
        include_cancelled: bool = False,
        fresh: bool = False,
    ) -> Sequence[OperatorOutcome]:
        if check_fresh(fresh):
            text = check_contains(reason_contains)
            skip = None if include_cancelled else CANCELLED_PREFIX
            await self.steps.forget_dead_steps(None, text, check_limit(limit), skip)
        text = check_contains(reason_contains)
        check_limit(limit)
        why = self.host.stored_text(redrive_reason(reason))
        ids, moved, seen = await self._redrive_dead(
            text, limit, why, self.host.clock(), include_cancelled=include_cancelled
        )
        for id in moved:
            _clog.moved(id, CustodyState.DEAD, CustodyState.PENDING, reason=why)
        return redrive_outcomes(ids, moved, seen)

    @abc.abstractmethod
    async def _redrive_dead(
        self, text: str | None, limit: int, why: str, now: float, *, include_cancelled: bool
    ) -> tuple[list[str], Moves, Moves]:
        """Re-drive the first ``limit`` dead tasks whose reason holds ``text`` (and that an
        operator did not cancel, unless ``include_cancelled``): (their ids, moved, seen)."""

    async def cancel(self, ids: Sequence[str], reason: str) -> Sequence[OperatorOutcome]:
        checked = check_ids(ids)
        why = self.host.stored_text(cancel_reason(reason))
        moved, seen = await self._cancel(checked, why, self.host.clock())
        for id, source in moved.items():
            _clog.moved(id, source, CustodyState.DEAD, reason=why)
        return cancel_outcomes(checked, moved, seen)

    @abc.abstractmethod
    async def _cancel(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        """pending, assigned or claimed -> dead: (moved, seen)."""

    # -- rewind and fork (issue #53) -----------------------------------------------------------

    async def rewind(self, id: str, step: str, *, reason: str | None = None) -> OperatorOutcome:
        (id,) = check_ids([id])
        step = check_step_name(step, own=True)
        note = None if reason is None else check_reason(reason)
        dropped = await self._drop_steps_from(id, step)
        if isinstance(dropped, OperatorOutcome):
            return dropped
        why = rewind_reason(step, dropped, note)
        (outcome,) = await self.redrive([id], reason=why)
        if outcome.done:
            _clog.log.info("operator: task %s rewound to step %r", id, step)
        return outcome

    @abc.abstractmethod
    async def _drop_steps_from(self, id: str, step: str) -> int | OperatorOutcome:
        """Delete dead task ``id``'s records from ``step`` on (its asks asked since too): how
        many, or the refusal (no such task, not dead, no such step), nothing changed."""

    async def fork(
        self, id: str, step: str, *, room: str | None = None, reason: str | None = None
    ) -> OperatorOutcome:
        (id,) = check_ids([id])
        step = check_step_name(step, own=True)
        room = None if room is None else check_room(room)
        said = f"forked from {id} at step {step!r}"
        why = self.host.stored_text(
            f"{OPERATOR_PREFIX}{said}" + ("" if reason is None else f": {check_reason(reason)}")
        )
        outcome = await self._fork(id, step, room, why, self.host.clock())
        if outcome.done:
            _clog.ingested([outcome.id], [True])
            self.host.work_bell.ring()
        return outcome

    @abc.abstractmethod
    async def _fork(
        self, id: str, step: str, room: str | None, why: str, now: float
    ) -> OperatorOutcome:
        """In one transaction: ``id``'s task ingested again as its next fork
        (``custody._versions.fork_id``, pending), with its records before ``step`` (and the
        asks answered before it) copied, journaled ``why``; the outcome names the new task,
        or the refusal (no such task, a child, no such step)."""


def check_fresh(fresh: object) -> bool:
    if not isinstance(fresh, bool):
        raise TypeError(f"fresh must be a bool, got {type(fresh).__name__}")
    return fresh


def forgotten_refusal(id: str) -> OperatorOutcome:
    return OperatorOutcome(
        id,
        False,
        CustodyState.DEAD,
        f"task {id!r} not re-driven: its room was forgotten and its text erased; nothing is "
        "left to run",
    )


def rewind_refusal(
    id: str, record: TaskRecord | None, names: Sequence[str], step: str
) -> OperatorOutcome | None:
    """Why task ``id`` (``record``, its recorded step ``names`` in order) cannot be rewound
    to ``step``, or None: both backends decide alike."""
    if record is None:
        return OperatorOutcome(id, False, None, f"no task {id!r}")
    if record.state is not CustodyState.DEAD:
        return OperatorOutcome(
            id,
            False,
            record.state,
            f"task {id!r} is {record.state.value}: only a dead task is rewound (cancel it "
            "first, or fork it: tether store fork)",
        )
    if step not in names:
        return OperatorOutcome(id, False, record.state, no_such_step(id, step, names))
    return None


def fork_refused(
    id: str, record: TaskRecord | None, names: Sequence[str], step: str
) -> OperatorOutcome | None:
    """Why task ``id`` cannot be forked at ``step``, or None."""
    if record is None:
        return OperatorOutcome(id, False, None, f"no task {id!r}")
    why = fork_refusal(record)
    if why is None and step not in names:
        why = no_such_step(id, step, names)
    return None if why is None else OperatorOutcome(id, False, record.state, why)


def forked(source: str, id: str, step: str, copied: int) -> OperatorOutcome:
    return OperatorOutcome(
        id,
        True,
        CustodyState.PENDING,
        f"forked task {source} at step {step!r} into {id} ({copied} record(s) copied)",
    )
