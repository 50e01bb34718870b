"""The soft-stop signal of a pool service, set by ``request_stop()`` or by its supervisor: one
object answers "was I asked to stop?" whichever way the request came."""

from __future__ import annotations

import attrs
import trio

from ..._core._stop import wait_stop_requested


@attrs.define(eq=False)
class StopSignal:
    _event: trio.Event = attrs.field(init=False, factory=trio.Event)

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    async def forward_supervisor_stop(self) -> None:
        """Run inside the service: set this signal when its supervisor asks the child to stop
        (outside a supervised child this just sleeps until cancelled)."""
        await wait_stop_requested()
        self.set()
