"""Child runs (issue #51): the rules a parent's spawn and join keep, alike on both stores.

A child is a task like any other: ingested (in the same transaction as the parent's record of
it), claimed, run, fenced. What makes it a child is its ``parent`` header, which only a
parent's spawn sets: its id is derived from the parent's id and the spawn's name, so a resumed
parent that spawns again names the same child, and the record (a step of the parent whose value
is the child's id) makes the second spawn return the first child without touching the store.

A child is *done* once its outcome is kept: ``result`` (its reply, which delivery confirms
without posting: the parent's reply is the one a person sees), ``delivered`` or ``dead``. A
join parks its parent in ``waiting`` until every child it names is done; the store wakes the
parent in the transaction that makes the last one done (and its reconciler wakes a joiner that
one missed). A parent that ends (its result, or dead) before its children cancels the live
ones: nobody would read their results.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from ..._protocol._bounds import InvalidTask
from ._records import StepRecord
from ._rules import DEFAULT_QUEUE, QUEUE_HEADER, CustodyState, Task, check_queue
from ._rules import PARENT_HEADER as PARENT_HEADER

DEPTH_HEADER: Final = "depth"
"""A child's depth below its top-level ancestor ("1" for a top-level parent's children)."""
MAX_DEPTH: Final = 8
"""How deep children may nest: a child of depth 8 cannot spawn."""
MAX_CHILDREN: Final = 1000
"""How many children one parent may spawn in all."""
CHILD_ID_PREFIX: Final = "c-"
SPAWN_PREFIX: Final = "~spawn:"
"""A spawn's record is the parent's step ``~spawn:<name>``: its value is the child's id."""
JOIN_PREFIX: Final = "~join:"
"""A join's record is the parent's step ``~join:<n>``: its value is the join's deadline."""
JOINING: Final = "joining "
"""How a parent parked by a join begins its recorded reason (the reconciler's safety net finds
joiners by it)."""

CHILD_DONE: Final = frozenset({CustodyState.RESULT, CustodyState.DELIVERED, CustodyState.DEAD})


def child_done(state: CustodyState) -> bool:
    """Is a child in this state done, as its parent's join sees it (its outcome kept)?"""
    return state in CHILD_DONE


class SpawnError(ValueError):
    """A spawn the rules refuse: too deep, too many children, a bad name or queue."""


class ChildFailed(Exception):
    """A joined child ended dead: its id, its spawn name and its reason. A parent that lets it
    propagate fails as any handler's exception fails it; one that catches it goes on."""

    def __init__(self, child: str, name: str, reason: str) -> None:
        super().__init__(f"child {name!r} ({child}) failed: {reason}")
        self.child = child
        self.name = name
        self.reason = reason


def child_id(parent: str, name: str) -> str:
    """The id of ``parent``'s child spawned as ``name``: the same in every run of the parent,
    different per parent and name, and of one length at any depth."""
    digest = hashlib.sha256(f"{parent}\0{name}".encode()).hexdigest()
    return f"{CHILD_ID_PREFIX}{digest[:40]}"


def depth_of(task: Task) -> int:
    """How deep ``task`` is below its top-level ancestor (0: not a child)."""
    return int(task.headers.get(DEPTH_HEADER, "0"))


INHERITED: Final = ("tenant", "traceparent")
"""The parent's headers a child carries too: its tenant (fair shares, limits) and its trace
(one trace for the whole tree)."""


def child_task(parent: Task, name: str, body: str, *, queue: str | None, room: str | None) -> Task:
    """The task ``parent`` spawns as ``name``: its id derived, its tenant, priority and trace
    inherited, its queue the one named (else the parent's). ``SpawnError`` past the depth."""
    depth = depth_of(parent) + 1
    if depth > MAX_DEPTH:
        raise SpawnError(
            f"task {parent.id!r} is at depth {depth - 1}: children nest at most {MAX_DEPTH} deep"
        )
    headers: dict[str, str] = {k: parent.headers[k] for k in INHERITED if k in parent.headers}
    headers[PARENT_HEADER] = parent.id
    headers[DEPTH_HEADER] = str(depth)
    try:
        queue = check_queue(parent.queue if queue is None else queue)
    except InvalidTask as exc:
        raise SpawnError(f"child {name!r} of task {parent.id!r}: {exc}") from None
    if queue != DEFAULT_QUEUE:
        headers[QUEUE_HEADER] = queue
    try:
        return Task(
            id=child_id(parent.id, name),
            body=body,
            room=room,
            priority=parent.priority,
            headers=headers,
        )
    except InvalidTask as exc:
        raise SpawnError(f"child {name!r} of task {parent.id!r}: {exc}") from None


def spawned(steps: Iterable[StepRecord]) -> list[tuple[str, str]]:
    """The children a task's recorded steps spawned, in spawn order: (spawn name, child id)."""
    return [
        (s.name.removeprefix(SPAWN_PREFIX), str(json.loads(s.value)))
        for s in steps
        if s.name.startswith(SPAWN_PREFIX)
    ]


def check_not_child(headers: Mapping[str, str], what: str) -> None:
    """Refuse a task from outside that claims to be a child (only a spawn makes one)."""
    if PARENT_HEADER in headers or DEPTH_HEADER in headers:
        raise InvalidTask(
            f"{what} carries a {PARENT_HEADER!r} or {DEPTH_HEADER!r} header: only a parent's "
            "run.spawn makes a child task"
        )


@attrs.frozen
class ChildView:
    """A child as its parent's join reads it."""

    id: str
    state: CustodyState
    result: str | None
    reason: str | None


def orphan_reason(parent: str, ended: str | None) -> str:
    """Why a live child is cancelled: its parent ended (``ended``: its state) or is gone."""
    if ended is None:
        return f"cancelled: its parent {parent} is no longer in the store"
    return f"cancelled: its parent {parent} ended ({ended}) before joining it"
