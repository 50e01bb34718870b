"""A run's journal: what it records while it runs (its steps, asks and permits) and where it
stops (a park), each through the store under its claim's fence.

Replay is the model: a resumed or retried run runs the handler again from the top, and a
recorded step returns its value without calling its function. The journal reads the task's
records once per run, at its first step. One journal per run: the author's ``Run`` records
through it, and the worker's ``ClaimedRun`` reads from it where the run stopped.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import attrs
import trio

from ..._plumbing._tracing import Attributes
from ..custody._asks import senders_of
from ..custody._children import SPAWN_PREFIX, ChildView, SpawnError
from ..custody._events import Event
from ..custody._records import StepRecord
from ..custody._roles import JournalStore
from ..custody._rules import Claim, StaleLease, Task
from ..custody._steps import MAX_STEP_BYTES, StepError, check_step_name, decode_step_value
from ..custody._versions import (
    PATCH_PREFIX,
    argument_mismatch,
    call_of,
    fingerprint,
    has_passed,
    passed_over,
    spawn_print,
)
from ._bounds import encode_step
from ._outage import until_stored
from ._spans import WaitTrace, wait_span
from ._versions import StepMismatch

T = TypeVar("T")

DEFAULT_PARK_AFTER: Final = 30.0
"""Seconds: a wait at most this long waits in place (the lease kept); a longer one parks the
task in ``waiting`` (``--park-after``)."""
STORE_RETRY_S: Final = 1.0
"""Seconds between tries of a step's record (or its read) while the store is unreachable."""


class Parked(Exception):
    """Ends a run that parked itself (a long sleep, a question, a permit it must wait for):
    its task waits in ``waiting`` (no attempt spent) and the handler runs again from the top
    once it is due. A handler should let it pass; the run is parked even if it is caught."""


