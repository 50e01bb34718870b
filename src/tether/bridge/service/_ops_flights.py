"""Store calls the operator page waits for at most a bound (issue 33: every admin route answers
within a second whatever the store does).

A store call cannot be cancelled once it reached the store (the SQLite writer and psycopg's
threads finish what they started), so each call runs as a background task of the runtime and
the request waits for it at most ``within`` seconds. Requests that ask the same question while
a call is out share it (one flight per key): a store that hangs holds one call per question,
not one per poll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import attrs
import trio

from ..._runtime import Runtime


class NoAnswer(Exception):
    """The store did not answer in time, or failed (the message says which)."""


@attrs.define(eq=False)
class _Flight:
    done: trio.Event = attrs.field(factory=trio.Event)
    value: Any = None
    error: Exception | None = None


@attrs.define(eq=False)
class Flights:
    runtime: Runtime
    _open: dict[Hashable, _Flight] = attrs.field(factory=dict, init=False)

    async def ask(
        self, key: Hashable, within: float, call: Callable[..., Awaitable[Any]], *args: Any
    ) -> Any:
        """``call(*args)``'s answer (shared with every request asking ``key`` meanwhile); a
        ``NoAnswer`` once ``within`` seconds pass without one, or when it failed."""
        flight = self._open.get(key)
        if flight is None:
            flight = self._open[key] = _Flight()
            self.runtime.spawn(self._fly, key, flight, call, *args, name=f"ops page: {key}")
        with trio.move_on_after(within):
            await flight.done.wait()
        if not flight.done.is_set():
            raise NoAnswer(f"the custody store did not answer within {within:g} s")
        if flight.error is not None:
            raise NoAnswer(f"the custody store failed: {flight.error!r}"[:300])
        return flight.value

    async def _fly(
        self, key: Hashable, flight: _Flight, call: Callable[..., Awaitable[Any]], *args: Any
    ) -> None:
        try:
            flight.value = await call(*args)
        except Exception as exc:  # the requests waiting for it say it (a late one is dropped)
            flight.error = exc
        finally:
            del self._open[key]
            flight.done.set()
