"""Store calls of one process that meet in flight share the next statement.

Each of a process's workers claims its tasks and stores its replies with calls of its own. On
PostgreSQL a statement costs the server about as much fixed work as a few rows (executor
start, the statement triggers, the commit), and a drain of short runs spent most of the
server's CPU on claims and completions of two or three rows each (issue 50). So the store
merges them: a call that finds another in flight waits its turn (a fair lock), and whoever
takes the turn runs every call waiting then, of the same kind, in one statement. A lone call
goes at once: no timer, as with the worker's completion batcher.

Nothing about custody changes: the merged statement is the calls' statement for many rows,
each row fenced as its own call's would be, and its failure is every merged call's failure.
A statement that raises ``Cancelled`` ran nothing (``PostgresDb.run`` never abandons a
statement), so the calls it took wait for the next turn instead of taking on another task's
cancellation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Final, Generic, TypeVar

import attrs
import trio

A = TypeVar("A")
"""A call's arguments."""
R = TypeVar("R")
"""A call's answer."""

MAX_MERGED: Final = 1024
"""Rows one merged statement takes at most (the calls beyond wait for the next)."""


@attrs.define(eq=False)
class _Call(Generic[A, R]):
    args: A
    kind: Hashable
    """Only calls of one kind share a statement."""
    rows: int
    apart: Hashable
    """Calls with the same ``apart`` never share a statement (None: any may)."""
    done: trio.Event = attrs.field(factory=trio.Event)
    answer: R | None = None
    error: BaseException | None = None


@attrs.define(eq=False)
class StatementMerge(Generic[A, R]):
    """``await merge.call(args, kind=..., rows=...)``: the answer ``run`` gave this call."""

    run: Callable[[Sequence[A]], Awaitable[Sequence[R]]]
    """Run the calls' arguments as one statement; an answer per call, in order."""
    statements: int = attrs.field(init=False, default=0)
    """Statements run (tests and benchmarks read it)."""
    merged: int = attrs.field(init=False, default=0)
    """Calls that shared another call's statement."""
    _turn: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _waiting: list[_Call[A, R]] = attrs.field(init=False, factory=list)

    async def call(self, args: A, *, kind: Hashable, rows: int, apart: Hashable = None) -> R:
        while True:
            call: _Call[A, R] = _Call(args, kind, rows, apart)
            self._waiting.append(call)
            try:
                async with self._turn:
                    if not call.done.is_set():
                        await self._run_waiting(call)
            except trio.Cancelled:
                if call in self._waiting:  # not taken into a statement: nothing will run
                    self._waiting.remove(call)
                    raise
                # taken into a statement in flight: its outcome first (as a store call's: its
                # thread is never abandoned), the cancellation at the caller's next checkpoint
                with trio.CancelScope(shield=True):
                    await call.done.wait()
                if call.error is not None and not isinstance(call.error, trio.Cancelled):
                    raise call.error from None
                if call.error is not None:
                    raise
                return call.answer  # type: ignore[return-value]
            if isinstance(call.error, trio.Cancelled):
                continue  # the caller whose turn took it was cancelled before its statement ran
            if call.error is not None:
                raise call.error
            return call.answer  # type: ignore[return-value]

    async def _run_waiting(self, first: _Call[A, R]) -> None:
        """Run ``first`` and the waiting calls of its kind in one statement."""
        calls = [first]
        rows = first.rows
        apart = {first.apart} - {None}
        for call in self._waiting:
            if call is first or call.kind != first.kind or call.apart in apart:
                continue
            if rows + call.rows > MAX_MERGED:
                break
            calls.append(call)
            rows += call.rows
            if call.apart is not None:
                apart.add(call.apart)
        taken = set(map(id, calls))
        self._waiting = [c for c in self._waiting if id(c) not in taken]
        try:
            answers = await self.run([c.args for c in calls])
            self.statements += 1
            self.merged += len(calls) - 1
            for call, answer in zip(calls, answers, strict=True):
                call.answer = answer
        except BaseException as exc:
            for call in calls:
                call.error = exc
            raise
        finally:
            for call in calls:
                call.done.set()


Item = tuple[str, int, str, str]
"""``(worker, run, id, body)``: one reply and its fence."""
Fence = tuple[str, int, str]
"""``(worker, run, id)``."""
StoreReplies = Callable[[Sequence[Item], bool, float], Awaitable[set[Fence]]]
"""Store distinct-fenced items with ``no_send`` at ``now``; the fences that moved."""


@attrs.define(eq=False)
class CompletionMerge:
    """``complete_many`` calls merged: ``await merge.complete_many(items, no_send, now)``."""

    store: StoreReplies
    merge: StatementMerge[tuple[Sequence[Item], bool, float], list[bool]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.merge = StatementMerge(self._store)

    async def complete_many(self, items: Sequence[Item], no_send: bool, now: float) -> list[bool]:
        return await self.merge.call((items, no_send, now), kind=no_send, rows=len(items))

    async def _store(self, calls: Sequence[tuple[Sequence[Item], bool, float]]) -> list[list[bool]]:
        """One statement for every call's replies: a fence repeated across or within the
        calls moves once, for its first item (the later answer False, as a later call's
        would)."""
        seen: set[Fence] = set()
        unique: list[Item] = []
        firsts: list[list[tuple[Fence, bool]]] = []
        for items, _, _ in calls:
            marks = []
            for worker, run, task, body in items:
                fence = (worker, run, task)
                first = fence not in seen
                if first:
                    seen.add(fence)
                    unique.append((worker, run, task, body))
                marks.append((fence, first))
            firsts.append(marks)
        moved = await self.store(unique, calls[0][1], max(now for _, _, now in calls))
        return [[f in moved and mine for f, mine in marks] for marks in firsts]
