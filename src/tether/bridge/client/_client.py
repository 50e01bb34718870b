"""``GatewayClient``: the bridge's end of gateway protocol v1, over httpx on Trio.

Transient trouble is retried with backoff until it succeeds or is cancelled; a refusal raises one
clear error; an optional endpoint a gateway lacks is asked once. See docs/guide/design.md, "The
bridge's client".
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import logging
import random
import secrets
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import attrs
import httpx
import trio

from ..._backoff import Backoff
from ..._expected import ExpectedFailure
from ..._plumbing._converter import unstructure
from ..._plumbing._json import loads_strict
from ..._plumbing._redact import redact_url
from ..._plumbing._token_file import TokenFileError, read_token
from ..._plumbing._when import clock_time, duration
from ..._protocol._bounds import MAX_REQUEST_BYTES
from ..._protocol._connection import ConnectionStatus, utc_now_iso
from ..._protocol._interim import InterimMessage
from ..._protocol._messages import (
    CLIENT_HEADER,
    MAX_BATCH,
    MAX_FOREIGN_ID_CHARS,
    MAX_REASON_CHARS,
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
    ResultBatchRequest,
    ResultMetadata,
    ResultReceipt,
    ResultRequest,
    check_label,
    check_task_id,
    is_task_id,
    parse_batch_item,
    parse_lenient,
    parse_result,
)
from ..._protocol._progress import ProgressRequest, fit_progress
from ._status_file import StatusFile

log = logging.getLogger("tether.bridge.gateway")

_TRANSIENT_STATUS = frozenset({408, 429})

MAX_TASK_WIRE_BYTES = MAX_REQUEST_BYTES
"""The most bytes one task can take in a poll's answer: the largest allowed body JSON-escaped,
plus its envelope (``_protocol._bounds``). A poll's answer is read up to ``limit`` of these."""

MAX_ANSWER_BYTES = 1 << 20
"""The most bytes read of any other answer (acks, receipts, batch items, an error's text):
all are small; a gateway sending more is not speaking protocol v1."""

POLL_BYTES_MAX = 32 << 20
"""The most bytes of a poll's answer read at all. A full poll of 100 tasks of the largest size
would be ~636 MB; after an answer over this, the next poll asks for only as many tasks as surely
fit (5), so a gateway sending huge tasks is drained, a few at a time, within this memory."""

REFUSED_MEMORY = 10_000
"""How many refused task ids a client remembers (so each is logged and rejected once)."""

LEASE_RELEASE_TIMEOUT = 2.0
"""Most seconds :meth:`GatewayClient.release_leases` may take (it runs while stopping)."""


class GatewayError(Exception):
    """Base of every error the gateway client raises."""


class GatewayAuthError(GatewayError):
    """The gateway refused our token even after re-reading the token file. Fatal."""


class GatewayRequestError(GatewayError):
    """The gateway refused a request (4xx other than auth); retrying would not help."""

    def __init__(self, status: int, detail: str, what: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"gateway refused {what}: HTTP {status}: {detail}")


class GatewayProtocolError(ExpectedFailure, GatewayError):
    """The gateway answered with something that is not protocol v1."""


