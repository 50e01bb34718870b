"""Quarantine: a suspect's run in a child process, so only the task's own crash is proof.

A suspect (a task in flight when its worker's process died) may kill whatever process runs it,
or may have been an innocent bystander of someone else's crash; from the worker's process alone
the two look the same. So the worker runs it in a child (``_quarantine_child``) started with
the same agent spec, and stays alive itself: if the child dies while it runs the task (a
signal, or a non-zero exit) the worker saw it happen, and that death is the task's doing. If
the worker's own process dies, nobody saw anything, and nobody is blamed.

The child reports progress and the reply over a pipe (framed JSON, ``_quarantine_wire``); the
worker keeps the lease, the fence and every store write. ``run_in_quarantine`` returns the
reply, raises what the agent raised (``Retry``, ``Permanent``, ``AgentError``, or
``QuarantineFailure`` for any other exception), or raises ``QuarantineDeath`` naming the
signal or exit code. Cancelled (a timeout, a stop), it kills the child first: that death is
the worker's doing and is never reported as the task's.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import attrs
import trio

from ..._backoff import Backoff
from ..custody._asks import AskRecord
from ..custody._children import ChildView, SpawnError
from ..custody._conversation import Conversation
from ..custody._crashes import DEFAULT_MAX_QUARANTINE_DEATHS, check_max_quarantine_deaths
from ..custody._events import Event
from ..custody._limits import Granted, NoPermit
from ..custody._records import StepRecord
from ..custody._rules import InvalidTask, StaleLease, Task
from ..custody._steps import MAX_STEP_BYTES
from ..runs._asks import asks_fields, parked_from
from ..runs._claimed import ClaimedRun, NotRun, Runner, RunnerDied
from ..runs._journal import Journal, Parked, ParkedAsk
from ..runs._reply import AgentError, Reply
from ..runs._retry import Permanent, Retry
from ._quarantine_env import check_env_names, child_environ
from ._quarantine_limits import ChildLimits
from ._quarantine_limits import serve as serve_limits
from ._quarantine_steps import steps_fields
from ._quarantine_wire import (
    EXIT_BAD_START,
    EXIT_OUT_OF_MEMORY,
    PROTOCOL,
    Deframer,
    conversation_fields,
    encode,
    task_fields,
    task_from,
)

CHILD_MODULE: Final = "tether.bridge.pool._quarantine_child"
DEFAULT_QUARANTINE_PROCESSES: Final = 2
"""Quarantine children one worker process runs at most at once."""
START_RETRY_MAXIMUM: Final = 60.0
"""Seconds a process waits at most before it starts a quarantine child again after children
failed to start (1 s doubling): a broken agent spec costs a Python start-up a minute, not one
every few seconds, and its error is logged as rarely."""

OnChildProgress = Callable[[str | None, str | None], None]
"""Told ``(status, partial)`` each time the child reports new progress."""


class QuarantineDeath(Exception):
    """The quarantine child died while it ran the task: the task's doing (the proof)."""

    def __init__(self, returncode: int, memory_limit: int = 0) -> None:
        self.returncode = returncode
        self.signal: signal.Signals | None = None
        if returncode < 0:
            try:
                self.signal = signal.Signals(-returncode)
            except ValueError:
                pass
        self.memory_limit = memory_limit
        super().__init__(death_reason(returncode, memory_limit))


class QuarantineFailure(Exception):
    """The agent raised in its quarantine child (an ordinary failed attempt); the message is
    the child's ``Type: message``."""


class QuarantineStartError(RuntimeError):
    """The child could not start the agent (not the task's doing: nothing counts)."""


