"""Wake-ups: tell a polling loop "look now" instead of letting it sleep out its interval.

The store stays the source of truth, so a lost wake-up costs latency, never a task. See
docs/guide/design.md, "Wake-ups".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs
import trio

from ._hands import Hands


@attrs.define(eq=False)
class Wakeup:
    """A coalescing doorbell for one waiting loop."""

    rings: int = attrs.field(init=False, default=0)
    """How many times ``set`` was called (tests and stats read it)."""
    _event: trio.Event = attrs.field(init=False, factory=trio.Event)

    def set(self) -> None:
        self.rings += 1
        self._event.set()

    def clear(self) -> None:
        """Forget a ring (the consumer is about to look anyway)."""
        if self._event.is_set():
            self._event = trio.Event()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, at_most: float) -> bool:
        """Wait until rung or ``at_most`` seconds pass; ``True`` if rung. Consumes the ring."""
        with trio.move_on_after(at_most):
            await self._event.wait()
        rung = self._event.is_set()
        if rung:
            self._event = trio.Event()
        return rung


@attrs.define(eq=False)
class PoolWakeups:
    """Who to wake when the pool's work changes ("Wake-ups" in ``docs/guide/design.md``)."""

    lead: Wakeup = attrs.field(factory=Wakeup)
    capacity_wanted: bool = True
    """Does a freed slot ring the lead? The lead sets it after each sweep: only while tasks
    wait for capacity (a sweep left pending tasks unassigned, or read a full page) can a
    freed slot let it assign more. Otherwise every finished task would cost a sweep that
    finds nothing, in the store's writer, ahead of the next message's commits."""
    dead: Wakeup = attrs.field(factory=Wakeup)
    """The dead-notice loop's doorbell (``tasks_dead``)."""
    hands: Hands = attrs.field(factory=Hands)
    """The process's claiming workers, offered to its lead (``pool._hands``)."""
    on_parked: Callable[[float], None] | None = None
    """Told when a run of this process parks until a time (store clock): the process's
    reconciler (``Reconciler.parked_until``), which wakes it then."""
    _pending_news: bool = attrs.field(init=False, default=False)
    _workers: dict[str, Wakeup] = attrs.field(init=False, factory=dict)
    _leaderless: set[str] = attrs.field(init=False, factory=set)

    def worker(self, name: str) -> Wakeup:
        """``name``'s doorbell (made on first use; a restarted worker gets the same one)."""
        wakeup = self._workers.get(name)
        if wakeup is None:
            wakeup = self._workers[name] = Wakeup()
        return wakeup

    def set_leaderless(self, name: str, leaderless: bool) -> None:
        """A worker claiming pending tasks directly wants to hear about new pending tasks."""
        if leaderless:
            self._leaderless.add(name)
        else:
            self._leaderless.discard(name)

    def tasks_pending(self) -> None:
        """New pending tasks: the lead sweeps now; leaderless workers claim now."""
        self._pending_news = True
        self.lead.set()
        for name in self._leaderless:
            self.worker(name).set()

    def take_pending_news(self) -> bool:
        """Did ``tasks_pending`` ring since the last call? The lead asks as a sweep begins: a
        sweep rung by new pending tasks has something to assign, so it skips the read that
        would only find that out (``PoolLead._look``)."""
        news, self._pending_news = self._pending_news, False
        return news

    def tasks_assigned(self, workers: Iterable[str]) -> None:
        """The lead assigned tasks to ``workers``: each claims now."""
        for name in set(workers):
            self.worker(name).set()

    def capacity_freed(self) -> None:
        """A worker's slot is free (its outcome is stored): the lead sweeps if tasks wait for
        capacity (``capacity_wanted``); leaderless workers claim. A task the outcome put back
        to pending rings ``tasks_pending`` as well."""
        if self.capacity_wanted:
            self.lead.set()
        for name in self._leaderless:
            self.worker(name).set()

    def parked(self, until: float) -> None:
        """A run parked itself until ``until`` (store clock): its wake-up comes on time."""
        if self.on_parked is not None:
            self.on_parked(until)

    def tasks_dead(self) -> None:
        """Tasks went dead (a worker's last failure, an expired last lease, a refused reply):
        the dead-notice loop tells the gateway now."""
        self.dead.set()
