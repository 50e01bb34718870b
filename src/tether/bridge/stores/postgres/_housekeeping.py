"""PostgresStore's housekeeping rows: members gone for longer than the retention period
(issue #56). Space is autovacuum's: ``reclaim_space`` keeps the frame's 0. Mixed into
``PostgresStore``."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TypeVar

from .._frame import StoreFrame
from ._connection import Conn

T = TypeVar("T")


class PostgresHousekeeping(StoreFrame):
    @property
    @abc.abstractmethod
    def _s(self) -> str:
        """The quoted schema (``PostgresStore._s``)."""

    @abc.abstractmethod
    async def _run(self, fn: Callable[[Conn], T]) -> T:
        """One thread hop with a pooled autocommit connection (``PostgresStore._run``)."""

    async def _prune_workers(self, before: float, limit: int) -> int:
        s = self._s
        return await self._run(
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {s}.workers WHERE name IN (SELECT name FROM {s}.workers "
                    "WHERE last_beat < %s LIMIT %s)",
                    (before, limit),
                ).rowcount
            )
        )
