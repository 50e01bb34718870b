"""The gateway's user side on the wire: submitting a message, reading its reply."""

from __future__ import annotations

from typing import Any

import attrs

from .._plumbing._converter import structure
from .._plumbing._tracing import is_traceparent
from .._protocol._messages import GatewayTask, check_label, check_task_id, require_object
from ._progress import LiveProgress
from ._store import FINAL_STATES, PRIORITIES, StoredTask

MAX_TEXT_CHARS = 32_000


@attrs.frozen
class MessageRequest:
    """``POST /v1/messages``. ``id`` (optional) makes a retried submission idempotent;
    ``priority`` (``urgent``, ``normal``, ``low``) orders the hand-out and the pool's
    assignments; ``tenant`` (optional, a label) names whose message it is, so the bridge's
    store can serve tenants in turn."""

    room: str
    text: str
    sender: str = "user"
    id: str | None = None
    priority: str = "normal"
    trace: str | None = None
    """The sender's W3C ``traceparent``, if it traces: the gateway's submit span is its child."""
    tenant: str | None = None


@attrs.frozen
class MessageView:
    """``GET /v1/messages/<id>``: the message, where it is, and its reply once there is one.

    ``status``: queued (waiting for a worker), leased (handed out, not yet acked), acked
    (a worker side has it), answered (``reply`` is set) or closed (done, no reply). A closed
    message the worker side rejected or gave up on (its agent kept failing) carries the
    ``reason``; ``None`` otherwise (added to protocol v1: old clients ignore it).

    While it is not yet answered or closed (all additive too): ``working_since`` (when the
    worker side's current run of it began, by the gateway's clock), ``progress`` (the latest
    status line), ``partial`` (the reply as it is being written) and ``attempt`` come from the
    worker side's best-effort progress updates; ``stalled_at`` and ``stalled_s`` say a stall
    notice came (it had been in custody that many seconds). ``rev`` changes whenever anything
    here does: ``GET /v1/messages/<id>?wait=N&seen=<rev>`` answers as soon as it differs.
    """

    id: str
    room: str
    sender: str
    text: str
    status: str
    reply: str | None
    worker: str | None
    deliveries: int
    created_at: float
    answered_at: float | None
    reason: str | None = None
    priority: str = "normal"
    working_since: float | None = None
    progress: str | None = None
    partial: str | None = None
    attempt: int | None = None
    stalled_at: float | None = None
    stalled_s: float | None = None
    rev: str = ""
    messages: tuple[Interim, ...] = ()
    """The worker side's messages to the person before the reply, in order: an agent's
    questions (``POST /v1/tasks/<id>/messages``, additive to v1); the person answers one by
    sending the room's next message."""
    tenant: str | None = None
    """Whose message it is, as submitted (None: no tenant)."""
    truncated: bool = False
    """In a room's history page: its text, reply, partial reply or questions were cut
    (``_history.SHOWN_CHARS``); ``GET /v1/messages/<id>`` has them whole (issue #48)."""


@attrs.frozen
class Interim:
    """One message to the person before the reply (a question)."""

    seq: int
    body: str
    at: float


def parse_message(data: Any) -> MessageRequest:
    message = structure(require_object(data), MessageRequest)
    check_label(message.room, "room")
    check_label(message.sender, "sender")
    if message.id is not None:
        check_task_id(message.id, "id")
    if not message.text.strip():
        raise ValueError("text is empty")
    if len(message.text) > MAX_TEXT_CHARS:
        raise ValueError(f"text has {len(message.text)} characters; the limit is {MAX_TEXT_CHARS}")
    if "\x00" in message.text:
        raise ValueError("text contains a NUL character")
    if message.priority not in PRIORITIES:
        raise ValueError(f"priority must be one of urgent, normal, low; got {message.priority!r}")
    if message.tenant is not None:
        check_label(message.tenant, "tenant")
    if message.trace is not None and not is_traceparent(message.trace):
        raise ValueError(
            "trace must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>), "
            f"got {message.trace!r:.80}"
        )
    return message


def message_view(task: StoredTask, live: LiveProgress | None = None) -> MessageView:
    """The view of ``task``; ``live`` (its progress) is shown only while it is open."""
    if task.state in FINAL_STATES:
        live = None
    rev = f"{task.state}/{task.deliveries}"
    if live is not None:
        rev += f"/{live.attempt}.{live.seq}"
    if task.stalled_at is not None:
        rev += f"/stall@{task.stalled_at!r}"
    messages = tuple(Interim(int(m["seq"]), str(m["body"]), float(m["at"])) for m in task.messages)
    if messages:
        rev += f"/m{len(messages)}"
    return MessageView(
        id=task.id,
        room=task.room,
        sender=task.sender,
        text=task.body,
        status=task.state,
        reply=task.reply,
        worker=task.worker,
        deliveries=task.deliveries,
        created_at=task.created_at,
        answered_at=task.answered_at,
        reason=task.reason,
        priority=task.priority,
        working_since=None if live is None else live.working_since,
        progress=None if live is None else live.status,
        partial=None if live is None else live.partial,
        attempt=None if live is None else live.attempt,
        stalled_at=task.stalled_at,
        stalled_s=task.stall_age_s,
        rev=rev,
        messages=messages,
        tenant=task.tenant,
    )


def task_for_worker(task: StoredTask) -> GatewayTask:
    return GatewayTask(
        id=task.id,
        body=task.body,
        room=task.room,
        sender=task.sender,
        created_at=task.created_at,
        delivery=task.deliveries,
        priority=task.priority,
        trace=task.trace,
        tenant=task.tenant,
    )
