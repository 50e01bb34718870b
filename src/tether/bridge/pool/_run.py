"""Durable runs (issue #35): ``run = run_of(task)`` in a handler, ``await run.step(name, fn)``
runs ``fn`` once per task and records its JSON result in the custody store under the lease
fence; ``await run.sleep(seconds)`` waits durably, parking the task in ``waiting`` (the worker
slot freed) when the wait is long.

Replay is the model: a resumed or retried run runs the handler again from the top; a recorded
step returns its value without calling ``fn``. See docs/guide/durable-runs.md.

The ``Run`` object is the run's handle to the store; later issues (a question to the person,
limits) add their methods beside ``step`` and ``sleep``.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, NoReturn

import attrs
import trio

from ..._plumbing._tracing import Attributes, set_attributes
from ..._plumbing._when import iso_time
from ..custody._records import StepRecord
from ..custody._roles import LimitStore, StepStore
from ..custody._rules import Claim, StaleLease, Task
from ..custody._steps import (
    SLEEP_PREFIX,
    StepError,
    check_step_name,
    decode_step_value,
    encode_step_value,
)
from . import _limits
from ._ask import Asking, ParkedAsk, answer_from
from ._outage import until_stored
from ._tracing import WaitTrace, step_span, wait_span

DEFAULT_PARK_AFTER: Final = 30.0
"""Seconds: a durable sleep at most this long sleeps in place (the lease kept); a longer one
parks the task in ``waiting`` (``--park-after``)."""
STORE_RETRY_S: Final = 1.0
"""Seconds between tries of a step's record (or its read) while the store is unreachable."""


class Parked(Exception):
    """Raised by ``Run.sleep`` to end a run that parked itself: the worker moves its task to
    ``waiting`` (no attempt spent) and the handler runs again from the top once it is due.
    A handler should let it pass; the worker parks the task even if it is caught."""


