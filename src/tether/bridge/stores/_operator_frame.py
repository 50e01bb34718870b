"""The operator's moves (``OperatorStore``), framed as ``_frame`` frames custody: check the
arguments, run the backend part's ``_name`` operation, log each move.

A fresh re-drive first has the steps part forget the dead runs' steps, then re-drives.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import attrs

from ..custody import _log as _clog
from ..custody._records import OperatorOutcome
from ..custody._rules import CustodyState
from ._common import check_limit
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
        moved, seen = await self._redrive(checked, why, self.host.clock())
        for id in moved:
            _clog.moved(id, CustodyState.DEAD, CustodyState.PENDING, reason=why)
        return redrive_outcomes(checked, moved, seen)

    @abc.abstractmethod
    async def _redrive(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        """dead -> pending for those of ``ids`` that are dead: (moved, seen)."""

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


def check_fresh(fresh: object) -> bool:
    if not isinstance(fresh, bool):
        raise TypeError(f"fresh must be a bool, got {type(fresh).__name__}")
    return fresh
