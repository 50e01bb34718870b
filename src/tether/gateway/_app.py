"""The reference gateway as an ASGI app: protocol v1 for workers, messages for users.

Routes (JSON in and out; errors are ``{"error": "..."}`` with a 4xx/5xx status):

======  ==========================  ======  ==============================================
GET     /                           none    the chat page (and /app.js, /style.css)
GET     /healthz                    none    liveness and protocol version
GET     /v1/tasks?wait=N&limit=M    worker  long-poll: lease up to M tasks, wait ≤ N s
POST    /v1/tasks/<id>/ack          worker  ``{"id","durable":true}``: stop redelivering
POST    /v1/acks                    worker  ``{"ids":[...],"durable":true}``: many acks at once
POST    /v1/results/batch           worker  ``{"results":[...]}``: many results at once
POST    /v1/results                 worker  ``{"id","body","no_send"?,"metadata"?}``
                                            (``metadata.room``: a bridge-made task's room)
POST    /v1/tasks/<id>/reject       worker  ``{"id","reason"}``: the bridge cannot take it
POST    /v1/rejects                 worker  ``{"rejects":[{"id","reason"}]}``: ids as polled, in
                                            the body (any text: an invalid id is named too)
POST    /v1/notices                 worker  ``{"id","kind":"stall","age_s"}``: tell people
POST    /v1/tasks/<id>/progress     worker  ``{"id","attempt","seq","running_s","status"?,
                                            "partial"?}``: what a running task shows now
POST    /v1/tasks/<id>/messages     worker  ``{"seq","body"}``: a message to the person before
                                            the reply (a question); idempotent by (id, seq)
POST    /v1/heartbeat               worker  ``{"client","protocol_version":1,"inflight"}``
POST    /v1/leases/release          worker  ``{"client"}``: queue again its unacked leases
POST    /v1/rooms/<room>/forget     worker  ``{"room"}``: erase the room's messages, replies,
                                            questions and progress (optional route)
GET     /v1/stats                   worker  task counts, duplicates absorbed, clients
POST    /v1/messages                user    ``{"room","text","sender"?,"id"?,"priority"?,
                                            "tenant"?}`` → id
GET     /v1/messages?room=R&limit=N user    a room's recent messages with their replies, cut
        &before=ID                          to a bounded page (``_history``); older: before
GET     /v1/messages/<id>?wait=N    user    status and reply; waits ≤ N s for the reply
        &seen=REV                           ... or, with ``seen``, for any change of the view
======  ==========================  ======  ==============================================

Nothing is stored unless the whole request is valid; the user token opens only the user
routes. See docs/guide/gateway.md and docs/guide/design.md, "Routes".
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from .._core._util import open_nursery_unwrapped
from .._http._asgi import (
    BODY_TIMEOUT,
    HttpError,
    Receive,
    Request,
    Scope,
    Send,
    allow_methods,
    query_count,
    query_seconds,
    send_bytes,
    send_json,
    serve_http,
)
from .._http._auth import TokenSource, bearer_token
from .._http._static import PAGE_HEADERS, StaticFile, load_static
from .._plumbing._converter import unstructure
from .._plumbing._token_file import TokenFileError
from .._plumbing._tracing import set_attributes, span, traceparent_of
from .._protocol._bounds import MAX_REQUEST_BYTES
from .._protocol._interim import InterimReceipt, parse_interim
from .._protocol._messages import (
    CLIENT_HEADER,
    PROTOCOL_VERSION,
    BatchItem,
    LeaseReleaseReceipt,
    ResultReceipt,
    RoomForgetReceipt,
    check_label,
    check_task_id,
    parse_ack,
    parse_ack_batch,
    parse_heartbeat,
    parse_lease_release,
    parse_notice,
    parse_reject,
    parse_reject_batch,
    parse_result,
    parse_result_batch,
    parse_room_forget,
)
from .._protocol._progress import parse_progress
from ._history import SHOWN_CHARS, HistoryRow, UnknownBefore
from ._progress import ProgressBoard
from ._store import FINAL_STATES, Conflict, GatewayStore, ItemOutcome, StoredTask
from ._wire import MessageView, message_view, parse_message, task_for_worker

log = logging.getLogger("tether.gateway")

WORKER = "worker"
USER = "user"

_STATIC = {"/": "index.html", "/app.js": "app.js", "/style.css": "style.css"}
_ACK_PATH = re.compile(r"/v1/tasks/([^/]+)/ack")
_REJECT_PATH = re.compile(r"/v1/tasks/([^/]+)/reject")
_PROGRESS_PATH = re.compile(r"/v1/tasks/([^/]+)/progress")
_INTERIM_PATH = re.compile(r"/v1/tasks/([^/]+)/messages")
_MESSAGE_PATH = re.compile(r"/v1/messages/([^/]+)")
_FORGET_PATH = re.compile(r"/v1/rooms/(.+)/forget", re.DOTALL)
"""The room as the server decoded the path (it may hold a ``/``); the body names it again."""


@attrs.frozen
class AppLimits:
    """Bounds on what one request may ask for. ``max_body`` (bytes) defaults to what carries
    the custody store's largest result JSON-escaped (``MAX_REQUEST_BYTES``)."""

    max_body: int = MAX_REQUEST_BYTES
    max_wait: float = 60.0
    max_poll_limit: int = 100
    max_history: int = 200
    body_timeout: float = BODY_TIMEOUT
    """Seconds a request body may take to arrive after its headers (then 408)."""


