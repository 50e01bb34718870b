"""The store methods of durable runs (issue #35), framed as ``_frame`` frames custody: check
the arguments, run the backend part's ``_name`` operation, log the move.

Each backend's steps part (``sqlite._steps``, ``postgres._steps``) implements the operations,
so steps, parks and wake-ups read the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import attrs

from ..._plumbing._when import iso_time
from ..custody import _log as _clog
from ..custody._records import StepRecord, WaitingRuns
from ..custody._rules import Claim, CustodyState, check_task_id
from ..custody._steps import (
    MAX_STEP_BYTES,
    StepError,
    check_step_name,
    check_wake_at,
)
from ._common import check_limit, check_reason, fence_args
from ._host import Host


@attrs.define(eq=False)
class StepsFrame(abc.ABC):
    """``StepStore``'s methods, ``ReconcilerStore.wake_due`` and the read of waiting runs
    around a backend part's operations; the operator's fresh re-drive has it forget a dead
    run's steps first (``forget_dead_steps``)."""

    host: Host

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
        return await self._record_step(claim, name, value, size, self.host.clock())

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
        reason = self.host.stored_text(check_reason(why))
        await self._park(claim, until, reason, self.host.clock())
        journal_parked(claim, f"{reason}; due {iso_time(until)}")

    @abc.abstractmethod
    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        """claimed -> waiting under the fence; raises ``StaleLease`` if fenced out."""

    async def wake_due(self, *, limit: int = 10_000) -> Sequence[str]:
        ids = await self._wake_due(check_limit(limit), self.host.clock())
        for id in ids:
            _clog.moved(id, CustodyState.WAITING, CustodyState.PENDING, reason="due")
        return ids

    @abc.abstractmethod
    async def _wake_due(self, limit: int, now: float) -> list[str]:
        """waiting -> pending for up to ``limit`` tasks due by ``now``; their ids."""

    @abc.abstractmethod
    async def waiting_runs(self) -> WaitingRuns: ...

    @abc.abstractmethod
    async def forget_dead_steps(
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
