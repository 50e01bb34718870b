"""The store methods of retention (issue #56), framed as ``_frame`` frames custody: check the
arguments, run the backend part's ``_name`` operation, log what was pruned.

Each prune is a bounded slice (``limit``), so retention never holds the store long.
"""

from __future__ import annotations

import abc

import attrs

from ..custody import _log as _clog
from ._common import check_limit
from ._host import Host


@attrs.define(eq=False)
class RetentionFrame(abc.ABC):
    """``RetentionStore``'s methods around a backend part's operations."""

    host: Host

    async def prune_delivered(self, before: float, *, limit: int = 10_000) -> int:
        count = await self._prune_delivered(before, check_limit(limit))
        _clog.pruned(count, before)
        return count

    @abc.abstractmethod
    async def _prune_delivered(self, before: float, limit: int) -> int: ...

    async def prune_tombstones(self, before: float, *, limit: int = 10_000) -> int:
        return await self._prune_tombstones(before, check_limit(limit))

    @abc.abstractmethod
    async def _prune_tombstones(self, before: float, limit: int) -> int: ...

    async def prune_workers(self, before: float, *, limit: int = 1000) -> int:
        return await self._prune_workers(before, check_limit(limit))

    @abc.abstractmethod
    async def _prune_workers(self, before: float, limit: int) -> int: ...

    async def prune_waiters(self, before: float, *, limit: int = 1000) -> int:
        return await self._prune_waiters(before, check_limit(limit))

    @abc.abstractmethod
    async def _prune_waiters(self, before: float, limit: int) -> int: ...

    async def reclaim_space(self, *, pages: int = 1024) -> int:
        return await self._reclaim_space(check_limit(pages, "pages"))

    async def _reclaim_space(self, pages: int) -> int:
        return 0  # a server that keeps its free space for reuse itself (PostgreSQL)
