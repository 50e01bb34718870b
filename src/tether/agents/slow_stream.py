"""A slow streaming agent: a status for three pauses, then ``stream: <body>`` word by word.

What an LLM agent looks like to the people waiting, without an LLM. The pause: the ``stream-delay``
header, else ``TETHER_STREAM_DELAY``, else 0.3 seconds.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator

import trio

from tether import Session
from tether.bridge import Task, progress_of

DEFAULT_DELAY = 0.3


def delay_of(task: Task) -> float:
    raw = task.headers.get("stream-delay", os.environ.get("TETHER_STREAM_DELAY"))
    if raw is None:
        return DEFAULT_DELAY
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"stream-delay/TETHER_STREAM_DELAY must be a number, got {raw!r}"
        ) from None
    if not (math.isfinite(value) and 0 <= value <= 60):
        raise ValueError(f"stream-delay/TETHER_STREAM_DELAY must be 0 to 60 s, got {raw!r}")
    return value


async def words(text: str, delay: float) -> AsyncIterator[str]:
    """``text`` a word at a time (spaces kept), ``delay`` seconds apart: a model's stream."""
    for i, word in enumerate(text.split(" ")):
        await trio.sleep(delay)
        yield word if i == 0 else " " + word


async def answer(task: Task, delay: float | None = None) -> str:
    """The agent's handler body (``delay`` overrides the task's setting)."""
    pause = delay_of(task) if delay is None else delay
    progress = progress_of(task)
    progress.status(f"thinking about {len(task.body.split())} words...")
    await trio.sleep(3 * pause)
    progress.status("writing")
    return await progress.stream_from(words(f"stream: {task.body}", pause))


def factory(session: Session) -> None:
    @session.on("task")
    async def slow_stream(task: Task) -> str:
        return await answer(task)
