"""What a handler's run is to its author: ``run = run_of(task)``; ``await run.step(name, fn)``
runs ``fn`` once per task and records its JSON result in the custody store under the lease
fence; ``await run.sleep(seconds)`` waits durably; ``await run.ask(text, timeout=...)`` asks the
person; ``async with run.limit(key):`` holds a permit of a limit shared by the store.

Replay is the model: a resumed or retried run runs the handler again from the top; a recorded
step returns its value without calling ``fn``. What the run records goes through its journal
(``_journal``); what becomes of it is its worker's ``ClaimedRun``'s. See
docs/guide/durable-runs.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from ..._plumbing._tracing import set_attributes
from ..._plumbing._when import iso_time
from ..custody._roles import JournalStore
from ..custody._rules import Claim, Task
from ..custody._steps import SLEEP_PREFIX, check_step_name
from . import _permits
from ._asks import Asking, answer_from
from ._children import Child, Joining
from ._events import Waits
from ._journal import DEFAULT_PARK_AFTER, Fence, Journal
from ._spans import step_span


def step_key(task_id: str, name: str) -> str:
    """The idempotency key of step ``name`` of task ``task_id``: the same in every attempt and
    every process, different per task and name (32 hex digits after ``tether-``)."""
    digest = hashlib.sha256(f"{task_id}\0{name}".encode()).hexdigest()
    return f"tether-{digest[:32]}"


@attrs.define(eq=False)
class Run:
    """One run of a task, as its handler sees it: its durable steps, sleeps, asks and permits.
    Get it with ``run_of(task)``.

    Outside a worker (a handler called by hand, a test) a run is *detached*: steps run and
    return their JSON-shaped values, nothing is recorded, and sleeps sleep in place."""

    task: Task
    _journal: Journal = attrs.field(
        default=attrs.Factory(lambda self: Journal(self.task), takes_self=True)
    )
    _sleeps: int = attrs.field(init=False, default=0)
    _asking: Asking = attrs.field(init=False, factory=Asking)
    _joining: Joining = attrs.field(init=False, factory=Joining)
    _waits: Waits = attrs.field(init=False, factory=Waits)

    @property
    def durable(self) -> bool:
        """Does this run record its steps (is it a worker's run with a store)?"""
        return self._journal.durable

    @property
    def replaying(self) -> bool:
        """Is the run still returning steps recorded by an earlier run of its task (the
        current step position was recorded before)? False once a step had to run, and before
        the first step (the records are read then). For logging: the code does the same."""
        return self._journal.replaying

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
        repeated name or a result that is not JSON; ``TooLarge`` for a result over
        ``--max-step-bytes``; ``StepMismatch`` if the step was recorded with other arguments
        or another version went on to another step (issue #53); ``StaleLease`` (the run is
        cancelled) if the run lost its lease before the record committed."""
        name = check_step_name(name)
        with step_span(self.task, name) as traced:
            value, outcome = await self._journal.step(name, fn, args, kwargs)
            set_attributes(traced, {"tether.outcome": outcome})
        return value

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` durably: the wake-up time is recorded as a step, so a resumed run
        returns at once once it has passed. Up to the worker's ``park_after`` seconds it
        sleeps in place; longer, the run ends (``Parked``), its task waits in ``waiting`` with
        no worker slot held and no attempt spent, and the handler runs again from the top
        when it is due."""
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds < math.inf
        ):
            raise ValueError(f"run.sleep needs finite seconds >= 0, got {seconds!r}")
        self._sleeps += 1
        name = f"{SLEEP_PREFIX}{self._sleeps}"
        journal = self._journal
        with journal.waiting("sleep") as traced:
            wake = float((await journal.step(name, lambda: journal.now() + seconds, (), {}))[0])
            traced.until(wake)
            left = wake - journal.now()
            if left <= 0:
                return
            if not journal.durable or left <= journal.park_after:
                await trio.sleep(left)
                return
            raise journal.park(wake, f"sleeping until {iso_time(wake)} (step {name})")

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
        with self._journal.waiting("ask"):
            return await self._asking.ask(self._journal, text, timeout, name, senders)

    async def spawn(
        self, name: str, body: str, *, queue: str | None = None, room: str | None = None
    ) -> Child:
        """Spawn a child run: a task of its own (``body`` its message) in ``queue`` (default:
        this task's), run by a worker serving that queue (``--queues``), with this task's
        tenant, priority and trace. Recorded as a step in the transaction that
        creates the child: a resumed run gets the same child back and spawns nothing
        (``name`` names it, as a step). Its reply is never delivered to the gateway:
        ``join`` returns it to this run. ``SpawnError`` past 8 levels of children or 1,000
        children of one run."""
        return await self._joining.spawn(self._journal, name, body, queue, room)

    async def join(self, *children: Child, timeout: float) -> list[str]:  # noqa: ASYNC109
        """The replies of ``children``, in order, once every one is done. Until then the run
        ends here (``Parked``) and its task waits in ``waiting`` (no worker slot, no attempt
        spent); the last child's outcome wakes it and the handler runs again from the top,
        where this join returns. ``ChildFailed`` names the first dead child and its reason;
        ``JoinTimeout`` once ``timeout`` seconds passed (a durable deadline) with children
        still running. What it returned is recorded: every later run gets the same."""
        return await self._joining.join(self._journal, children, timeout)

    async def gather(
        self,
        bodies: Mapping[str, str],
        *,
        timeout: float,  # noqa: ASYNC109
        queue: str | None = None,
    ) -> dict[str, str]:
        """Spawn a child per ``{name: body}`` and join them all: ``{name: reply}``."""
        children = [
            await self.spawn(name, body, queue=queue) for name, body in dict(bodies).items()
        ]
        replies = await self.join(*children, timeout=timeout)
        return {child.name: reply for child, reply in zip(children, replies, strict=True)}

    async def wait_for(self, key: str, *, timeout: float) -> Any:  # noqa: ASYNC109
        """The body (JSON) of the next event of ``key`` this task has not had: one kept
        already (it came before the wait, within its TTL) or the next to come. Until one
        comes the run ends here (``Parked``) and its task waits in ``waiting`` (no worker
        slot, no attempt spent); the event wakes it and the handler runs again from the top,
        where this wait returns. ``WaitTimeout`` once ``timeout`` seconds passed (a durable
        deadline). What it returned is recorded: every later run gets the same."""
        return await self._waits.wait_for(self._journal, key, timeout)

    async def patched(self, name: str) -> bool:
        """Mark a deliberate change of the code (issue #53), as Temporal's ``patched``:
        ``if await run.patched("ask-twice"): <new code> else: <old code>``. True for a run
        that had not passed this point under the old code (a new run, or one resumed before
        it got here); False for one that had (it recorded steps further on: it replays them
        along the old path). The answer is recorded: every later run of the task gets the
        same, so a run never switches path halfway. Once no run from before the change is in
        flight (``tether store list --version``), the old branch and the call can go."""
        return await self._journal.patched(check_step_name(name), self._asking.used)

    def limit(self, key: str, weight: float = 1) -> _permits.Limited:
        """``async with run.limit("openai:gpt-4o"):`` holds a permit of ``key`` (spending
        ``weight`` tokens of its bucket) for the block; ``await run.limit(key).pause(30)``
        stops the key for everyone on the store. See ``runs._permits``."""
        return _permits.limit(self._journal, key, weight)

    async def acquire(self, key: str, weight: float = 1) -> _permits.Permit:
        """Wait for a permit of ``key`` (as ``limit``), held until ``permit.release()`` or
        the run's end."""
        return await _permits.acquire(self._journal, key, weight)


def run_for(claim: Claim, store: JournalStore, *, park_after: float = DEFAULT_PARK_AFTER) -> Run:
    """A durable run of ``claim``'s task recording through ``store``, for code that holds a
    claim itself (a notebook, a benchmark); a worker's runs are made by the worker."""
    journal = Journal(
        claim.task, store, Fence(lambda: claim), park_after=park_after, clock=store.clock
    )
    return Run(claim.task, journal)
