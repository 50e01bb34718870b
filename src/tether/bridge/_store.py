"""The Store protocol: what every custody backend (SQLite, PostgreSQL) must do.

Each method is one transaction and a compare-and-set: it names the state (and for claims the
owner and attempt) it expects, and either moves the task or changes nothing. A method returns
only after its change is durable, so a caller that acks the gateway after ``await ingest(...)``
never acks a task a crash could lose. One conformance suite (``tests/bridge``) runs against
every implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from ._custody import Claim, CustodyState, Result, Task, TaskRecord


@attrs.frozen
class LeaseExpiry:
    """Evidence of one expired lease the store acted on."""

    id: str
    worker: str
    attempt: int
    lease_until: float
    now: float
    outcome: CustodyState
    """``PENDING`` (repooled with ``attempt + 1``) or ``DEAD`` (``max_attempts`` reached)."""
    reason: str


@runtime_checkable
class Store(Protocol):
    """A transactional custody store. Every method is async; all raise ``ClosedResourceError``
    after ``aclose``."""

    clock: Callable[[], float]
    """Seconds, the time base of leases. The reconciler reads time from here."""
    lease_s: float
    max_attempts: int

    async def aclose(self) -> None: ...

    async def ingest(self, task: Task) -> bool:
        """Store ``task`` as pending. ``False`` for a replay: nothing changes, in any state."""
        ...

    async def ingest_many(self, tasks: Sequence[Task]) -> list[bool]:
        """Ingest a gateway batch in one transaction (one commit, then ack them all).

        Every task is validated first: one invalid task refuses the batch and stores nothing.
        """
        ...

    async def prune_delivered(self, before: float, *, limit: int = ...) -> int:
        """Delete up to ``limit`` tasks delivered before ``before`` (store clock); dead tasks
        are never pruned. Keep the retention longer than the gateway's replay window: a replay
        of a pruned id would be ingested as new."""
        ...

    async def pending(self, *, limit: int = ...) -> Sequence[Task]:
        """Pending tasks in the order the lead should assign them: priority, then age."""
        ...

    async def assign(self, id: str, worker: str) -> None:
        """pending -> assigned to ``worker``; ``CustodyConflict`` if not pending."""
        ...

    async def unassign(self, id: str, worker: str) -> bool:
        """assigned to ``worker`` -> pending (the lead returns a dead or stuck assignment).

        ``False`` if the task is no longer assigned to ``worker`` (it was claimed meanwhile).
        """
        ...

    async def claim(self, worker: str, *, leaderless: bool = False) -> Claim | None:
        """The worker's next lease: its own assignments first (by priority, then age); pending
        tasks only when ``leaderless``. ``None`` if nothing is there."""
        ...

    async def renew(self, claim: Claim) -> Claim:
        """Extend a live lease by ``lease_s`` from now; ``StaleLease`` if fenced out."""
        ...

    async def complete(self, claim: Claim, body: str) -> None:
        """claimed -> result with ``body``; ``StaleLease`` if fenced out."""
        ...

    async def fail(self, claim: Claim, reason: str) -> CustodyState:
        """claimed -> pending with ``attempt + 1``, or dead once ``max_attempts`` is reached.

        Returns the new state; ``StaleLease`` if fenced out.
        """
        ...

    async def expire_leases(self, *, limit: int = ...) -> Sequence[LeaseExpiry]:
        """Repool (or dead-letter past ``max_attempts``) up to ``limit`` expired leases."""
        ...

    async def state(self, id: str) -> CustodyState | None: ...

    async def get(self, id: str) -> TaskRecord | None: ...

    async def counts(self) -> Mapping[CustodyState, int]:
        """Tasks per state, every state present (zero when empty)."""
        ...

    async def in_flight(self) -> Sequence[str]:
        """Ids still in custody (pending, assigned, claimed, result), oldest first."""
        ...

    async def records(
        self, state: CustodyState, *, limit: int = ..., newest_first: bool = False
    ) -> Sequence[TaskRecord]:
        """Up to ``limit`` full records in ``state``, in ingest order (oldest first, unless
        ``newest_first``): what ``tether store status`` shows (oldest in flight, dead letters
        with their reasons)."""
        ...

    async def ready_results(self, *, limit: int = ...) -> Sequence[Result]:
        """Stored replies waiting for delivery, by priority then age."""
        ...

    async def mark_delivered(self, id: str) -> None:
        """result -> delivered (a repeat on a delivered id is a no-op); else ``CustodyConflict``."""
        ...

    async def dead_letter(self, id: str, reason: str) -> None:
        """Any in-custody state -> dead with ``reason`` (no-op if already dead); a delivered
        task raises ``CustodyConflict``."""
        ...
