"""Just enough ASGI for the reference gateway: parse a request, read a bounded body, answer JSON.

Hand-written, so the body limit, the JSON error shape and the headers are enforced in one place.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Final
from urllib.parse import parse_qsl

import attrs
import hypercorn.config
import hypercorn.trio
import trio

from .._plumbing._json import JsonRefused, loads_strict
from ._loopback import warn_off_loopback

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_COMMON_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]

BODY_TIMEOUT = 30.0
"""Seconds a request body may take to arrive once its headers are in (then 408): a client
that sends headers and never the body does not hold a request open."""
_SECONDS_RE = re.compile(r"[0-9]{1,12}(?:\.[0-9]{0,12})?(?:[eE][-+]?[0-9]{1,3})?")


class HttpError(Exception):
    """Answer the request with ``status`` and ``{"error": message}``."""

    def __init__(
        self, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


@attrs.frozen
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    receive: Receive

    @classmethod
    def from_scope(cls, scope: Scope, receive: Receive) -> Request:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        query: dict[str, str] = {}
        try:
            pairs = parse_qsl(
                scope["query_string"].decode("latin-1"),
                keep_blank_values=True,
                strict_parsing=False,
                max_num_fields=32,
            )
        except ValueError as exc:
            raise HttpError(400, f"bad query string: {exc}") from None
        for key, value in pairs:
            if key in query:
                raise HttpError(400, f"query parameter {key!r} given more than once")
            query[key] = value
        return cls(scope["method"], scope["path"], query, headers, receive)

    async def body(self, limit: int, within: float = BODY_TIMEOUT) -> bytes:
        """The whole body, refused with 413 as soon as it is known to exceed ``limit``, and
        with 408 unless it has all arrived ``within`` seconds."""
        declared = self.headers.get("content-length")
        if declared is not None:
            if not (declared.isascii() and declared.isdigit()):
                raise HttpError(400, f"bad Content-Length header {declared[:40]!r}")
            if len(declared) > 18 or int(declared) > limit:
                raise HttpError(
                    413, f"request body of {declared[:40]} bytes exceeds the limit of {limit}"
                )
        chunks: list[bytes] = []
        size = 0
        with trio.move_on_after(within) as waited:
            while True:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    raise HttpError(400, "client disconnected before sending the whole body")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise HttpError(413, f"request body exceeds the limit of {limit} bytes")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        assert waited.cancelled_caught
        raise HttpError(
            408,
            f"request body not received within {within:g} s",
            [(b"connection", b"close")],
        )

    async def json(self, limit: int, within: float = BODY_TIMEOUT) -> Any:
        """The body parsed as strict JSON (``tether._plumbing._json``); 415 unless it is declared
        ``application/json``."""
        content_type = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise HttpError(
                415,
                f"expected Content-Type: application/json, got {content_type[:60] or 'none'!r}",
            )
        raw = await self.body(limit, within)
        if not raw:
            raise HttpError(400, "request body is empty; expected a JSON object")
        try:
            data = loads_strict(raw)
        except JsonRefused as exc:
            raise HttpError(400, f"request body: {exc}") from None
        if b"\\u" in raw:  # only a \u escape can smuggle in a lone surrogate
            try:
                json.dumps(data, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as exc:
                raise HttpError(
                    400,
                    f"request body contains a lone surrogate {exc.object[exc.start]!r} in a "
                    "JSON string; text must be valid Unicode (encodable as UTF-8)",
                ) from None
        return data


def query_seconds(query: dict[str, str], name: str, default: float) -> float:
    """Query parameter ``name`` as seconds >= 0 written in ASCII digits (``1``, ``0.5``,
    ``1e-05``), else 400 naming it. ``float()`` alone would take ``1_0`` and other scripts'
    digits, and ``inf``."""
    raw = query.get(name)
    if raw is None:
        return default
    value = float(raw) if _SECONDS_RE.fullmatch(raw) else math.nan
    if not math.isfinite(value):
        raise HttpError(400, f"query parameter {name!r} must be a number of seconds >= 0")
    return value


def query_count(query: dict[str, str], name: str, default: int, maximum: int) -> int:
    """Query parameter ``name`` as an integer from 1 to ``maximum`` in ASCII digits, else 400
    naming it (``str.isdigit`` alone takes ``²``, which ``int()`` then refuses)."""
    raw = query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18 and 1 <= int(raw) <= maximum):
        raise HttpError(400, f"query parameter {name!r} must be an integer from 1 to {maximum}")
    return int(raw)


async def send_json(
    send: Send,
    status: int,
    data: Any,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    await send_bytes(send, status, body, b"application/json", headers)


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *_COMMON_HEADERS,
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Answer the ASGI lifespan protocol (nothing to set up or tear down)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def allow_methods(method: str, *allowed: str) -> None:
    """Raise 405 (with ``Allow``) unless ``method`` is one of ``allowed``."""
    if method not in allowed:
        raise HttpError(
            405,
            f"method {method} not allowed here; use {' or '.join(allowed)}",
            [(b"allow", ", ".join(allowed).encode())],
        )


async def serve_http(
    scope: Scope,
    receive: Receive,
    send: Send,
    route: Callable[[Request, Send], Awaitable[None]],
    *,
    log: logging.Logger,
    who: str,
    see_log: str,
) -> None:
    """The ASGI entry both tether servers share: lifespan answered, websockets refused,
    ``HttpError`` as its JSON status, anything else logged and answered 500."""
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    if scope["type"] != "http":
        return  # websockets: not offered; the server closes the connection
    try:
        await route(Request.from_scope(scope, receive), send)
    except HttpError as exc:
        await send_json(send, exc.status, {"error": exc.message}, exc.headers)
    except Exception:
        log.exception("%s: unhandled error on %s %s", who, scope["method"], scope["path"])
        await send_json(send, 500, {"error": f"internal error; see {see_log}"})


KEEP_ALIVE_S: Final = 30.0
"""Seconds a server keeps an idle connection open. Longer than any client keeps one to use
again (httpx: 5 s): with hypercorn's default, also 5 s, a client could send its request on a
connection the server was closing that instant ("Server disconnected without sending a
response"), which a bridge's poll or a test's request then met as a failure."""


def hypercorn_config(
    host: str, port: int, *, graceful_timeout: float, errorlog: str
) -> hypercorn.config.Config:
    """Bind ``host:port`` (IPv6 bracketed), errors to the ``errorlog`` logger, no access log,
    no ``Server`` header, idle connections kept ``KEEP_ALIVE_S``."""
    config = hypercorn.config.Config()
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.errorlog = logging.getLogger(errorlog)
    config.accesslog = None
    config.graceful_timeout = graceful_timeout
    config.include_server_header = False
    return config


def sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error inside nested groups (e.g. "address already in use"), else the group."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class ListenError(OSError):
    """A server could not listen: one line naming the server, the address and why."""

    def __str__(self) -> str:
        return str(self.strerror)


async def start_hypercorn(
    nursery: trio.Nursery, app: Any, config: hypercorn.config.Config, *, what: str = "server"
) -> tuple[int, str, trio.Event]:
    """Serve ``app`` in ``nursery``; returns once it listens: the bound port, the bind and
    the event that shuts it down. A failure to bind is a ``ListenError`` naming ``what`` and
    the address (the OS's "address already in use" names neither). Bound beyond loopback, it
    warns once that it serves plain HTTP (issue #48)."""
    stop = trio.Event()
    try:
        try:
            binds = await nursery.start(
                partial(hypercorn.trio.serve, app, config, shutdown_trigger=stop.wait)
            )
        except BaseExceptionGroup as group:
            raise sole_error(group) from None
    except OSError as exc:
        _close_sockets_left_open(exc)
        why = (exc.strerror or str(exc)).lower()
        if exc.errno == errno.EADDRINUSE:
            why += " (another process holds the port)"
        where = ", ".join(config.bind)
        raise ListenError(exc.errno, f"{what} cannot listen on {where}: {why}") from None
    port = int(binds[0].rsplit(":", 1)[1])
    host = config.bind[0].rsplit(":", 1)[0]
    warn_off_loopback(what, host, f"{host}:{port}")
    return port, binds[0], stop


def _close_sockets_left_open(exc: BaseException) -> None:
    """Close the sockets the failed start left open: hypercorn's ``create_sockets`` raises
    without closing the socket whose bind failed (a ResourceWarning when it is collected)."""
    tb = exc.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, socket.socket):
                value.close()
        tb = tb.tb_next
