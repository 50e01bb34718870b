"""Questions to the person (issue #36): a run asks, its task waits in ``waiting`` with no worker
and no attempt, and the room's next message from one of the ask's senders is the answer.

An ask is a row beside its task: ``open`` while the task waits on it, then ``answered`` (the
room's next message from a sender it names, or from anyone: issue #48; taken at ingest),
``timeout`` (its wake-up came first) or
``unsupported`` (the gateway has no messages route). The first of these to commit wins; a
replay of the run reads the outcome and returns it (or raises it) again. What is checked here
is checked before anything touches a store, alike on both backends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal, Protocol

import attrs

AskStatus = Literal["open", "answered", "timeout", "unsupported"]
ASK_STATUSES: Final[tuple[AskStatus, ...]] = ("open", "answered", "timeout", "unsupported")

ASK_PREFIX: Final = "~ask:"
"""The name of a run's n-th unnamed ask is ``~ask:n``."""
MAX_QUESTION_CHARS: Final = 16_000
"""The longest question (characters): one message in the room."""
ANSWERS_PREFIX: Final = "answers the question of "
"""The reason an answering message's no-send result records (its task closed at the
gateway, answered by the asking task)."""
ANSWER_OWNER: Final = "answer"
"""The owner an answering message's no-send result records (no worker ever held it)."""
SENDER_HEADER: Final = "sender"
"""The header that names who sent a message (the bridge sets it at ingest)."""
MAX_ANSWER_FROM: Final = 64
"""Most senders one ask may name."""
MAX_SENDER_CHARS: Final = 4096
"""The longest sender (a header value's limit, ``_protocol._bounds.MAX_HEADER_VALUE_CHARS``)."""


def senders_of(value: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen
class AskRecord:
    """One question a run asked: what a replay reads instead of asking again."""

    name: str
    seq: int
    """Its number among its task's asks (1, 2, ...): the ``seq`` of the gateway message."""
    question: str
    status: AskStatus
    deadline: float
    """When it times out (store clock)."""
    at: float
    """When it was recorded (store clock)."""
    answer: str | None = None
    answer_id: str | None = None
    """The id of the room's message that answered it."""
    posted: bool = False
    """Has the gateway confirmed the question (``POST /v1/tasks/<id>/messages``)?"""
    answer_from: tuple[str, ...] | None = attrs.field(default=None, converter=senders_of)
    """Whose message answers it (their ``sender``), or None: anyone's."""


@attrs.frozen
class Question:
    """A recorded question not yet confirmed by the gateway: what the question poster sends."""

    task_id: str
    name: str
    seq: int
    text: str


class QuestionStore(Protocol):
    """What the question poster needs: recorded questions to send, and their outcomes."""

    async def unposted_questions(self, *, limit: int = ...) -> Sequence[Question]:
        """Questions of waiting tasks the gateway has not confirmed, oldest first, once they
        are durable (a promise follows: the post)."""
        ...

    async def question_posted(self, id: str, name: str) -> bool:
        """The gateway confirmed question ``name`` of task ``id``: it is not posted again."""
        ...

    async def ask_unsupported(self, id: str, name: str) -> bool:
        """The gateway has no messages route: the open ask ``name`` of ``id`` ends
        ``unsupported`` and its task is pending again (no attempt spent), so its run raises
        ``AskUnsupported``. False if the ask was not open (answered or timed out first)."""
        ...


def check_question(text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"run.ask needs a question (non-empty text), got {text!r:.80}")
    if len(text) > MAX_QUESTION_CHARS:
        raise ValueError(
            f"a question has at most {MAX_QUESTION_CHARS} characters, this one {len(text)}"
        )
    if "\x00" in text:
        raise ValueError("a question cannot contain a NUL character")
    return text


def check_ask_timeout(timeout: object) -> float:
    """``timeout``: seconds > 0, finite (a question nobody answers must end)."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < math.inf
    ):
        raise ValueError(f"run.ask needs a finite timeout in seconds > 0, got {timeout!r}")
    return float(timeout)


def check_answer_from(senders: object) -> tuple[str, ...] | None:
    """``senders``: None (anyone), or a non-empty list of senders (non-empty text without NUL,
    at most ``MAX_SENDER_CHARS`` each, at most ``MAX_ANSWER_FROM`` of them)."""
    if senders is None:
        return None
    if isinstance(senders, str) or not isinstance(senders, Sequence):
        raise TypeError(f"an ask's senders are a list of senders, got {senders!r:.80}")
    if not 0 < len(senders) <= MAX_ANSWER_FROM:
        raise ValueError(
            f"an ask names 1 to {MAX_ANSWER_FROM} senders (or anyone), got {len(senders)}"
        )
    for sender in senders:
        if (
            not isinstance(sender, str)
            or not 0 < len(sender) <= MAX_SENDER_CHARS
            or "\x00" in sender
        ):
            raise ValueError(
                f"an ask's sender must be 1-{MAX_SENDER_CHARS} characters without NUL, got "
                f"{sender!r:.80}"
            )
    return tuple(dict.fromkeys(senders))


def answers_reason(task_id: str) -> str:
    return f"{ANSWERS_PREFIX}{task_id}"
