"""Delivery: the bridge loop's outbound half. Post stored replies, then mark them delivered.

A reply leaves custody only when the gateway confirmed it: ``mark_delivered_many`` runs after the
gateway's answer, never before, so a crash in between re-posts the reply after restart and the
gateway absorbs the duplicate (it dedupes by task id; a duplicate receipt counts as confirmed).
Transient trouble (gateway down, 5xx, 429) is retried with backoff inside the gateway client;
a permanent refusal (a 4xx other than auth) dead-letters the task with the gateway's reason
(``_dead_notices`` then tells the gateway the task is closed, so its user hears why);
an auth refusal ends the loop (fatal for the whole bridge).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs
import trio

from .._converter import unstructure
from ._custody import CustodyConflict, Result
from ._gateway_client import GatewayClient, GatewayRequestError
from ._gateway_wire import MAX_BATCH, ResultMetadata, ResultReceipt, ResultRequest, parse_result
from ._store import Store

log = logging.getLogger("tether.bridge.delivery")


def is_no_send(result: Result) -> bool:
    """Does this stored reply close its task without sending anything to the user?"""
    return result.no_send


def _request_for(result: Result) -> ResultRequest:
    no_send = is_no_send(result)
    return ResultRequest(
        id=result.task.id,
        body="" if no_send else result.body,
        no_send=no_send,
        metadata=ResultMetadata(worker=result.worker, attempt=result.attempt),
    )


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

    store: Store
    gateway: GatewayClient
    batch: int = 64
    idle_interval: float = 0.05
    """How long to wait for new results when none are ready (``nudge()`` wakes it early)."""
    on_dead: Callable[[], None] | None = None
    """Called after a reply was dead-lettered (the bridge rings its dead-notice loop)."""
    stats: DeliveryStats = attrs.field(factory=DeliveryStats, init=False)
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    _stopping: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.batch <= MAX_BATCH:
            raise ValueError(f"delivery batch must be from 1 to {MAX_BATCH}, got {self.batch}")
        if not (self.idle_interval > 0 and math.isfinite(self.idle_interval)):
            raise ValueError(f"idle_interval must be > 0 seconds, got {self.idle_interval}")

    def nudge(self) -> None:
        """A result was stored: look now instead of at the next idle tick."""
        self._wake.set()

    def request_stop(self) -> None:
        """Soft stop: finish the batch in hand, deliver what is ready, then ``run`` returns.

        Never cancel a batch midway if you can help it: a reply the gateway took but that
        was not yet marked delivered is posted again next time (a duplicate it absorbs).
        """
        self._stopping = True
        self._wake.set()

    async def run_once(self) -> int:
        """Deliver (or dead-letter) one batch of ready results; returns how many were handled.

        The batch goes out in one request when the gateway supports it; each reply is marked
        delivered only after the gateway's receipt for it (a duplicate receipt included).
        """
        results = await self.store.ready_results(limit=self.batch)
        if not results:
            return 0
        sendable: list[tuple[Result, ResultRequest]] = []
        async with trio.open_nursery() as nursery:
            for result in results:
                request = _request_for(result)
                try:
                    parse_result(unstructure(request))
                except ValueError as exc:  # breaks a protocol rule: retrying cannot help
                    nursery.start_soon(
                        self._dead_letter, result.task.id, f"the reply cannot be sent: {exc}"
                    )
                else:
                    sendable.append((result, request))
        if not sendable:
            return len(results)
        answers = await self.gateway.post_results([request for _, request in sendable])
        confirmed: list[tuple[Result, ResultReceipt]] = []
        async with trio.open_nursery() as nursery:  # the marks and dead letters share a commit
            for (result, _), answer in zip(sendable, answers, strict=True):
                if isinstance(answer, GatewayRequestError):
                    reason = f"the gateway refused the reply: {answer}"
                    nursery.start_soon(self._dead_letter, result.task.id, reason)
                else:
                    confirmed.append((result, answer))
            if confirmed:
                nursery.start_soon(self._confirmed, confirmed)
        return len(results)

    async def _confirmed(self, confirmed: list[tuple[Result, ResultReceipt]]) -> None:
        """Mark every confirmed reply delivered, in one store call (one commit)."""
        marked = await self.store.mark_delivered_many([r.task.id for r, _ in confirmed])
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
        task_status.started()
        while True:
            self._wake = trio.Event()
            handled = await self.run_once()
            if self._stopping and handled == 0:
                return
            if handled < self.batch and not self._stopping:
                with trio.move_on_after(self.idle_interval):
                    await self._wake.wait()
