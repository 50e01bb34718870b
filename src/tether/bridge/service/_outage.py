"""A child whose store call met the start of an outage runs again at once, not as a failure.

A call in flight when the store's connection broke raises (its outcome unknown; every later
call waits for the store instead, see the PostgreSQL store). That is the outage's doing, not
the child's: counting it as a crash would make the supervisor back off (and give up after ten
in thirty seconds, stopping the bridge) through outages that come and go. So the child is run
again in place after one line, and the store's own wait holds it until the store answers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from ..runs._outage import STORE_UNREACHABLE, first_line

log = logging.getLogger("tether.bridge")

RERUN_PAUSE_S: Final = 0.5
"""The pause before a child runs again (the store's calls then wait for the store itself)."""


async def run_through_outages(
    run: Callable[..., Awaitable[None]],
    name: str = "a child",
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``await run(task_status=...)`` again while it fails only of an unreachable store."""
    started = False

    def ready(value: Any = None) -> None:
        nonlocal started
        if not started:
            started = True
            task_status.started(value)

    class _Status:
        started = staticmethod(ready)

    while True:
        try:
            await run(task_status=_Status())
        except* STORE_UNREACHABLE as group:
            log.warning(
                "child %s met the store's outage (%s); it runs again when the store answers",
                name,
                first_line(_first(group)),
            )
        else:
            return
        await trio.sleep(RERUN_PAUSE_S)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
