"""The store methods of durable runs (issue #35), framed as ``_frame.StoreFrame`` frames the
rest: check the arguments, run the backend's ``_name`` operation, log the move.

A mixin of both backends' store classes, so steps, parks and wake-ups read the same on SQLite
and PostgreSQL and stay apart from the methods of other issues.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from ..._plumbing._when import iso_time
from ..custody import _log as _clog
from ..custody._records import OperatorOutcome, StepRecord, WaitingRuns
from ..custody._rules import Claim, CustodyState, check_task_id
from ..custody._steps import (
    MAX_STEP_BYTES,
    StepError,
    check_step_name,
    check_wake_at,
)
from ._common import check_limit, check_reason, fence_args
from ._frame import StoreFrame
from ._operator import CANCELLED_PREFIX, check_contains, check_ids


class StepsFrame(StoreFrame):
    """``StoreFrame`` with ``StepStore``'s methods, ``ReconcilerStore.wake_due``, the read of
    waiting runs, and the operator's fresh re-drive (the steps forgotten first)."""

    async def steps(self, id: str) -> Sequence[StepRecord]:
        return await self._steps(check_task_id(id))

    @abc.abstractmethod
    async def _steps(self, id: str) -> list[StepRecord]:
        """``id``'s steps in the order they were recorded."""

    async def record_step(self, claim: Claim, name: str, value: str) -> StepRecord:
        fence_args(claim)
        check_step_name(name, own=True)
        if not isinstance(value, str):
            raise TypeError(f"a step's value is JSON text (a str), got {type(value).__name__}")
        size = len(value.encode("utf-8"))
        if size > MAX_STEP_BYTES:
            raise StepError(
                f"step {name!r}: {size} bytes, over the {MAX_STEP_BYTES} a step may record"
            )
        return await self._record_step(claim, name, value, size, self.clock())

    @abc.abstractmethod
    async def _record_step(
        self, claim: Claim, name: str, value: str, size: int, now: float
    ) -> StepRecord:
        """Insert the step under the fence (in one statement or transaction with the fence
        check and the task's total); the record now stored under ``name``. Raises
        ``StaleLease`` (``stale_lease``) if fenced out, ``StepError`` past the task's total."""

    async def park(self, claim: Claim, until: float, why: str) -> None:
        fence_args(claim)
        until = check_wake_at(until)
        reason = self._stored_text(check_reason(why))
        await self._park(claim, until, reason, self.clock())
        journal_parked(claim, f"{reason}; due {iso_time(until)}")

    @abc.abstractmethod
    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        """claimed -> waiting under the fence; raises ``StaleLease`` if fenced out."""

    async def wake_due(self, *, limit: int = 10_000) -> Sequence[str]:
        ids = await self._wake_due(check_limit(limit), self.clock())
        for id in ids:
            _clog.moved(id, CustodyState.WAITING, CustodyState.PENDING, reason="due")
        return ids

    @abc.abstractmethod
    async def _wake_due(self, limit: int, now: float) -> list[str]:
        """waiting -> pending for up to ``limit`` tasks due by ``now``; their ids."""

    @abc.abstractmethod
    async def waiting_runs(self) -> WaitingRuns: ...

    async def redrive(
        self, ids: Sequence[str], *, reason: str | None = None, fresh: bool = False
    ) -> Sequence[OperatorOutcome]:
        if check_fresh(fresh):
            await self._forget_dead_steps(check_ids(ids), None, 0)
        return await super().redrive(ids, reason=reason)

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
            await self._forget_dead_steps(None, text, check_limit(limit), skip)
        return await super().redrive_dead(
            reason_contains=reason_contains,
            reason=reason,
            limit=limit,
            include_cancelled=include_cancelled,
        )

    @abc.abstractmethod
    async def _forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        """Before a fresh re-drive: delete the steps of the dead tasks among ``ids`` (or, for
        ``ids=None``, of the first ``limit`` dead tasks whose reason holds ``text`` and does not
        begin with ``skip``, in the re-drive's order). A crash between this and the re-drive
        leaves a dead task without steps: what the operator asked for, and the re-drive can be
        repeated."""


def journal_parked(claim: Claim, reason: str) -> None:
    """Journal ``claimed -> waiting`` for ``claim``'s run (a durable sleep, a long wait for a
    permit, or a question to the person)."""
    _clog.moved(
        claim.task.id,
        CustodyState.CLAIMED,
        CustodyState.WAITING,
        worker=claim.worker,
        attempt=claim.attempt,
        reason=reason,
    )


def check_fresh(fresh: object) -> bool:
    if not isinstance(fresh, bool):
        raise TypeError(f"fresh must be a bool, got {type(fresh).__name__}")
    return fresh
