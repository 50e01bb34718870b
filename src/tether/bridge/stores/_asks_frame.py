"""The store methods of questions to the person (issue #36), framed as ``_frame`` frames
custody: check the arguments, run the backend part's ``_name`` operation, log the move.

Each backend's asks part (``sqlite._asks``, ``postgres._asks``) implements the operations, so
asks read the same on SQLite and PostgreSQL. The answer itself is taken at ingest (each
backend's ingest calls its asks module's ``answer``/``answers`` on every new message of a
room): the room's oldest open ask that the message's sender may answer (issue #48).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence

import attrs

from ..._plumbing._when import iso_time
from ..custody import _log as _clog
from ..custody._asks import (
    AskRecord,
    Question,
    answers_reason,
    check_answer_from,
    check_question,
)
from ..custody._rules import Claim, CustodyState, check_task_id
from ..custody._steps import check_step_name, check_wake_at
from ._common import check_limit, check_reason, fence_args
from ._host import Host
from ._steps_frame import journal_parked


@attrs.define(eq=False)
class AsksFrame(abc.ABC):
    """``AskStore``'s and ``QuestionStore``'s methods around a backend part's operations."""

    host: Host

    async def asks(self, id: str) -> Sequence[AskRecord]:
        return await self._asks(check_task_id(id))

    @abc.abstractmethod
    async def _asks(self, id: str) -> list[AskRecord]:
        """``id``'s asks by their ``seq``."""

    async def ask(
        self,
        claim: Claim,
        name: str,
        text: str,
        until: float,
        why: str,
        *,
        answer_from: Sequence[str] | None = None,
    ) -> AskRecord:
        fence_args(claim)
        check_step_name(name, own=True)
        check_question(text)
        until = check_wake_at(until)
        senders = check_answer_from(answer_from)
        reason = self.host.stored_text(check_reason(why))
        record = await self._ask(claim, name, text, until, reason, self.host.clock(), senders)
        journal_parked(claim, f"{reason}; times out {iso_time(record.deadline)}")
        return record

    @abc.abstractmethod
    async def _ask(
        self,
        claim: Claim,
        name: str,
        text: str,
        until: float,
        why: str,
        now: float,
        answer_from: tuple[str, ...] | None,
    ) -> AskRecord:
        """Record the ask (the first record of ``name`` wins) with the senders who may answer
        it (None: anyone) and its turn, and park the task until the recorded deadline, under
        the fence; ``StaleLease`` if fenced out."""

    async def unposted_questions(self, *, limit: int = 64) -> Sequence[Question]:
        return await self._unposted_questions(check_limit(limit))

    @abc.abstractmethod
    async def _unposted_questions(self, limit: int) -> list[Question]:
        """Up to ``limit`` unconfirmed questions (not ``unsupported``), oldest first, read
        and then made durable if any were found (a post follows)."""

    async def question_posted(self, id: str, name: str) -> bool:
        return await self._question_posted(check_task_id(id), check_step_name(name, own=True))

    @abc.abstractmethod
    async def _question_posted(self, id: str, name: str) -> bool: ...

    async def ask_unsupported(self, id: str, name: str) -> bool:
        check_task_id(id)
        check_step_name(name, own=True)
        woke = await self._ask_unsupported(id, name, self.host.clock())
        if woke:
            _clog.moved(
                id, CustodyState.WAITING, CustodyState.PENDING, reason="the gateway cannot ask"
            )
        return woke

    @abc.abstractmethod
    async def _ask_unsupported(self, id: str, name: str, now: float) -> bool: ...


def log_answers(pairs: Iterable[tuple[str, str]]) -> None:
    """Log the moves of each ``(asking task, answering message)`` an ingest took as an answer."""
    for asker, answer in pairs:
        _clog.moved(
            asker, CustodyState.WAITING, CustodyState.PENDING, reason=f"answered by {answer}"
        )
        _clog.moved(answer, CustodyState.PENDING, CustodyState.RESULT, reason=answers_reason(asker))