def death_reason(returncode: int, memory_limit: int = 0) -> str:
    """How a child died, for a person: the signal by name, or the exit code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"its quarantine process was killed by {name}"
    if returncode == EXIT_OUT_OF_MEMORY:
        return (
            f"its quarantine process ran out of memory (limit {memory_limit // 2**20} MiB, "
            f"--quarantine-memory) and exited with code {EXIT_OUT_OF_MEMORY}"
        )
    if returncode == 0:
        return "its quarantine process exited (code 0) without a reply"
    return f"its quarantine process exited with code {returncode}"


@attrs.frozen
class QuarantineSpec:
    """How a worker starts its quarantine children: the agent spec, the memory limit (bytes
    of address space, ``RLIMIT_AS``; 0: none) and the environment variables the agent reads
    beyond the base ones (names, or prefixes ending ``*``: ``_quarantine_env``)."""

    agent: str
    memory: int = 0
    env: tuple[str, ...] = attrs.field(default=(), converter=check_env_names)


async def run_in_quarantine(
    spec: QuarantineSpec,
    task: Any,
    *,
    on_progress: OnChildProgress | None = None,
    on_started: Callable[[int], None] | None = None,
    steps: ChildSteps | None = None,
) -> Reply:
    """Run ``task`` (a ``Task``) in a new quarantine child and return its reply (see the
    module docstring for what it raises)."""
    argv = [sys.executable, "-m", CHILD_MODULE, spec.agent, str(os.getpid()), str(spec.memory)]
    process = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_environ(os.environ, spec.env),  # no secret of the worker's (issue #48)
    )
    assert process.stdin is not None
    assert process.stdout is not None
    if on_started is not None:
        on_started(process.pid)
    frames = Deframer()
    outcome: dict[str, Any] | None = None
    try:
        await process.stdin.send_all(_task_frame(task, steps))
        ready = False
        while outcome is None:
            data = await process.stdout.receive_some(65536)
            if not data:
                break
            for message in frames.feed(data):
                kind = message["kind"]
                if kind == "ready":
                    ready = _speaks(message)
                elif kind in ("reply", "error") or (kind == "parked" and steps is not None):
                    if steps is not None and kind == "parked":
                        _note_parked(steps, message)
                    outcome = message
                else:
                    await _serve(process.stdin, message, steps, on_progress)
        await process.stdin.aclose()  # the child leaves at EOF (if it has not already)
        returncode = await process.wait()
    except BaseException:
        with trio.CancelScope(shield=True):
            process.kill()  # cancelled or broken: the worker's doing, never the task's
            await process.wait()
            await process.stdout.aclose()
        raise
    await process.stdout.aclose()
    if outcome is None:
        if not ready:  # it never took the task: whatever killed it, the task did not
            how = death_reason(returncode, spec.memory).removeprefix("its quarantine process ")
            raise QuarantineStartError(
                f"the quarantine child could not start agent {spec.agent!r}: it {how}"
                + (" (see its stderr)" if returncode == EXIT_BAD_START else "")
            )
        raise QuarantineDeath(returncode, spec.memory)
    return _outcome(outcome)


def _task_frame(task: Any, steps: ChildSteps | None) -> bytes:
    """The ``task`` frame: the task, its recorded steps and asks (its conversation is asked
    for when the run reads it: a ``conversation`` frame)."""
    return encode(
        "task",
        **task_fields(task),
        steps=[] if steps is None else steps_fields(steps.recorded),
        asks=[] if steps is None else asks_fields(steps.asks),
        park_after=math.inf if steps is None else steps.park_after,
        max_step_bytes=MAX_STEP_BYTES if steps is None else steps.max_step_bytes,
        version=None if steps is None else steps.version,
    )


async def _serve(
    stdin: trio.abc.SendStream,
    message: dict[str, Any],
    steps: ChildSteps | None,
    on_progress: OnChildProgress | None,
) -> None:
    """Do what a child's frame asks of its parent mid-run: show its progress, record a step,
    read the conversation, take, give back or pause a permit (answered on ``stdin`` where an
    answer is due)."""
    kind = message["kind"]
    if kind == "progress" and on_progress is not None:
        on_progress(message.get("status"), message.get("partial"))
    elif kind == "step" and steps is not None:
        await stdin.send_all(await _record(steps, message))
    elif kind == "spawn" and steps is not None and steps.spawn is not None:
        await stdin.send_all(await _spawn(steps.spawn, message))
    elif kind == "children" and steps is not None and steps.children is not None:
        found = await steps.children([str(id) for id in message.get("ids") or ()])
        rows = [None if v is None else [v.id, v.state.value, v.result, v.reason] for v in found]
        await stdin.send_all(encode("children_ok", n=message.get("n"), children=rows))
    elif kind == "event" and steps is not None and steps.take_event is not None:
        event = await steps.take_event(
            str(message["key"]), [str(id) for id in message.get("taken") or ()]
        )
        row = None if event is None else [event.id, event.key, event.body, event.at, event.until]
        await stdin.send_all(encode("event_ok", n=message.get("n"), event=row))
    elif kind == "conversation" and steps is not None:
        talk = Conversation() if steps.conversation is None else await steps.conversation()
        await stdin.send_all(
            encode("conversation_ok", n=message.get("n"), **conversation_fields(talk))
        )
    elif kind in ("permit", "release", "pause") and steps is not None and steps.limits is not None:
        answer = await serve_limits(steps.limits, message)
        if answer is not None:
            await stdin.send_all(encode(**answer))


def _note_parked(steps: ChildSteps, message: dict[str, Any]) -> None:
    """The child's run parked: where, and at which question (issue #36) or for which
    children (issue #51)."""
    why, asked = str(message.get("why") or "parked"), parked_from(message)
    join, until = [str(id) for id in message.get("join") or ()], float(message["until"])
    event, taken = message.get("event"), [str(id) for id in message.get("taken") or ()]
    if event is not None:
        steps.parked(until, why, event=str(event), taken=taken)
    elif join:
        steps.parked(until, why, asked, join)
    elif asked is None:
        steps.parked(until, why)
    else:
        steps.parked(until, why, asked)


async def _spawn(
    spawn: Callable[[str, Task], Awaitable[StepRecord]], message: dict[str, Any]
) -> bytes:
    """Spawn the child a quarantined parent asked for, under this process's fence."""
    name, n = str(message["name"]), message.get("n")
    try:
        record = await spawn(name, task_from(message["child"]))
    except StaleLease as exc:
        return encode("spawn_stale", n=n, reason=str(exc))
    except (SpawnError, InvalidTask) as exc:
        return encode("spawn_ok", n=n, error=str(exc))
    return encode("spawn_ok", n=n, **attrs.asdict(record))


def _speaks(ready: dict[str, Any]) -> bool:
    """A child's ``ready`` names this protocol, or the child is refused."""
    if ready.get("protocol") != PROTOCOL:
        raise QuarantineStartError(
            f"the quarantine child speaks protocol {ready.get('protocol')!r}, not {PROTOCOL}"
        )
    return True


async def _record(steps: ChildSteps, message: dict[str, Any]) -> bytes:
    """Record a step the child asked for, under the parent's fence; the frame that answers."""
    name = str(message["name"])
    try:
        fingerprint, call = message.get("fingerprint"), message.get("call")
        record = await steps.record(
            name,
            str(message["value"]),
            None if fingerprint is None else str(fingerprint),
            None if call is None else str(call),
        )
    except StaleLease as exc:  # the run is lost (its worker cancels it): tell the child anyway
        return encode("step_stale", name=name, reason=str(exc))
    return encode("step_ok", **attrs.asdict(record))


@attrs.frozen
class ChildSteps:
    """What a quarantined run's steps need from its parent: the task's recorded steps, a
    fenced record of a new one, where a parked run goes, and the park threshold."""

    recorded: Sequence[StepRecord]
    record: Callable[[str, str, str | None, str | None], Awaitable[StepRecord]]
    parked: Callable[..., None]
    """``parked(until, why, ask, join)``: ``ask`` the ``ParkedAsk`` of a run that asked,
    ``join`` the children a joining run waits for."""
    park_after: float
    asks: Sequence[AskRecord] = ()
    """The task's recorded asks (issue #36): the child's run replays them."""
    limits: ChildLimits | None = None
    """Permits of limits taken for the run under the parent's claim (issue #38)."""
    spawn: Callable[[str, Task], Awaitable[StepRecord]] | None = None
    """Spawns a child under the parent's claim (issue #51)."""
    children: Callable[[Sequence[str]], Awaitable[Sequence[ChildView | None]]] | None = None
    """Reads the run's children for a join."""
    take_event: Callable[[str, Sequence[str]], Awaitable[Event | None]] | None = None
    """Reads the event a wait takes (issue #52)."""
    conversation: Callable[[], Awaitable[Conversation]] | None = None
    """Reads the run's conversation when the child asks (its first ``await
    conversation_of``): the parent's run keeps what it read, for the state's base version."""
    version: str | None = None
    """The agent version the parent's runs record under (issue #53): the child's run checks
    the records against it."""
    max_step_bytes: int = MAX_STEP_BYTES
    """The largest result the child's run may record as a step (``--max-step-bytes``)."""


def quarantined(quarantine: Quarantine, *, mirror_progress: bool) -> Runner:
    """A runner (``runs.ClaimedRun``) for a suspect: its handler runs in a quarantine child
    of ``quarantine``; the child's progress is mirrored into the run's if ``mirror_progress``.
    A death of the child while it runs the task is the task's (``RunnerDied``); a child that
    cannot start did not run it (``NotRun``)."""

    async def run(claimed: ClaimedRun) -> Reply:
        assert claimed.journal is not None
        steps = attrs.evolve(await child_steps(claimed.journal), conversation=claimed.talk.get)
        progress = claimed.progress

        def shown(status: str | None, partial: str | None) -> None:
            if status is not None:
                progress.status(status)
            progress.clear()
            if partial:
                progress.stream(partial)

        mirror = shown if mirror_progress else None
        try:
            return await quarantine.run(claimed.task, mirror, steps)
        except QuarantineDeath as death:
            raise RunnerDied(str(death), max_deaths=quarantine.max_deaths) from death
        except QuarantineStartError as exc:
            raise NotRun(str(exc), level=logging.ERROR) from exc

    return run


async def child_steps(journal: Journal) -> ChildSteps:
    """What a quarantined run's journal needs from this process: the task's records read
    here, new ones recorded here under this process's claim (the child holds nothing of the
    store), and its park recorded in ``journal`` (its ``ClaimedRun`` stores it)."""
    store, id = journal.store, journal.task.id
    assert store is not None

    async def record(
        name: str, value: str, fingerprint: str | None = None, call: str | None = None
    ) -> StepRecord:
        return await journal.fenced(
            lambda store, claim: store.record_step(
                claim, name, value, version=journal.version, fingerprint=fingerprint, call=call
            )
        )

    def parked(
        until: float,
        why: str,
        asked: ParkedAsk | None = None,
        join: Sequence[str] = (),
        *,
        event: str | None = None,
        taken: Sequence[str] = (),
    ) -> None:
        journal.park(until, why, asked, join, event=event, taken=taken)

    async def acquire(key: str, weight: float) -> Granted | NoPermit:
        return await journal.fenced(lambda store, claim: store.acquire_permit(claim, key, weight))

    async def spawn(name: str, child: Task) -> StepRecord:
        return await journal.fenced(
            lambda store, claim: store.spawn(claim, name, child, version=journal.version)
        )

    async def children(ids: Sequence[str]) -> Sequence[ChildView | None]:
        return await store.children(id, ids)

    limits = ChildLimits(acquire, store.release_permit, store.pause_limit)
    return ChildSteps(
        await store.steps(id),
        record,
        parked,
        journal.park_after,
        await store.asks(id),
        limits,
        spawn=spawn,
        children=children,
        take_event=store.take_event,
        version=journal.version,
        max_step_bytes=journal.max_step_bytes,
    )


def _outcome(message: dict[str, Any]) -> Reply:
    if message["kind"] == "parked":
        raise Parked(f"parked: {message.get('why')}")
    if message["kind"] == "reply":
        return Reply(
            str(message["body"]),
            no_send=bool(message.get("no_send", False)),
            state=message.get("state"),
        )
    kind, reason = message.get("type"), str(message.get("reason") or "failed")
    if kind == "retry":
        raise Retry(reason, after=message.get("after"), key=message.get("key"))
    if kind == "permanent":
        raise Permanent(reason)
    if kind == "agent":
        raise AgentError(reason)
    raise QuarantineFailure(reason)


@attrs.define(eq=False)
class Quarantine:
    """The quarantine of one worker process, shared by its workers: the spec its children
    start with, how many may run at once (``--quarantine-processes``), the deaths that prove
    a task (``--max-quarantine-deaths``), and the counts ``/metrics`` shows."""

    spec: QuarantineSpec
    processes: int = DEFAULT_QUARANTINE_PROCESSES
    max_deaths: int = DEFAULT_MAX_QUARANTINE_DEATHS
    clock: Callable[[], float] = time.monotonic
    runs: int = attrs.field(init=False, default=0)
    """Quarantined runs started."""
    deaths: int = attrs.field(init=False, default=0)
    """Quarantine children that died while they ran their task."""
    start_failures: int = attrs.field(init=False, default=0)
    """Quarantine children that could not start the agent."""
    _busy: int = attrs.field(init=False, default=0)
    _starts: Backoff = attrs.field(
        init=False, factory=lambda: Backoff(initial=1.0, maximum=START_RETRY_MAXIMUM)
    )
    _closed_until: float = attrs.field(init=False, default=-math.inf)

    def __attrs_post_init__(self) -> None:
        p = self.processes
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ValueError(f"quarantine processes must be an int >= 1, got {p!r}")
        check_max_quarantine_deaths(self.max_deaths)

    def reserve(self, wanted: int) -> int:
        """Take up to ``wanted`` free places for a claim's suspects; return how many (none
        while the last children failed to start and their backoff runs: the suspects stay in
        the store for this or another process, instead of a start-up failing again at once)."""
        if self.clock() < self._closed_until:
            return 0
        n = max(0, min(wanted, self.processes - self._busy))
        self._busy += n
        return n

    def give_back(self, n: int) -> None:
        """Free ``n`` places: reserved but not used (the claim found fewer suspects), or
        whose suspect's run has ended (the worker frees it, however the run went)."""
        self._busy -= n

    async def run(
        self,
        task: Any,
        on_progress: OnChildProgress | None = None,
        steps: ChildSteps | None = None,
    ) -> Reply:
        """Run ``task`` in a child, in a place ``reserve`` took."""
        self.runs += 1
        try:
            reply = await run_in_quarantine(self.spec, task, on_progress=on_progress, steps=steps)
        except QuarantineStartError as exc:
            self.start_failures += 1
            delay = self._starts.next_delay()
            self._closed_until = self.clock() + delay
            raise QuarantineStartError(
                f"{exc}; no quarantine child starts here for the next {delay:.1f} s"
            ) from None
        except QuarantineDeath:
            self._starts.reset()
            self.deaths += 1
            raise
        except Exception:
            self._starts.reset()  # the child started: the agent's outcome, not the spec's
            raise
        self._starts.reset()
        return reply
