"""Completions that arrive while one is in flight share the next statement.

Each of a process's workers stores its replies with its own ``complete_many`` (its
``CompletionBatcher``). On PostgreSQL a statement costs the server about as much fixed work as
a few rows (executor start, the statement triggers, the commit), and a drain of short runs
spent most of its server CPU on statements of two or three rows (issue 50). So the store
itself merges them: a call that finds another in flight waits its turn (a fair lock), and
whoever takes the turn stores every call waiting then in one statement. A lone call goes at
once: no timer, as with the batcher.

Nothing about custody changes: every item keeps its own fence, a fence repeated across the
merged calls moves once (the later answers False, as a second call would), and a failure of
the statement is every merged caller's failure. A store call that raises ``Cancelled`` ran
nothing (``PostgresDb.run`` never abandons a statement), so the calls it took wait for the
next turn instead of taking on another task's cancellation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import attrs
import trio

Item = tuple[str, int, str, str]
"""``(worker, run, id, body)``: one reply and its fence."""
Fence = tuple[str, int, str]
"""``(worker, run, id)``."""
Store = Callable[[Sequence[Item], bool, float], Awaitable[set[Fence]]]
"""Store distinct-fenced items with ``no_send`` at ``now``; the fences that moved."""

MAX_MERGED: Final = 1024
"""Items one merged statement stores at most (the rest wait for the next)."""


@attrs.define(eq=False)
class _Call:
    items: Sequence[Item]
    no_send: bool
    now: float
    done: trio.Event = attrs.field(factory=trio.Event)
    answer: list[bool] | None = None
    error: BaseException | None = None


@attrs.define(eq=False)
class CompletionMerge:
    """``await merge.complete_many(items, no_send, now)``: ``complete_many``'s answer, per item."""

    store: Store
    statements: int = attrs.field(init=False, default=0)
    """Statements run (tests and benchmarks read it)."""
    merged: int = attrs.field(init=False, default=0)
    """Calls that shared another call's statement."""
    _turn: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _waiting: list[_Call] = attrs.field(init=False, factory=list)

    async def complete_many(self, items: Sequence[Item], no_send: bool, now: float) -> list[bool]:
        while True:
            call = _Call(items, no_send, now)
            self._waiting.append(call)
            try:
                async with self._turn:
                    if not call.done.is_set():
                        await self._store_waiting(no_send)
            except trio.Cancelled:
                if call in self._waiting:  # not taken into a statement: nothing will be stored
                    self._waiting.remove(call)
                    raise
                # taken into a statement in flight: its outcome first (as a store call's: its
                # thread is never abandoned), the cancellation at the caller's next checkpoint
                with trio.CancelScope(shield=True):
                    await call.done.wait()
                if call.error is not None and not isinstance(call.error, trio.Cancelled):
                    raise call.error from None
                if call.answer is None:
                    raise
                return call.answer
            if isinstance(call.error, trio.Cancelled):
                continue  # the caller whose turn took it was cancelled before its statement ran
            if call.error is not None:
                raise call.error
            assert call.answer is not None
            return call.answer

    async def _store_waiting(self, no_send: bool) -> None:
        """Store the waiting calls of ``no_send`` (the turn's own among them) in one statement."""
        calls: list[_Call] = []
        size = 0
        for call in self._waiting:
            if call.no_send is no_send and (not calls or size + len(call.items) <= MAX_MERGED):
                calls.append(call)
                size += len(call.items)
        taken = set(map(id, calls))
        self._waiting = [c for c in self._waiting if id(c) not in taken]
        try:
            firsts, unique = _first_fences(calls)
            moved = await self.store(unique, no_send, max(c.now for c in calls))
            self.statements += 1
            self.merged += len(calls) - 1
            for call, first in zip(calls, firsts, strict=True):
                call.answer = [f in moved and mine for f, mine in first]
        except BaseException as exc:
            for call in calls:
                call.error = exc
            raise
        finally:
            for call in calls:
                call.done.set()


def _first_fences(calls: Sequence[_Call]) -> tuple[list[list[tuple[Fence, bool]]], list[Item]]:
    """Per call, each item's fence and whether it is that fence's first item across ``calls``;
    and the first items, whose fences are distinct (one row each in the statement)."""
    seen: set[Fence] = set()
    unique: list[Item] = []
    firsts: list[list[tuple[Fence, bool]]] = []
    for call in calls:
        marks = []
        for worker, run, task, body in call.items:
            fence = (worker, run, task)
            first = fence not in seen
            if first:
                seen.add(fence)
                unique.append((worker, run, task, body))
            marks.append((fence, first))
        firsts.append(marks)
    return firsts, unique
