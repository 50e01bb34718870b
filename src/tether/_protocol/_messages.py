"""Gateway protocol v1 on the wire: the records both ends exchange, structured strictly (a wrong
type or an unknown key names the field); ids are checked after structuring."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import attrs

from .._plumbing._converter import structure, unstructure
from . import _bounds as _custody
from ._bounds import MAX_BATCH as MAX_BATCH
from ._bounds import MAX_REASON_CHARS as MAX_REASON_CHARS
from ._bounds import (
    MAX_ROOM_CHARS,
    MAX_VERSION_CHARS,
    InvalidTaskId,
    InvalidWorkerName,
    check_free_text,
)
from ._bounds import check_label as check_label

PROTOCOL_VERSION = 1

CLIENT_HEADER = "X-Tether-Client"
"""The request header naming the lease holder (``GatewayClient.lease_holder``: the client name
and a random suffix per client object): the gateway records it as the holder of the leases a
poll hands out, so that client can release them (additive to v1)."""

T = TypeVar("T")


def is_task_id(value: str) -> bool:
    """True when ``value`` is a valid gateway task id (the custody id rule)."""
    try:
        _custody.check_task_id(value)
    except InvalidTaskId:
        return False
    return True


def check_task_id(value: str, what: str = "task id") -> str:
    """The custody id rule, with ``what`` naming the field in the error."""
    try:
        return _custody.check_task_id(value)
    except InvalidTaskId as exc:
        raise InvalidTaskId(f"{what} is not a valid task id: {exc}") from None


def check_worker_name(value: str, what: str = "worker name") -> str:
    """The custody worker-name rule, with ``what`` naming the field in the error."""
    try:
        return _custody.check_worker(value)
    except InvalidWorkerName as exc:
        raise InvalidWorkerName(f"{what}: {exc}") from None


@attrs.frozen
class GatewayTask:
    """One task handed out by ``GET /v1/tasks``.

    ``delivery`` counts hand-outs of this task (1 the first time; more means an earlier
    hand-out was not acked within its lease and the task was redelivered). ``priority``
    (``urgent``, ``normal`` or ``low``; optional, added to v1: an older gateway leaves it out)
    orders the pool lead's assignments; any other value has the task rejected. ``trace``
    (optional, added to v1) is the message's W3C ``traceparent``: the bridge continues that
    trace in every span of the task (one that is not a valid traceparent is ignored).
    ``tenant`` (optional, added to v1: an older gateway leaves it out) names whose task it is,
    a label like a room (``check_label``): the bridge stores it as the custody task's
    ``tenant`` header, and the store serves tenants in turn; one that is not a valid label
    has the task rejected.
    """

    id: str
    body: str
    room: str
    sender: str = "user"
    created_at: float = 0.0
    delivery: int = 1
    priority: str = "normal"
    trace: str | None = None
    tenant: str | None = None


@attrs.frozen
class AckRequest:
    id: str
    durable: bool


@attrs.frozen
class ResultMetadata:
    worker: str | None = None
    attempt: int | None = None
    room: str | None = None
    """Sent only with the reply of a task the bridge made itself (a schedule's firing, issue
    #52), whose id the gateway never sent: the room the reply goes to. A gateway that knows
    the id ignores it; one without this extension refuses the unknown id (a 404), and the
    bridge dead-letters the reply, saying so."""


@attrs.frozen
class ResultRequest:
    id: str
    body: str = ""
    no_send: bool = False
    metadata: ResultMetadata = ResultMetadata()


@attrs.frozen
class ResultReceipt:
    """The gateway's answer to a result: ``duplicate`` when it already had one for the id."""

    id: str
    duplicate: bool


@attrs.frozen
class AckBatchRequest:
    """``POST /v1/acks``: ack many tasks in one request (and one commit at the gateway)."""

    ids: list[str]
    durable: bool


@attrs.frozen
class ResultBatchRequest:
    """``POST /v1/results/batch``: many results in one request (and one commit)."""

    results: list[ResultRequest]


@attrs.frozen
class BatchItem:
    """One entry of a batch answer: ``status`` 200 (done; ``duplicate`` for results) or the
    HTTP status the single request would have had (404 unknown id, 409 conflict), ``error``
    saying why."""

    id: str
    status: int
    duplicate: bool = False
    error: str | None = None


@attrs.frozen
class RejectRequest:
    """``POST /v1/tasks/<id>/reject``: the bridge cannot take this task, and why."""

    id: str
    reason: str


@attrs.frozen
class RejectEntry:
    """One entry of ``POST /v1/rejects``: a task id as the gateway sent it, and why it is
    refused. The id may break the id rule (that is often the reason): it travels in the body,
    never in a URL path."""

    id: str
    reason: str


@attrs.frozen
class RejectBatchRequest:
    """``POST /v1/rejects``: refuse polled tasks this bridge cannot take, by their ids as sent
    (additive to v1: a gateway without the route answers 404 and the bridge skips such tasks,
    logging each once)."""

    rejects: list[RejectEntry]


MAX_FOREIGN_ID_CHARS = 1024
"""The longest id a ``POST /v1/rejects`` entry may carry: an id that breaks the id rule is
named as the gateway sent it, up to this bound (a longer one cannot be rejected, only skipped)."""


@attrs.frozen
class NoticeRequest:
    """``POST /v1/notices``: something about a task the people behind the gateway should see.

    ``kind`` is ``"stall"`` (a task in custody for ``age_s`` seconds without a reply).
    """

    id: str
    kind: str
    age_s: float
    detail: str = ""


NOTICE_KINDS = frozenset({"stall"})


@attrs.frozen
class HeartbeatRequest:
    client: str
    protocol_version: int
    inflight: int
    version: str | None = None
    uptime_s: float | None = None


@attrs.frozen
class LeaseReleaseRequest:
    """``POST /v1/leases/release``: give back every task leased to ``client`` and not acked."""

    client: str


@attrs.frozen
class LeaseReleaseReceipt:
    """How many tasks the release queued again (0 for a client holding none)."""

    client: str
    released: int


@attrs.frozen
class RoomForgetRequest:
    """``POST /v1/rooms/<room>/forget`` (optional, fourth wave): drop the gateway's copy of a
    room. The body names the room again (as an ack names its id), so a path the server
    decodes otherwise than the client encoded it is refused, never misread."""

    room: str


@attrs.frozen
class RoomForgetReceipt:
    """How many of the room's messages the gateway erased (0 for a room it holds nothing of:
    forgetting twice is harmless)."""

    room: str
    forgotten: int


def check_room_name(room: str, what: str = "room") -> str:
    """A room as the bridge keeps it: 1 to ``MAX_ROOM_CHARS`` characters, no NUL (a gateway's
    own rooms may follow a narrower rule, as the reference gateway's labels do)."""
    if not room or len(room) > MAX_ROOM_CHARS or "\0" in room:
        raise ValueError(
            f"{what} must be a room name of 1 to {MAX_ROOM_CHARS} characters, got {room!r:.80}"
        )
    return room


def parse_room_forget(data: Any, path_room: str) -> RoomForgetRequest:
    forget = structure(require_object(data), RoomForgetRequest)
    check_room_name(forget.room)
    if forget.room != path_room:
        raise ValueError(
            f"body room {forget.room!r:.80} does not match the room in the path {path_room!r:.80}"
        )
    return forget


def parse_lease_release(data: Any) -> LeaseReleaseRequest:
    release = structure(require_object(data), LeaseReleaseRequest)
    check_label(release.client, "client")
    return release


def parse_ack(data: Any, path_id: str) -> AckRequest:
    ack = structure(require_object(data), AckRequest)
    check_task_id(ack.id, "id")
    if ack.id != path_id:
        raise ValueError(f"ack body id {ack.id!r} does not match the id in the path {path_id!r}")
    if not ack.durable:
        raise ValueError("durable must be true: ack a task only after it is committed")
    return ack


def result_document(result: ResultRequest) -> dict[str, Any]:
    """``result`` as sent: ``metadata.room`` only when it is set, so every other result reads
    as before to a gateway that does not know the field."""
    doc: dict[str, Any] = unstructure(result)
    if result.metadata.room is None:
        doc["metadata"].pop("room", None)
    return doc


def parse_result(data: Any) -> ResultRequest:
    result = structure(require_object(data), ResultRequest)
    check_task_id(result.id, "id")
    if result.metadata.worker is not None:
        check_worker_name(result.metadata.worker, "metadata.worker")
    if result.metadata.attempt is not None and result.metadata.attempt < 0:
        raise ValueError(f"metadata.attempt must be >= 0, got {result.metadata.attempt}")
    if result.metadata.room is not None:
        check_room_name(result.metadata.room, "metadata.room")
    if not result.no_send and not result.body:
        raise ValueError("body is empty: send no_send=true to close a task without a message")
    return result


def parse_ack_batch(data: Any) -> AckBatchRequest:
    batch = structure(require_object(data), AckBatchRequest)
    _check_batch_size(len(batch.ids), "ids")
    for i, task_id in enumerate(batch.ids):
        check_task_id(task_id, f"ids[{i}]")
    if len(set(batch.ids)) != len(batch.ids):
        raise ValueError("ids must not repeat an id")
    if not batch.durable:
        raise ValueError("durable must be true: ack tasks only after they are committed")
    return batch


def parse_result_batch(data: Any) -> ResultBatchRequest:
    obj = require_object(data)
    raw = obj.get("results")
    if not isinstance(raw, list):
        raise ValueError("results must be an array of results")  # noqa: TRY004
    _check_batch_size(len(raw), "results")
    extra = sorted(set(obj) - {"results"})
    if extra:
        raise ValueError(f"unknown field {extra[0]!r}")
    results = []
    for i, item in enumerate(raw):
        try:
            results.append(parse_result(item))
        except ValueError as exc:
            raise ValueError(f"results[{i}]: {exc}") from None
    if len({r.id for r in results}) != len(results):
        raise ValueError("results must not repeat an id")
    return ResultBatchRequest(results)


def _check_batch_size(size: int, what: str) -> None:
    if not 1 <= size <= MAX_BATCH:
        raise ValueError(f"{what} must hold 1 to {MAX_BATCH} entries, got {size}")


def parse_reject(data: Any, path_id: str) -> RejectRequest:
    reject = structure(require_object(data), RejectRequest)
    check_task_id(reject.id, "id")
    if reject.id != path_id:
        raise ValueError(
            f"reject body id {reject.id!r} does not match the id in the path {path_id!r}"
        )
    _check_reason(reject.reason, "reason")
    return reject


def parse_reject_batch(data: Any) -> RejectBatchRequest:
    """A ``POST /v1/rejects`` body: 1 to ``MAX_BATCH`` entries, each an id of 1 to
    ``MAX_FOREIGN_ID_CHARS`` characters without NUL (any other text: it is the id as sent)
    and a reason like a single reject's; no id twice."""
    batch = structure(require_object(data), RejectBatchRequest)
    _check_batch_size(len(batch.rejects), "rejects")
    for i, entry in enumerate(batch.rejects):
        if not entry.id:
            raise ValueError(f"rejects[{i}].id must not be empty")
        check_free_text(entry.id, f"rejects[{i}].id", MAX_FOREIGN_ID_CHARS)
        _check_reason(entry.reason, f"rejects[{i}].reason")
    if len({entry.id for entry in batch.rejects}) != len(batch.rejects):
        raise ValueError("rejects must not repeat an id")
    return batch


def _check_reason(reason: str, what: str) -> None:
    if not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise ValueError(f"{what} must be 1-{MAX_REASON_CHARS} characters, not blank")
    check_free_text(reason, what, MAX_REASON_CHARS)


def parse_notice(data: Any) -> NoticeRequest:
    notice = structure(require_object(data), NoticeRequest)
    check_task_id(notice.id, "id")
    if notice.kind not in NOTICE_KINDS:
        raise ValueError(
            f"kind must be one of {', '.join(sorted(NOTICE_KINDS))}; got {notice.kind!r}"
        )
    if not notice.age_s >= 0:
        raise ValueError(f"age_s must be >= 0, got {notice.age_s}")
    check_free_text(notice.detail, "detail", MAX_REASON_CHARS)
    return notice


def parse_heartbeat(data: Any) -> HeartbeatRequest:
    beat = structure(require_object(data), HeartbeatRequest)
    check_label(beat.client, "client")
    if beat.protocol_version != PROTOCOL_VERSION:
        raise ValueError(
            f"unsupported protocol_version {beat.protocol_version}; "
            f"this gateway speaks {PROTOCOL_VERSION}"
        )
    if beat.inflight < 0:
        raise ValueError(f"inflight must be >= 0, got {beat.inflight}")
    if beat.version is not None:
        check_free_text(beat.version, "version", MAX_VERSION_CHARS, one_line=True)
    if beat.uptime_s is not None and not 0 <= beat.uptime_s < float("inf"):
        raise ValueError(f"uptime_s must be a number of seconds >= 0, got {beat.uptime_s}")
    return beat


def parse_batch_item(data: Any) -> BatchItem:
    """``parse_lenient(data, BatchItem)``, with a fast path for the well-formed item a batch
    answer holds by the hundred (the slow path names whatever is wrong)."""
    if type(data) is dict:
        id, status = data.get("id"), data.get("status")
        duplicate, error = data.get("duplicate", False), data.get("error")
        if (
            type(id) is str
            and type(status) is int
            and type(duplicate) is bool
            and (error is None or type(error) is str)
        ):
            return BatchItem(id, status, duplicate, error)
    return parse_lenient(data, BatchItem)


def parse_lenient(data: Any, cls: type[T]) -> T:
    """Structure a response from the other end, ignoring keys this version does not know.

    Requests are parsed strictly (the sender must be exact); responses tolerate new fields
    so a newer gateway can add information without breaking older clients.
    """
    known = _field_names(cls)  # type: ignore[arg-type]
    obj = require_object(data)
    return structure({k: v for k, v in obj.items() if k in known}, cls)


@functools.cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(field.name for field in attrs.fields(cls))


def require_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        # ValueError, not TypeError: to the caller this is bad input like any other
        raise ValueError(f"expected a JSON object, got {_json_kind(data)}")  # noqa: TRY004
    return data


def _json_kind(data: Any) -> str:
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, (int, float)):
        return "a number"
    if isinstance(data, str):
        return "a string"
    if isinstance(data, list):
        return "an array"
    return type(data).__name__
