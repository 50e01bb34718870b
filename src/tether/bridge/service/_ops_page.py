"""What the operator page shows and does, as JSON documents: the store's picture (what ``tether
store status`` reads, plus the oldest task of each state, waiting tasks and the pool's beats), one
task's timeline (what ``tether store show`` reads) and the operator's two moves (the store's own
``redrive`` and ``cancel``, as ``tether store retry`` and ``cancel`` make them).

Sections of later issues fill themselves: whatever ``StoreStatus`` and ``TaskShow`` grow (the
quarantine deaths of issue 37, the steps and turns of issues 35 and 36) reaches the page in
their documents, and the page draws them when they are there. The limits and the tenants'
shares are the documents ``tether store limits --json`` and ``tether store tenants --json`` print.
"""

from __future__ import annotations

from typing import Final

import attrs

from ..._plumbing._converter import unstructure
from ..custody._records import OperatorOutcome
from ..custody._roles import Store
from ..custody._rules import IN_CUSTODY, CustodyState, TaskRecord
from . import _store_limits, _store_schedules, _store_tenants
from ._store_show import TaskShow, task_tree
from ._store_status import StatusEntry, StoreStatus, store_status

LISTED: Final = 50
"""Tasks per list on the page (dead letters, suspects, waiting, oldest in flight)."""

PAGE_REASON: Final = "from the operator page"
"""What an operator's move from the page records after "operator: re-driven" / "cancelled"."""


@attrs.frozen
class Member:
    """A pool member's last beat, as ages on the store's clock."""

    name: str
    role: str
    capacity: int
    beat_age_s: float
    up_s: float


@attrs.frozen
class WaitingEntry:
    """A parked task and what it waits for: its reason, and when it is due (if it is)."""

    id: str
    room: str | None
    age_s: float
    waits_for: str | None
    due_in_s: float | None


@attrs.frozen
class OpsView:
    """``GET /ops/api/store``: the store's status, the oldest task per in-custody state,
    the waiting tasks and the pool members' beats."""

    status: StoreStatus
    oldest: dict[str, StatusEntry]
    waiting: tuple[WaitingEntry, ...]
    members: tuple[Member, ...]
    schema_version: int = 1


def _age(now: float, since: float) -> float:
    return round(max(0.0, now - since), 3)


def _entry(record: TaskRecord, now: float) -> StatusEntry:
    return StatusEntry(
        id=record.task.id,
        state=record.state,
        age_s=_age(now, record.created_at),
        attempt=record.attempt,
        owner=record.owner,
        reason=record.reason,
        crash_count=record.crash_count,
        crashes_alone=record.crashes_alone,
    )


async def ops_view(store: Store) -> dict[str, object]:
    status = await store_status(store, limit=LISTED)
    now = store.clock()
    oldest = {}
    for state in CustodyState:  # in the states' order
        if state in IN_CUSTODY and status.counts.get(state.value, 0):
            first = await store.records(state, limit=1)
            if first:
                oldest[state.value] = _entry(first[0], now)
    waiting: tuple[WaitingEntry, ...] = ()
    if status.counts.get(CustodyState.WAITING.value, 0):
        waiting = tuple(
            WaitingEntry(
                id=r.task.id,
                room=r.task.room,
                age_s=_age(now, r.updated_at),
                waits_for=r.reason,
                due_in_s=None if r.not_before is None else round(r.not_before - now, 3),
            )
            for r in await store.records(CustodyState.WAITING, limit=LISTED)
        )
    members = tuple(
        Member(w.name, w.role, w.capacity, _age(now, w.last_beat), _age(now, w.started_at))
        for w in await store.workers()
    )
    view: dict[str, object] = unstructure(OpsView(status, oldest, waiting, members))
    # what `tether store limits --json` and `tether store tenants --json` print (issue 47.9)
    view["limits"] = _store_limits.document(await store.limit_views(), now)["limits"]
    view["tenants"] = _store_tenants.document(await store.tenant_views())["tenants"]
    # what `tether store schedules --json` prints (issue 52), and the kept events, with each
    # time as seconds from now, as the page shows every time
    view["schedules"] = [
        {**doc, "due_in_s": round(doc["next_due"] - now, 3), "last_s": _ago(now, doc["last_due"])}
        for doc in _store_schedules.document(await store.schedules())["schedules"]
    ]
    # (the runs waiting on a key are under "waiting" already: their reason names it)
    # issue 53: the tasks in custody per version their runs began under (drained: gone here)
    view["versions"] = [
        {"version": flight.version, "tasks": flight.tasks}
        for flight in await store.versions_in_flight()
    ]
    view["events"] = [
        {"id": e.id, "key": e.key, "age_s": _age(now, e.at), "kept_s": e.until - now}
        for e in await store.events(limit=LISTED)
    ]
    return view


def _ago(now: float, at: float | None) -> float | None:
    return None if at is None else round(now - at, 3)


async def task_timeline(store: Store, id: str) -> dict[str, object] | None:
    """``tether store show``'s document for ``id``, steps and asks included (None: no such
    task)."""
    record = await store.get(id)
    if record is None:
        return None
    journal, steps, asks = await store.journal(id), await store.steps(id), await store.asks(id)
    tree = await task_tree(store, record)
    show = TaskShow(
        record, tuple(journal), store.clock(), steps=tuple(steps), asks=tuple(asks), tree=tree
    )
    return show.to_document()


@attrs.frozen
class Move:
    """What an operator's move from the page asks: its reason, and the step (and room) of a
    rewind or a fork."""

    reason: str | None = None
    step: str | None = None
    room: str | None = None


async def operator_move(store: Store, move: str, id: str, asked: Move) -> OperatorOutcome:
    """``retry`` (dead -> pending), ``cancel`` (in custody -> dead), ``rewind`` (a dead run
    re-driven from ``asked.step``) or ``fork`` (a new task from ``asked.step``) of one task,
    journalled as the operator's, with ``asked.reason`` (or ``PAGE_REASON``) recorded."""
    why = asked.reason or PAGE_REASON
    if move == "retry":
        (outcome,) = await store.redrive([id], reason=why)
    elif move == "cancel":
        (outcome,) = await store.cancel([id], why)
    elif move == "rewind":
        assert asked.step is not None
        outcome = await store.rewind(id, asked.step, reason=why)
    else:
        assert asked.step is not None
        outcome = await store.fork(id, asked.step, room=asked.room, reason=why)
    return outcome
