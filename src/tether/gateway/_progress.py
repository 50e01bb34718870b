"""The reference gateway's progress board: what each running task shows now, in memory only and
bounded, since progress is never custody. See docs/guide/design.md, "Routes"."""

from __future__ import annotations

from collections import OrderedDict

import attrs

from .._protocol._progress import ProgressRequest


@attrs.frozen
class LiveProgress:
    """The latest progress of one task; ``working_since`` on the gateway's clock."""

    attempt: int
    seq: int
    working_since: float
    updated_at: float
    status: str | None
    partial: str | None
    worker: str | None

    @property
    def chars(self) -> int:
        return len(self.status or "") + len(self.partial or "")


@attrs.define(eq=False)
class ProgressBoard:
    max_entries: int = 10_000
    max_chars: int = 16_000_000
    _entries: OrderedDict[str, LiveProgress] = attrs.field(init=False, factory=OrderedDict)
    _chars: int = attrs.field(init=False, default=0)

    def update(self, request: ProgressRequest, now: float) -> bool:
        """Keep ``request`` if it is newer than what the board has; True if it was kept."""
        old = self._entries.get(request.id)
        if old is not None and (request.attempt, request.seq) <= (old.attempt, old.seq):
            return False
        since = now - request.running_s
        if old is not None and old.attempt == request.attempt:
            since = old.working_since  # one run's start does not wander with network delays
        live = LiveProgress(
            attempt=request.attempt,
            seq=request.seq,
            working_since=since,
            updated_at=now,
            status=request.status,
            partial=request.partial,
            worker=request.worker,
        )
        self.forget(request.id)
        self._entries[request.id] = live
        self._chars += live.chars
        while len(self._entries) > self.max_entries or self._chars > self.max_chars:
            _, dropped = self._entries.popitem(last=False)
            self._chars -= dropped.chars
        return True

    def get(self, task_id: str) -> LiveProgress | None:
        return self._entries.get(task_id)

    def forget(self, task_id: str) -> None:
        old = self._entries.pop(task_id, None)
        if old is not None:
            self._chars -= old.chars

    def __len__(self) -> int:
        return len(self._entries)
