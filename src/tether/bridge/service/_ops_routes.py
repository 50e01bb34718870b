"""The operator page's routes on the admin endpoint, under ``/ops``, and ``POST /v1/events``
(issue #52: the world sends the events runs wait for).

The page's own files are public (a browser navigating to a page sends no bearer header; they
are the same code for everyone and carry no data). Every JSON route and every move needs the
admin token as an ``Authorization: Bearer`` header, which the page sends from
``sessionStorage``: another site cannot make a browser send it (no cookie rides along), so
the POST routes need no CSRF token. A store that does not answer in time (``Flights``)
gives a 503 saying so, never a hung page.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from typing import Any, Final, TypeVar

import attrs

from ..._http._asgi import HttpError, Request, Send, send_bytes, send_json
from ..._http._static import PAGE_HEADERS, StaticFile, load_static
from ..._runtime import Runtime
from ...observe._routes import AdminRoute
from ..custody._conversation import check_room
from ..custody._events import (
    DEFAULT_EVENT_TTL_S,
    MAX_EVENT_BYTES,
    EventConflict,
    EventSent,
    InvalidEvent,
    check_event_id,
    check_event_key,
    event_body,
)
from ..custody._roles import Store
from ..custody._rules import InvalidTask, InvalidTaskId, check_task_id
from ..custody._steps import StepError, check_step_name
from ._ops_flights import Flights, NoAnswer
from ._ops_page import Move, operator_move, ops_view, task_timeline

log = logging.getLogger("tether.admin")
T = TypeVar("T")

READ_WITHIN: Final = 1.0
"""Seconds a read waits for the store before it answers 503 (issue 33's bound for every
admin route); the page asks again at its next poll."""
MOVE_WITHIN: Final = 3.0
"""Seconds a retry or cancel waits for the store before it answers 503; the move may still
land when the store answers, and the page's next reading shows whether it did."""
MAX_MOVE_BODY: Final = 4096
MAX_EVENT_REQUEST: Final = MAX_EVENT_BYTES * 6 + 4096
"""An event's request: its body JSON-escaped at worst, and its id and key."""
_PAGE = {"/ops": "index.html", "/ops/ops.js": "ops.js", "/ops/ops.css": "ops.css"}
_TASK = re.compile(r"/ops/api/tasks/([^/]+)")
_MOVE = re.compile(r"/ops/api/tasks/([^/]+)/(retry|cancel|rewind|fork)")
_DROP = re.compile(r"/ops/api/events/([^/]+)/drop")


def _load_page() -> dict[str, StaticFile]:
    return load_static("tether.bridge.service", "ops_page", _PAGE, shared_at="/ops/")


