"""The operator page's routes on the admin endpoint, under ``/ops``.

The page's own files are public (a browser navigating to a page sends no bearer header; they
are the same code for everyone and carry no data). Every JSON route and every move needs the
admin token as an ``Authorization: Bearer`` header, which the page sends from
``sessionStorage``: another site cannot make a browser send it (no cookie rides along), so
the POST routes need no CSRF token. A store that does not answer within ``STORE_WITHIN``
gives a 503 naming it, never a hung page.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, ParamSpec, TypeVar

import attrs
import trio

from ..._http._asgi import HttpError, Request, Send, send_bytes, send_json
from ..._http._static import PAGE_HEADERS, StaticFile, load_static
from ...observe._routes import AdminRoute
from ..custody._roles import Store
from ..custody._rules import InvalidTaskId, check_task_id
from ._ops_page import operator_move, ops_view, task_timeline

log = logging.getLogger("tether.admin")
P = ParamSpec("P")
T = TypeVar("T")

STORE_WITHIN: Final = 5.0
"""Seconds a store read or move may take before the page hears 503."""
MAX_MOVE_BODY: Final = 4096
_PAGE = {"/ops": "index.html", "/ops/ops.js": "ops.js", "/ops/ops.css": "ops.css"}
_TASK = re.compile(r"/ops/api/tasks/([^/]+)")
_MOVE = re.compile(r"/ops/api/tasks/([^/]+)/(retry|cancel)")


def _load_page() -> dict[str, StaticFile]:
    return load_static("tether.bridge.service", "ops_page", _PAGE, base_css="/ops/base.css")


@attrs.define(eq=False)
class OpsRoutes:
    """``/ops`` (the page), ``GET /ops/api/store``, ``GET /ops/api/tasks/ID`` and ``POST
    /ops/api/tasks/ID/retry`` or ``/cancel`` (an optional JSON body ``{"reason": ...}``)."""

    store: Store
    _page: dict[str, StaticFile] = attrs.field(factory=_load_page, init=False)

    def route(self, path: str) -> AdminRoute | None:
        page_file = self._page.get(path)
        if page_file is not None:
            return AdminRoute(("GET",), partial(_send_file, page_file), public=True)
        if path == "/ops/api/store":
            return AdminRoute(("GET",), self._view)
        if m := _MOVE.fullmatch(path):
            return AdminRoute(("POST",), partial(self._move, m.group(2), m.group(1)))
        if m := _TASK.fullmatch(path):
            return AdminRoute(("GET",), partial(self._task, m.group(1)))
        return None

    async def _view(self, request: Request, send: Send) -> None:
        await send_json(send, 200, await self._ask(ops_view, self.store))

    async def _task(self, id: str, request: Request, send: Send) -> None:
        doc = await self._ask(task_timeline, self.store, _task_id(id))
        if doc is None:
            raise HttpError(404, f"task {id!r}: no such task in the store")
        await send_json(send, 200, doc)

    async def _move(self, move: str, id: str, request: Request, send: Send) -> None:
        id = _task_id(id)
        reason = await _reason(request)
        outcome = await self._ask(operator_move, self.store, move, id, reason)
        log.info("admin: operator page: %s", outcome.detail)
        if outcome.state is None:
            raise HttpError(404, outcome.detail)
        if not outcome.done:  # refused for its state: a repeat of a move already made lands here
            raise HttpError(409, outcome.detail)
        await send_json(
            send, 200, {"id": id, "done": True, "state": outcome.state, "detail": outcome.detail}
        )

    async def _ask(self, call: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """``call``'s answer, or a 503 saying why the store gave none."""
        try:
            with trio.fail_after(STORE_WITHIN):
                return await call(*args, **kwargs)
        except trio.TooSlowError:
            raise HttpError(
                503, f"the custody store did not answer within {STORE_WITHIN:g} s"
            ) from None
        except Exception as exc:
            log.warning("admin: operator page: the custody store failed: %r", exc)
            raise HttpError(503, f"the custody store failed: {exc!r}"[:300]) from None


async def _send_file(page_file: StaticFile, request: Request, send: Send) -> None:
    await send_bytes(send, 200, page_file.body, page_file.content_type, PAGE_HEADERS)


def _task_id(raw: str) -> str:
    try:
        return check_task_id(raw)
    except InvalidTaskId as exc:
        raise HttpError(400, str(exc)) from None


async def _reason(request: Request) -> str | None:
    """The move's optional ``reason``: no body, or a JSON object ``{"reason": "..."}``."""
    if request.headers.get("content-length", "0") == "0" and (
        "transfer-encoding" not in request.headers
    ):
        return None
    body = await request.json(MAX_MOVE_BODY)
    if not isinstance(body, dict) or set(body) - {"reason"}:
        raise HttpError(400, 'the body must be a JSON object with at most a "reason"')
    reason = body.get("reason")
    if reason is not None and not (isinstance(reason, str) and reason.strip()):
        raise HttpError(400, '"reason" must be a non-empty string or null')
    return reason
