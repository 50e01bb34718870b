"""Gateway protocol v1's bounds: its size limits and id rules, enforced by both ends and the
custody store: the task id is the store's primary key, so none of them accepts what another
refuses. (Flow-control limits, a run's permits, are ``bridge.custody._limits``.)"""

from __future__ import annotations

import re
from typing import Final


class InvalidTask(ValueError):
    """A task (or a value about one) broke a rule; nothing was stored."""


class InvalidTaskId(InvalidTask):
    """A task id broke the id rule; the message names the rule."""


class BodyTooLarge(InvalidTask):
    """A task body or result is over the store's configured size limit."""


class InvalidWorkerName(ValueError):
    """A worker name broke the worker-name rule; the message names the rule."""


TASK_ID_RULE: Final = "[A-Za-z0-9][A-Za-z0-9_~.-]{0,127}"
WORKER_RULE: Final = "[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
_TASK_ID_RE: Final = re.compile(TASK_ID_RULE)
_WORKER_RE: Final = re.compile(WORKER_RULE)
MAX_ROOM_CHARS: Final = 256

MAX_BODY_BYTES: Final = 1 << 20
"""The one limit on a task body or result (UTF-8 bytes): the custody store's default, and what
the gateway's request limit is sized from, so every stored result can be delivered."""
JSON_ESCAPE_FACTOR: Final = 6
"""The most bytes JSON spends on one byte of UTF-8 text: a control character is ``\\u0001``."""
ENVELOPE_BYTES: Final = 64 * 1024
"""Room for everything around a body in a request (id, flags, metadata) with plenty to spare."""
MAX_REQUEST_BYTES: Final = MAX_BODY_BYTES * JSON_ESCAPE_FACTOR + ENVELOPE_BYTES
"""The gateway's default request limit: a ``MAX_BODY_BYTES`` body JSON-escaped, plus envelope."""


def check_task_id(value: object) -> str:
    """Return ``value`` if it is a valid task id, else raise ``InvalidTaskId`` naming the rule."""
    if (  # the common case, checked without building an error message
        type(value) is str
        and 0 < len(value) <= 128
        and value[0].isascii()
        and value[0].isalnum()
        and ".." not in value
        and _TASK_ID_RE.fullmatch(value) is not None
    ):
        return value
    if not isinstance(value, str):
        raise InvalidTaskId(f"task id must be a str, got {type(value).__name__}")
    shown = repr(value[:140])
    if not value:
        raise InvalidTaskId("task id must not be empty")
    if len(value) > 128:
        raise InvalidTaskId(f"task id {shown}... is {len(value)} characters; the limit is 128")
    if ".." in value:
        raise InvalidTaskId(f"task id {shown} must not contain '..'")
    if not value[0].isascii() or not value[0].isalnum():
        raise InvalidTaskId(f"task id {shown} must start with a letter or digit (A-Z a-z 0-9)")
    if _TASK_ID_RE.fullmatch(value) is None:
        bad = next(c for c in value if _TASK_ID_RE.fullmatch("a" + c) is None)
        raise InvalidTaskId(
            f"task id {shown} contains {bad!r}; allowed are letters, digits and _ ~ . - "
            f"(rule {TASK_ID_RULE})"
        )
    return value


def check_worker(value: object) -> str:
    """Return ``value`` if it is a valid worker name, else raise ``InvalidWorkerName``."""
    if not isinstance(value, str):
        raise InvalidWorkerName(f"worker name must be a str, got {type(value).__name__}")
    if _WORKER_RE.fullmatch(value) is None:
        raise InvalidWorkerName(
            f"worker name {value[:80]!r} must match {WORKER_RULE} "
            "(a letter or digit, then up to 63 letters, digits, _ or -)"
        )
    return value


def check_text(value: str, what: str) -> bytes:
    """``value`` as UTF-8, or ``InvalidTask`` naming the first lone surrogate (JSON can carry
    ``"\\ud800"``, but no store or gateway can encode it)."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise InvalidTask(
            f"{what} contains a lone surrogate {bad!r} at index {exc.start}; "
            "text must be valid Unicode (encodable as UTF-8)"
        ) from None


def check_body(value: str, limit: int, what: str = "task body") -> str:
    """Refuse a body over ``limit`` UTF-8 bytes (the store's configured size limit), or one
    that is not valid Unicode."""
    size = len(check_text(value, what))
    if size > limit:
        raise BodyTooLarge(f"{what} is {size} bytes; the limit is {limit} bytes")
    return value


MAX_HEADERS: Final = 32
"""Most headers one task may carry (the bridge sets two: ``sender`` and ``delivery``)."""

MAX_HEADER_NAME_CHARS: Final = 128

MAX_HEADER_VALUE_CHARS: Final = 4096
"""A header is metadata shown to an agent and in ``tether store show``, not a second body: a
gateway that puts a megabyte in ``sender`` has its task refused, by name, at ingest."""


def check_headers(headers: dict[str, str], what: str) -> None:
    """Refuse too many headers, an empty or over-long name, or an over-long value (``InvalidTask``
    naming the header); names and values must be valid Unicode."""
    if len(headers) > MAX_HEADERS:
        raise InvalidTask(f"{what} has {len(headers)} headers; the limit is {MAX_HEADERS}")
    for name, value in headers.items():
        if not 0 < len(name) <= MAX_HEADER_NAME_CHARS:
            raise InvalidTask(
                f"{what} has a header name of {len(name)} characters {name[:40]!r}; "
                f"names are 1-{MAX_HEADER_NAME_CHARS} characters"
            )
        if len(value) > MAX_HEADER_VALUE_CHARS:
            raise InvalidTask(
                f"{what}: header {name[:40]!r} is {len(value)} characters; "
                f"the limit is {MAX_HEADER_VALUE_CHARS}"
            )
        check_text(name, f"{what}: a header name")
        check_text(value, f"{what}: header {name[:40]!r}")


# Rooms and client names are labels shown to people; same shape as worker names, a bit longer.
LABEL_RULE: Final = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}"
_LABEL: Final = re.compile(LABEL_RULE)


def check_label(value: str, what: str) -> str:
    if _LABEL.fullmatch(value) is None:
        raise ValueError(
            f"{what} {value[:140]!r} is not valid: 1-128 characters from [A-Za-z0-9_.:-], "
            "starting with a letter or digit"
        )
    return value


MAX_BATCH = 100
"""Most ids (or results) one batch request may carry."""

MAX_REASON_CHARS = 2000
"""A reject ``reason`` or a notice ``detail``: free text shown to people."""

MAX_VERSION_CHARS = 128
"""A heartbeat's ``version`` text (a software version, shown in the gateway's stats)."""

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NUL: Final = re.compile("\x00")


def check_free_text(value: str, what: str, limit: int, *, one_line: bool = False) -> str:
    """Bound a free-text field of the protocol: at most ``limit`` characters, no NUL, and for
    a ``one_line`` field (a version, a name) no control or line-separator character at all.
    Every free-text field has one of these bounds, so no peer can grow what the other stores
    or shows without limit."""
    if len(value) > limit:
        raise ValueError(f"{what} has {len(value)} characters; the limit is {limit}")
    bad = (_CONTROL if one_line else _NUL).search(value)
    if bad is not None:
        raise ValueError(f"{what} contains the control character {bad.group()!r}")
    return value
