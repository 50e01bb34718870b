"""Ingest: poll the gateway, commit, and only then ack.

A failed commit acks nothing (the gateway redelivers, and ingest is idempotent); on its way out
ingest gives back the leases it will not read. See docs/guide/design.md, "Ingest".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import attrs
import trio

from ..._backoff import Backoff
from ..._expected import ExpectedFailure
from ..._plumbing._tracing import enabled as tracing_enabled
from ..._protocol._messages import GatewayTask
from ..client._client import GatewayClient, GatewayError, GatewayRequestError
from ..custody._asks import SENDER_HEADER
from ..custody._roles import IngestStore
from ..custody._rooms import (
    DEFAULT_ROOM_POLICY,
    RoomPolicy,
    check_debounce,
    check_room_policy,
)
from ..custody._rules import InvalidTask, Task
from ..custody._tenants import TENANT_HEADER
from ..pool._wakeup import PoolWakeups
from ..runs._spans import TaskTrace
from ..runs._timings import Timings

log = logging.getLogger("tether.bridge.ingest")

CONFLICT_REASON = (
    "this id is already in custody with a different body; the first body is kept and this "
    "one refused (a gateway must not reuse a task id for another message)"
)


@attrs.frozen
class IngestRound:
    """What one poll → commit → ack round did."""

    polled: int
    ingested: tuple[str, ...] = ()
    replays: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()
    """``(id, reason)`` for each task the store refused, or that conflicts (below)."""
    conflicts: tuple[str, ...] = ()
    """Ids polled again with another body than the one in custody: the first body is kept,
    the newcomer rejected to the gateway (never acked: the gateway would take the reply to
    the first body for an answer to the second)."""

    @property
    def acked(self) -> int:
        return len(self.ingested) + len(self.replays)


@attrs.define
class IngestStats:
    rounds: int = 0
    polled: int = 0
    ingested: int = 0
    replays: int = 0
    rejected: int = 0
    conflicts: int = 0
    """Of ``rejected``: ids polled again with a different body."""
    failed_commits: int = 0
    released: int = 0
    """Unacked leases handed back to the gateway when ``run`` ended."""


class IngestCommitFailed(ExpectedFailure, Exception):
    """The store could not commit a round; none of its tasks was acked."""


def to_custody_task(task: GatewayTask, trace: TaskTrace | None = None) -> Task:
    """The custody record of a polled task (raises ``InvalidTask`` naming what is wrong).

    The sender and the gateway's hand-out count travel as headers, so an agent can see them;
    so does the tenant, if the task has one (the store reads it there to serve tenants in
    turn), and the task's trace and when it was taken in, if it is traced (``TaskTrace``).
    """
    headers = {SENDER_HEADER: task.sender, "delivery": str(task.delivery)}
    if task.tenant is not None:
        headers[TENANT_HEADER] = task.tenant
    if trace is not None:
        headers.update(trace.headers)
    return Task(
        id=task.id,
        body=task.body,
        room=task.room,
        headers=headers,
        priority=task.priority,
    )


@attrs.define(eq=False)
class Ingest:
    """Moves tasks from the gateway into the store. ``run()`` is the supervised service."""

    store: IngestStore
    gateway: GatewayClient
    poll_wait: float = 30.0
    ack_concurrency: int = 16
    retry: Backoff = attrs.field(factory=lambda: Backoff(0.5, 30.0))
    wakeups: PoolWakeups | None = None
    """Rung once new tasks are committed: for a store whose work bell does not ring this pool
    already (``open_pool_store`` wires a service's store to its pool, which then hears of an
    ingest at its commit)."""
    release_on_exit: bool = True
    """Give this client's unacked leases back to the gateway when ``run`` ends."""
    timings: Timings | None = None
    """If given, each new task's intake time is noted (its queue wait ends at its claim)."""
    room_policy: RoomPolicy = attrs.field(
        default=DEFAULT_ROOM_POLICY, validator=lambda _i, _a, v: check_room_policy(v)
    )
    """The room policy stored with every task ingested (``custody._rooms``)."""
    debounce_s: float = attrs.field(default=0.0, validator=lambda _i, _a, v: check_debounce(v))
    """A room's burst window (issue #52; 0: off): see ``IngestStore.ingest_many``."""
    stats: IngestStats = attrs.field(factory=IngestStats, init=False)

    async def run_once(self, wait: float | None = None) -> IngestRound:
        """One long poll, one commit, then the acks. Raises ``IngestCommitFailed``."""
        polled = await self.gateway.poll_tasks(self.poll_wait if wait is None else wait)
        self.stats.rounds += 1
        self.stats.polled += len(polled)
        if not polled:
            return IngestRound(polled=0)
        good: list[Task] = []
        rejected: list[tuple[str, str]] = []
        traces = (
            {raw.id: TaskTrace.begin(raw.id, raw.room, raw.delivery, raw.trace) for raw in polled}
            if tracing_enabled()
            else {}
        )
        for raw in polled:
            try:
                good.append(to_custody_task(raw, traces.get(raw.id)))
            except (InvalidTask, ValueError) as exc:
                rejected.append((raw.id, str(exc)))
        landed: IngestRound | None = None
        try:
            landed = await self._land(polled, good, rejected)
            return landed
        finally:
            for task_id, trace in traces.items():
                trace.end(_outcome(landed, task_id))

    async def _land(
        self,
        polled: Sequence[GatewayTask],
        good: list[Task],
        rejected: list[tuple[str, str]],
    ) -> IngestRound:
        """Commit the good tasks, then ack them and reject the others."""
        # intake noted before the commit: the pool may claim a task while the ack's sync runs
        noted: list[str] = []
        if self.timings is not None:
            noted = self.timings.taking_in([task.id for task in good], self.store.clock())
        try:
            landed, more_rejected = await self._commit(good)
        except BaseException:
            if self.timings is not None:
                self.timings.not_taken(noted)
            raise
        rejected.extend(more_rejected)
        conflicts = await self._conflicts([task for task, fresh in landed if not fresh])
        if conflicts:
            landed = [(task, fresh) for task, fresh in landed if task not in conflicts]
            rejected.extend((task.id, CONFLICT_REASON) for task in conflicts)
        new = tuple(task.id for task, fresh in landed if fresh)
        if self.timings is not None:  # a replay's intake was long ago, or not by us
            self.timings.not_taken(set(noted).difference(new))
        if new and self.wakeups is not None:
            self.wakeups.tasks_pending()
        replays = tuple(task.id for task, fresh in landed if not fresh)
        async with trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(self.ack_concurrency)
            if landed:
                nursery.start_soon(self._ack, [task.id for task, _ in landed])
            for task_id, reason in rejected:
                nursery.start_soon(self._reject, task_id, reason, limiter)
        self.stats.ingested += len(new)
        self.stats.replays += len(replays)
        self.stats.rejected += len(rejected)
        self.stats.conflicts += len(conflicts)
        if replays:
            log.info("%d replayed task(s) were already in the store; acked again", len(replays))
        return IngestRound(
            polled=len(polled),
            ingested=new,
            replays=replays,
            rejected=tuple(rejected),
            conflicts=tuple(task.id for task in conflicts),
        )

    async def _conflicts(self, replays: Sequence[Task]) -> list[Task]:
        """The replays whose body differs from the stored one (the store kept the first).

        A failed look is logged and they count as plain replays: the store has the id either
        way, and nothing is lost by acking it again."""
        if not replays:
            return []
        try:
            differs = await self.store.body_conflicts(replays)
        except (trio.Cancelled, trio.ClosedResourceError):
            raise
        except Exception as exc:
            log.warning("could not compare %d replayed bodies: %s", len(replays), exc)
            return []
        return [task for task, conflict in zip(replays, differs, strict=True) if conflict]

    async def _commit(
        self, tasks: Sequence[Task]
    ) -> tuple[list[tuple[Task, bool]], list[tuple[str, str]]]:
        """Commit ``tasks`` in one transaction; if the store refuses one, find which, alone."""
        if not tasks:
            return [], []
        try:
            try:
                fresh = await self.store.ingest_many(
                    tasks, room_policy=self.room_policy, debounce_s=self.debounce_s
                )
                return list(zip(tasks, fresh, strict=True)), []
            except InvalidTask:
                pass
            # one of them broke a store rule (size limit...): commit them one by one so the
            # others land and only the bad ones are refused
            landed: list[tuple[Task, bool]] = []
            rejected: list[tuple[str, str]] = []
            for task in tasks:
                try:
                    [new] = await self.store.ingest_many(
                        [task], room_policy=self.room_policy, debounce_s=self.debounce_s
                    )
                except InvalidTask as exc:
                    rejected.append((task.id, str(exc)))
                else:
                    landed.append((task, new))
        except (trio.Cancelled, trio.ClosedResourceError):
            raise
        except Exception as exc:
            self.stats.failed_commits += 1
            raise IngestCommitFailed(
                f"the store could not commit {len(tasks)} task(s); none acked, the gateway "
                f"will redeliver them: {type(exc).__name__}: {exc}"
            ) from exc
        return landed, rejected

    async def _ack(self, task_ids: list[str]) -> None:
        for refusal in await self.gateway.ack_many(task_ids):
            # the task is safe in the store either way; the gateway may redeliver it, and the
            # replay is a no-op here
            log.warning("%s", refusal)

    async def _reject(self, task_id: str, reason: str, limiter: trio.CapacityLimiter) -> None:
        log.warning("rejected task %s: %s", task_id, reason)
        async with limiter:
            try:
                await self.gateway.reject(task_id, reason)
            except GatewayRequestError as exc:
                log.warning("the gateway refused the rejection of %s: %s", task_id, exc)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll → commit → ack until cancelled. A failed commit is logged and retried after a
        backoff (the gateway redelivers); an auth refusal or a closed store ends the loop."""
        if not (self.poll_wait >= 0 and math.isfinite(self.poll_wait)):
            raise ValueError(f"poll_wait must be a number of seconds >= 0, got {self.poll_wait}")
        task_status.started()
        try:
            while True:
                try:
                    await self.run_once()
                except IngestCommitFailed as exc:
                    delay = self.retry.next_delay()
                    log.error("%s; retrying in %.1f s", exc, delay)  # noqa: TRY400 (one line)
                    await trio.sleep(delay)
                else:
                    self.retry.reset()
        finally:
            if self.release_on_exit:
                with trio.CancelScope(shield=True):  # bounded by the client's release_timeout
                    await self.release_leases()

    async def release_leases(self) -> int | None:
        """Ask the gateway to queue again what it leased to this client and got no ack for.

        Call it only once polling stopped (``run`` does, on its way out). Never raises: a
        gateway without the endpoint, or one that does not answer within the client's
        ``release_timeout``, leaves those tasks to come back when their lease runs out.
        """
        try:
            released = await self.gateway.release_leases()
        except GatewayError as exc:
            log.warning("could not give unacked leases back (they return after the lease): %s", exc)
            return None
        if released:
            self.stats.released += released
            log.info("gave %d unacked lease(s) back to the gateway", released)
        return released


def _outcome(landed: IngestRound | None, task_id: str) -> str:
    """What a round did with one task, for its ingest span."""
    if landed is None:
        return "not stored"
    if task_id in landed.ingested:
        return "ingested"
    if task_id in landed.replays:
        return "replay"
    return "rejected"
