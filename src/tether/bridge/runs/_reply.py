"""What a run's handler answers: a ``Reply`` (or a str), checked as the agent's contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs


def _state_validator(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(
            f"Reply(state=...) must be a dict (a JSON object) or None, got {type(value).__name__}"
        )


@attrs.frozen
class Reply:
    """An agent's reply. ``no_send``: confirm the task to the gateway without posting a message
    (then ``body`` may be empty). ``state`` (a JSON object): the room's new state, stored in
    the same transaction as the reply (``conversation_of``); None keeps the state as it is.
    A body over ``--max-reply-bytes`` (256 KiB) or a state over ``--max-state-bytes`` (1 MiB)
    fails the run at once (``TooLarge``)."""

    body: str = attrs.field(validator=attrs.validators.instance_of(str))
    no_send: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    state: Mapping[str, Any] | None = attrs.field(
        default=None, validator=_state_validator, kw_only=True
    )


class AgentError(Exception):
    """The agent broke its contract (no handler, a reply of the wrong type, an empty reply)."""


class EmptyReply(AgentError):
    """The agent returned an empty reply without ``no_send``: refused, recorded as a failure."""


def reply_of(results: Sequence[Any], task_id: str) -> Reply:
    """Turn what ``session.call("task", task)`` returned into a ``Reply``, or refuse it."""
    if len(results) != 1:
        raise AgentError(
            f"task {task_id!r}: expected one reply from the agent's task handler, "
            f"got {len(results)}"
        )
    (value,) = results
    if isinstance(value, str):
        reply = Reply(value)
    elif isinstance(value, Reply):
        reply = value
    else:
        raise AgentError(
            f"task {task_id!r}: the agent returned a {type(value).__name__}; "
            "a task handler must return a str or a tether.bridge.Reply"
        )
    if not reply.body and not reply.no_send:
        raise EmptyReply(
            f"task {task_id!r}: the agent returned an empty reply; return text, or "
            "Reply('', no_send=True) to confirm the task without a message"
        )
    return reply