class GatewayUnavailable(ExpectedFailure, GatewayError):
    """A call made without retries (heartbeat) could not reach the gateway."""


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verifying TLS context (its CA bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    honoured), made once per process: loading the bundle is slow, and every client (a
    restarted bridge, the demo's second bridge, each test) would otherwise pay it again."""
    return httpx.create_ssl_context()


def _package_version() -> str | None:
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return None


@attrs.define(eq=False)
class GatewayClient:
    """A connection to one gateway. Use as ``async with GatewayClient(url, token_file) as c:``.

    ``transport`` replaces the network (tests use ``httpx.MockTransport``); ``rng`` drives
    the backoff jitter; ``status_file`` (optional) receives :class:`ConnectionStatus`;
    ``release_timeout`` bounds :meth:`release_leases` (it runs while the bridge stops).
    """

    base_url: str
    token_file: Path
    client_name: str = "tether-bridge"
    status_file: Path | None = None
    poll_wait: float = 30.0
    poll_limit: int = MAX_BATCH
    """Tasks one poll may lease (the protocol's most, 100): a round is one commit and one ack
    request however many it holds, so a busy gateway is drained in few round trips."""
    timeout_margin: float = 10.0
    request_timeout: float = 30.0
    backoff_initial: float = 1.0
    backoff_maximum: float = 60.0
    release_timeout: float = LEASE_RELEASE_TIMEOUT
    rng: random.Random = attrs.field(factory=random.Random)
    transport: httpx.AsyncBaseTransport | None = None
    pool_name: str | None = None
    """The stem of the bridge's pool names, shown in the status file (``pool``)."""

    lease_holder: str = attrs.field(default="", init=False)
    """Who holds this client's gateway leases (``X-Tether-Client``): ``client_name`` and a
    random suffix, unique per client object (so per bridge run)."""
    heartbeat_supported: bool = attrs.field(default=True, init=False)
    batches_supported: bool = attrs.field(default=True, init=False)
    reject_supported: bool = attrs.field(default=True, init=False)
    notices_supported: bool = attrs.field(default=True, init=False)
    release_supported: bool = attrs.field(default=True, init=False)
    progress_supported: bool = attrs.field(default=True, init=False)
    poll_bytes_max: int = POLL_BYTES_MAX
    """The most bytes any poll's answer may take (see ``poll_bytes_cap``)."""
    rejects_supported: bool = attrs.field(default=True, init=False)
    refused_memory: int = REFUSED_MEMORY
    rejected_tasks: int = attrs.field(default=0, init=False)
    _poll_ask: int = attrs.field(default=0, init=False)
    """The ``limit`` the next poll asks for: ``poll_limit``, or after an answer over
    ``poll_bytes_max`` as many as surely fit in it (then ``poll_limit`` again)."""
    _refused: OrderedDict[str, bool] = attrs.field(factory=OrderedDict, init=False)
    """Polled tasks refused, by key (``_Refusal.key``), oldest first: True once the gateway
    was told (or cannot be), False while the rejection has yet to get through."""
    _http: httpx.AsyncClient | None = attrs.field(default=None, init=False)
    _token: str = attrs.field(default="", init=False)
    shown_url: str = attrs.field(init=False, default="")
    """``base_url`` as logs, errors and the status file show it (``tether._plumbing._redact``)."""
    _status: ConnectionStatus = attrs.field(init=False)
    _status_writer: StatusFile | None = attrs.field(default=None, init=False)
    _started_at: float = attrs.field(default=0.0, init=False)
    _beat_after_outage: trio.Event = attrs.field(factory=trio.Event, init=False)
    """Set when the gateway answers again after an outage that made a good heartbeat stale:
    the heartbeat loop beats at once instead of at its next interval."""
    _heartbeat_marked_by_outage: bool = attrs.field(default=False, init=False)
    _outage_since: float | None = attrs.field(default=None, init=False)
    _outage_kind: str = attrs.field(default="unreachable", init=False)
    """When the gateway stopped answering (Trio clock), while it does not answer."""

    def __attrs_post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway url must start with http:// or https://: {self.shown_url}")
        if "@" in self.base_url.split("://", 1)[1].split("/", 1)[0]:
            # httpx would turn it into Basic auth, replacing the bearer token
            raise ValueError(
                f"gateway url {self.shown_url} must not carry a user or password; "
                "the token comes from the token file"
            )
        if "?" in self.base_url or "#" in self.base_url:
            raise ValueError(
                f"gateway url {self.shown_url} must not carry a query or fragment "
                "(request paths are appended to it)"
            )
        check_label(self.client_name, "client name")
        if not 0 <= self.poll_wait <= 300:
            raise ValueError(f"poll_wait must be within 0-300 seconds, got {self.poll_wait}")
        if not 0 < self.backoff_initial <= self.backoff_maximum:
            # a zero first delay would retry a down gateway in a hot loop
            raise ValueError(
                f"backoff needs 0 < initial <= maximum, got {self.backoff_initial} "
                f"and {self.backoff_maximum}"
            )
        if not 0 < self.release_timeout <= 60:
            raise ValueError(
                f"release_timeout must be within 0-60 seconds (> 0), got {self.release_timeout}"
            )
        if not 1 <= self.poll_limit <= MAX_BATCH:
            raise ValueError(f"poll_limit must be within 1-{MAX_BATCH}, got {self.poll_limit}")
        if self.poll_bytes_max < MAX_TASK_WIRE_BYTES:
            raise ValueError(
                f"poll_bytes_max must hold one task of the largest size "
                f"({MAX_TASK_WIRE_BYTES} bytes), got {self.poll_bytes_max}"
            )
        self._poll_ask = self.poll_limit
        self.lease_holder = f"{self.client_name[:121]}-{secrets.token_hex(3)}"
        self._status = ConnectionStatus(
            gateway=self.shown_url, client=self.client_name, pool=self.pool_name
        )
        if self.status_file is not None:
            self._status_writer = StatusFile(self.status_file)

    async def __aenter__(self) -> Self:
        self._token = await self._read_token()
        self._started_at = trio.current_time()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=self.transport,
            verify=_tls_context(),
            timeout=self.request_timeout,
            headers={
                "User-Agent": f"tether-gateway-client/{_package_version() or 'dev'}",
                CLIENT_HEADER: self.lease_holder,
            },
        )
        await self._publish()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        http, self._http = self._http, None
        if http is not None:
            with trio.CancelScope(shield=True):
                await http.aclose()

    @property
    def status(self) -> ConnectionStatus:
        return self._status

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
                    params={"wait": _format_seconds(wait), "limit": str(ask)},
                    http_timeout=timeout,
                    max_bytes=self.poll_bytes_cap,
                    judge_answer=True,
                )
                assert response is not None
                raw_tasks = _tasks_array(response)
            except GatewayProtocolError as exc:
                if isinstance(exc, _OverCap):  # ask for as many as surely fit, next time
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
        refusals: list[_Refusal] = []
        for raw in raw_tasks:
            try:
                task = parse_lenient(raw, GatewayTask)
                check_task_id(task.id)
            except ValueError as exc:
                refusals.append(_Refusal.of(raw, str(exc)))
                continue
            tasks.append(task)
        if refusals:
            await self._refuse(refusals)
        return tasks

    async def _refuse(self, refusals: list[_Refusal]) -> None:
        """Reject polled tasks this bridge cannot take: each is logged once and rejected to
        the gateway once (``POST /v1/rejects``, the id in the body); one the gateway offers
        again is left out without a word (``refused_memory`` ids are remembered)."""
        to_send: dict[str, _Refusal] = {}
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

    async def _send_rejects(self, refusals: list[_Refusal]) -> list[str]:
        """The keys of the refusals the gateway took (or that no route can carry)."""
        if self.rejects_supported:
            payload = unstructure(
                RejectBatchRequest(
                    [RejectEntry(r.id, _one_line_reason(r.reason)) for r in refusals]
                )
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
                data = _json_object(response, "POST /v1/rejects")
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
    ) -> ResultReceipt:
        """Deliver a task's result; safe to repeat (the gateway dedupes by task id).

        ``no_send=True`` closes the task without a message to the user.
        """
        request = ResultRequest(
            id=task_id,
            body=body,
            no_send=no_send,
            metadata=ResultMetadata(worker=worker, attempt=attempt),
        )
        payload = unstructure(request)
        parse_result(payload)  # the server's own checks, so a bad result fails here, clearly
        response = await self._request(
            "POST", "/v1/results", what=f"the result of {task_id}", payload=payload
        )
        assert response is not None
        try:
            return parse_lenient(_json_object(response, "POST /v1/results"), ResultReceipt)
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
                parse_result(unstructure(result))  # the server's own checks, failing here
        answers: list[ResultReceipt | GatewayRequestError] = []
        for start in range(0, len(results), MAX_BATCH):
            chunk = list(results[start : start + MAX_BATCH])
            items = await self._batch(
                "/v1/results/batch", unstructure(ResultBatchRequest(results=chunk)), "results"
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
        data = _json_object(response, f"POST {path}")
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
        reason = _one_line_reason(reason)
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
                data = _json_object(response, "POST /v1/leases/release")
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
            version=_package_version(),
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

    # -- the one request path ----------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        payload: Any = None,
        params: dict[str, str] | None = None,
        http_timeout: httpx.Timeout | None = None,
        optional: bool = False,
        retry: bool = True,
        max_bytes: int = MAX_ANSWER_BYTES,
        judge_answer: bool = False,
    ) -> httpx.Response | None:
        """Send a request; back off on transient errors, re-read the token once on 401/403.

        The answer is read as a stream and refused (``GatewayProtocolError``) past
        ``max_bytes``. Returns None only for an ``optional`` endpoint the gateway does not
        have. ``judge_answer``: the caller decides whether a 2xx answer ends an outage (it
        may not be protocol v1) and calls ``_answered`` itself.
        """
        if self._http is None:
            raise RuntimeError("GatewayClient used outside its 'async with' block")
        backoff = Backoff(self.backoff_initial, self.backoff_maximum, rng=self.rng)
        token_reread = False
        while True:
            retry_after: float | None = None
            try:
                response = await _bounded(
                    self._http,
                    self._http.build_request(
                        method,
                        path,
                        json=payload,
                        params=params,
                        headers={"Authorization": f"Bearer {self._token}"},
                        timeout=(
                            http_timeout if http_timeout is not None else httpx.USE_CLIENT_DEFAULT
                        ),
                    ),
                    max_bytes,
                    what,
                )
            except httpx.TransportError as exc:
                problem = f"{what}: {type(exc).__name__}: {exc or 'no detail'}"
            else:
                status = response.status_code
                if status in (401, 403):
                    if token_reread:
                        raise await self._auth_failure(what, response, "after re-reading it")
                    token_reread = True
                    fresh = await self._read_token()
                    if fresh == self._token:
                        raise await self._auth_failure(what, response, "and the file is unchanged")
                    log.info("gateway refused the token; re-read %s, retrying", self.token_file)
                    self._token = fresh
                    continue
                if status < 400:
                    if not judge_answer:
                        await self._answered()
                    return response
                if optional and status in (404, 405):
                    await self._answered()
                    return None
                if status < 500 and status not in _TRANSIENT_STATUS:
                    await self._answered()
                    raise GatewayRequestError(status, _error_detail(response), what)
                problem = f"{what}: HTTP {status}: {_error_detail(response)}"
                retry_after = _retry_after(response)
            problem = self._redact(problem)
            if not retry:
                await self._publish(connected=False, error=problem)
                raise GatewayUnavailable(problem)
            delay = backoff.next_delay()
            if retry_after is not None:
                delay = min(max(delay, retry_after), self.backoff_maximum)
            self._unreachable(problem, delay)
            await self._publish(connected=False, error=problem, backoff_s=round(delay, 3))
            await trio.sleep(delay)

    def _unreachable(self, problem: str, delay: float, what: str = "unreachable") -> None:
        """Log an outage once, as it begins, with the next try's time (the requests failing
        in it say so at DEBUG): a person watching the log knows it is being dealt with.
        ``what`` says what kind of outage: unreachable, or answering outside protocol v1."""
        next_try = f"next try at {clock_time(time.time() + delay)} (in {delay:.1f} s)"
        if self._outage_since is not None:
            log.debug("gateway %s still %s (%s); %s", self.shown_url, what, problem, next_try)
            return
        self._outage_since = trio.current_time()
        self._outage_kind = what
        log.warning(
            "gateway %s %s (%s); %s, then less often (at most %g s apart); "
            "a line says when it answers again",
            self.shown_url,
            what,
            problem,
            next_try,
            self.backoff_maximum,
        )

    async def _answered(self) -> None:
        """The gateway answered: the end of an outage, if one was going on, gets its line (at
        the outage's level: whoever saw it begin sees it end)."""
        if self._outage_since is not None:
            lasted = trio.current_time() - self._outage_since
            self._outage_since = None
            log.warning(
                "gateway %s answers again after %s %s",
                self.shown_url,
                duration(lasted),
                "unreachable" if self._outage_kind == "unreachable" else "answering outside v1",
            )
        await self._publish(connected=True, ok=True)

    async def _auth_failure(
        self, what: str, response: httpx.Response, when: str
    ) -> GatewayAuthError:
        message = self._redact(
            f"gateway {self.shown_url} refused the token in {self.token_file} "
            f"(HTTP {response.status_code}: {_error_detail(response)}) {when}; "
            "put the gateway's current token in that file"
        )
        await self._publish(connected=False, error=message)
        log.error("%s (during %s)", message, what)
        return GatewayAuthError(message)

    async def _read_token(self) -> str:
        try:
            return await trio.to_thread.run_sync(read_token, self.token_file)
        except TokenFileError as exc:
            message = f"cannot use the gateway token: {exc}"
            await self._publish(connected=False, error=message)
            raise GatewayAuthError(message) from None

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "[token]") if self._token else text

    async def _publish(
        self,
        *,
        connected: bool | None = None,
        ok: bool = False,
        error: str | None = None,
        backoff_s: float | None = None,
        heartbeat: str | None = None,
    ) -> None:
        status = self._status
        if heartbeat is not None:  # a beat's own outcome
            self._heartbeat_marked_by_outage = False
        elif connected is False and status.heartbeat == "ok":
            heartbeat = "failing"  # a beat cannot get through either: "ok" would be stale
            self._heartbeat_marked_by_outage = True
        elif connected and self._heartbeat_marked_by_outage:
            self._heartbeat_marked_by_outage = False
            self._beat_after_outage.set()  # find out now, not a heartbeat interval later
        if connected is not None:
            failures = 0 if connected else status.consecutive_failures + 1
            status = attrs.evolve(
                status,
                connected=connected,
                error=None if connected else error,
                backoff_s=backoff_s,
                consecutive_failures=failures,
            )
        if ok:
            status = attrs.evolve(status, last_ok=utc_now_iso())
        if heartbeat is not None:
            status = attrs.evolve(status, heartbeat=heartbeat)
        self._status = status
        if self._status_writer is not None:
            await self._status_writer.publish(status)