def check_park_after(value: object) -> float:
    """``--park-after``: finite seconds >= 0 (0: every durable sleep parks)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"park_after must be finite seconds >= 0, got {value!r}")
    return float(value)


def step_key(task_id: str, name: str) -> str:
    """The idempotency key of step ``name`` of task ``task_id``: the same in every attempt and
    every process, different per task and name (32 hex digits after ``tether-``)."""
    digest = hashlib.sha256(f"{task_id}\0{name}".encode()).hexdigest()
    return f"tether-{digest[:32]}"


@attrs.define(eq=False)
class Run:
    """One run of a task: its durable steps and sleeps. Get it with ``run_of(task)``.

    Outside a worker (a handler called by hand, a test) a run is *detached*: steps run and
    return their JSON-shaped values, nothing is recorded, and sleeps sleep in place."""

    task: Task
    _store: StepStore | None = None
    _claim: Callable[[], Claim] | None = None
    _on_stale: Callable[[StaleLease], None] = lambda exc: None
    park_after: float = DEFAULT_PARK_AFTER
    _clock: Callable[[], float] = time.time
    _recorded: dict[str, StepRecord] | None = attrs.field(init=False, default=None)
    _loading: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _used: set[str] = attrs.field(init=False, factory=set)
    _ran_fresh: bool = attrs.field(init=False, default=False)
    _sleeps: int = attrs.field(init=False, default=0)
    parked_until: float | None = attrs.field(init=False, default=None)
    """Set once ``sleep`` parked the run: the wake-up time (store clock)."""
    parked_why: str | None = attrs.field(init=False, default=None)
    """What the parked run waits for (its task's recorded reason while ``waiting``)."""
    _asking: Asking = attrs.field(init=False, factory=Asking)
    limits: LimitStore | None = None
    """Where the run's flow control is kept (issue #38; None: a detached run, no limits)."""

    @property
    def durable(self) -> bool:
        """Does this run record its steps (is it a worker's run with a store)?"""
        return self._store is not None

    @property
    def replaying(self) -> bool:
        """Is the run still returning steps recorded by an earlier run of its task (the
        current step position was recorded before)? False once a step had to run, and before
        the first step (the records are read then). For logging: the code does the same."""
        if self._ran_fresh or not self._recorded:
            return False
        return bool(self._recorded.keys() - self._used)

    def key(self, name: str) -> str:
        """A stable idempotency key for step ``name``'s outside call (an ``Idempotency-Key``
        header, a booking reference): the same in every attempt of this task, different per
        task and name. It covers the one window a step can repeat in: the outside effect
        happened, the process died before the record committed."""
        return step_key(self.task.id, check_step_name(name))

    async def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` (a plain or async function) once for this task and
        return its result, recorded as JSON: a later run of the task gets the recorded value
        and ``fn`` is not called. An exception is not recorded (the step runs again next
        attempt); ``Retry``/``Permanent`` keep their meaning. ``StepError`` for a bad or
        repeated name or a result that is not JSON or too large; ``StaleLease`` (the run is
        cancelled) if the run lost its lease before the record committed."""
        name = check_step_name(name)
        with step_span(self.task, name) as traced:
            value, outcome = await self._step(name, fn, args, kwargs)
            set_attributes(traced, {"tether.outcome": outcome})
        return value

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` durably: the wake-up time is recorded as a step, so a resumed run
        returns at once once it has passed. Up to ``park_after`` seconds it sleeps in place;
        longer, the run ends (``Parked``), its task waits in ``waiting`` with no worker slot
        held and no attempt spent, and the handler runs again from the top when it is due."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds < math.inf
        ):
            raise ValueError(f"run.sleep needs finite seconds >= 0, got {seconds!r}")
        self._sleeps += 1
        name = f"{SLEEP_PREFIX}{self._sleeps}"
        with self.waiting("sleep") as traced:
            wake = float((await self._step(name, lambda: self._clock() + seconds, (), {}))[0])
            traced.until(wake)
            left = wake - self._clock()
            if left <= 0:
                return
            if self._store is None or left <= self.park_after:
                await trio.sleep(left)
                return
            raise self.park_at(wake, f"sleeping until {iso_time(wake)} (step {name})")

    @contextmanager
    def waiting(self, kind: str, attributes: Attributes | None = None) -> Iterator[WaitTrace]:
        """The block is a wait of kind ``kind`` (its ``tether.wait`` span): parked if the run
        parks in it (with its wake-up time), else returned or the exception leaving it."""
        with wait_span(self.task, kind, attributes) as traced:
            try:
                yield traced
            except Parked:
                if self.parked_until is not None:
                    traced.until(self.parked_until)
                traced.end("parked")
                raise

    # -- asks (issue #36: the rules and the replay are pool._ask's) ----------------------------

    async def ask(
        self,
        text: str,
        *,
        timeout: float,  # noqa: ASYNC109
        name: str | None = None,
        from_anyone: bool = False,
        from_senders: Sequence[str] | None = None,
    ) -> str:
        """Ask the person ``text`` and return their answer: the room's next message from the
        asking message's sender (other senders' messages queue as ordinary ones), or from
        anyone (``from_anyone=True``), or from one of ``from_senders``. The run ends here
        (``Parked``) and its task waits in ``waiting`` (no worker slot, no attempt spent);
        once the question is durably recorded the bridge posts it to the room, and the answer
        makes the task pending again: the handler runs again from the top and this ask
        returns the answer. ``AskTimeout`` once ``timeout`` seconds passed with no answer;
        ``AskUnsupported`` if the gateway cannot show questions. Each is recorded: every
        later run of the task gets the same. Asks are told apart by their position in the
        run, or by ``name`` (a step name)."""
        senders = answer_from(self.task.headers, from_anyone, from_senders)
        with self.waiting("ask"):
            return await self._asking.ask(self, text, timeout, name, senders)

    @property
    def parked_ask(self) -> ParkedAsk | None:
        """The question the run parked at (its worker records it with the park)."""
        return self._asking.parked

    @parked_ask.setter
    def parked_ask(self, value: ParkedAsk | None) -> None:
        self._asking.parked = value

    @property
    def step_store(self) -> StepStore | None:
        return self._store

    def now(self) -> float:
        """The store's clock."""
        return self._clock()

    def park_at(self, until: float, why: str) -> Parked:
        """Mark the run parked until ``until`` waiting for ``why``: the exception to raise."""
        self.parked_until, self.parked_why = until, why
        return Parked(f"task {self.task.id!r} parked: {why}")

    # -- flow control (issue #38): see pool._limits -------------------------------------------

    def limit(self, key: str, weight: float = 1) -> _limits.Limited:
        """``async with run.limit("openai:gpt-4o"):`` holds a permit of ``key`` (spending
        ``weight`` tokens of its bucket) for the block; ``await run.limit(key).pause(30)``
        stops the key for everyone on the store. See ``pool._limits``."""
        return _limits.limit(self, key, weight)

    async def acquire(self, key: str, weight: float = 1) -> _limits.Permit:
        """Wait for a permit of ``key`` (as ``limit``), held until ``permit.release()`` or
        the run's end."""
        return await _limits.acquire(self, key, weight)

    @property
    def claim_of(self) -> Callable[[], Claim] | None:
        """The run's current claim, read at each call (None outside a worker)."""
        return self._claim

    def lost(self, exc: StaleLease) -> None:
        """The run lost its lease (the store said so): its worker cancels it."""
        self._on_stale(exc)

    def park(self, until: float, why: str) -> NoReturn:
        """End the run parked until ``until`` (store clock): ``Parked``."""
        self.parked_until, self.parked_why = until, why
        raise Parked(f"task {self.task.id!r} parked: {why}")

    async def _step(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, str]:
        """The step's value, and whether it was ``recorded`` now, ``replayed`` from an earlier
        run's record or ``not recorded`` (a detached run)."""
        if name in self._used:
            raise StepError(
                f"step {name!r} ran twice in one run of task {self.task.id!r}: step names are "
                "unique per task (name a loop's steps 'search:1', 'search:2', ...)"
            )
        self._used.add(name)
        recorded = await self._records()
        if name in recorded:
            return decode_step_value(recorded[name].value), "replayed"
        self._ran_fresh = True
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        text, _ = encode_step_value(name, value)
        if self._store is None or self._claim is None:
            return decode_step_value(text), "not recorded"
        store, claim = self._store, self._claim
        try:  # the effect has happened: an outage delays its record, never fails the run
            record = await until_stored(
                lambda: store.record_step(claim(), name, text),
                what=f"recording step {name!r} of task {self.task.id}",
                pause=STORE_RETRY_S,
            )
        except StaleLease as exc:
            self._on_stale(exc)
            raise
        recorded[name] = record
        return decode_step_value(record.value), "recorded"

    async def _records(self) -> dict[str, StepRecord]:
        """The task's recorded steps, read once per run (at its first step)."""
        if self._recorded is None:
            async with self._loading:
                if self._recorded is None:
                    store, id = self._store, self.task.id
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


_RUNS: dict[int, tuple[Task, Run]] = {}
"""The run of each task object a worker is running now, by the object's identity (as
``_progress``: two attempts of one task are two objects)."""


def run_of(task: Task) -> Run:
    """The durable run ``task`` is in (a detached one outside a worker's run)."""
    entry = _RUNS.get(id(task))
    if entry is not None and entry[0] is task:
        return entry[1]
    return Run(task)


@contextmanager
def running(task: Task, run: Run) -> Iterator[Run]:
    """Make ``run`` what ``run_of(task)`` returns while the block runs."""
    key = id(task)
    _RUNS[key] = (task, run)
    try:
        yield run
    finally:
        if _RUNS.get(key, (None, None))[1] is run:
            del _RUNS[key]
