"""A quarantine child's ``JournalStore``: its steps and asks as its parent sent them, new steps
and permits asked of its parent over the pipe (``_quarantine_steps``, ``_quarantine_limits``).
The parent records each under its own claim's fence; the child's ``Run`` sees a store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..custody._asks import AskRecord
from ..custody._limits import Granted, NoPermit
from ..custody._records import StepRecord
from ..custody._rules import Claim
from ._quarantine_limits import PipeLimits
from ._quarantine_steps import PipeSteps


@attrs.define(eq=False)
class PipeJournal:
    """What a quarantined run records, through its parent."""

    _steps: PipeSteps
    limits: PipeLimits
    clock: Callable[[], float] = time.time

    async def steps(self, id: str) -> Sequence[StepRecord]:
        return await self._steps.steps(id)

    async def record_step(self, claim: Claim, name: str, value: str) -> StepRecord:
        return await self._steps.record_step(claim, name, value)

    async def asks(self, id: str) -> Sequence[AskRecord]:
        return await self._steps.asks(id)

    async def acquire_permit(
        self, claim: Claim, key: str, weight: float = 1.0
    ) -> Granted | NoPermit:
        return await self.limits.acquire_permit(claim, key, weight)

    async def release_permit(self, permit: int) -> None:
        await self.limits.release_permit(permit)

    async def pause_limit(self, key: str, until: float) -> None:
        await self.limits.pause_limit(key, until)

    def answered(self, message: dict[str, Any]) -> None:
        """A frame from the parent: an answer to a step or a permit this child asked for."""
        self._steps.answered(message)
        self.limits.answered(message)
