"""Structured logs: one JSON object per line with the Trio task and owner; secrets redacted."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import trio

from tether import owned_by
from tether._plumbing._logging import (
    RedactingFormatter,
    configure_logging,
    make_handler,
    register_secret,
)
from tether.bridge import read_token, write_token

SECRET = "s3cret-token-value-9Zq"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = make_handler("json", stream)
    logger = logging.getLogger("tether.test-json")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def fail(exc: Exception) -> None:
    raise exc


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_json_lines_carry_time_level_logger_task_owner_and_exc(
    json_log: io.StringIO,
) -> None:
    log = logging.getLogger("tether.test-json")

    async def worker() -> None:
        log.info("custody %s -> %s", "pending", "claimed", extra={"task_id": "t-1"})
        try:
            fail(ValueError("broken pipe"))
        except ValueError:
            log.exception("handler failed")

    async with trio.open_nursery() as nursery:
        with owned_by("session:chat"):
            nursery.start_soon(worker, name="chat::ask::answer")
    log.warning("outside any owner")

    first, second, third = lines(json_log)
    assert first["level"] == "INFO"
    assert first["logger"] == "tether.test-json"
    assert first["message"] == "custody pending -> claimed"
    assert first["task"] == "chat::ask::answer"
    assert first["owner"] == "session:chat"
    assert first["task_id"] == "t-1"
    assert str(first["time"]).endswith("Z")
    assert "exc" not in first
    assert second["level"] == "ERROR"
    assert "ValueError: broken pipe" in str(second["exc"])
    assert "owner" not in third


async def test_registered_secrets_never_reach_a_log_line(
    json_log: io.StringIO, tmp_path: object
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    path = tmp_path / "token"
    write_token(path, SECRET)
    assert read_token(path) == SECRET
    log = logging.getLogger("tether.test-json")
    log.error("sent Authorization: Bearer %s", SECRET)
    try:
        fail(RuntimeError(f"request failed with token {SECRET}"))
    except RuntimeError:
        log.exception("oops")
    text = json_log.getvalue()
    assert SECRET not in text
    assert text.count("[redacted]") == 2  # the message and the traceback


def test_configure_logging_text_and_errors() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        register_secret("another-secret-123")
        configure_logging("debug", "text", stream)
        logging.getLogger("tether.x").debug("token another-secret-123 here")
        assert "DEBUG tether.x: token [redacted] here" in stream.getvalue()
        with pytest.raises(ValueError, match="log format must be one of text, json"):
            configure_logging("INFO", "yaml", stream)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="log level must be one of"):
            configure_logging("LOUD", "text", stream)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("DEBUG", True)])
def test_httpx_request_lines_show_only_at_debug(level: str, shown: bool) -> None:
    """Issue 32.5: httpx logs every request at INFO, ~97% of a busy bridge's log; tether's
    own INFO lines stay."""
    root, httpx_log = logging.getLogger(), logging.getLogger("httpx")
    saved = (list(root.handlers), root.level, httpx_log.level)
    stream = io.StringIO()
    try:
        configure_logging(level, "text", stream)
        httpx_log.info('HTTP Request: GET http://gw/v1/tasks "HTTP/1.1 200 OK"')
        httpx_log.warning("something httpx warns about")
        logging.getLogger("tether.x").info("bridge running")
        text = stream.getvalue()
        assert ("HTTP Request: GET" in text) is shown
        assert "something httpx warns about" in text
        assert "INFO tether.x: bridge running" in text
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        httpx_log.setLevel(saved[2])


def test_the_text_format_escapes_control_characters_so_no_value_forges_a_line() -> None:
    """A reason with a newline cannot forge a log line; a NUL or an ANSI escape does not
    reach the terminal raw; a traceback's lines are indented under their record."""
    stream = io.StringIO()
    handler = make_handler("text", stream)
    handler.setFormatter(
        RedactingFormatter(
            "%(levelname)s %(name)s: %(message)s [%(task_id)s]", defaults={"task_id": "-"}
        )
    )
    log = logging.getLogger("tether.test-text")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    forged = "bad\n2026-12-01 00:00:00,000 INFO tether.bridge: all tasks delivered"
    try:
        log.warning("rejected task %s: %s", "t1", forged, extra={"task_id": "t1\r\nx\x00"})
        log.info("nul \x00 bell \x07 ansi \x1b[31m del \x7f c1 \x85 ls \u2028 tab\tok")
        try:
            fail(ValueError("boom\nCRITICAL tether: forged from an exception"))
        except ValueError:
            log.exception("handler failed: %s", "x\ny")
    finally:
        log.removeHandler(handler)
        log.propagate = True
    lines_ = stream.getvalue().splitlines()
    assert lines_[0] == (
        "WARNING tether.test-text: rejected task t1: bad\\n2026-12-01 00:00:00,000 INFO "
        "tether.bridge: all tasks delivered [t1\\r\\nx\\x00]"
    )
    assert lines_[1] == (
        "INFO tether.test-text: nul \\x00 bell \\x07 ansi \\x1b[31m del \\x7f c1 \\x85 "
        "ls \\u2028 tab\tok [-]"
    )
    assert lines_[2].startswith("ERROR tether.test-text: handler failed: x\\ny")
    assert len(lines_) > 3
    assert all(line.startswith(" ") for line in lines_[3:]), lines_[3:]
    assert any("ValueError: boom" in line for line in lines_[3:])
    assert all(not any(c in line for c in "\x00\x07\x1b\x7f\x85\u2028") for line in lines_)
