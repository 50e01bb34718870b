"""The soft stop a supervised child reads: ``stop_requested()``, ``wait_stop_requested()``.

A supervisor asks before it cancels, so a service can finish the work in hand; outside a child
nobody asks, so the same service runs unsupervised. See docs/guide/design.md, "Supervisors".
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
