"""What a run reads of its room's conversation (issue #34): the turns and the state, as
values. Apart from ``_conversation`` (the rules of writing them) so that a ``Claim`` can
carry the conversation read in its own transaction (``_rules`` imports this module)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

TurnRole = Literal["user", "assistant"]
TurnOutcome = Literal["received", "shown", "result", "delivered", "interrupted", "asked"]
"""``received``: the person's message, in custody. An agent's reply: ``result`` (stored, not
yet confirmed by the gateway), ``delivered`` (confirmed), ``interrupted`` (a newer message of
the room superseded the run; the text is what it had shown). ``shown`` is a reply still being
streamed (the text the gateway took so far): kept so a barge-in can record it, never part of
a run's history. ``asked``: a question a run asked the person (issue #36), a turn of its own
before the answer (the person's next message), the run's reply after it."""


@attrs.frozen
class Turn:
    """One turn of a room's conversation, as the person saw it."""

    role: TurnRole
    text: str
    task_id: str
    at: float
    """When (store clock): the message's ingest, or the reply's last move."""
    outcome: TurnOutcome


@attrs.frozen
class Conversation:
    """What a run reads of its room: the turns before its message, oldest first (at most the
    window), the room's state and its version (0: never written)."""

    history: tuple[Turn, ...] = ()
    state: Mapping[str, Any] = attrs.field(factory=dict)
    version: int = 0
