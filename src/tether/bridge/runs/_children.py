"""Child runs (issue #51): ``child = await run.spawn(name, body)``, ``await run.join(child)``.

A spawn is a step of the parent: the child task is ingested in the transaction that records
it, under the parent's fence, with an id derived from the parent's and the name; a resumed
parent gets the recorded child back and spawns nothing. A join reads its children: all done,
it records what they gave (a step, so every later run of the parent gets the same, even once
the children are pruned) and returns it; else the run parks (``Parked``) until the last of
them is done, no worker slot held and no attempt spent, and the handler runs again from the
top (replay, as for ``run.sleep``). See docs/guide/children.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..._plumbing._when import iso_time
from ..custody._children import (
    JOIN_PREFIX,
    SPAWN_PREFIX,
    ChildFailed,
    SpawnError,
    child_done,
    child_task,
)
from ..custody._rules import CustodyState
from ..custody._steps import check_step_name
from ._journal import Journal


class JoinTimeout(Exception):
    """The join's children were not all done before its timeout (a later run of the parent
    that reaches the join after its deadline raises it again, unless they are done by then)."""


@attrs.frozen
class Child:
    """A child a run spawned: its task id and its spawn name (``run.join`` takes these)."""

    id: str
    name: str


def check_join_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"run.join needs a finite timeout > 0 seconds, got {value!r}")
    return float(value)


@attrs.define(eq=False)
class Joining:
    """A run's joins: how many it made (a join's record is named by its position)."""

    made: int = 0

    async def spawn(
        self,
        journal: Journal,
        name: str,
        body: str,
        queue: str | None,
        room: str | None,
    ) -> Child:
        name = check_step_name(name)
        if not isinstance(body, str):
            raise SpawnError(f"child {name!r}: its body must be a str, got {type(body).__name__}")
        child = child_task(journal.task, name, body, queue=queue, room=room)
        id = await journal.spawn(f"{SPAWN_PREFIX}{name}", child)
        return Child(id, name)

    async def join(
        self,
        journal: Journal,
        children: Sequence[Child],
        timeout: float,  # noqa: ASYNC109 - a durable deadline, not a cancel scope
    ) -> list[str]:
        seconds = check_join_timeout(timeout)
        for child in children:
            if not isinstance(child, Child):
                raise TypeError(f"run.join takes the children run.spawn returned, got {child!r}")
        self.made += 1
        name = f"{JOIN_PREFIX}{self.made}"
        deadline = float(
            (await journal.step(f"{name}:until", lambda: journal.now() + seconds, (), {}))[0]
        )
        if not children:
            return []
        with journal.waiting("join", {"tether.children": len(children)}) as traced:
            traced.until(deadline)
            joined, _ = await journal.step(name, _read, (journal, children, deadline), {})
            return _outcome(joined, children)


async def _read(journal: Journal, children: Sequence[Child], deadline: float) -> dict[str, Any]:
    """What the children gave once all are done (the join's step records it); else the run
    parks; past the deadline, the timeout (recorded too: ``JoinTimeout`` in every run)."""
    views = await journal.children([child.id for child in children])
    results: list[str] = []
    for child, view in zip(children, views, strict=True):
        if view is None:
            return {"failed": [child.id, child.name, "no such child in the store"]}
        if view.state is CustodyState.DEAD:
            return {"failed": [child.id, child.name, view.reason or "dead"]}
        if not child_done(view.state):
            break
        results.append(view.result or "")
    else:
        return {"results": results}
    live = [c for c, v in zip(children, views, strict=True) if v and not child_done(v.state)]
    names = ", ".join(c.name for c in live[:5]) + (", ..." if len(live) > 5 else "")
    if journal.now() >= deadline:  # recorded, so a child done later changes no replay
        return {
            "timeout": f"task {journal.task.id!r}: {len(live)} of {len(children)} children "
            f"not done by the join's deadline ({names})"
        }
    why = f"{len(live)} of {len(children)} children ({names}) until {iso_time(deadline)}"
    raise journal.park(deadline, why, join=[c.id for c in live])


def _outcome(joined: Mapping[str, Any], children: Sequence[Child]) -> list[str]:
    if "timeout" in joined:
        raise JoinTimeout(str(joined["timeout"]))
    failed = joined.get("failed")
    if failed is not None:
        id, name, reason = failed
        raise ChildFailed(str(id), str(name), str(reason))
    results = joined["results"]
    assert len(results) == len(children)
    return [str(r) for r in results]
