"""Completion batching: the replies that answer while a commit runs share one ``complete_many``.

No timer, so a lone reply is stored at once, and each reply keeps its own fence. See
docs/guide/design.md, "Completion batching".
"""

from __future__ import annotations

from typing import Final

import attrs
import trio
import trio.lowlevel

from ..custody._roles import WorkerStore
from ..custody._rules import Claim, InvalidTask

MAX_COMPLETE_BATCH: Final = 256
"""Replies stored by one ``complete_many`` at most (a worker rarely holds more)."""


@attrs.define(eq=False)
class _Pending:
    claim: Claim
    body: str
    no_send: bool
    done: trio.Event = attrs.field(factory=trio.Event)
    error: BaseException | None = None


@attrs.define(eq=False)
class CompletionBatcher:
    """Stores replies for one worker; ``await nursery.start(batcher.run)``, then ``complete``.

    Without a running ``run`` (a worker used outside its own ``run``), ``complete`` stores the
    reply directly."""

    store: WorkerStore
    batches: int = attrs.field(init=False, default=0)
    """``complete_many`` calls made (tests and benchmarks read it)."""
    stored: int = attrs.field(init=False, default=0)
    """Replies stored through those calls."""
    _queue: list[_Pending] = attrs.field(init=False, factory=list)
    _ring: trio.Event = attrs.field(init=False, factory=trio.Event)
    _running: bool = attrs.field(init=False, default=False)

    @property
    def queued(self) -> int:
        """Replies waiting for the next batch (not yet handed to the store)."""
        return len(self._queue)

    async def complete(self, claim: Claim, body: str, *, no_send: bool = False) -> None:
        """``store.complete(claim, body)``, batched with the replies of other runs: returns
        once committed; ``StaleLease``/``InvalidTask`` for this task as ``complete`` raises."""
        if not self._running:
            await self.store.complete(claim, body, no_send=no_send)
            return
        item = _Pending(claim, body, no_send)
        self._queue.append(item)
        self._ring.set()
        try:
            await item.done.wait()
        except trio.Cancelled:
            if item in self._queue:  # not taken into a batch yet: nothing will be stored
                self._queue.remove(item)
                raise
            # taken into a batch: its commit goes ahead, so learn its outcome first (as a
            # ``complete`` in the store's writer does); the cancellation comes at the caller's
            # next checkpoint, its scope being still cancelled
            with trio.CancelScope(shield=True):
                await item.done.wait()
        if item.error is not None:
            if isinstance(item.error, trio.ClosedResourceError):
                # the batcher stopped with this reply unstored: if the caller is being stopped
                # too (a hard stop cancels both; the batcher's ending may wake it first), its
                # cancellation is the outcome, as for any run cut off mid-call
                await trio.lowlevel.checkpoint_if_cancelled()
            raise item.error

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        batch: list[_Pending] = []
        try:
            task_status.started()
            while True:
                await self._ring.wait()
                self._ring = trio.Event()
                seen = 0
                while seen != len(self._queue) < MAX_COMPLETE_BATCH:
                    seen = len(self._queue)  # runs answering now join (a tick, not a timer)
                    await trio.lowlevel.checkpoint()
                while self._queue:
                    batch = self._queue[:MAX_COMPLETE_BATCH]
                    del self._queue[:MAX_COMPLETE_BATCH]
                    await self._store(batch)
                    for item in batch:
                        item.done.set()
                    batch = []
        finally:
            self._running = False
            gone = trio.ClosedResourceError("the worker stopped before the reply was stored")
            for item in [*batch, *self._queue]:  # never leave a caller waiting forever
                if not item.done.is_set():
                    item.error = gone
                    item.done.set()
            self._queue = []

    async def _store(self, batch: list[_Pending]) -> None:
        """Commit ``batch``: one ``complete_many`` per ``no_send`` value (concurrently, so a
        group-committing store takes both in one commit); each item's error set, if any."""
        groups = [g for g in ([i for i in batch if i.no_send is f] for f in (False, True)) if g]
        if len(groups) == 1:
            await self._store_group(groups[0])
            return
        async with trio.open_nursery() as nursery:
            for group in groups:
                nursery.start_soon(self._store_group, group)

    async def _store_group(self, group: list[_Pending]) -> None:
        try:
            done = await self.store.complete_many(
                [(i.claim, i.body) for i in group], no_send=group[0].no_send
            )
        except InvalidTask:
            done = [False] * len(group)  # a body was refused (the whole call): each alone
        except Exception as exc:  # the store failed as a whole (closed, I/O): every caller
            for item in group:
                item.error = exc
            return
        else:
            self.batches += 1
            self.stored += sum(done)
        refused = [item for item, ok in zip(group, done, strict=True) if not ok]
        if len(refused) == 1:
            await self._alone(refused[0])
        elif refused:
            async with trio.open_nursery() as nursery:
                for item in refused:
                    nursery.start_soon(self._alone, item)

    async def _alone(self, item: _Pending) -> None:
        """A reply ``complete_many`` refused, alone: ``complete`` says why (``StaleLease`` or
        ``Superseded`` for its fence, ``InvalidTask`` for its body), or stores it."""
        try:
            await self.store.complete(item.claim, item.body, no_send=item.no_send)
        except Exception as exc:
            item.error = exc
