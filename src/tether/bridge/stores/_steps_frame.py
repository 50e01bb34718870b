"""The store methods of durable runs (issue #35), framed as ``_frame`` frames custody: check
the arguments, run the backend part's ``_name`` operation, log the move.

Each backend's steps part (``sqlite._steps``, ``postgres._steps``) implements the operations,
so steps, parks and wake-ups read the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence

import attrs

from ..._plumbing._when import iso_time
from ..custody import _log as _clog
from ..custody._children import JOINING, SPAWN_PREFIX, ChildView, SpawnError
from ..custody._records import StepRecord, WaitingRuns
from ..custody._rules import Claim, CustodyState, Task, TaskRecord, check_task_id
from ..custody._steps import (
    MAX_STEP_BYTES,
    StepError,
    check_step_name,
    check_wake_at,
)
from ..custody._versions import (
    MAX_CALL_CHARS,
    InFlight,
    check_fingerprint,
    check_version,
    spawn_print,
)
from ._common import check_limit, check_reason, fence_args, ingest_headers
from ._host import Host


@attrs.define(eq=False)
class StepsFrame(abc.ABC):
    """``StepStore``'s methods, ``ReconcilerStore.wake_due`` and the read of waiting runs
    around a backend part's operations; the operator's fresh re-drive has it forget a dead
    run's steps first (``forget_dead_steps``)."""

    host: Host

    async def steps(self, id: str) -> Sequence[StepRecord]:
        return await self._steps(check_task_id(id))

    @abc.abstractmethod
    async def _steps(self, id: str) -> list[StepRecord]:
        """``id``'s steps in the order they were recorded."""

    async def record_step(
        self,
        claim: Claim,
        name: str,
        value: str,
        *,
        version: str | None = None,
        fingerprint: str | None = None,
        call: str | None = None,
    ) -> StepRecord:
        fence_args(claim)
        check_step_name(name, own=True)
        version = None if version is None else check_version(version)
        fingerprint = None if fingerprint is None else check_fingerprint(fingerprint)
        if call is not None and (not isinstance(call, str) or not 0 < len(call) <= MAX_CALL_CHARS):
            raise ValueError(f"a step's call is a name of 1-{MAX_CALL_CHARS} characters")
        if not isinstance(value, str):
            raise TypeError(f"a step's value is JSON text (a str), got {type(value).__name__}")
        size = len(value.encode("utf-8"))
        if size > MAX_STEP_BYTES:
            raise StepError(
                f"step {name!r}: {size} bytes, over the {MAX_STEP_BYTES} a step may record"
            )
        now = self.host.clock()
        return await self._record_step(claim, name, value, size, now, version, fingerprint, call)

    @abc.abstractmethod
    async def _record_step(
        self,
        claim: Claim,
        name: str,
        value: str,
        size: int,
        now: float,
        version: str | None,
        fingerprint: str | None,
        call: str | None,
    ) -> StepRecord:
        """Insert the step under the fence (in one statement or transaction with the fence
        check and the task's total); the record now stored under ``name``. Raises
        ``StaleLease`` (``stale_lease``) if fenced out, ``StepError`` past the task's total."""

    async def park(self, claim: Claim, until: float, why: str) -> None:
        fence_args(claim)
        until = check_wake_at(until)
        reason = self.host.stored_text(check_reason(why))
        await self._park(claim, until, reason, self.host.clock())
        journal_parked(claim, f"{reason}; due {iso_time(until)}")

    @abc.abstractmethod
    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        """claimed -> waiting under the fence; raises ``StaleLease`` if fenced out."""

    # -- child runs (issue #51) ---------------------------------------------------------------

    async def spawn(
        self, claim: Claim, name: str, child: Task, *, version: str | None = None
    ) -> StepRecord:
        fence_args(claim)
        version = None if version is None else check_version(version)
        step = check_step_name(f"{SPAWN_PREFIX}{name}", own=True)
        if child.parent != claim.task.id:
            raise SpawnError(f"task {child.id!r} is not a child of {claim.task.id!r}")
        headers = ingest_headers(child, self.host.max_body_bytes)
        value = json.dumps(child.id)
        record, new = await self._spawn(
            claim, step, value, child, headers, self.host.clock(), version, spawn_print(child)
        )
        _clog.ingested([child.id], [new])
        if new:
            self.host.work_bell.ring()
        return record

    @abc.abstractmethod
    async def _spawn(
        self,
        claim: Claim,
        step: str,
        value: str,
        child: Task,
        headers: str,
        now: float,
        version: str | None,
        fingerprint: str,
    ) -> tuple[StepRecord, bool]:
        """Under ``claim``'s fence, in one transaction: the record of ``step`` if one is kept
        (nothing else done), else ``child`` ingested (pending) and ``step`` recorded with
        ``value``; the record, and whether the child is new. ``SpawnError`` past
        ``MAX_CHILDREN``; ``StaleLease`` if fenced out."""

    async def children(self, parent: str, ids: Sequence[str]) -> list[ChildView | None]:
        check_task_id(parent)
        return await self._children(parent, [check_task_id(id) for id in ids])

    @abc.abstractmethod
    async def _children(self, parent: str, ids: Sequence[str]) -> list[ChildView | None]:
        """Each of ``ids`` that is ``parent``'s child, as its join reads it (None: no such
        child). Reads only."""

    async def park_join(
        self, claim: Claim, ids: Sequence[str], until: float, why: str
    ) -> CustodyState:
        fence_args(claim)
        until = check_wake_at(until)
        reason = self.host.stored_text(check_reason(f"{JOINING}{why}"))
        state = await self._park_join(claim, list(ids), until, reason, self.host.clock())
        return parked_or_back(
            self.host, claim, state, f"{reason}; due {iso_time(until)}",
            "its children were done as it parked",
        )  # fmt: skip

    @abc.abstractmethod
    async def _park_join(
        self, claim: Claim, ids: Sequence[str], until: float, why: str, now: float
    ) -> CustodyState:
        """Mark ``ids`` (children of ``claim``'s task) awaited, then, under the fence:
        claimed -> waiting until ``until`` if one of them is live, else claimed -> pending
        (the same attempt: its join returns when it runs again). The children are marked in
        a statement before the parent's move (PostgreSQL: the child's row, then the parent's,
        as a child's completion locks them). The state it moved to; ``StaleLease`` if fenced
        out."""

    async def settle_children(self, *, limit: int = 1000) -> tuple[list[str], list[str]]:
        woken, cancelled = await self._settle_children(check_limit(limit), self.host.clock())
        if woken:
            self.host.work_bell.ring()
        for id in woken:
            _clog.moved(id, CustodyState.WAITING, CustodyState.PENDING, reason="children done")
        for id, was, why in cancelled:
            _clog.moved(id, was, CustodyState.DEAD, reason=why)
        return woken, [id for id, _, _ in cancelled]

    @abc.abstractmethod
    async def _settle_children(
        self, limit: int, now: float
    ) -> tuple[list[str], list[tuple[str, CustodyState, str]]]:
        """The reconciler's pass over children: wake each joining parent whose awaited
        children are all done (one a completion missed), and cancel (-> dead) each live child
        whose parent ended or is gone; (woken ids, (id, state before, reason) cancelled)."""

    async def wake_due(self, *, limit: int = 10_000) -> Sequence[str]:
        ids = await self._wake_due(check_limit(limit), self.host.clock())
        for id in ids:
            _clog.moved(id, CustodyState.WAITING, CustodyState.PENDING, reason="due")
        return ids

    @abc.abstractmethod
    async def _wake_due(self, limit: int, now: float) -> list[str]:
        """waiting -> pending for up to ``limit`` tasks due by ``now``; their ids."""

    @abc.abstractmethod
    async def waiting_runs(self) -> WaitingRuns: ...

    # -- versions (issue #53) -----------------------------------------------------------------

    @abc.abstractmethod
    async def versions_in_flight(self) -> Sequence[InFlight]:
        """Runs in flight by the version they began under (their first step record's), most
        first. Reads only."""

    async def records_of_version(
        self, version: str | None, *, limit: int = 50
    ) -> Sequence[TaskRecord]:
        version = None if version is None else check_version(version)
        return await self._records_of_version(version, check_limit(limit))

    @abc.abstractmethod
    async def _records_of_version(self, version: str | None, limit: int) -> list[TaskRecord]:
        """The first ``limit`` tasks in custody (oldest first) whose first step record was
        made by ``version`` (None: unversioned, or none recorded). Reads only."""

    @abc.abstractmethod
    async def forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        """Before a fresh re-drive: delete the steps of the dead tasks among ``ids`` (or, for
        ``ids=None``, of the first ``limit`` dead tasks whose reason holds ``text`` and does not
        begin with ``skip``, in the re-drive's order). A crash between this and the re-drive
        leaves a dead task without steps: what the operator asked for, and the re-drive can be
        repeated."""


def parked_or_back(
    host: Host, claim: Claim, state: CustodyState, parked: str, back: str
) -> CustodyState:
    """A conditional park's outcome (a join, a wait for an event), journaled: ``waiting``
    (``parked`` its reason), or back to ``pending`` at once (``back``: what came as it parked),
    the pool rung to run it again."""
    if state is CustodyState.WAITING:
        journal_parked(claim, parked)
        return state
    host.work_bell.ring()
    _clog.left_claim(claim, state, reason=back)
    return state


def journal_parked(claim: Claim, reason: str) -> None:
    """Journal ``claimed -> waiting`` for ``claim``'s run (a durable sleep, a long wait for a
    permit, or a question to the person)."""
    _clog.left_claim(claim, CustodyState.WAITING, reason=reason)
