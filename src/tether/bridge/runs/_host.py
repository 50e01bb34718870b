"""What a worker lends each of its runs: the store they reach it through, how they retry and
park, whom they ring when their task moves, and the counts of how they ended.

One per worker, shared by its runs; the worker's own fields (claim loop, heartbeat, slots)
are not here, and nothing here claims or renews.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import attrs

from ..custody._conversation import DEFAULT_HISTORY_TURNS
from ..custody._roles import RunStore
from ..custody._rules import Task
from ._bounds import Bounds
from ._completions import CompletionBatcher
from ._journal import DEFAULT_PARK_AFTER
from ._retry import Retry, RetryBackoff
from ._timings import Timings

TRACED_TASKS: Final = 10_000
"""Tasks whose agent traceback a worker remembers having logged (oldest forgotten first)."""


class Rings(Protocol):
    """The pool's switchboard as a run rings it when its task moves (``pool._wakeup``)."""

    def tasks_pending(self) -> None: ...

    def tasks_dead(self) -> None: ...

    def parked(self, until: float) -> None: ...


@attrs.define(eq=False)
class RunCounts:
    """How a worker's runs ended (its ``/metrics`` and tests read them)."""

    completed: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    """Claims lost to fencing (the lease expired and someone else holds the task)."""
    superseded: int = 0
    """Runs stopped because a newer message of their room superseded the task (``replace``)."""
    parked: int = 0
    state_conflicts: int = 0
    """Runs run again because another run of their room stored a state first."""
    quarantine_deaths: int = 0


@attrs.define(eq=False)
class RunHost:
    """The worker ``worker``'s part in its runs."""

    store: RunStore
    worker: str
    completions: CompletionBatcher
    store_retry: float = 1.0
    """Seconds between tries of an outcome while the store is unreachable."""
    park_after: float = DEFAULT_PARK_AFTER
    agent_version: str | None = None
    """The version the runs' step records keep (issue #53: ``--agent-version``)."""
    history_turns: int = DEFAULT_HISTORY_TURNS
    bounds: Bounds = attrs.field(factory=Bounds)
    """The size limits of a step's result, a room's state and a reply (``runs._bounds``)."""
    stop_grace: float = 4.0
    supersede_grace: float | None = None
    """Seconds a superseded run may still take (None: ``stop_grace``)."""
    retry_backoff: RetryBackoff = attrs.field(factory=RetryBackoff)
    rng: random.Random = attrs.field(factory=random.Random)
    timings: Timings | None = None
    rings: Rings | None = None
    after_complete: Callable[[Task], Awaitable[None]] | None = None
    on_asked: Callable[[], None] | None = None
    on_answered: Callable[[float], None] = lambda seconds: None
    """Told how long each run took to answer (the worker's pace: ``asked_capacity``)."""
    clock: Callable[[], float] | None = None
    """The clock timings are read on (None: the store's)."""
    counts: RunCounts = attrs.field(factory=RunCounts)
    retry_due: float = math.inf
    """When (Trio's clock) the earliest task these runs failed falls due again."""
    traced: dict[str, None] = attrs.field(factory=dict)
    """Tasks whose agent traceback was logged (``TRACED_TASKS`` at most, oldest first): a task
    failing again logs one line, its traceback at DEBUG."""

    def now(self) -> float:
        return (self.clock or self.store.clock)()

    def retry_delay(self, exc: BaseException, attempt: int) -> float:
        """Seconds before the next attempt after ``exc`` failed attempt ``attempt``: the
        agent's ``Retry(after=)``, else the backoff's draw."""
        if isinstance(exc, Retry) and exc.after is not None:
            return exc.after
        return self.retry_backoff.delay(attempt, self.rng)

    def first_traceback(self, task_id: str) -> bool:
        """Is this the first failure of ``task_id`` whose traceback is logged here?"""
        if task_id in self.traced:
            return False
        self.traced[task_id] = None
        while len(self.traced) > TRACED_TASKS:
            del self.traced[next(iter(self.traced))]
        return True
