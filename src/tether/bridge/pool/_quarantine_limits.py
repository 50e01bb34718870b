"""A quarantine child's permits (issue #38): asked of its parent over the pipe.

The child holds nothing of the store (``_quarantine_child``), yet a suspect's run must keep to
the limits every other run keeps to. So its ``Run`` asks the parent for a permit (a ``permit``
frame), which the parent takes under its own claim's fence and answers (``permit_ok``, or
``permit_stale``: the run lost its lease, and its parent is about to end it); a release and a
pause are told, not answered.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from ..custody._limits import Granted, NoPermit
from ..custody._rules import Claim, StaleLease


class _Sends(Protocol):
    def send(self, kind: str, **fields: Any) -> None: ...


@attrs.define(eq=False)
class PipeLimits:
    """The ``LimitStore`` a quarantine child's ``Run`` uses: every call goes to the parent."""

    _pipe: _Sends
    _waiting: dict[int, tuple[trio.Event, list[dict[str, Any]]]] = attrs.field(factory=dict)
    _asked: int = 0

    def clock(self) -> float:
        return time.time()

    async def acquire_permit(
        self, claim: Claim, key: str, weight: float = 1.0
    ) -> Granted | NoPermit:
        self._asked += 1
        n = self._asked
        done, answer = self._waiting[n] = (trio.Event(), [])
        self._pipe.send("permit", n=n, key=key, weight=weight)
        try:
            await done.wait()
        finally:
            del self._waiting[n]
        message = answer[0]
        if message["kind"] != "permit_ok":
            raise StaleLease(str(message.get("reason") or "the run lost its lease"))
        if message["granted"]:
            tokens = message.get("tokens")
            return Granted(message.get("permit"), math.inf if tokens is None else float(tokens))
        return NoPermit(message.get("seconds"), str(message["why"]))

    async def release_permit(self, permit: int) -> None:
        self._pipe.send("release", permit=permit)

    async def pause_limit(self, key: str, until: float) -> None:
        self._pipe.send("pause", key=key, until=until)

    def answered(self, message: dict[str, Any]) -> None:
        """A frame from the parent: the answer to a permit this child asked for."""
        if message.get("kind") in ("permit_ok", "permit_stale"):
            waiting = self._waiting.get(int(message.get("n") or 0))
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()


@attrs.frozen
class ChildLimits:
    """What the parent does for a quarantined run's permits: under its own claim."""

    acquire: Callable[[str, float], Awaitable[Granted | NoPermit]]
    release: Callable[[int], Awaitable[None]]
    pause: Callable[[str, float], Awaitable[None]]


async def serve(limits: ChildLimits, message: dict[str, Any]) -> dict[str, Any] | None:
    """Do what a child's ``permit``, ``release`` or ``pause`` frame asks; the answer's fields
    (for a ``permit``), else None."""
    kind = message["kind"]
    if kind == "release":
        await limits.release(int(message["permit"]))
        return None
    if kind == "pause":
        await limits.pause(str(message["key"]), float(message["until"]))
        return None
    n = message.get("n")
    try:
        got = await limits.acquire(str(message["key"]), float(message.get("weight", 1.0)))
    except StaleLease as exc:
        return {"kind": "permit_stale", "n": n, "reason": str(exc)}
    if isinstance(got, Granted):
        tokens = None if math.isinf(got.tokens) else got.tokens  # JSON holds no infinity
        return {
            "kind": "permit_ok",
            "n": n,
            "granted": True,
            "permit": got.permit,
            "tokens": tokens,
        }
    return {"kind": "permit_ok", "n": n, "granted": False, "seconds": got.seconds, "why": got.why}