@attrs.define(eq=False)
class OpsRoutes:
    """``/ops`` (the page), ``GET /ops/api/store``, ``GET /ops/api/tasks/ID``, ``POST
    /ops/api/tasks/ID/retry`` or ``/cancel`` (an optional JSON body ``{"reason": ...}``),
    ``POST /ops/api/events/ID/drop``, and ``POST /v1/events`` (the world's events)."""

    store: Store
    runtime: Runtime
    """Owns the store calls (``Flights``): a call outlives a request that stopped waiting."""
    read_within: float = READ_WITHIN
    move_within: float = MOVE_WITHIN
    event_ttl: float = DEFAULT_EVENT_TTL_S
    """Seconds an event sent here is kept for the waits that come after it."""
    _page: dict[str, StaticFile] = attrs.field(factory=_load_page, init=False)
    _flights: Flights = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._flights = Flights(self.runtime)

    def route(self, path: str) -> AdminRoute | None:
        page_file = self._page.get(path)
        if page_file is not None:
            return AdminRoute(("GET",), partial(_send_file, page_file), public=True)
        if path == "/ops/api/store":
            return AdminRoute(("GET",), self._view)
        if path == "/v1/events":
            return AdminRoute(("POST",), self._event)
        if m := _DROP.fullmatch(path):
            return AdminRoute(("POST",), partial(self._drop, m.group(1)))
        if m := _MOVE.fullmatch(path):
            return AdminRoute(("POST",), partial(self._move, m.group(2), m.group(1)))
        if m := _TASK.fullmatch(path):
            return AdminRoute(("GET",), partial(self._task, m.group(1)))
        return None

    async def _view(self, request: Request, send: Send) -> None:
        view = await self._ask("store", self.read_within, ops_view, self.store)
        await send_json(send, 200, view)

    async def _task(self, id: str, request: Request, send: Send) -> None:
        id = _task_id(id)
        doc = await self._ask(("task", id), self.read_within, task_timeline, self.store, id)
        if doc is None:
            raise HttpError(404, f"task {id!r}: no such task in the store")
        await send_json(send, 200, doc)

    async def _move(self, move: str, id: str, request: Request, send: Send) -> None:
        id = _task_id(id)
        asked = await _move_body(request, move)
        outcome = await self._ask(
            (move, id, asked), self.move_within, operator_move, self.store, move, id, asked
        )
        log.info("admin: operator page: %s", outcome.detail)
        if outcome.state is None:
            raise HttpError(404, outcome.detail)
        if not outcome.done:  # refused for its state: a repeat of a move already made lands here
            raise HttpError(409, outcome.detail)
        await send_json(  # a fork's outcome names the new task
            send,
            200,
            {"id": outcome.id, "done": True, "state": outcome.state, "detail": outcome.detail},
        )

    async def _drop(self, id: str, request: Request, send: Send) -> None:
        """An operator drops a kept event (issue #52): 404 if none is kept under ``id``."""
        try:
            id = check_event_id(id)
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        dropped = await self._ask(("drop", id), self.move_within, self.store.drop_event, id)
        if not dropped:
            raise HttpError(404, f"event {id!r}: no such kept event")
        log.info("admin: operator page: event %s dropped", id)
        await send_json(send, 200, {"id": id, "done": True, "detail": f"event {id} dropped"})

    async def _event(self, request: Request, send: Send) -> None:
        """``{"id", "key", "body"}``: kept before the answer (200, ``new`` false for a replay);
        400 for a bad id, key or body, 409 for an id kept with another key or body. A 503
        (the store did not answer in time) may still keep it: send it again, same id."""
        doc = await request.json(MAX_EVENT_REQUEST)
        if not isinstance(doc, dict) or set(doc) - {"id", "key", "body"} or "id" not in doc:
            raise HttpError(
                400, 'the body must be a JSON object {"id", "key", "body"} (id and key required)'
            )
        try:
            id, key = check_event_id(doc["id"]), check_event_key(doc.get("key"))
            text = event_body(doc.get("body"))
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        sent = await self._ask(
            ("event", id, key, text),  # a request shares only an identical one's answer
            self.move_within,
            _send_event,
            self.store,
            id,
            key,
            doc.get("body"),
            self.event_ttl,
        )
        if isinstance(sent, str):
            raise HttpError(409 if sent.startswith("event") else 400, sent)
        await send_json(
            send,
            200,
            {
                "id": id,
                "key": sent.event.key,
                "new": sent.new,
                "woken": len(sent.woken),
                "kept_until": sent.event.until,
            },
        )

    async def _ask(
        self, key: Hashable, within: float, call: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """``call(*args)``'s answer, or a 503 saying why the store gave none."""
        try:
            return await self._flights.ask(key, within, call, *args)  # type: ignore[no-any-return]
        except NoAnswer as exc:
            log.warning("admin: operator page: %s", exc)
            raise HttpError(503, str(exc)) from None


async def _send_event(store: Store, id: str, key: str, body: Any, ttl_s: float) -> EventSent | str:
    """The event kept, or why the store refused it (a 409 for an id kept with another key or
    body, a 400 for a body over the store's own limit: not a 503, which says "try again")."""
    try:
        return await store.send_event(id, key, body, ttl_s=ttl_s)
    except EventConflict as exc:
        return str(exc)
    except InvalidEvent as exc:
        return f"the store refused it: {exc}"


async def _send_file(page_file: StaticFile, request: Request, send: Send) -> None:
    await send_bytes(send, 200, page_file.body, page_file.content_type, PAGE_HEADERS)


def _task_id(raw: str) -> str:
    try:
        return check_task_id(raw)
    except InvalidTaskId as exc:
        raise HttpError(400, str(exc)) from None


_MOVE_FIELDS: Final = {
    "retry": frozenset({"reason"}),
    "cancel": frozenset({"reason"}),
    "rewind": frozenset({"reason", "step"}),
    "fork": frozenset({"reason", "step", "room"}),
}
"""What each move's JSON body may hold; a rewind and a fork name their ``step``."""


async def _move_body(request: Request, move: str) -> Move:
    """The move's body: none, or a JSON object of its fields (``_MOVE_FIELDS``)."""
    body: object = {}
    if request.headers.get("content-length", "0") != "0" or (
        "transfer-encoding" in request.headers
    ):
        body = await request.json(MAX_MOVE_BODY)
    fields = _MOVE_FIELDS[move]
    if not isinstance(body, dict) or set(body) - fields:
        *most, last = sorted(f'"{field}"' for field in fields)
        named = f"{', '.join(most)} and {last}" if most else f"a {last}"
        raise HttpError(400, f"the body must be a JSON object with at most {named}")
    for field in ("reason", "room"):
        value = body.get(field)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise HttpError(400, f'"{field}" must be a non-empty string or null')
    step = body.get("step")
    if move in ("rewind", "fork"):
        try:
            step = check_step_name(step, own=True)
        except StepError as exc:
            raise HttpError(400, f'"step": {exc}') from None
    try:
        room = None if body.get("room") is None else check_room(body["room"])
    except InvalidTask as exc:
        raise HttpError(400, f'"room": {exc}') from None
    return Move(body.get("reason"), step, room)
