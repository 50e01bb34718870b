"""The question poster (issue #36): post each recorded question to the gateway once it is
durable, and mark it posted once the gateway confirmed it.

A crash in between posts it again, which the gateway absorbs (idempotent by task id and
seq): the person sees each question once. A gateway without the messages route (404) ends
the ask ``unsupported`` and the asking task runs again, its ``ask`` raising
``AskUnsupported``; that is said in one log line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs
import trio

from ..._backoff import Backoff
from ..._plumbing._grid import on_grid
from ..client._client import (
    GatewayClient,
    GatewayProtocolError,
    GatewayRequestError,
    GatewayUnavailable,
)
from ..custody._asks import QuestionStore
from ..pool._idle import idle_backoff

log = logging.getLogger("tether.bridge.questions")


@attrs.define(eq=False)
class QuestionPoster:
    """Posts recorded questions to the gateway. ``run()`` is the supervised service."""

    store: QuestionStore
    gateway: GatewayClient
    on_woken: Callable[[], None] | None = None
    """Called after an unsupported ask made its task pending again (the pool looks now)."""
    idle_interval: float = 0.05
    batch: int = 64
    posted: int = 0
    unsupported: int = 0
    _said_unsupported: bool = attrs.field(init=False, default=False)
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    _idle: Backoff = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not (self.idle_interval > 0 and math.isfinite(self.idle_interval)):
            raise ValueError(f"idle_interval must be > 0 seconds, got {self.idle_interval}")
        self._idle = idle_backoff(self.idle_interval)

    def nudge(self) -> None:
        """A question was recorded: look now rather than at the next idle tick."""
        self._wake.set()

    async def run_once(self) -> int:
        """Post what is unposted now; how many questions were read."""
        questions = await self.store.unposted_questions(limit=self.batch)
        for question in questions:
            try:
                taken = await self.gateway.post_message(
                    question.task_id, question.seq, question.text
                )
            except (GatewayUnavailable, GatewayProtocolError) as exc:
                log.debug(
                    "question %d of %s not posted yet: %s", question.seq, question.task_id, exc
                )
                return 0  # the gateway is away: the next look tries again, after the idle wait
            except GatewayRequestError as exc:  # refused (a task it no longer knows): not again
                log.warning(
                    "the gateway refused question %d of task %s: %s",
                    question.seq,
                    question.task_id,
                    exc,
                )
                await self.store.question_posted(question.task_id, question.name)
                continue
            if taken:
                await self.store.question_posted(question.task_id, question.name)
                self.posted += 1
                continue
            if await self.store.ask_unsupported(question.task_id, question.name):
                self.unsupported += 1
                if self.on_woken is not None:
                    self.on_woken()
            if not self._said_unsupported:
                self._said_unsupported = True
                log.warning(
                    "gateway %s has no messages route (POST /v1/tasks/<id>/messages): runs "
                    "that ask the person get AskUnsupported",
                    self.gateway.shown_url,
                )
        return len(questions)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            wake = self._wake = trio.Event()
            if await self.run_once():
                self._idle.reset()
                continue
            with trio.move_on_after(on_grid(self._idle.next_delay())):
                await wake.wait()
            if wake.is_set():
                self._idle.reset()