async def _bounded(
    http: httpx.AsyncClient, request: httpx.Request, max_bytes: int, what: str
) -> httpx.Response:
    """Send ``request`` and read its answer up to ``max_bytes``: a longer one (by its
    ``Content-Length`` or as it streams in) is cut off unread and refused."""
    response = await http.send(request, stream=True)
    try:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise _over_cap(what, max_bytes, f"declares {int(declared)} bytes")
        try:
            body = response.content  # already in memory (an in-process test transport)
        except httpx.ResponseNotRead:
            parts: list[bytes] = []
            size = 0
            chunks = response.aiter_bytes()
            async with contextlib.aclosing(chunks):  # type: ignore[type-var]
                async for chunk in chunks:
                    parts.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        raise _over_cap(what, max_bytes, "went on past it") from None
            body = b"".join(parts)
            del parts
        if len(body) > max_bytes:
            raise _over_cap(what, max_bytes, "went on past it")
    finally:
        await response.aclose()
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        content=body,
        request=request,
        extensions=response.extensions,
    )


class _OverCap(GatewayProtocolError):
    """An answer longer than the client reads."""


def _over_cap(what: str, max_bytes: int, how: str) -> GatewayProtocolError:
    return _OverCap(
        f"{what}: the answer is over this client's limit of {max_bytes} bytes (it {how}); "
        "refused unread"
    )


