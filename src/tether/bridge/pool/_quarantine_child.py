"""The quarantine child: one task of a suspect, run by the agent in a process of its own.

Started by its worker's process (``_quarantine.run_in_quarantine``) as ``python -m
tether.bridge.pool._quarantine_child SPEC PARENT_PID MEMORY_BYTES``. It holds nothing of the
store: it loads the agent (the ``module:factory`` spec), reads one ``task`` frame, runs it,
and tells its parent ``progress`` and then ``reply`` or ``error`` over its stdout pipe
(``_quarantine_wire``); its parent holds the lease, the fence and every write. So if this
process dies while it runs the task, the death is the task's own doing, seen by a live parent.

No orphans: the kernel kills it when its parent dies (``PR_SET_PDEATHSIG``, Linux), and it
leaves when its stdin reaches EOF (the parent's end of the pipe closed, on any platform).
Anything the agent prints goes to stderr: stdout is the pipe.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import signal
import sys
from collections.abc import Awaitable
from typing import Any, BinaryIO, Final

import trio

from ..._session import open_session
from ..custody._rules import Claim
from ..custody._steps import MAX_STEP_BYTES
from ..runs._asks import asks_from, parked_fields
from ..runs._bounds import over_a_bound
from ..runs._current import Current, entering
from ..runs._journal import Fence, Journal, Park, Parked
from ..runs._progress import Progress
from ..runs._reply import AgentError, reply_of
from ..runs._retry import Permanent, Retry
from ..runs._run import Run
from ..runs._talk import Talk
from ._agent import TASK_EVENT, install_agent, load_agent
from ._asyncio import loop_for
from ._quarantine_journal import PipeJournal
from ._quarantine_steps import steps_from
from ._quarantine_wire import (
    EXIT_BAD_START,
    EXIT_OUT_OF_MEMORY,
    PROTOCOL,
    Deframer,
    encode,
    task_from,
)

_PR_SET_PDEATHSIG: Final = 1
PROGRESS_POLL_S: Final = 0.2
"""How often the child looks for new progress to tell its parent."""


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl took hold
        os._exit(EXIT_BAD_START)


def _limit_memory(limit: int) -> None:
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class _Pipe:
    """The child's end: frames out on a private copy of stdout, frames in from stdin."""

    def __init__(self) -> None:
        out = os.dup(1)
        os.dup2(2, 1)  # the agent's prints go to stderr, never into the pipe
        sys.stdout = sys.stderr
        self._out: BinaryIO = os.fdopen(out, "wb", buffering=0)
        self._in = trio.lowlevel.FdStream(os.dup(0))
        self._frames = Deframer()
        self._ready: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self._out.write(encode(kind, **fields))

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None at EOF (the parent is gone)."""
        while not self._ready:
            data = await self._in.receive_some(65536)
            if not data:
                return None
            self._ready += self._frames.feed(data)
        return self._ready.pop(0)


async def _serve(spec: str, pipe: _Pipe) -> int:
    factory = load_agent(spec)
    async with loop_for(factory), open_session("quarantine") as session:
        install_agent(session, factory)
        session.wrap_handlers(TASK_EVENT, entering)
        pipe.send("ready", protocol=PROTOCOL, pid=os.getpid())
        message = await pipe.receive()
        while message is not None and message["kind"] != "task":
            message = await pipe.receive()  # a kind this child does not know: skip it
        if message is None:
            return 0
        task = task_from(message)
        progress = Progress()
        store = PipeJournal(pipe, steps_from(message.get("steps")), asks_from(message.get("asks")))
        claim = Claim(task, "quarantine", 1, 0.0, 0)  # the parent holds the real one and its fence
        journal = Journal(
            task,
            store,
            Fence(lambda: claim),
            park_after=float(message.get("park_after", math.inf)),
            max_step_bytes=int(message.get("max_step_bytes", MAX_STEP_BYTES)),
            clock=store.clock,
            version=_version(message.get("version")),
        )
        talk = Talk(store.conversation)  # read on demand: asked of the parent
        current = Current(Run(task, journal), talk, progress)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_parent, pipe, store)
            nursery.start_soon(_tell_progress, pipe, progress)
            try:
                reply = reply_of(
                    await _bounded(session.call(TASK_EVENT, current), journal), task.id
                )
            except MemoryError:
                os._exit(EXIT_OUT_OF_MEMORY)
            except Exception as exc:
                _send_failure(pipe, journal, exc)
            else:
                if journal.mismatch is not None:  # a mismatch the handler caught (issue #53)
                    pipe.send("error", type="permanent", reason=journal.mismatch.reason)
                    nursery.cancel_scope.cancel()
                    return 0
                if journal.parked is not None:  # parked, whatever it returned after
                    _send_parked(pipe, journal.parked)
                    nursery.cancel_scope.cancel()
                    return 0
                _send_progress(pipe, progress, -1)
                state = None if reply.state is None else dict(reply.state)
                pipe.send("reply", body=reply.body, no_send=reply.no_send, state=state)
            nursery.cancel_scope.cancel()
    return 0


def _send_failure(pipe: _Pipe, journal: Journal, exc: Exception) -> None:
    """Tell the parent how the run failed: a step that did not match its record first
    (whatever the handler made of it: issue #53), as the worker's own process decides."""
    if journal.mismatch is not None:
        pipe.send("error", type="permanent", reason=journal.mismatch.reason)
    elif isinstance(exc, Parked):
        if journal.parked is None:  # raised by hand: not a park the run asked for
            pipe.send("error", type="failure", reason=f"Parked: {exc}")
        else:
            _send_parked(pipe, journal.parked)
    elif isinstance(exc, Retry):
        pipe.send("error", type="retry", reason=exc.reason, after=exc.after, key=exc.key)
    elif isinstance(exc, Permanent):
        pipe.send("error", type="permanent", reason=exc.reason)
    elif isinstance(exc, AgentError):
        pipe.send("error", type="agent", reason=str(exc))
    elif journal.parked is not None:  # parked, whatever it raised after
        _send_parked(pipe, journal.parked)
    else:
        pipe.send("error", type="failure", reason=f"{type(exc).__name__}: {exc}")


def _version(value: object) -> str | None:
    return None if value is None else str(value)


async def _bounded(call: Awaitable[Any], journal: Journal) -> Any:
    """The handler's outcome; an exception it ends with that comes from a bound it ran into
    (``runs._bounds.over_a_bound``) is raised as that ``TooLarge``, a ``Permanent``, unless
    the run parked or mismatched first: the parent fails it as it would in its own process."""
    try:
        return await call
    except Exception as exc:
        bound = over_a_bound(exc)
        if bound is None or bound is exc or journal.parked or journal.mismatch:
            raise
        raise bound from exc


def _send_parked(pipe: _Pipe, park: Park) -> None:
    """Tell the parent the run parked (and at which question, if it asked: issue #36)."""
    pipe.send(
        "parked",
        until=park.until,
        why=park.why,
        join=list(park.join),
        event=park.event,
        taken=list(park.taken),
        **parked_fields(park.ask),
    )


async def _watch_parent(pipe: _Pipe, store: PipeJournal) -> None:
    """The one reader of the pipe: the parent's answers to recorded steps and to permits,
    until EOF."""
    while (message := await pipe.receive()) is not None:
        store.answered(message)
    os._exit(0)  # EOF: the parent is gone (or gave the run up); nobody waits for an answer


def _send_progress(pipe: _Pipe, progress: Progress, sent: int) -> int:
    version, status, partial = progress.snapshot()
    if version != sent and version:
        pipe.send("progress", version=version, status=status, partial=partial)
    return version


async def _tell_progress(pipe: _Pipe, progress: Progress) -> None:
    sent = 0
    while True:
        await trio.sleep(PROGRESS_POLL_S)
        sent = _send_progress(pipe, progress, sent)


def main(argv: list[str]) -> int:
    spec, parent, memory = argv[0], int(argv[1]), int(argv[2])
    _die_with_parent(parent)
    _limit_memory(memory)
    try:
        pipe = _Pipe()
    except OSError:
        return EXIT_BAD_START
    try:
        return trio.run(_serve, spec, pipe)
    except MemoryError:
        return EXIT_OUT_OF_MEMORY
    except BaseException as exc:  # one line to stderr; the parent says why
        print(f"quarantine child: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_START


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
