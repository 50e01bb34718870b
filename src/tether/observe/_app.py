"""The admin ASGI app: ``/healthz``, ``/metrics``, ``/tasks``, ``/status``, all behind a bearer
token (an operator's view of the process is as sensitive as its data: task names carry ids,
stacks carry file paths)."""

from __future__ import annotations

import logging
import time

import attrs

from .._core._registry import ALL_KINDS, USER_ONLY, TaskKind
from .._core._task_tree import count_nodes, task_tree
from .._http._asgi import (
    HttpError,
    Receive,
    Request,
    Scope,
    Send,
    allow_methods,
    send_bytes,
    send_json,
    serve_http,
)
from .._http._auth import TokenSource, bearer_token
from .._plumbing._converter import unstructure
from .._plumbing._token_file import TokenFileError
from .._plumbing._when import iso_time
from ._health import check_health
from ._metrics import CONTENT_TYPE, Metrics
from ._observed import Observed
from ._status import status_report

log = logging.getLogger("tether.admin")

_CHALLENGE = [(b"www-authenticate", b'Bearer realm="tether-admin"')]
_TRUE = ("1", "true", "yes")
_FALSE = ("", "0", "false", "no")


@attrs.define(eq=False)
class AdminApp:
    """The admin endpoint as an ASGI app (``serve_admin`` serves it): ``/healthz``,
    ``/metrics``, ``/tasks``, ``/status``, each behind the bearer token, and the routes the
    service adds (``Observed.routes``)."""

    observed: Observed
    tokens: TokenSource
    metrics: Metrics = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.metrics = Metrics(self.observed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await serve_http(
            scope,
            receive,
            send,
            self._route,
            log=log,
            who="admin",
            see_log="the service's log",
        )

    async def _route(self, request: Request, send: Send) -> None:
        path = request.path
        if path not in ("/healthz", "/metrics", "/tasks", "/status"):
            await self._service_route(request, send)
            return
        allow_methods(request.method, "GET")
        self._authorize(request)
        if path == "/healthz":
            report = check_health(self.observed)
            await send_json(send, 200 if report.ok else 503, unstructure(report))
        elif path == "/metrics":
            body = await self.metrics.render()
            await send_bytes(send, 200, body, CONTENT_TYPE.encode())
        elif path == "/tasks":
            await self._tasks(request, send)
        else:
            await send_json(send, 200, unstructure(await status_report(self.observed)))

    async def _service_route(self, request: Request, send: Send) -> None:
        """A route the service added (``Observed.routes``): its methods, then the token."""
        routes = self.observed.routes
        route = None if routes is None else routes.route(request.path)
        if route is None:
            raise HttpError(404, f"no such endpoint: {request.path[:200]}")
        allow_methods(request.method, *route.methods)
        if not route.public:
            self._authorize(request)
        await route.handler(request, send)

    def _authorize(self, request: Request) -> None:
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            raise HttpError(401, "missing bearer token", _CHALLENGE)
        try:
            accepted = self.tokens.accepts(token)
        except (TokenFileError, OSError) as exc:
            log.error("admin: cannot read the token file: %s", exc)  # noqa: TRY400 (one line)
            raise HttpError(503, "the admin endpoint cannot read its token file") from None
        if not accepted:
            raise HttpError(401, "invalid bearer token", _CHALLENGE)

    async def _tasks(self, request: Request, send: Send) -> None:
        stacks = _flag(request.query, "stacks")
        kinds = _kinds(request.query.get("kinds", "user"))
        nodes = task_tree(self.observed.registry, kinds=kinds, stacks=stacks)
        doc = {
            "time": iso_time(time.time()),
            "count": count_nodes(nodes),
            "tasks": unstructure(nodes),
        }
        await send_json(send, 200, doc)


def _flag(query: dict[str, str], name: str) -> bool:
    value = query.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise HttpError(400, f"query parameter {name!r} must be 1 or 0, got {value[:20]!r}")


def _kinds(value: str) -> frozenset[TaskKind]:
    if value == "all":
        return ALL_KINDS
    kinds: set[TaskKind] = set()
    for part in value.split(","):
        name = part.strip()
        if name == "user":
            kinds.add("user")
        elif name == "system":
            kinds.add("system")
        elif name == "harness":
            kinds.add("harness")
        else:
            raise HttpError(
                400,
                f"query parameter 'kinds' must be 'all' or a comma list of user, system, "
                f"harness; got {value[:40]!r}",
            )
    return frozenset(kinds) or USER_ONLY
