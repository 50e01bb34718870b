"""What every part of a store reads of the store it belongs to: its settings, its reach and
its work bell, through one narrow role (the parts hold no store, only this).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..custody._outage import StoreReach
from ..custody._work_bell import WorkBell


class Host(Protocol):
    """The store's settings as its parts check and log with them (``SqliteStore`` and
    ``PostgresStore`` are hosts)."""

    clock: Callable[[], float]
    lease_s: float
    max_attempts: int
    max_body_bytes: int
    max_crashes_alone: int
    reach: StoreReach
    """Whether this process reaches the store, and since when (``custody._outage``)."""
    work_bell: WorkBell
    """Rung when this process's own call made work for a pool: an ingest stored a new task,
    a permit given back woke its waiter (``custody._work_bell``)."""

    def stored_text(self, text: str) -> str:
        """A reason as the backend stores it (PostgreSQL's text holds no NUL)."""
        ...
