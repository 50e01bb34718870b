"""Reading a gateway's answers: at most so many bytes of each, JSON objects of protocol v1,
the error text of a refusal, ``Retry-After``, and the polled tasks a client refuses."""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

import attrs
import httpx

from ..._plumbing._json import loads_strict
from ..._protocol._messages import MAX_FOREIGN_ID_CHARS, MAX_REASON_CHARS
from ._errors import GatewayProtocolError


async def read_bounded(
    http: httpx.AsyncClient, request: httpx.Request, max_bytes: int, what: str
) -> httpx.Response:
    """Send ``request`` and read its answer up to ``max_bytes``: a longer one (by its
    ``Content-Length`` or as it streams in) is cut off unread and refused."""
    response = await http.send(request, stream=True)
    try:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise over_cap(what, max_bytes, f"declares {int(declared)} bytes")
        if declared.isdigit() and "Content-Encoding" not in response.headers:
            # framed by its length, as it comes off the wire (HTTP/1.1 reads no byte past
            # it): read it whole, and hand back this response rather than a copy
            if len(await response.aread()) > max_bytes:  # a transport that ignores framing
                raise over_cap(what, max_bytes, "went on past it")
            return response
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
                        raise over_cap(what, max_bytes, "went on past it") from None
            body = b"".join(parts)
            del parts
        if len(body) > max_bytes:
            raise over_cap(what, max_bytes, "went on past it")
    finally:
        await response.aclose()
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        content=body,
        request=request,
        extensions=response.extensions,
    )


class OverCap(GatewayProtocolError):
    """An answer longer than the client reads."""


def over_cap(what: str, max_bytes: int, how: str) -> GatewayProtocolError:
    return OverCap(
        f"{what}: the answer is over this client's limit of {max_bytes} bytes (it {how}); "
        "refused unread"
    )


def tasks_array(response: httpx.Response) -> list[Any]:
    data = json_object(response, "GET /v1/tasks")
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list):
        raise GatewayProtocolError("GET /v1/tasks: the response has no 'tasks' array")
    return raw_tasks


@attrs.frozen
class Refusal:
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
    def of(cls, raw: Any, reason: str) -> Refusal:
        raw_id = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(raw_id, str) and raw_id and "\x00" not in raw_id:
            sendable = len(raw_id) <= MAX_FOREIGN_ID_CHARS
            key = raw_id if len(raw_id) <= 200 else "#" + digest(raw_id)
            return cls(raw_id if sendable else raw_id[:200], key, reason, sendable)
        return cls("", "#" + digest(raw), reason, sendable=False)


def digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def one_line_reason(reason: str) -> str:
    """One line, no NUL, within the bound the gateway enforces (``parse_reject``)."""
    return " ".join(reason.replace("\x00", " ").split())[:MAX_REASON_CHARS] or "rejected"


def format_seconds(value: float) -> str:
    return f"{value:g}"


def json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        data = loads_strict(response.content)
    except ValueError as exc:
        raise GatewayProtocolError(f"{what}: the response is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise GatewayProtocolError(f"{what}: the response is not a JSON object")
    return data


def error_detail(response: httpx.Response) -> str:
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


def retry_after_of(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
