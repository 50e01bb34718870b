"""A store outage is the store's, not the run's: a worker's runs go on through it.

PostgreSQL's store waits out an outage in each call; a call in flight when the connection broke
raises ``StoreConnectionLost`` (a ``ConnectionError``) and a statement the server cancelled
``StoreTimeout`` (a ``TimeoutError``). The worker skips a beat or a renewal that met one (the
next comes within the heartbeat interval; custody._outage keeps the lease meanwhile) and stores
a run's outcome again until it is stored, so no run is cut short and none runs twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

log = logging.getLogger("tether.bridge.pool.worker")

T = TypeVar("T")

STORE_UNREACHABLE: Final = (ConnectionError, TimeoutError)
"""What a store call raises when the store could not be reached (or answer) mid-call."""


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


async def until_stored(call: Callable[[], Awaitable[T]], *, what: str, pause: float) -> T:
    """``await call()`` again every ``pause`` seconds while the store cannot be reached; one
    line for the incident (the store logs the outage itself)."""
    said = False
    while True:
        try:
            return await call()
        except STORE_UNREACHABLE as exc:
            if not said:
                log.warning("%s: %s; trying again until the store answers", what, first_line(exc))
                said = True
        await trio.sleep(pause)
