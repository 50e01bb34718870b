"""A result another process stored wakes delivery at once (the store's hint), at most after
the idle maximum otherwise (virtual time)."""

from __future__ import annotations

from collections.abc import Iterable

import trio
import trio.testing

from tether.bridge.pool._idle import IDLE_MAXIMUM
from tether.bridge.service._store_wakeups import relay_results, relay_work


class Hinting:
    """A store whose notifications the test sends."""

    def __init__(self) -> None:
        self.heard = trio.Event()
        self.waits = 0

    async def wait_for_results(self, seconds: float) -> bool:
        self.waits += 1
        with trio.move_on_after(seconds):
            await self.heard.wait()
            self.heard = trio.Event()
            return True
        return False


class Delivery:
    def __init__(self) -> None:
        self.nudges: list[float] = []

    def nudge(self) -> None:
        self.nudges.append(trio.current_time())


async def test_a_notified_result_nudges_delivery_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, delivery = Hinting(), Delivery()
    async with trio.open_nursery() as nursery:
        await nursery.start(relay_results, store, delivery)
        await trio.sleep(10 * IDLE_MAXIMUM)  # silence: no nudge, and the wait is not a spin
        assert delivery.nudges == []
        assert store.waits <= 11
        at = trio.current_time()
        store.heard.set()
        await trio.testing.wait_all_tasks_blocked()
        assert delivery.nudges == [at]
        nursery.cancel_scope.cancel()


class Ringing:
    def __init__(self) -> None:
        self.rings: list[float] = []
        self.assigned: list[tuple[float, list[str]]] = []

    def tasks_pending(self) -> None:
        self.rings.append(trio.current_time())

    def tasks_assigned(self, workers: Iterable[str]) -> None:
        self.assigned.append((trio.current_time(), list(workers)))


class WorkHinting:
    def __init__(self) -> None:
        self.heard = trio.Event()

    async def wait_for_work(self, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await self.heard.wait()
            self.heard = trio.Event()
            return True
        return False


async def test_work_made_elsewhere_rings_the_lead_and_this_processs_workers_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, wakeups = WorkHinting(), Ringing()
    async with trio.open_nursery() as nursery:
        await nursery.start(relay_work, store, wakeups, ["b-w1", "b-w2"])
        await trio.sleep(10 * IDLE_MAXIMUM)
        assert wakeups.rings == []
        at = trio.current_time()
        store.heard.set()  # another bridge ingested, or a lead elsewhere assigned to b-w2
        await trio.testing.wait_all_tasks_blocked()
        assert wakeups.rings == [at]
        assert wakeups.assigned == [(at, ["b-w1", "b-w2"])]
        nursery.cancel_scope.cancel()
