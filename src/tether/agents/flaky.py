"""A slow, sometimes failing agent: exercises retries, leases and stall notices.

Which tasks fail is a pure function of the id (``fails(id, rate)``). Settings, header first, then
environment: ``flaky-delay`` / ``TETHER_FLAKY_DELAY`` (0.5 s before answering) and
``flaky-fail-rate`` / ``TETHER_FLAKY_FAIL_RATE`` (0.2 of the task ids fail).
"""

from __future__ import annotations

import hashlib
import math
import os

import trio

from tether import Session
from tether.bridge import Task

DEFAULT_DELAY = 0.5
DEFAULT_FAIL_RATE = 0.2


class FlakyFailure(RuntimeError):
    """The flaky agent's deliberate failure."""


def fails(task_id: str, rate: float) -> bool:
    """Does the flaky agent fail task ``task_id`` at fail ``rate``? (Stable across runs.)"""
    digest = hashlib.sha256(task_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def _setting(task: Task, header: str, env: str, default: float, lo: float, hi: float) -> float:
    raw = task.headers.get(header, os.environ.get(env))
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{header}/{env} must be a number, got {raw!r}") from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ValueError(f"{header}/{env} must be between {lo} and {hi}, got {raw!r}")
    return value


def factory(session: Session) -> None:
    @session.on("task")
    async def flaky(task: Task) -> str:
        delay = _setting(task, "flaky-delay", "TETHER_FLAKY_DELAY", DEFAULT_DELAY, 0, 86_400)
        rate = _setting(task, "flaky-fail-rate", "TETHER_FLAKY_FAIL_RATE", DEFAULT_FAIL_RATE, 0, 1)
        await trio.sleep(delay)
        if fails(task.id, rate):
            raise FlakyFailure(f"flaky agent fails task {task.id} (rate {rate:g})")
        return f"flaky: {task.body}"
