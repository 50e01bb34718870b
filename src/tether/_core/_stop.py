"""The soft stop signal a supervised child reads.

A supervisor asks a child to stop before it cancels it, so services can finish the unit of
work in hand, flush, and say goodbye. The request lives in a context variable set in the
child's task, so the child (and every task it spawns) can ask without any extra parameter in
``async def run(..., task_status=...)``::

    async def run(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with trio_util.move_on_when(tether.wait_stop_requested):
            await serve_forever()
        await flush()  # cleanup runs after a soft stop, within the child's shutdown_grace

Outside a supervised child nobody can ask for a stop: ``stop_requested()`` is False and
``wait_stop_requested()`` sleeps until cancelled, so the same service runs unsupervised too.
"""

from __future__ import annotations

import trio

from ._context import STOP_EVENT


def stop_requested() -> bool:
    """True once the supervisor asked the calling child to stop."""
    event = STOP_EVENT.get()
    return event is not None and event.is_set()


async def wait_stop_requested() -> None:
    """Return when the supervisor asks the calling child to stop (never, outside a child)."""
    event = STOP_EVENT.get()
    if event is None:
        await trio.sleep_forever()
    else:
        await event.wait()
