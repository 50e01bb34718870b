"""Delivery: post stored replies, and mark them delivered only once the gateway confirmed.

A crash in between re-posts the reply, which the gateway absorbs. See docs/guide/design.md,
"Delivery".
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Sequence

import attrs
import trio

from ..._backoff import Backoff
from ..._plumbing._grid import on_grid
from ..._plumbing._tracing import enabled as tracing_enabled
from ..._plumbing._tracing import end_span, finished_span, start_span, traceparent_of
from ..._protocol._messages import (
    MAX_BATCH,
    ResultMetadata,
    ResultReceipt,
    ResultRequest,
    parse_result,
    result_document,
)
from ..client._client import GatewayClient, GatewayRequestError
from ..custody._roles import DeliveryStore
from ..custody._rules import CustodyConflict, Result, Task, check_delivery_lease
from ..custody._schedules import SCHEDULE_HEADER
from ..custody._versions import FORK_HEADER
from ..pool._idle import idle_backoff
from ..runs._spans import task_attributes, task_trace
from ..runs._timings import Timings

log = logging.getLogger("tether.bridge.delivery")


def made_by_store(task: Task) -> bool:
    """Was ``task`` made by the store, not sent by the gateway (a schedule's firing, a fork)?
    The gateway learns of it from its result, which names its room."""
    return SCHEDULE_HEADER in task.headers or FORK_HEADER in task.headers


def is_no_send(result: Result) -> bool:
    """Does this stored reply close its task without sending anything to the user?"""
    return result.no_send


def _request_for(result: Result) -> ResultRequest:
    no_send = is_no_send(result)
    task = result.task
    made = made_by_store(task)  # its id is not the gateway's: name its room
    return ResultRequest(
        id=task.id,
        body="" if no_send else result.body,
        no_send=no_send,
        metadata=ResultMetadata(
            worker=result.worker, attempt=result.attempt, room=task.room if made else None
        ),
    )


def delivery_holder(stem: str = "delivery") -> str:
    """A delivery lease holder name: ``stem`` (e.g. the bridge's pool stem) and a random
    suffix, so two bridges with one client name never share a lease, and a restarted process
    is a new holder (the lease of the one that died lapses first)."""
    return f"{stem[:47]}-delivery-{secrets.token_hex(3)}"


@attrs.define
class DeliveryStats:
    delivered: int = 0
    duplicates: int = 0
    """Replies the gateway already had (a re-post after a crash): absorbed, still delivered."""
    no_send: int = 0
    dead_lettered: int = 0


@attrs.define(eq=False)
class Delivery:
    """Posts ready results to the gateway. ``run()`` is the supervised service."""

    store: DeliveryStore
    gateway: GatewayClient
    batch: int = 64
    idle_interval: float = 0.05
    """How long to wait for new results when none are ready (``nudge()`` wakes it early);
    doubling while looks keep finding none, up to ``pool._idle.IDLE_MAXIMUM``."""
    linger: float = 0.01
    """Seconds from one partial batch's start to the next at least (full batches go back to
    back). Under load every stored result nudges delivery; waiting a few milliseconds posts
    dozens of replies per request instead of a handful (a request costs the bridge far more CPU
    than a reply in it). Idle, a reply goes out at once: the linger counts from the last
    read that found replies, not from an idle look that found none."""
    marks_in_flight: int = 4
    """Batches whose "delivered" marks may be committing while the next batch is read and
    posted (``run`` only; ``run_once`` waits for its marks)."""
    on_dead: Callable[[], None] | None = None
    """Called after a reply was dead-lettered (the bridge rings its dead-notice loop)."""
    on_delivered: Callable[[], None] | None = None
    """Called after replies were marked delivered (the bridge rings its pool lead: the next
    message of a ``serial`` room may run only once the reply before it was delivered)."""
    holder: str = attrs.field(factory=delivery_holder)
    """This loop's name on the delivery leases it takes (stores with ``delivery_leases``)."""
    lease_s: float | None = None
    """How long a read's results stay leased to ``holder``; ``None``: the store's ``lease_s``
    (the time a crashed bridge's work waits for another). A post that outlasts it (a gateway
    outage) may be posted by another bridge too: a duplicate the gateway absorbs."""
    timings: Timings | None = None
    """If given, each confirmed reply's delivery time is observed (from its stored reply)."""
    stats: DeliveryStats = attrs.field(factory=DeliveryStats, init=False)
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    _idle: Backoff = attrs.field(init=False)
    """The wait after a look that found nothing: ``idle_interval`` doubling (``pool._idle``)."""
    _stopped: trio.Event = attrs.field(factory=trio.Event, init=False)
    _marking: set[str] = attrs.field(factory=set, init=False)
    """Ids the gateway confirmed whose mark has not committed yet: still ``result`` in the
    store, and never posted again meanwhile."""

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.batch <= MAX_BATCH:
            raise ValueError(f"delivery batch must be from 1 to {MAX_BATCH}, got {self.batch}")
        if not (self.idle_interval > 0 and math.isfinite(self.idle_interval)):
            raise ValueError(f"idle_interval must be > 0 seconds, got {self.idle_interval}")
        self._idle = idle_backoff(self.idle_interval)
        if not (self.linger >= 0 and math.isfinite(self.linger)):
            raise ValueError(f"linger must be >= 0 seconds, got {self.linger}")
        if isinstance(self.marks_in_flight, bool) or not (
            isinstance(self.marks_in_flight, int) and self.marks_in_flight >= 1
        ):
            raise ValueError(f"marks_in_flight must be an int >= 1, got {self.marks_in_flight!r}")
        check_delivery_lease(self.holder, 1.0 if self.lease_s is None else self.lease_s)

    def nudge(self) -> None:
        """A result was stored: look now instead of at the next idle tick."""
        self._wake.set()

    def request_stop(self) -> None:
        """Soft stop: finish the batch in hand, deliver what is ready, then ``run`` returns.

        Never cancel a batch midway if you can help it: a reply the gateway took but that
        was not yet marked delivered is posted again next time (a duplicate it absorbs).
        """
        self._stopped.set()
        self._wake.set()

    async def run_once(self) -> int:
        """Deliver (or dead-letter) one batch of ready results; returns how many were handled.

        The batch goes out in one request when the gateway supports it; each reply is marked
        delivered only after the gateway's receipt for it (a duplicate receipt included).
        Returns once the marks are committed.
        """
        async with trio.open_nursery() as marks:
            return await self._deliver_batch(marks, trio.Semaphore(1))

    async def _deliver_batch(self, marks: trio.Nursery, mark_slots: trio.Semaphore) -> int:
        """Read, post and dead-letter one batch; its marks run in ``marks`` (holding one of
        ``mark_slots``), so the next batch can be read and posted while they commit."""
        # the ids being marked as the read starts: a mark that commits during the read (and
        # leaves ``_marking``) may not be in the read's snapshot
        marking = frozenset(self._marking)
        ready = await self._ready(self.batch + len(marking))
        results = [r for r in ready if r.task.id not in marking][: self.batch]
        if not results:
            return 0
        # a child's reply is its parent's to read, never the gateway's (issue #51): kept, the
        # child is done; confirmed without a post
        kept = [(r, ResultReceipt(r.task.id, False)) for r in results if r.task.parent]
        if kept:
            await mark_slots.acquire()
            self._marking.update(r.task.id for r, _ in kept)
            marks.start_soon(self._confirmed, kept, mark_slots)
        sendable: list[tuple[Result, ResultRequest]] = []
        async with trio.open_nursery() as nursery:
            for result in (r for r in results if not r.task.parent):
                request = _request_for(result)
                try:
                    parse_result(result_document(request))
                except ValueError as exc:  # breaks a protocol rule: retrying cannot help
                    nursery.start_soon(
                        self._dead_letter, result.task.id, f"the reply cannot be sent: {exc}"
                    )
                else:
                    sendable.append((result, request))
        if not sendable:
            return len(results)
        began = time.time()
        answers = await self.gateway.post_results(
            [request for _, request in sendable], checked=True
        )
        if tracing_enabled():
            _traced(sendable, answers, began)
        confirmed: list[tuple[Result, ResultReceipt]] = []
        async with trio.open_nursery() as nursery:  # the marks and dead letters share a commit
            for (result, _), answer in zip(sendable, answers, strict=True):
                if isinstance(answer, GatewayRequestError):
                    reason = f"the gateway refused the reply: {answer}"
                    nursery.start_soon(self._dead_letter, result.task.id, reason)
                else:
                    confirmed.append((result, answer))
            if confirmed:
                await mark_slots.acquire()
                self._marking.update(r.task.id for r, _ in confirmed)
                marks.start_soon(self._confirmed, confirmed, mark_slots)
        return len(results)

    async def _ready(self, limit: int) -> Sequence[Result]:
        """Ready results, leased to ``holder`` where the store leases (shared by bridges)."""
        if not self.store.delivery_leases:
            return await self.store.ready_results(limit=limit)
        lease_s = self.store.lease_s if self.lease_s is None else self.lease_s
        return await self.store.ready_results(limit=limit, holder=self.holder, lease_s=lease_s)

    async def _confirmed(
        self, confirmed: list[tuple[Result, ResultReceipt]], mark_slots: trio.Semaphore
    ) -> None:
        """Mark every confirmed reply delivered, in one store call (one commit)."""
        if self.timings is not None:
            self.timings.delivered((r.task.id for r, _ in confirmed), self.store.clock())
        try:
            marked = await self.store.mark_delivered_many([r.task.id for r, _ in confirmed])
        finally:
            self._marking.difference_update(r.task.id for r, _ in confirmed)
            mark_slots.release()
        if self.on_delivered is not None and any(marked):
            self.on_delivered()
        for (result, receipt), ok in zip(confirmed, marked, strict=True):
            task_id = result.task.id
            if not ok:
                state = await self.store.state(task_id)
                log.warning(
                    "delivered %s but could not mark it delivered: it is %s, not result",
                    task_id,
                    "unknown" if state is None else state.value,
                )
                continue
            self.stats.delivered += 1
            self.stats.no_send += is_no_send(result)
            if receipt.duplicate:
                self.stats.duplicates += 1
                log.info("the gateway already had the reply to %s (duplicate absorbed)", task_id)

    async def _dead_letter(self, task_id: str, reason: str) -> None:
        log.error("dead-lettering %s: %s", task_id, reason)
        try:
            await self.store.dead_letter(task_id, reason)
        except CustodyConflict as exc:
            log.warning("could not dead-letter %s: %s", task_id, exc)
            return
        self.stats.dead_lettered += 1
        if self.on_dead is not None:
            self.on_dead()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver until cancelled or stopped: full batches back to back, else wait for a nudge
        or the idle tick. After ``request_stop`` it delivers what is ready, then returns."""
        self._marking = set()
        task_status.started()
        mark_slots = trio.Semaphore(self.marks_in_flight)
        last_batch = -math.inf  # when the last read that found replies started
        async with trio.open_nursery() as marks:
            while True:
                self._wake = trio.Event()
                started = trio.current_time()
                handled = await self._deliver_batch(marks, mark_slots)
                if handled:
                    last_batch = started
                stopping = self._stopped.is_set()
                if stopping and handled == 0:
                    return  # the nursery waits for the marks still committing
                if handled < self.batch and not stopping:
                    if handled:
                        self._idle.reset()
                    with trio.move_on_after(on_grid(self._idle.next_delay())):
                        await self._wake.wait()
                    if self._wake.is_set():
                        self._idle.reset()  # news: look again at the busy pace
                    # nudged soon after a partial batch: let the batch fill a little (the
                    # nudges meanwhile need not wake this loop; a stop does). An idle look
                    # that found nothing does not hold the next reply back.
                    with trio.move_on_at(last_batch + self.linger):
                        await self._stopped.wait()


def _traced(
    sendable: Sequence[tuple[Result, ResultRequest]],
    answers: Sequence[ResultReceipt | GatewayRequestError],
    began: float,
) -> None:
    """Each traced reply's delivery span (from the post to the gateway's answer), with the
    gateway request inside it; the request carried the batch, and each span says so."""
    answered = time.time()
    for (result, _), answer in zip(sendable, answers, strict=True):
        trace = task_trace(result.task)
        if trace is None:
            continue
        if isinstance(answer, GatewayRequestError):
            outcome = "refused"
        else:
            outcome = "duplicate" if answer.duplicate else "delivered"
        attributes = {
            **task_attributes(result.task),
            "tether.worker": result.worker,
            "tether.attempt": result.attempt,
        }
        delivery = start_span(
            "tether.delivery", traceparent=trace, attributes=attributes, start=began
        )
        finished_span(
            "tether.gateway.request",
            traceparent=traceparent_of(delivery),
            start=began,
            end=answered,
            attributes={
                **attributes,
                "http.request.method": "POST",
                "tether.batch": len(sendable),
                "tether.outcome": outcome,
            },
        )
        end_span(delivery, {"tether.outcome": outcome}, end=answered)