def check_park_after(value: object) -> float:
    """``--park-after``: finite seconds >= 0 (0: every long wait parks)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"park_after must be finite seconds >= 0, got {value!r}")
    return float(value)


@attrs.frozen
class ParkedAsk:
    """The question a run stopped at: recorded with its park, in one transaction."""

    name: str
    text: str
    until: float
    answer_from: tuple[str, ...] | None = attrs.field(default=None, converter=senders_of)
    """Whose message answers it (None: anyone's)."""


@attrs.frozen
class Park:
    """Where a run stopped: due again at ``until`` (store clock), waiting for ``why``, and at
    which question if it asked one, or for which children if it joined them."""

    until: float
    why: str
    ask: ParkedAsk | None = None
    join: tuple[str, ...] = ()
    """The children a join waits for (issue #51): the task wakes once they are all done."""
    event: str | None = None
    """The key a wait for an event waits on (issue #52): an event of it wakes the task."""
    taken: tuple[str, ...] = ()
    """The events of that key the task's runs took already (not waited for again)."""


@attrs.frozen
class Fence:
    """A run's claim, read at each call (renewals replace it), and what a refused one means:
    the run lost its lease, and its owner cancels it."""

    claim: Callable[[], Claim]
    lost: Callable[[StaleLease], None] = lambda exc: None


@attrs.define(eq=False)
class Journal:
    """What one run of ``task`` records, through ``store`` under ``fence``. Without a store
    the run is *detached* (a handler called by hand, a test): steps run and are not recorded,
    and waits wait in place."""

    task: Task
    store: JournalStore | None = None
    fence: Fence | None = None
    park_after: float = DEFAULT_PARK_AFTER
    max_step_bytes: int = MAX_STEP_BYTES
    """The largest result a step records (``--max-step-bytes``): over it ``TooLarge``."""
    clock: Callable[[], float] = time.time
    """The store's clock: due times are on it."""
    version: str | None = None
    """The agent version this run records under (issue #53; None: unversioned)."""
    parked: Park | None = attrs.field(init=False, default=None)
    """Set once the run parked itself: where, and why."""
    mismatch: StepMismatch | None = attrs.field(init=False, default=None)
    """Set once a step did not match its record (issue #53): the run fails with it, even if
    the handler caught it."""
    _recorded: dict[str, StepRecord] | None = attrs.field(init=False, default=None)
    _loading: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _used: set[str] = attrs.field(init=False, factory=set)
    _ran_fresh: bool = attrs.field(init=False, default=False)

    @property
    def durable(self) -> bool:
        return self.store is not None and self.fence is not None

    @property
    def replaying(self) -> bool:
        """Is the run still at steps an earlier run recorded? (See ``Run.replaying``.)"""
        if self._ran_fresh or not self._recorded:
            return False
        return has_passed(self._recorded, self._used)

    def now(self) -> float:
        return self.clock()

    def park(
        self,
        until: float,
        why: str,
        ask: ParkedAsk | None = None,
        join: Sequence[str] = (),
        *,
        event: str | None = None,
        taken: Sequence[str] = (),
    ) -> Parked:
        """Mark the run parked until ``until``, waiting for ``why`` (or for the children
        ``join``, or an event of ``event`` not in ``taken``): the exception to raise."""
        self.parked = Park(until, why, ask, tuple(join), event, tuple(taken))
        return Parked(f"task {self.task.id!r} parked: {why}")

    async def fenced(self, call: Callable[[JournalStore, Claim], Awaitable[T]]) -> T:
        """``call(store, claim)``: a store call under the run's fence. A ``StaleLease`` tells
        the run's owner (it cancels the run) and is raised."""
        assert self.store is not None
        assert self.fence is not None
        try:
            return await call(self.store, self.fence.claim())
        except StaleLease as exc:
            self.fence.lost(exc)
            raise

    @contextmanager
    def waiting(self, kind: str, attributes: Attributes | None = None) -> Iterator[WaitTrace]:
        """The block is a wait of kind ``kind`` (its ``tether.wait`` span): parked if the run
        parks in it (with its due time), else returned or the exception leaving it."""
        with wait_span(self.task, kind, attributes) as traced:
            try:
                yield traced
            except Parked:
                if self.parked is not None:
                    traced.until(self.parked.until)
                traced.end("parked")
                raise

    async def step(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, str]:
        """Step ``name``'s value, and whether it was ``recorded`` now, ``replayed`` from an
        earlier run's record or ``not recorded`` (a detached run)."""
        self._still_matching()
        self._use(name)
        recorded = await self._records()
        own = name.startswith("~")
        asked = None if own else fingerprint(args, kwargs)
        call = None if own else call_of(fn)
        if name in recorded:
            if asked is not None:
                self._check(argument_mismatch(recorded[name], self.version, asked))
            return decode_step_value(recorded[name].value), "replayed"
        if asked is not None and passed_over(recorded, self._used, name, self.version, call, asked):
            await trio.lowlevel.checkpoint()  # parallel siblings asked at once say so first
            self._check(passed_over(recorded, self._used, name, self.version, call, asked))
        self._ran_fresh = True
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        text, _ = encode_step(name, value, self.max_step_bytes)
        if not self.durable:
            return decode_step_value(text), "not recorded"
        # the effect has happened: an outage delays its record, never fails the run
        record = await until_stored(
            lambda: self.fenced(
                lambda store, claim: store.record_step(
                    claim, name, text, version=self.version, fingerprint=asked, call=call
                )
            ),
            what=f"recording step {name!r} of task {self.task.id}",
            pause=STORE_RETRY_S,
        )
        recorded[name] = record
        return decode_step_value(record.value), "recorded"

    async def spawn(self, name: str, child: Task) -> str:
        """The id of the child spawned as step ``name`` (``~spawn:...``): the recorded one if
        an earlier run of the task spawned it, else ``child`` spawned now, in one fenced
        transaction with its record (``JournalStore.spawn``)."""
        self._still_matching()
        self._use(name)
        recorded = await self._records()
        if name in recorded:
            self._check(argument_mismatch(recorded[name], self.version, spawn_print(child)))
        else:
            self._ran_fresh = True
            if not self.durable:
                raise SpawnError(
                    f"task {self.task.id!r}: only a worker's run can spawn a child (this run "
                    "is detached: called outside a worker)"
                )
            spawn_name = name.removeprefix(SPAWN_PREFIX)
            recorded[name] = await until_stored(
                lambda: self.fenced(
                    lambda store, claim: store.spawn(claim, spawn_name, child, version=self.version)
                ),
                what=f"spawning {name!r} of task {self.task.id}",
                pause=STORE_RETRY_S,
            )
        return str(decode_step_value(recorded[name].value))

    async def children(self, ids: Sequence[str]) -> Sequence[ChildView | None]:
        """The children ``ids`` as the store has them now (a join's read)."""
        store = self.store
        assert store is not None
        return await until_stored(
            lambda: store.children(self.task.id, ids),
            what=f"reading the children of task {self.task.id}",
            pause=STORE_RETRY_S,
        )

    async def take_event(self, key: str, taken: Sequence[str]) -> Event | None:
        """The first event of ``key`` not in ``taken`` the store keeps now (a wait's read)."""
        store = self.store
        assert store is not None
        return await until_stored(
            lambda: store.take_event(key, taken),
            what=f"reading the events of {key!r} for task {self.task.id}",
            pause=STORE_RETRY_S,
        )

    async def patched(self, name: str, asked: Collection[str] = ()) -> bool:
        """``run.patched(name)``: True unless an earlier run of the task had gone past this
        point (it recorded something this run has not reached yet, its questions included:
        this run asked ``asked``: the old code's path), recorded as ``~patch:<name>`` so every
        later run decides the same."""
        self._still_matching()
        record = check_step_name(f"{PATCH_PREFIX}{name}", own=True)
        self._use(record)
        recorded = await self._records()
        if record in recorded:
            return bool(decode_step_value(recorded[record].value))
        asks: list[str] = []
        if self.store is not None and self.durable:
            store, id = self.store, self.task.id
            found = await until_stored(
                lambda: store.asks(id),
                what=f"reading the asks of task {id}",
                pause=STORE_RETRY_S,
            )
            asks = [ask.name for ask in found]
        decided = not has_passed(recorded, self._used, asks, asked)
        if self.durable:
            text = "true" if decided else "false"
            recorded[record] = await until_stored(
                lambda: self.fenced(
                    lambda store, claim: store.record_step(
                        claim, record, text, version=self.version
                    )
                ),
                what=f"recording patch {name!r} of task {self.task.id}",
                pause=STORE_RETRY_S,
            )
        return decided

    def _still_matching(self) -> None:
        """A run whose step did not match goes no further, even if its handler caught it:
        no later step's effect happens."""
        if self.mismatch is not None:
            raise self.mismatch

    def _check(self, why: str | None) -> None:
        """Fail the run with ``StepMismatch(why)`` if there is a ``why``."""
        if why is not None:
            self.mismatch = StepMismatch(f"task {self.task.id!r}: {why}")
            raise self.mismatch

    async def recorded(self) -> Mapping[str, StepRecord]:
        """Every step the task's runs recorded, by name."""
        return await self._records()

    def _use(self, name: str) -> None:
        if name in self._used:
            raise StepError(
                f"step {name!r} ran twice in one run of task {self.task.id!r}: step names are "
                "unique per task (name a loop's steps 'search:1', 'search:2', ...)"
            )
        self._used.add(name)

    async def _records(self) -> dict[str, StepRecord]:
        if self._recorded is None:
            async with self._loading:
                if self._recorded is None:
                    store, id = self.store, self.task.id
                    found = (
                        []
                        if store is None
                        else await until_stored(
                            lambda: store.steps(id),
                            what=f"reading the steps of task {id}",
                            pause=STORE_RETRY_S,
                        )
                    )
                    self._recorded = {record.name: record for record in found}
        return self._recorded
