"""The lead's planner: one sweep decided as a pure function of one ``PoolView`` (the same view
gives the same plan), and the values it decides. ``PoolLead`` (``_lead``) reads the view, asks
for the plan and makes its moves. See docs/guide/design.md, "The lead".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import attrs

from ..custody._records import PoolView, WorkerInfo
from ._liveness import DEFAULT_MAX_SKEW, is_alive

AFFINITY_SLACK: Final = 1
"""How many more tasks (assigned + claimed) a room's keeper may hold than the least-loaded
free worker and still get the room's next task, when nothing of the room is in flight."""


@attrs.frozen
class Assigned:
    """One assignment a sweep planned: task ``id`` to ``worker``, and why that worker."""

    id: str
    worker: str
    why: Literal["affinity", "least_loaded"]


@attrs.frozen
class Returned:
    """An assignment the lead sent back to pending, with its evidence."""

    id: str
    worker: str
    why: Literal["dead_worker", "stuck"]
    age: float
    """Seconds since it was assigned."""


@attrs.frozen
class Deferred:
    """A stuck assignment left in place because its worker is busy with ``claims`` claims."""

    id: str
    worker: str
    age: float
    claims: int


@attrs.frozen
class SweepPlan:
    dead_workers: tuple[str, ...]
    stuck: tuple[Returned, ...]
    deferred: tuple[Deferred, ...]
    assign: tuple[Assigned, ...]
    waiting: int
    """Pending tasks (of those read) left for later: every fitting worker was full."""
    last_pick: str | None
    blocked_rooms: tuple[str, ...] = ()
    """Rooms with a task left waiting because the room's live keeper is full."""
    spare: int = 0
    """Free capacity left on the live workers after this plan."""
    first_waiting: str | None = None
    """The first pending task left waiting because every worker was full (not for its room's
    keeper): assignments it outranks go back to pending (``return_outranked``). Only a task
    every live worker may take: another's assignment cannot make room for it."""
    unserved: Mapping[str, int] = attrs.field(factory=dict)
    """Pending tasks (of those read) per queue that no live worker serves while others live
    (issue #51): they wait (counted in ``waiting`` too), and are reported."""
    full_queues: tuple[str, ...] = ()
    """Queues with a task left waiting that other live workers could not take (its own are
    full, or it has none): the lead reads past them while workers have room (issue #51)."""


def plan_sweep(
    view: PoolView,
    *,
    now: float,
    dead_after: float,
    stuck_after: float,
    stuck_cap: float,
    capacity: int | None = None,
    max_skew: float = DEFAULT_MAX_SKEW,
    last_pick: str | None = None,
) -> SweepPlan:
    """Decide one sweep from ``view`` (pure: the same view gives the same plan)."""
    live = {
        w.name: w
        for w in view.workers
        if w.role == "worker" and is_alive(w, now, dead_after, max_skew)
    }
    cap = {
        name: w.capacity if capacity is None else min(w.capacity, capacity)
        for name, w in live.items()
    }
    load = {name: view.claims.get(name, 0) for name in live}
    dead_workers, stuck, deferred = _judge_assigned(view, live, load, now, stuck_after, stuck_cap)
    rooms = dict(view.rooms)
    names = sorted(live)
    assign: list[Assigned] = []
    waiting = 0
    first_waiting: str | None = None
    blocked: set[str] = set()
    unserved: dict[str, int] = {}
    full: set[str] = set()
    in_flight = set(view.busy_rooms) | {a.room for a in view.assigned if a.room is not None}
    by_queue: dict[str, list[str]] = {}  # each queue's live workers, found once a sweep
    for task in view.pending:
        serving = by_queue.get(task.queue)
        if serving is None:  # issue #51
            serving = by_queue[task.queue] = [n for n in names if live[n].serves(task.queue)]
        if not serving:
            waiting += 1
            if names:  # workers live, none of this queue (none at all: the pool is down)
                unserved[task.queue] = unserved.get(task.queue, 0) + 1
            continue
        keeper = rooms.get(task.room) if task.room is not None else None
        free = [n for n in serving if load[n] < cap[n]]
        if keeper is not None and keeper in serving and task.room is not None:
            if task.room in in_flight:  # a run of the room is out: it stays with its keeper
                if load[keeper] < cap[keeper]:
                    assign.append(Assigned(task.id, keeper, "affinity"))
                    load[keeper] += 1
                else:
                    waiting += 1
                    blocked.add(task.room)
                continue
            if load[keeper] < cap[keeper] and load[keeper] <= AFFINITY_SLACK + min(
                load[n] for n in free
            ):
                assign.append(Assigned(task.id, keeper, "affinity"))
                load[keeper] += 1
                in_flight.add(task.room)
                continue
            # nothing of the room is in flight and its keeper is full or much busier than a
            # free worker: the room moves (affinity is a preference, not a prison)
        if not free:
            waiting += 1
            if len(serving) == len(names):  # it may take the place of any worker's assignment
                first_waiting = first_waiting or task.id
            else:
                full.add(task.queue)  # its workers are full; others may not be
            continue
        least = min(load[n] for n in free)
        tied = [n for n in free if load[n] == least]
        pick = next((n for n in tied if last_pick is not None and n > last_pick), tied[0])
        last_pick = pick
        assign.append(Assigned(task.id, pick, "least_loaded"))
        load[pick] += 1
        if task.room is not None:
            rooms[task.room] = pick
            in_flight.add(task.room)
    return SweepPlan(
        dead_workers=tuple(sorted(dead_workers)),
        stuck=tuple(stuck),
        deferred=tuple(deferred),
        assign=tuple(assign),
        waiting=waiting,
        last_pick=last_pick,
        blocked_rooms=tuple(sorted(blocked)),
        spare=sum(max(0, cap[n] - load[n]) for n in live),
        first_waiting=first_waiting,
        unserved=unserved,
        full_queues=tuple(sorted(full | unserved.keys())),
    )


def _judge_assigned(
    view: PoolView,
    live: Mapping[str, WorkerInfo],
    load: dict[str, int],
    now: float,
    stuck_after: float,
    stuck_cap: float,
) -> tuple[set[str], list[Returned], list[Deferred]]:
    """The assignments standing: those of dead workers (their workers named), the stuck ones
    to return, the stuck ones deferred (their worker is busy, not yet past ``stuck_cap``);
    every assignment kept counts in ``load``."""
    dead_workers: set[str] = set()
    stuck: list[Returned] = []
    deferred: list[Deferred] = []
    for a in view.assigned:
        # never negative: ``since`` may have been written (by a lead that held the pool while
        # this sweep waited on the store) after the ``now`` this sweep began with
        age = max(0.0, now - a.since)
        if a.worker not in live:
            dead_workers.add(a.worker)
        elif age >= stuck_after and (view.claims.get(a.worker, 0) == 0 or age >= stuck_cap):
            stuck.append(Returned(a.id, a.worker, "stuck", age))
        else:
            if age >= stuck_after:
                deferred.append(Deferred(a.id, a.worker, age, view.claims.get(a.worker, 0)))
            load[a.worker] += 1
    return dead_workers, stuck, deferred