def _tasks_array(response: httpx.Response) -> list[Any]:
    data = _json_object(response, "GET /v1/tasks")
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list):
        raise GatewayProtocolError("GET /v1/tasks: the response has no 'tasks' array")
    return raw_tasks


@attrs.frozen
class _Refusal:
    """A polled task this client cannot take: ``id`` as sent (``""`` when there is none),
    ``key`` to remember it by (the id, or a digest of a long id or of an entry without one),
    ``sendable`` when a rejection can name it."""

    id: str
    key: str
    reason: str
    sendable: bool

    @property
    def shown(self) -> str:
        return repr(self.id)[:140] if self.id else "(no id)"

    @classmethod
    def of(cls, raw: Any, reason: str) -> _Refusal:
        raw_id = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(raw_id, str) and raw_id and "\x00" not in raw_id:
            sendable = len(raw_id) <= MAX_FOREIGN_ID_CHARS
            key = raw_id if len(raw_id) <= 200 else "#" + _digest(raw_id)
            return cls(raw_id if sendable else raw_id[:200], key, reason, sendable)
        return cls("", "#" + _digest(raw), reason, sendable=False)


def _digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _one_line_reason(reason: str) -> str:
    """One line, no NUL, within the bound the gateway enforces (``parse_reject``)."""
    return " ".join(reason.replace("\x00", " ").split())[:MAX_REASON_CHARS] or "rejected"


def _format_seconds(value: float) -> str:
    return f"{value:g}"


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        data = loads_strict(response.content)
    except ValueError as exc:
        raise GatewayProtocolError(f"{what}: the response is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise GatewayProtocolError(f"{what}: the response is not a JSON object")
    return data


def _error_detail(response: httpx.Response) -> str:
    """The gateway's ``{"error": ...}`` text, or a short excerpt of whatever it sent."""
    try:
        data = loads_strict(response.content)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        detail: str = data["error"]
    else:
        detail = response.text[:200].strip() or response.reason_phrase or "no detail"
    return " ".join(detail.split())[:300]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
