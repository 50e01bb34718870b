"""Logging for tether services: text or one JSON object per line, secrets redacted.

Plain stdlib ``logging`` (a library must not impose more); a registered bearer token never reaches a
log line, whatever a message or a traceback contains (``register_secret``).
"""

from __future__ import annotations

import copy
import json
import logging
import re
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

import trio

from .._core._owner import current_owner
from ._log_format import LOG_FORMATS as LOG_FORMATS
from ._log_format import LogFormat as LogFormat

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
REDACTED = "[redacted]"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def register_secret(secret: str) -> None:
    """Never let ``secret`` appear in a log line formatted by tether's formatters.

    Token readers call it for every token they read; secrets shorter than 8 characters are
    not registered (redacting them would mangle ordinary words, and no real token is that
    short).
    """
    if len(secret) >= 8:
        with _secrets_lock:
            _secrets.add(secret)


def redact(text: str) -> str:
    for secret in list(_secrets):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _task_context() -> tuple[str | None, str | None]:
    """The running Trio task's name and owner label (None outside Trio, e.g. a thread)."""
    try:
        task = trio.lowlevel.current_task()
    except RuntimeError:
        return None, None
    return task.name, current_owner()


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    c = match.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control and line-separator character but the tab escaped
    (``\\n``, ``\\r``, ``\\x00``, ``\\u2028``): one value stays on its line, and
    terminal escapes arrive inert."""
    return _CONTROL.sub(_escape_char, text) if _CONTROL.search(text) else text


def _indented_block(text: str) -> str:
    """A traceback or stack under its record: controls escaped within each line, and every
    line indented, so none of it can pass for a record of its own (each starts with the
    time)."""
    return "\n".join("  " + escape_controls(line) for line in text.split("\n"))


class RedactingFormatter(logging.Formatter):
    """The stdlib text format, safe to print whatever the values hold: registered secrets
    are replaced by ``[redacted]``, and control characters in the message and in every
    field the format prints are escaped (a reason with a newline cannot forge a log line,
    a NUL or a terminal escape never reaches the log raw)."""

    def format(self, record: logging.LogRecord) -> str:
        safe = copy.copy(record)
        safe.msg, safe.args = escape_controls(record.getMessage()), None
        for key, value in record.__dict__.items():
            if isinstance(value, str) and key not in ("msg", "exc_text", "stack_info"):
                setattr(safe, key, escape_controls(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        safe.exc_info = None
        safe.exc_text = _indented_block(record.exc_text) if record.exc_text else None
        safe.stack_info = _indented_block(record.stack_info) if record.stack_info else None
        return redact(super().format(safe))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601 UTC), ``level``, ``logger``, ``message``,
    ``task`` and ``owner`` (the Trio task that logged, when there is one), ``thread`` outside
    the main thread, ``exc`` (the formatted traceback) and any ``extra={...}`` fields."""

    _STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        task = getattr(record, "trio_task", None)
        if task is not None:
            doc["task"] = task
            owner = getattr(record, "trio_owner", None)
            if owner is not None:
                doc["owner"] = owner
        if record.threadName not in (None, "MainThread"):
            doc["thread"] = record.threadName
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exc"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and not key.startswith("trio_") and key not in doc:
                doc[key] = value if _is_json_scalar(value) else repr(value)
        return redact(json.dumps(doc, ensure_ascii=False, default=repr))


def _is_json_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


class TaskContextFilter(logging.Filter):
    """Stamps each record with the Trio task and owner it was logged from. A handler filter:
    it runs in the logging thread, i.e. in the task that called the logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trio_task"):
            record.trio_task, record.trio_owner = _task_context()
        return True


def make_handler(fmt: LogFormat = "text", stream: TextIO | None = None) -> logging.Handler:
    """A stream handler with tether's formatter for ``fmt`` (secrets redacted either way)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}; got {fmt!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(TaskContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else RedactingFormatter(TEXT_FORMAT))
    return handler


def configure_logging(
    level: str | int = "INFO", fmt: LogFormat = "text", stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (default stderr) in ``fmt``.

    Replaces the root logger's handlers (a service configures logging once, at start) and
    returns the new handler. httpx's line per request (INFO; ~97% of a busy bridge's log)
    shows only at DEBUG; its warnings always do.
    """
    if isinstance(level, str):
        if level.upper() not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}; got {level!r}")
        level = level.upper()
    handler = make_handler(fmt, stream)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    numeric = logging.getLevelName(level) if isinstance(level, str) else level
    logging.getLogger("httpx").setLevel(logging.WARNING if numeric > logging.DEBUG else 0)
    return handler