def _load_static() -> dict[str, StaticFile]:
    return load_static("tether.gateway", "static", _STATIC, shared_at="/")


@attrs.define(eq=False)
class GatewayApp:
    """The ASGI application. ``close()`` ends every long poll at once (graceful shutdown)."""

    store: GatewayStore
    worker_tokens: TokenSource
    user_tokens: TokenSource | None = None
    lease: float = 30.0
    limits: AppLimits = attrs.field(factory=AppLimits)
    clock: Callable[[], float] = time.time
    closing: trio.Event = attrs.field(factory=trio.Event, init=False)
    _tasks_added: trio.Event = attrs.field(factory=trio.Event, init=False)
    _answered: trio.Event = attrs.field(factory=trio.Event, init=False)
    _static: dict[str, StaticFile] = attrs.field(factory=_load_static, init=False)
    progress: ProgressBoard = attrs.field(factory=ProgressBoard, init=False)
    """What each open message's run shows now (in memory: progress is never custody)."""

    def __attrs_post_init__(self) -> None:
        if not self.lease > 0:
            raise ValueError(f"lease must be > 0 seconds, got {self.lease}")

    def close(self) -> None:
        self.closing.set()
        self._tasks_added.set()
        self._answered.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await serve_http(
            scope,
            receive,
            send,
            self._route,
            log=log,
            who="gateway",
            see_log="the gateway's log",
        )

    async def _json(self, request: Request) -> Any:
        return await request.json(self.limits.max_body, self.limits.body_timeout)

    # -- routing -----------------------------------------------------------------------

    async def _route(self, request: Request, send: Send) -> None:
        path, method = request.path, request.method
        page_file = self._static.get(path)
        if page_file is not None:
            allow_methods(method, "GET")
            await send_bytes(send, 200, page_file.body, page_file.content_type, PAGE_HEADERS)
            return
        if path == "/healthz":
            allow_methods(method, "GET")
            await send_json(send, 200, {"ok": True, "protocol_version": PROTOCOL_VERSION})
            return
        handler = self._handler(path, method)
        await handler(request, send)

    def _handler(self, path: str, method: str) -> Callable[[Request, Send], Awaitable[None]]:
        if path == "/v1/tasks":
            allow_methods(method, "GET")
            return self._poll_tasks
        if _ACK_PATH.fullmatch(path):
            allow_methods(method, "POST")
            return self._ack
        if _REJECT_PATH.fullmatch(path):
            allow_methods(method, "POST")
            return self._reject
        if path == "/v1/results":
            allow_methods(method, "POST")
            return self._result
        if _PROGRESS_PATH.fullmatch(path):
            allow_methods(method, "POST")
            return self._progress
        if _INTERIM_PATH.fullmatch(path):
            allow_methods(method, "POST")
            return self._interim
        if path == "/v1/acks":
            allow_methods(method, "POST")
            return self._ack_batch
        if path == "/v1/results/batch":
            allow_methods(method, "POST")
            return self._result_batch
        if path == "/v1/rejects":
            allow_methods(method, "POST")
            return self._reject_batch
        if path == "/v1/notices":
            allow_methods(method, "POST")
            return self._notice
        if path == "/v1/heartbeat":
            allow_methods(method, "POST")
            return self._heartbeat
        if path == "/v1/leases/release":
            allow_methods(method, "POST")
            return self._release_leases
        if _FORGET_PATH.fullmatch(path):
            allow_methods(method, "POST")
            return self._forget_room
        if path == "/v1/stats":
            allow_methods(method, "GET")
            return self._stats
        if path == "/v1/messages":
            allow_methods(method, "GET", "POST")
            return self._submit if method == "POST" else self._history
        if _MESSAGE_PATH.fullmatch(path):
            allow_methods(method, "GET")
            return self._message
        raise HttpError(404, f"no such endpoint: {path[:200]}")

    def _authorize(self, request: Request, role: str) -> None:
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            raise HttpError(401, "missing bearer token", [(b"www-authenticate", b"Bearer")])
        try:
            if self.worker_tokens.accepts(token):
                return
            if self.user_tokens is not None and self.user_tokens.accepts(token):
                if role == USER:
                    return
                raise HttpError(403, "the user token cannot use worker endpoints")
        except (TokenFileError, OSError) as exc:
            log.error("gateway: cannot read a token file: %s", exc)  # noqa: TRY400 (one line)
            raise HttpError(503, "the gateway cannot read its token file") from None
        raise HttpError(401, "invalid bearer token", [(b"www-authenticate", b"Bearer")])

    # -- worker side -------------------------------------------------------------------

    async def _poll_tasks(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        wait = min(query_seconds(request.query, "wait", 0.0), self.limits.max_wait)
        limit = query_count(request.query, "limit", 16, self.limits.max_poll_limit)
        client = _client_header(request)
        deadline = trio.current_time() + wait
        tasks: list[StoredTask] = []
        async with _cancel_on_disconnect(request) as disconnected:
            while True:
                added = self._tasks_added
                claim = await self.store.claim(limit, self.lease, self.clock(), client)
                tasks = claim.tasks
                if tasks or self.closing.is_set() or trio.current_time() >= deadline:
                    break
                wake = deadline
                if claim.next_expiry is not None:
                    wake = min(
                        wake, trio.current_time() + max(0.0, claim.next_expiry - self.clock())
                    )
                with trio.move_on_at(wake):
                    await added.wait()
        if disconnected():
            if tasks:  # leased just as the poller left: nobody will read them
                await self.store.release_tasks([task.id for task in tasks])
                self._wake_pollers()
            return
        if tasks:
            self._message_changed()
        payload = {"tasks": [_without_nones(unstructure(task_for_worker(task))) for task in tasks]}
        await send_json(send, 200, payload)

    async def _ack(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        match = _ACK_PATH.fullmatch(request.path)
        assert match is not None
        path_id = _valid(check_task_id, match.group(1), "task id in the path")
        ack = _valid(parse_ack, await self._json(request), path_id)
        task = await _conflicts(self.store.ack(ack.id, self.clock()))
        if task is None:
            raise HttpError(404, f"unknown task id {ack.id!r}")
        self._message_changed()
        await send_json(send, 200, {"id": task.id, "status": task.state})

    async def _ack_batch(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        batch = _valid(parse_ack_batch, await self._json(request))
        outcomes = await self.store.ack_many(batch.ids, self.clock())
        self._message_changed()
        await send_json(send, 200, {"items": [unstructure(_item(o)) for o in outcomes]})

    async def _result_batch(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        batch = _valid(parse_result_batch, await self._json(request))
        outcomes = await self.store.record_results(
            [(r.id, r.body, r.no_send, r.metadata.worker, r.metadata.room) for r in batch.results],
            self.clock(),
        )
        if any(o.status == 200 and not o.duplicate for o in outcomes):
            self._answered.set()
            self._answered = trio.Event()
        duplicates = sum(o.duplicate for o in outcomes)
        if duplicates:
            log.info("gateway: %d duplicate result(s) absorbed", duplicates)
        await send_json(send, 200, {"items": [unstructure(_item(o)) for o in outcomes]})

    async def _reject(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        match = _REJECT_PATH.fullmatch(request.path)
        assert match is not None
        path_id = _valid(check_task_id, match.group(1), "task id in the path")
        reject = _valid(parse_reject, await self._json(request), path_id)
        task = await _conflicts(self.store.reject(reject.id, reject.reason, self.clock()))
        if task is None:
            # not 404: on an optional endpoint a client reads 404 as "no such endpoint"
            raise HttpError(409, f"unknown task id {reject.id!r}")
        log.warning("gateway: the bridge rejected task %s: %s", reject.id, reject.reason)
        self._answered.set()
        self._answered = trio.Event()
        await send_json(send, 200, {"id": task.id, "status": task.state})

    async def _reject_batch(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        batch = _valid(parse_reject_batch, await self._json(request))
        outcomes = await self.store.reject_many(
            [(entry.id, entry.reason) for entry in batch.rejects], self.clock()
        )
        for entry, outcome in zip(batch.rejects, outcomes, strict=True):
            if outcome.status == 200:
                log.warning("gateway: the bridge rejected task %s: %s", entry.id, entry.reason)
            else:
                log.warning(
                    "gateway: the bridge rejected task %r, which it cannot close (%s): %s",
                    entry.id[:200],
                    outcome.error,
                    entry.reason,
                )
        if any(o.status == 200 for o in outcomes):
            self._answered.set()
            self._answered = trio.Event()
        await send_json(send, 200, {"items": [unstructure(_item(o)) for o in outcomes]})

    async def _notice(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        notice = _valid(parse_notice, await self._json(request))
        task = await self.store.notice(
            notice.id, notice.kind, notice.age_s, notice.detail, self.clock()
        )
        if task is None:
            raise HttpError(409, f"unknown task id {notice.id!r}")  # not 404: see _reject
        log.warning(
            "gateway: %s notice for task %s (%.1f s in custody)",
            notice.kind,
            notice.id,
            notice.age_s,
        )
        self._message_changed()
        await send_json(send, 200, {"id": notice.id, "kind": notice.kind})

    async def _progress(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        match = _PROGRESS_PATH.fullmatch(request.path)
        assert match is not None
        path_id = _valid(check_task_id, match.group(1), "task id in the path")
        progress = _valid(parse_progress, await request.json(self.limits.max_body), path_id)
        task = await self.store.get(progress.id)
        if task is None:
            raise HttpError(409, f"unknown task id {progress.id!r}")  # not 404: see _reject
        kept = False
        if task.state not in FINAL_STATES:
            kept = self.progress.update(progress, self.clock())
            if kept:
                self._message_changed()
        await send_json(send, 200, {"id": progress.id, "kept": kept})

    async def _interim(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        match = _INTERIM_PATH.fullmatch(request.path)
        assert match is not None
        path_id = _valid(check_task_id, match.group(1), "task id in the path")
        message = _valid(parse_interim, await self._json(request))
        added = await self.store.add_message(path_id, message.seq, message.body, self.clock())
        if added is None:
            raise HttpError(409, f"unknown task id {path_id!r}")  # not 404: see _reject
        _, duplicate = added
        if duplicate:
            log.info("gateway: duplicate message %d of %s absorbed", message.seq, path_id)
        else:
            self._message_changed()
        receipt = InterimReceipt(id=path_id, seq=message.seq, duplicate=duplicate)
        await send_json(send, 200, unstructure(receipt))

    def _message_changed(self) -> None:
        """Something a message view shows changed: every waiting message poll looks again."""
        self._answered.set()
        self._answered = trio.Event()

    async def _result(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        result = _valid(parse_result, await self._json(request))
        outcome = await _conflicts(
            self.store.record_result(
                result.id,
                result.body,
                result.no_send,
                result.metadata.worker,
                self.clock(),
                result.metadata.room,
            )
        )
        if outcome is None:
            raise HttpError(404, f"unknown task id {result.id!r}")
        if outcome.duplicate:
            log.info("gateway: duplicate result for %s absorbed", result.id)
        else:
            self._answered.set()
            self._answered = trio.Event()
        receipt = ResultReceipt(id=result.id, duplicate=outcome.duplicate)
        await send_json(send, 200, unstructure(receipt))

    async def _heartbeat(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        beat = _valid(parse_heartbeat, await self._json(request))
        await self.store.heartbeat(
            beat.client,
            beat.inflight,
            beat.protocol_version,
            beat.version,
            beat.uptime_s,
            self.clock(),
        )
        await send_json(send, 200, {"ok": True})

    async def _release_leases(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        release = _valid(parse_lease_release, await self._json(request))
        released = await self.store.release_client(release.client)
        if released:
            log.info("gateway: client %s released %d unacked lease(s)", release.client, released)
            self._wake_pollers()
        receipt = LeaseReleaseReceipt(client=release.client, released=released)
        await send_json(send, 200, unstructure(receipt))

    async def _forget_room(self, request: Request, send: Send) -> None:
        """Erase the room (issue #53): a bridge's ``tether store forget-room`` asks after it
        erased its own copy. Its messages go from the store and from every open view (a
        waiting message poll answers 404 from now on); a room it holds nothing of is a 200
        with 0 (a 404 would say "no such route")."""
        self._authorize(request, WORKER)
        match = _FORGET_PATH.fullmatch(request.path)
        assert match is not None
        forget = _valid(parse_room_forget, await self._json(request), match.group(1))
        ids = await self.store.forget_room(forget.room)
        for task_id in ids:
            self.progress.forget(task_id)
        log.warning("gateway: forgot room %r: %d message(s) erased", forget.room, len(ids))
        self._message_changed()
        receipt = RoomForgetReceipt(room=forget.room, forgotten=len(ids))
        await send_json(send, 200, unstructure(receipt))

    async def _stats(self, request: Request, send: Send) -> None:
        self._authorize(request, WORKER)
        stats = unstructure(await self.store.stats())
        stats["lease_s"] = self.lease
        stats["protocol_version"] = PROTOCOL_VERSION
        await send_json(send, 200, stats)

    def _wake_pollers(self) -> None:
        """Tasks became available: every waiting long poll looks again now."""
        self._tasks_added.set()
        self._tasks_added = trio.Event()

    # -- user side ---------------------------------------------------------------------

    async def _submit(self, request: Request, send: Send) -> None:
        self._authorize(request, USER)
        message = _valid(parse_message, await self._json(request))
        # the message's trace begins here (or continues the sender's): one trace per message
        with span(
            "tether.gateway.submit",
            traceparent=message.trace,
            attributes={"tether.room": message.room},
        ) as submitted:
            task, created = await _conflicts(
                self.store.submit(
                    message.room,
                    message.sender,
                    message.text,
                    self.clock(),
                    message.id,
                    message.priority,
                    traceparent_of(submitted),
                    message.tenant,
                )
            )
            set_attributes(
                submitted,
                {"tether.task.id": task.id, "tether.outcome": "created" if created else "replay"},
            )
        if created:
            self._wake_pollers()
        await send_json(send, 201 if created else 200, {"id": task.id, "status": task.state})

    async def _history(self, request: Request, send: Send) -> None:
        self._authorize(request, USER)
        room = request.query.get("room")
        if room is None:
            raise HttpError(400, "query parameter 'room' is required")
        _valid(check_label, room, "room")
        limit = query_count(request.query, "limit", 50, self.limits.max_history)
        before = request.query.get("before")
        if before is not None:
            _valid(check_task_id, before, "before")
        try:
            page = await self.store.room_page(room, limit, before)
        except UnknownBefore as exc:
            raise HttpError(400, str(exc)) from None
        views = [unstructure(self._page_view(row)) for row in page.rows]
        await send_json(send, 200, {"messages": views, "more": page.more})

    def _page_view(self, row: HistoryRow) -> MessageView:
        """A message as a history page shows it: cut (its partial reply too), and marked."""
        view = self._view(StoredTask(*row.fields))  # type: ignore[arg-type]
        partial = view.partial
        cut = row.cut or (partial is not None and len(partial) > SHOWN_CHARS)
        if partial is not None:
            partial = partial[:SHOWN_CHARS]
        return attrs.evolve(view, partial=partial, truncated=cut)

    def _view(self, task: StoredTask) -> MessageView:
        if task.state in FINAL_STATES:
            self.progress.forget(task.id)
        return message_view(task, self.progress.get(task.id))

    async def _message(self, request: Request, send: Send) -> None:
        self._authorize(request, USER)
        match = _MESSAGE_PATH.fullmatch(request.path)
        assert match is not None
        task_id = _valid(check_task_id, match.group(1), "message id in the path")
        wait = query_seconds(request.query, "wait", 0.0)
        if wait > self.limits.max_wait:  # a person asked for it: cut short, it would mislead
            raise HttpError(
                400,
                f"query parameter 'wait' must be at most {self.limits.max_wait:g} seconds here "
                f"(the gateway's longest wait); got {wait:g}",
            )
        seen = request.query.get("seen")
        deadline = trio.current_time() + wait
        task: StoredTask | None = None
        async with _cancel_on_disconnect(request) as disconnected:
            while True:
                answered = self._answered
                task = await self.store.get(task_id)
                if task is None:
                    raise HttpError(404, f"unknown message id {task_id!r}")
                if task.state in FINAL_STATES or self.closing.is_set():
                    break
                if seen is not None and self._view(task).rev != seen:
                    break
                with trio.move_on_at(deadline) as waited:
                    await answered.wait()
                if waited.cancelled_caught:
                    break
        if disconnected() or task is None:
            return
        await send_json(send, 200, unstructure(self._view(task)))


def _item(outcome: ItemOutcome) -> BatchItem:
    return BatchItem(
        id=outcome.id, status=outcome.status, duplicate=outcome.duplicate, error=outcome.error
    )


@asynccontextmanager
async def _cancel_on_disconnect(request: Request) -> AsyncIterator[Callable[[], bool]]:
    """Cancel the block when the client hangs up (so a gone poller is handed no tasks).

    Yields ``disconnected()``: after the block, whether it ended because the client left.
    """
    gone = False
    async with open_nursery_unwrapped() as nursery:

        async def watch() -> None:
            nonlocal gone
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gone = True
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        yield lambda: gone
        nursery.cancel_scope.cancel()


def _client_header(request: Request) -> str | None:
    raw = request.headers.get(CLIENT_HEADER.lower())
    if raw is None:
        return None
    return str(_valid(check_label, raw, f"the {CLIENT_HEADER} header"))


def _valid(check: Callable[..., Any], *args: Any) -> Any:
    try:
        return check(*args)
    except ValueError as exc:
        raise HttpError(400, str(exc)) from None


async def _conflicts(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except Conflict as exc:
        raise HttpError(409, str(exc)) from None


def _without_nones(task: dict[str, Any]) -> dict[str, Any]:
    """A task for the wire without its unset optional fields (``trace``, ``tenant``): a bridge
    that predates one never sees it."""
    return {key: value for key, value in task.items() if value is not None}
