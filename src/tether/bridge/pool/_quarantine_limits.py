"""A quarantine child's permits (issue #38), the parent's side: what it does for a child's
``permit``, ``release`` and ``pause`` frames, under its own claim (the child's side:
``_quarantine_journal``)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ..custody._limits import Granted, NoPermit
from ..custody._rules import StaleLease


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
