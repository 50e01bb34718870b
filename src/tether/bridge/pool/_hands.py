"""Hands: the lead's own process's workers take the tasks it claims for them in its sweep.

A lead and workers in one process (a bridge, ``tether worker run``) share a ``PoolWakeups``.
Each worker, while it claims, offers a hand there: its free slots and a way to start a run.
The lead reserves those slots before a sweep's transaction, the store claims for each hand
what it assigns that worker (``Store.plan_assign_and_claim``), and the lead starts the runs
at once: a pending task reaches its run through one transaction, with no claim of the
worker's own and no wake-up (issue 49). Nothing here decides custody: the claims are the
store's, fenced as the worker's own would be; a reserved slot not filled goes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import attrs
import trio

from ..custody._records import Hand
from ..custody._rules import Claim


@attrs.define(eq=False)
class WorkerHand:
    """What a claiming worker lends the lead: its slots, and ``start(claim)``, which runs a
    claim holding one of them (the slot is freed when that run ends)."""

    slots: trio.Semaphore
    start: Callable[[Claim], None]
    quarantines: bool = False
    _reserved: int = attrs.field(init=False, default=0)
    _settled: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        self._settled.set()

    def reserve(self) -> int:
        """Take every free slot for the lead's next transaction; how many."""
        n = 0
        while self.slots.value > 0:
            self.slots.acquire_nowait()
            n += 1
        if n:
            self._reserved += n
            self._settled = trio.Event()
        return n

    def settle(self, reserved: int, claims: Sequence[Claim]) -> None:
        """Start a run for each of ``claims`` on ``reserved`` slots, and free the rest."""
        try:
            for claim in claims:
                self.start(claim)
        finally:
            for _ in range(reserved - len(claims)):
                self.slots.release()
            self._reserved -= reserved
            if self._reserved == 0:
                self._settled.set()

    async def settled(self) -> None:
        """Return once no reservation of the lead is outstanding: a worker leaving its claim
        loop waits here, so the claims of a transaction in flight still find their runs."""
        await self._settled.wait()


@attrs.define(eq=False)
class Hands:
    """The hands offered in one process (``PoolWakeups.hands``)."""

    _offered: dict[str, WorkerHand] = attrs.field(init=False, factory=dict)
    handed: int = attrs.field(init=False, default=0)
    """Claims the lead handed to workers so far (tests and benchmarks read it)."""

    def offer(self, worker: str, hand: WorkerHand) -> None:
        self._offered[worker] = hand

    def withdraw(self, worker: str) -> None:
        self._offered.pop(worker, None)

    def __bool__(self) -> bool:
        return bool(self._offered)

    @contextmanager
    def reserved(self) -> Iterator[_Reservation]:
        """Reserve every offered hand's free slots for one transaction: the block passes the
        reservation's ``hands`` to the store and ``deliver``s what it claimed; whatever was
        not delivered (an error, nothing claimed) is freed on the way out."""
        taken = {name: (hand, hand.reserve()) for name, hand in self._offered.items()}
        reservation = _Reservation({name: (h, n) for name, (h, n) in taken.items() if n})
        try:
            yield reservation
        finally:
            reservation.close()
            self.handed += reservation.handed


@attrs.define(eq=False)
class _Reservation:
    _taken: dict[str, tuple[WorkerHand, int]]
    _claims: Mapping[str, Sequence[Claim]] = attrs.field(init=False, factory=dict)
    handed: int = attrs.field(init=False, default=0)

    @property
    def hands(self) -> dict[str, Hand]:
        """What the store may claim for, by worker."""
        return {name: Hand(n, hand.quarantines) for name, (hand, n) in self._taken.items()}

    def deliver(self, claims: Mapping[str, Sequence[Claim]]) -> None:
        """The store's claims: each starts its run as the block ends (``close``)."""
        self._claims = claims

    def close(self) -> None:
        for name, (hand, n) in self._taken.items():
            claims = self._claims.get(name, ())
            hand.settle(n, claims)
            self.handed += len(claims)
        self._taken = {}
