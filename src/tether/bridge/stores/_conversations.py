"""The conversation methods of both backends (issue #34), in the shape of ``_frame``: check
the arguments, run the backend part's ``_name`` operation, log what an operator changed.

Each backend's rooms part (``sqlite._conversations``, ``postgres._conversations``) implements
the operations. A live task's turns are its own row (its message's number in the room, its
stored result: issue #49); the schema's triggers count them in the custody moves' own
transactions and copy them into ``turns`` when the task is deleted. Only the state, the text
a streaming run has shown, an operator's erasure and retention are written by the part.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import Any

import attrs

from ..custody._conversation import (
    DEFAULT_HISTORY_KEEP,
    DEFAULT_HISTORY_TURNS,
    MAX_STATE_BYTES,
    Conversation,
    ConversationCounts,
    RoomView,
    check_room,
    check_version,
    check_window,
    encode_state,
)
from ..custody._rules import Claim, check_task_id
from ._common import check_limit, complete_args, fence_args, ring_for_children
from ._host import Host

log = logging.getLogger("tether.custody")


@attrs.define(eq=False)
class ConversationFrame(abc.ABC):
    """The ``ConversationStore`` and ``RoomStore`` roles around a backend part's operations."""

    host: Host

    async def conversation(
        self, task_id: str, *, limit: int = DEFAULT_HISTORY_TURNS
    ) -> Conversation:
        return await self._conversation(check_task_id(task_id), check_window(limit, "limit"))

    @abc.abstractmethod
    async def _conversation(self, task_id: str, limit: int) -> Conversation: ...

    async def complete_with_state(
        self,
        claim: Claim,
        body: str,
        state: Mapping[str, Any],
        base_version: int,
        *,
        no_send: bool = False,
    ) -> int:
        complete_args(claim, body, self.host.max_body_bytes)
        if not isinstance(no_send, bool):
            raise TypeError(f"no_send must be a bool, got {type(no_send).__name__}")
        text = encode_state(state, task_id=claim.task.id, limit=MAX_STATE_BYTES)
        version = await self._complete_with_state(
            claim, body, no_send, text, check_version(base_version), self.host.clock()
        )
        ring_for_children(self.host, [claim])
        log.debug(
            "task %s: result stored by %s (attempt %d) with its room's state version %d",
            claim.task.id,
            claim.worker,
            claim.attempt,
            version,
        )
        return version

    @abc.abstractmethod
    async def _complete_with_state(
        self, claim: Claim, body: str, no_send: bool, state: str, base: int, now: float
    ) -> int:
        """``complete`` plus the room's state, in one transaction: the new version; raises
        ``StaleLease`` (fence), ``InvalidTask`` (no room), ``StateConflict`` (stale base)."""

    async def record_shown(self, claim: Claim, text: str) -> bool:
        fence_args(claim)
        complete_args(claim, text, self.host.max_body_bytes)
        return await self._record_shown(claim, text, self.host.clock())

    @abc.abstractmethod
    async def _record_shown(self, claim: Claim, text: str, now: float) -> bool: ...

    async def room(self, room: str, *, limit: int = DEFAULT_HISTORY_TURNS) -> RoomView | None:
        return await self._room(check_room(room), check_window(limit, "limit"))

    @abc.abstractmethod
    async def _room(self, room: str, limit: int) -> RoomView | None: ...

    async def forget_room(self, room: str) -> tuple[int, int]:
        room = check_room(room)
        turns, tasks = await self._forget_room(room, self.host.clock())
        log.warning(
            "operator: forgot room %r: %d turn(s), its state and the stored bodies of %d "
            "finished task(s) erased",
            room,
            turns,
            tasks,
        )
        return turns, tasks

    @abc.abstractmethod
    async def _forget_room(self, room: str, now: float) -> tuple[int, int]:
        """Erase ``room``'s turns and state and its finished tasks' bodies, journalled as the
        operator's: (turns erased, tasks erased)."""

    async def prune_turns(self, *, keep: int = DEFAULT_HISTORY_KEEP, limit: int = 1000) -> int:
        return await self._prune_turns(check_window(keep, "keep"), check_limit(limit))

    @abc.abstractmethod
    async def _prune_turns(self, keep: int, limit: int) -> int:
        """Delete at most ``limit`` turns, the oldest of rooms holding more than ``keep``: a
        bounded slice, so retention never holds the writer long (issue #56)."""

    async def prune_rooms(self, before: float, *, limit: int = 1000) -> int:
        return await self._prune_rooms(before, check_limit(limit))

    @abc.abstractmethod
    async def _prune_rooms(self, before: float, limit: int) -> int:
        """Delete at most ``limit`` room affinities noted before ``before``."""

    async def conversation_counts(self) -> ConversationCounts:
        return await self._conversation_counts()

    @abc.abstractmethod
    async def _conversation_counts(self) -> ConversationCounts: ...


FORGOTTEN_REASON = "operator: room forgotten (history, state and bodies erased)"
"""What the journal of each finished task of a forgotten room records."""
