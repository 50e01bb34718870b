"""``GatewayClient``: the bridge's end of gateway protocol v1, over httpx on Trio: the
protocol's calls (poll, acks, results, rejects, notices, progress, messages, lease release,
heartbeat) over the connection's one request path (``_connection``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import httpx
import trio

from ..._backoff import Backoff
from ..._plumbing._converter import unstructure
from ..._protocol._interim import InterimMessage
from ..._protocol._messages import (
    MAX_BATCH,
    PROTOCOL_VERSION,
    AckBatchRequest,
    AckRequest,
    BatchItem,
    GatewayTask,
    HeartbeatRequest,
    LeaseReleaseReceipt,
    LeaseReleaseRequest,
    NoticeRequest,
    RejectBatchRequest,
    RejectEntry,
    RejectRequest,
    ResultMetadata,
    ResultReceipt,
    ResultRequest,
    RoomForgetReceipt,
    RoomForgetRequest,
    check_room_name,
    check_task_id,
    is_task_id,
    parse_batch_item,
    parse_lenient,
    parse_result,
    result_document,
)
from ..._protocol._progress import ProgressRequest, fit_progress
from ._answers import (
    OverCap,
    Refusal,
    format_seconds,
    json_object,
    one_line_reason,
    tasks_array,
)
from ._connection import MAX_TASK_WIRE_BYTES, GatewayConnection, package_version
from ._errors import GatewayAuthError as GatewayAuthError
from ._errors import GatewayError as GatewayError
from ._errors import GatewayProtocolError as GatewayProtocolError
from ._errors import GatewayRequestError as GatewayRequestError
from ._errors import GatewayUnavailable as GatewayUnavailable

log = logging.getLogger("tether.bridge.gateway")


class GatewayClient(GatewayConnection):
    """A connection to one gateway. Use as ``async with GatewayClient(url, token_file) as c:``.

    ``transport`` replaces the network (tests use ``httpx.MockTransport``); ``rng`` drives
    the backoff jitter; ``status_file`` (optional) receives :class:`ConnectionStatus`;
    ``release_timeout`` bounds :meth:`release_leases` (it runs while the bridge stops).
    """

    __slots__ = ()  # its state is the connection's fields

    @property
    def poll_bytes_cap(self) -> int:
        """The most bytes of the next poll's answer this client reads: what its ``limit``
        tasks of the largest allowed size can be, and never more than ``poll_bytes_max``.
        More is refused unread: memory stays bounded."""
        return min(self._poll_ask * MAX_TASK_WIRE_BYTES + 1024, self.poll_bytes_max)

    # -- protocol calls ----------------------------------------------------------------

    async def poll_tasks(self, wait: float | None = None) -> list[GatewayTask]:
        """Long-poll for tasks: returns as soon as some are ready, or ``[]`` after ``wait`` s.

        The answer is read up to ``poll_bytes_cap`` and at most the ``limit`` asked of its
        tasks are taken: the rest are neither taken nor acked, so the gateway offers them
        again (taking the first ``limit`` keeps a gateway that ignores ``limit`` drained;
        taking none would leave it stuck).
        An answer that is not protocol v1 (not JSON, wrong shape, over the cap) is retried
        with backoff like an outage, one line per incident. A task this bridge cannot take
        (an id breaking the id rule, a wrong shape) is rejected to the gateway once, logged
        once, and left out (``rejected_tasks`` counts them).
        """
        wait = self.poll_wait if wait is None else wait
        timeout = httpx.Timeout(self.request_timeout, read=wait + self.timeout_margin)
        backoff = Backoff(self.backoff_initial, self.backoff_maximum, rng=self.rng)
        while True:
            ask = self._poll_ask
            try:
                response = await self._request(
                    "GET",
                    "/v1/tasks",
                    what="the task poll",
                    params={"wait": format_seconds(wait), "limit": str(ask)},
                    http_timeout=timeout,
                    max_bytes=self.poll_bytes_cap,
                    judge_answer=True,
                )
                assert response is not None
                raw_tasks = tasks_array(response)
            except GatewayProtocolError as exc:
                if isinstance(exc, OverCap):  # ask for as many as surely fit, next time
                    self._poll_ask = max(1, min(ask, self.poll_bytes_max // MAX_TASK_WIRE_BYTES))
                problem = self._redact(str(exc))
                delay = backoff.next_delay()
                self._unreachable(problem, delay, "answers outside protocol v1")
                await self._publish(connected=False, error=problem, backoff_s=round(delay, 3))
                await trio.sleep(delay)
                continue
            await self._answered()
            self._poll_ask = self.poll_limit
            break
        if len(raw_tasks) > ask:
            log.warning(
                "gateway %s answered a poll for at most %d tasks with %d; took the first %d, "
                "the other %d are not acked (the gateway offers them again)",
                self.shown_url,
                ask,
                len(raw_tasks),
                ask,
                len(raw_tasks) - ask,
            )
            del raw_tasks[ask:]
        tasks = []
        refusals: list[Refusal] = []
        for raw in raw_tasks:
            try:
                task = parse_lenient(raw, GatewayTask)
                check_task_id(task.id)
            except ValueError as exc:
                refusals.append(Refusal.of(raw, str(exc)))
                continue
            tasks.append(task)
        if refusals:
            await self._refuse(refusals)
        return tasks

    async def _refuse(self, refusals: list[Refusal]) -> None:
        """Reject polled tasks this bridge cannot take: each is logged once and rejected to
        the gateway once (``POST /v1/rejects``, the id in the body); one the gateway offers
        again is left out without a word (``refused_memory`` ids are remembered)."""
        to_send: dict[str, Refusal] = {}
        for refusal in refusals:
            self.rejected_tasks += 1
            sent = self._refused.get(refusal.key)
            if sent is None:
                log.warning(
                    "gateway sent a task this bridge cannot take: id %s: %s; %s",
                    refusal.shown,
                    refusal.reason,
                    "rejected to the gateway" if refusal.sendable else "skipped (cannot name it)",
                    extra={"task_id": refusal.shown},
                )
            else:
                log.debug("gateway offered refused task %s again; left out", refusal.shown)
            self._refused[refusal.key] = sent or not refusal.sendable
            self._refused.move_to_end(refusal.key)
            if not self._refused[refusal.key]:
                to_send[refusal.key] = refusal
        while len(self._refused) > self.refused_memory:
            self._refused.popitem(last=False)
        if not to_send:
            return
        try:
            done = await self._send_rejects(list(to_send.values()))
        except GatewayError as exc:
            log.debug("the rejection of %d task(s) did not get through: %s", len(to_send), exc)
            return
        for key in done:
            if key in self._refused:
                self._refused[key] = True

    async def _send_rejects(self, refusals: list[Refusal]) -> list[str]:
        """The keys of the refusals the gateway took (or that no route can carry)."""
        if self.rejects_supported:
            payload = unstructure(
                RejectBatchRequest([RejectEntry(r.id, one_line_reason(r.reason)) for r in refusals])
            )
            response = await self._request(
                "POST",
                "/v1/rejects",
                what=f"the rejection of {len(refusals)} polled task(s)",
                payload=payload,
                optional=True,
                retry=False,
            )
            if response is not None:
                data = json_object(response, "POST /v1/rejects")
                if not isinstance(data.get("items"), list):
                    raise GatewayProtocolError("POST /v1/rejects: the response has no 'items'")
                return [r.key for r in refusals]  # a 404 item: the gateway does not know it
            self.rejects_supported = False
            log.warning(
                "gateway %s has no POST /v1/rejects; a task with an invalid id is skipped "
                "(logged once per id), never rejected",
                self.shown_url,
            )
        done = []
        for refusal in refusals:
            if is_task_id(refusal.id):  # the path route can carry it
                try:
                    await self.reject(refusal.id, refusal.reason)
                except GatewayRequestError:
                    pass
            done.append(refusal.key)
        return done

    async def ack(self, task_id: str) -> None:
        """Tell the gateway the task is durably ours. Call only after the commit."""
        check_task_id(task_id)
        payload = unstructure(AckRequest(id=task_id, durable=True))
        await self._request(
            "POST", f"/v1/tasks/{task_id}/ack", what=f"the ack of {task_id}", payload=payload
        )

    async def post_result(
        self,
        task_id: str,
        body: str,
        *,
        no_send: bool = False,
        worker: str | None = None,
        attempt: int | None = None,
        room: str | None = None,
    ) -> ResultReceipt:
        """Deliver a task's result; safe to repeat (the gateway dedupes by task id).

        ``no_send=True`` closes the task without a message to the user. ``room``: the room of
        a task the bridge made (a schedule's firing), whose id the gateway never sent.
        """
        request = ResultRequest(
            id=task_id,
            body=body,
            no_send=no_send,
            metadata=ResultMetadata(worker=worker, attempt=attempt, room=room),
        )
        payload = result_document(request)
        parse_result(payload)  # the server's own checks, so a bad result fails here, clearly
        response = await self._request(
            "POST", "/v1/results", what=f"the result of {task_id}", payload=payload
        )
        assert response is not None
        try:
            return parse_lenient(json_object(response, "POST /v1/results"), ResultReceipt)
        except ValueError as exc:
            raise GatewayProtocolError(f"POST /v1/results: {exc}") from None

    async def ack_many(self, task_ids: Sequence[str]) -> list[GatewayRequestError]:
        """Ack many tasks (call only after their commit): one request per ``MAX_BATCH`` ids
        when the gateway has ``POST /v1/acks``, else one ack each. Returns the refusals (an
        id the gateway does not know, or never handed out), one per refused id."""
        for task_id in task_ids:
            check_task_id(task_id)
        refused: list[GatewayRequestError] = []
        for start in range(0, len(task_ids), MAX_BATCH):
            chunk = list(task_ids[start : start + MAX_BATCH])
            items = await self._batch(
                "/v1/acks", unstructure(AckBatchRequest(ids=chunk, durable=True)), "acks"
            )
            if items is None:
                refused.extend(await self._one_by_one(chunk, self.ack))
                continue
            refused.extend(
                GatewayRequestError(i.status, i.error or "refused", f"the ack of {i.id}")
                for i in items
                if i.status != 200
            )
        return refused

    async def post_results(
        self, results: Sequence[ResultRequest], *, checked: bool = False
    ) -> list[ResultReceipt | GatewayRequestError]:
        """Deliver many results, in order: a receipt each, or the gateway's refusal of it.

        One request per ``MAX_BATCH`` when the gateway has ``POST /v1/results/batch``, else
        one ``post_result`` each. Safe to repeat, like ``post_result``. ``checked=True``: the
        caller already ran ``parse_result`` on each (delivery does, to dead-letter one alone).
        """
        if not checked:
            for result in results:
                parse_result(result_document(result))  # the server's own checks, failing here
        answers: list[ResultReceipt | GatewayRequestError] = []
        for start in range(0, len(results), MAX_BATCH):
            chunk = list(results[start : start + MAX_BATCH])
            items = await self._batch(
                "/v1/results/batch", {"results": [result_document(r) for r in chunk]}, "results"
            )
            if items is None:
                answers.extend(await self._post_one_by_one(chunk))
                continue
            for item in items:
                if item.status == 200:
                    answers.append(ResultReceipt(id=item.id, duplicate=item.duplicate))
                else:
                    what = f"the result of {item.id}"
                    answers.append(GatewayRequestError(item.status, item.error or "refused", what))
        return answers

    async def _batch(self, path: str, payload: Any, what: str) -> list[BatchItem] | None:
        """POST a batch; its items in order, or None when the gateway has no such endpoint."""
        if not self.batches_supported:
            return None
        response = await self._request(
            "POST", path, what=f"a batch of {what}", payload=payload, optional=True
        )
        if response is None:
            self.batches_supported = False
            log.info("gateway %s has no batch endpoints; one request per task", self.shown_url)
            return None
        data = json_object(response, f"POST {path}")
        raw = data.get("items")
        if not isinstance(raw, list):
            raise GatewayProtocolError(f"POST {path}: the response has no 'items' array")
        try:
            return [parse_batch_item(item) for item in raw]
        except ValueError as exc:
            raise GatewayProtocolError(f"POST {path}: {exc}") from None

    async def _one_by_one(
        self, task_ids: list[str], call: Callable[[str], Any]
    ) -> list[GatewayRequestError]:
        refused: list[GatewayRequestError] = []
        limiter = trio.CapacityLimiter(16)

        async def one(task_id: str) -> None:
            async with limiter:
                try:
                    await call(task_id)
                except GatewayRequestError as exc:
                    refused.append(exc)

        async with trio.open_nursery() as nursery:
            for task_id in task_ids:
                nursery.start_soon(one, task_id)
        return refused

    async def _post_one_by_one(
        self, results: list[ResultRequest]
    ) -> list[ResultReceipt | GatewayRequestError]:
        answers: list[ResultReceipt | GatewayRequestError | None] = [None] * len(results)
        limiter = trio.CapacityLimiter(16)

        async def one(i: int, r: ResultRequest) -> None:
            async with limiter:
                try:
                    answers[i] = await self.post_result(
                        r.id,
                        r.body,
                        no_send=r.no_send,
                        worker=r.metadata.worker,
                        attempt=r.metadata.attempt,
                        room=r.metadata.room,
                    )
                except GatewayRequestError as exc:
                    answers[i] = exc

        async with trio.open_nursery() as nursery:
            for i, r in enumerate(results):
                nursery.start_soon(one, i, r)
        return [a for a in answers if a is not None]

    async def reject(self, task_id: str, reason: str) -> bool:
        """Tell the gateway this bridge cannot take ``task_id`` (it is closed there, with the
        reason). False when the gateway has no reject endpoint: the task will be redelivered.
        """
        if not self.reject_supported:
            return False
        check_task_id(task_id)
        reason = one_line_reason(reason)
        payload = unstructure(RejectRequest(id=task_id, reason=reason))
        response = await self._request(
            "POST",
            f"/v1/tasks/{task_id}/reject",
            what=f"the rejection of {task_id}",
            payload=payload,
            optional=True,
        )
        if response is None:
            self.reject_supported = False
            log.warning(
                "gateway %s has no reject endpoint; rejected tasks will be redelivered",
                self.shown_url,
            )
            return False
        return True

    async def notice(self, task_id: str, age_s: float, *, kind: str = "stall") -> bool:
        """Send one notice about a task (a stall); False when the gateway has no endpoint.

        Not retried: raises :class:`GatewayUnavailable` so the caller tries again next pass.
        """
        if not self.notices_supported:
            return False
        payload = unstructure(NoticeRequest(id=task_id, kind=kind, age_s=round(age_s, 3)))
        response = await self._request(
            "POST",
            "/v1/notices",
            what=f"the {kind} notice for {task_id}",
            payload=payload,
            optional=True,
            retry=False,
        )
        if response is None:
            self.notices_supported = False
            log.info("gateway %s has no notices endpoint; notices stay in the log", self.shown_url)
            return False
        return True

    async def progress(self, request: ProgressRequest) -> bool:
        """Send one progress update (texts cut to the limits); False when the gateway has no
        progress endpoint (remembered: no request next time).

        Best effort, not retried: a transient failure raises :class:`GatewayUnavailable`, a
        refusal :class:`GatewayRequestError` (e.g. 409 for a task the gateway has closed);
        the caller drops the update, and the next one supersedes it anyway.
        """
        if not self.progress_supported:
            return False
        check_task_id(request.id)
        response = await self._request(
            "POST",
            f"/v1/tasks/{request.id}/progress",
            what=f"a progress update of {request.id}",
            payload=unstructure(fit_progress(request)),
            optional=True,
            retry=False,
        )
        if response is None:
            self.progress_supported = False
            log.info("gateway %s has no progress endpoint; progress is not sent", self.base_url)
            return False
        return True

    async def post_message(self, task_id: str, seq: int, body: str) -> bool:
        """Post message ``seq`` of task ``task_id`` to the person before its reply (an ask's
        question: ``POST /v1/tasks/<id>/messages``); True once the gateway has it (a repost
        of the same seq is absorbed). False when the gateway has no such route (404): the
        caller ends the ask ``unsupported``. Not retried: :class:`GatewayUnavailable` for a
        transient failure, and the caller posts it again next pass."""
        check_task_id(task_id)
        response = await self._request(
            "POST",
            f"/v1/tasks/{task_id}/messages",
            what=f"message {seq} of {task_id}",
            payload=unstructure(InterimMessage(seq=seq, body=body)),
            optional=True,
            retry=False,
        )
        return response is not None

    async def forget_room(self, room: str) -> int | None:
        """Ask the gateway to drop its copy of ``room``: its messages, replies, questions and
        progress (``POST /v1/rooms/<room>/forget``, optional; issue #53). The number of
        messages it erased (0 for a room it holds nothing of), or None when it has no such
        route (404/405): it cannot forget, say so. Retried with backoff like any call, until
        it is answered or cancelled: the caller bounds the wait. ``ValueError`` for a room
        no bridge keeps (empty, over 256 characters, a NUL)."""
        check_room_name(room)
        response = await self._request(
            "POST",
            f"/v1/rooms/{quote(room, safe='')}/forget",
            what=f"the erasure of room {room!r:.80}",
            payload=unstructure(RoomForgetRequest(room=room)),
            optional=True,
        )
        if response is None:
            return None
        data = json_object(response, "POST /v1/rooms/<room>/forget")
        try:
            return parse_lenient(data, RoomForgetReceipt).forgotten
        except ValueError as exc:
            raise GatewayProtocolError(f"POST /v1/rooms/<room>/forget: {exc}") from None

    async def release_leases(self) -> int | None:
        """Give back every task the gateway leased to this client name and that was not acked:
        it queues them again at once instead of waiting out their lease. Returns how many;
        None when the gateway has no such endpoint (remembered: no request next time).

        Meant for a stop, after this client's polls and acks ended (an ack still on its way
        may find its task released; the gateway takes it all the same). It never holds a
        stop for long: at most ``release_timeout`` seconds and two tries, then
        :class:`GatewayUnavailable` (the tasks come back when their lease runs out).
        The holder is this client object's ``lease_holder``, so two bridges sharing a client
        name never release each other's leases.
        """
        if not self.release_supported:
            return None
        payload = unstructure(LeaseReleaseRequest(client=self.lease_holder))
        timeout = self.release_timeout
        http_timeout = httpx.Timeout(timeout)
        problem: GatewayUnavailable | None = None
        with trio.move_on_after(timeout):
            for attempt in range(2):
                if attempt:
                    await trio.sleep(min(0.1, timeout / 10))
                try:
                    response = await self._request(
                        "POST",
                        "/v1/leases/release",
                        what="the lease release",
                        payload=payload,
                        http_timeout=http_timeout,
                        optional=True,
                        retry=False,
                    )
                except GatewayUnavailable as exc:
                    problem = exc
                    continue
                if response is None:
                    self.release_supported = False
                    log.info(
                        "gateway %s cannot release leases; unacked tasks wait out their lease",
                        self.shown_url,
                    )
                    return None
                data = json_object(response, "POST /v1/leases/release")
                try:
                    return parse_lenient(data, LeaseReleaseReceipt).released
                except ValueError as exc:
                    raise GatewayProtocolError(f"POST /v1/leases/release: {exc}") from None
        raise GatewayUnavailable(
            str(problem) if problem is not None else f"the lease release: no answer in {timeout} s"
        )

    async def heartbeat(self, inflight: int) -> bool:
        """Send one heartbeat; False when the gateway has no heartbeat endpoint.

        Not retried: a missed heartbeat is replaced by the next one. Raises
        :class:`GatewayUnavailable` when the gateway cannot be reached.
        """
        if not self.heartbeat_supported:
            return False
        beat = HeartbeatRequest(
            client=self.client_name,
            protocol_version=PROTOCOL_VERSION,
            inflight=inflight,
            version=package_version(),
            uptime_s=round(trio.current_time() - self._started_at, 3),
        )
        try:
            response = await self._request(
                "POST",
                "/v1/heartbeat",
                what="the heartbeat",
                payload=unstructure(beat),
                optional=True,
                retry=False,
            )
        except GatewayUnavailable:
            await self._publish(heartbeat="failing")
            raise
        if response is None:
            self.heartbeat_supported = False
            log.info("gateway %s has no heartbeat endpoint; not sending heartbeats", self.shown_url)
            await self._publish(heartbeat="unsupported")
            return False
        await self._publish(heartbeat="ok")
        return True

    async def run_heartbeat(
        self,
        inflight: Callable[[], int],
        *,
        interval: float = 60.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Heartbeat every ``interval`` s with ``inflight()`` tasks; returns if unsupported.

        Failures are logged (once per outage) and the beat goes on; only an auth failure,
        which is fatal for the whole client, escapes.
        """
        task_status.started()
        failing = False
        deadline = trio.current_time()
        while self.heartbeat_supported:
            try:
                await self.heartbeat(inflight())
            except (GatewayUnavailable, GatewayRequestError, GatewayProtocolError) as exc:
                if not failing:
                    log.warning("heartbeat failed (will keep trying): %s", exc)
                failing = True
            else:
                if failing:
                    log.info("heartbeat to %s works again", self.shown_url)
                failing = False
            if trio.current_time() >= deadline:  # else this beat came early, after an outage
                deadline += interval
            with trio.move_on_at(deadline):
                await self._beat_after_outage.wait()
            self._beat_after_outage = trio.Event()
