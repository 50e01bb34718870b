"""The store methods of flow control (issue #38), framed as ``_frame`` frames custody: check
the arguments, run the backend part's ``_name`` operation.

Each backend's limits part (``sqlite._limits``, ``postgres._limits``) implements the
operations, so limits read the same on SQLite and PostgreSQL. The bucket arithmetic is
``custody._limits``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..custody import _log as _clog
from ..custody._limits import (
    Bucket,
    Granted,
    LimitSpec,
    LimitView,
    NoPermit,
    check_key,
    check_weight,
    tokens_at,
)
from ..custody._rules import Claim, CustodyState
from ..custody._steps import check_wake_at
from ._common import fence_args
from ._host import Host

log = logging.getLogger("tether.bridge.limits")


@attrs.define(eq=False)
class LimitsFrame(abc.ABC):
    """``LimitStore``'s permit methods around a backend part's operations (a tenant's weight
    is ``_tenants_frame``'s)."""

    host: Host

    async def set_limit(self, spec: LimitSpec) -> None:
        if not isinstance(spec, LimitSpec):
            raise TypeError(f"expected a LimitSpec, got {type(spec).__name__}")
        await self._set_limit(spec, self.host.clock())
        log.info(
            "limit %s: rate %s/s, burst %g, concurrency %s",
            spec.key,
            "-" if spec.rate is None else f"{spec.rate:g}",
            spec.burst,
            "-" if spec.concurrency is None else spec.concurrency,
        )

    @abc.abstractmethod
    async def _set_limit(self, spec: LimitSpec, now: float) -> None: ...

    async def acquire_permit(
        self, claim: Claim, key: str, weight: float = 1.0
    ) -> Granted | NoPermit:
        fence_args(claim)
        return await self._acquire_permit(
            claim, check_key(key), check_weight(weight), self.host.clock()
        )

    @abc.abstractmethod
    async def _acquire_permit(
        self, claim: Claim, key: str, weight: float, now: float
    ) -> Granted | NoPermit:
        """Under the fence, apply ``custody._limits.decide`` to ``key``'s bucket: on a grant
        spend the tokens, count the permit in flight and insert it (its id returned); on a
        wait record the waiter (until its wait is over). ``StaleLease`` if fenced out."""

    async def release_permit(self, permit: int) -> None:
        if isinstance(permit, bool) or not isinstance(permit, int):
            raise TypeError(f"a permit is an int id, got {type(permit).__name__}")
        woken = await self._release_permit(permit, self.host.clock())
        for id, key in woken:
            reason = f"a permit of {key} came free"
            _clog.moved(id, CustodyState.WAITING, CustodyState.PENDING, reason=reason)
        if woken:
            # work for this process's pool (others hear the store's news)
            self.host.work_bell.ring()

    @abc.abstractmethod
    async def _release_permit(self, permit: int, now: float) -> list[tuple[str, str]]:
        """Give ``permit`` back (nothing if it was freed already) and make the run parked
        longest for a permit of its key pending again: ``(id, key)`` of the run woken."""

    async def pause_limit(self, key: str, until: float) -> None:
        key, until = check_key(key), check_wake_at(until)
        await self._pause_limit(key, until, self.host.clock())
        log.warning("limit %s paused for everyone on the store until %.3f", key, until)

    @abc.abstractmethod
    async def _pause_limit(self, key: str, until: float, now: float) -> None: ...

    async def limit_views(self) -> Sequence[LimitView]:
        return await self._limit_views(self.host.clock())

    @abc.abstractmethod
    async def _limit_views(self, now: float) -> list[LimitView]: ...


def bucket_of(row: Sequence[Any]) -> Bucket:
    """A ``limits`` row (``key, rate, burst, concurrency, tokens, at, in_flight,
    paused_until``, both backends) as a ``Bucket``."""
    key, rate, burst, concurrency, tokens, at, in_flight, paused_until = row
    spec = LimitSpec(key, rate, burst, concurrency)
    return Bucket(spec, tokens, at, in_flight, paused_until)


def views_of(
    rows: Iterable[Sequence[Any]], waiting: Mapping[str, int], now: float
) -> list[LimitView]:
    """What ``limits()`` shows of each row at ``now``: tokens refilled, a pause only while it
    lasts, the waiters counted."""
    out = []
    for row in rows:
        bucket = bucket_of(row)
        paused = bucket.paused_until
        out.append(
            LimitView(
                bucket.spec,
                tokens_at(bucket, now),
                bucket.in_flight,
                paused if paused is not None and paused > now else None,
                int(waiting.get(bucket.spec.key, 0)),
            )
        )
    return out
