"""The quarantine pipe's framing: length-prefixed JSON objects, one message each.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON, an object with a
``"kind"``. Framing by length (not by line) lets a message carry any text, and a receiver
skips a kind it does not know, so the protocol grows (steps, conversations) without a new
version: the parent holds the store, the child asks and tells over this pipe.

Kinds today, parent -> child: ``task``, answers (``step_ok``, ``permit_ok``,
``conversation_ok``, ...). Child -> parent: ``ready`` (the agent is installed), ``progress``
(``status``, ``partial``), requests (``step``, ``permit``, ``conversation``), ``reply``
(``body``, ``no_send``), ``error``
(``type``: ``retry`` | ``permanent`` | ``agent`` | ``failure``; ``reason``; ``after``).
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

import attrs

from ..custody._conversation import Conversation, Turn
from ..custody._rules import Task

PROTOCOL: Final = 1
"""Sent in ``ready``; a parent refuses a child that speaks another."""
EXIT_OUT_OF_MEMORY: Final = 86
"""The child's exit code when the agent ran out of memory under ``--quarantine-memory``."""
EXIT_BAD_START: Final = 87
"""The child could not start the agent or read its task (not the task's doing)."""
MAX_FRAME: Final = 64 * 1024 * 1024
"""A frame longer than this is a broken pipe, not a message."""
_HEADER: Final = struct.Struct(">I")


class FrameError(ValueError):
    """The pipe carried something that is not a frame of this protocol."""


def encode(kind: str, **fields: Any) -> bytes:
    """One frame: ``{"kind": kind, **fields}``."""
    data = json.dumps({"kind": kind, **fields}, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise FrameError(f"a {kind!r} message of {len(data)} bytes is over {MAX_FRAME}")
    return _HEADER.pack(len(data)) + data


class Deframer:
    """Frames out of a byte stream read in arbitrary pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> list[dict[str, Any]]:
        """Add ``data``; return every message now complete, in order."""
        self._buffer += data
        out: list[dict[str, Any]] = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME:
                raise FrameError(f"a frame of {size} bytes is over {MAX_FRAME}")
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            raw = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            try:
                message = json.loads(raw)
            except ValueError as exc:
                raise FrameError(f"a frame is not JSON: {exc}") from None
            if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
                raise FrameError(f"a frame is not a message object: {raw[:80]!r}")
            out.append(message)
        return out

    @property
    def pending(self) -> int:
        """Bytes of a frame begun but not complete (a child that died mid-write)."""
        return len(self._buffer)


def task_fields(task: Task) -> dict[str, Any]:
    """A task as a frame carries it (the ``task`` frame's run, a ``spawn`` frame's child)."""
    return {
        "id": task.id,
        "body": task.body,
        "room": task.room,
        "priority": task.priority,
        "headers": dict(task.headers),
    }


def task_from(fields: dict[str, Any]) -> Task:
    """The other side's ``task_fields``."""
    return Task(
        fields["id"],
        fields["body"],
        room=fields.get("room"),
        priority=fields.get("priority", "normal"),
        headers=fields.get("headers") or {},
    )


def conversation_fields(conversation: Conversation) -> dict[str, Any]:
    """A run's conversation as the ``conversation_ok`` frame carries it to the child."""
    return {
        "history": [attrs.asdict(turn) for turn in conversation.history],
        "state": dict(conversation.state),
        "version": conversation.version,
    }


def conversation_from(fields: dict[str, Any] | None) -> Conversation:
    """The child's side of ``conversation_fields`` (an empty conversation for none)."""
    if not fields:
        return Conversation()
    history = tuple(Turn(**turn) for turn in fields["history"])
    return Conversation(history, fields["state"], int(fields["version"]))
