"""``tether store list``, ``retry`` and ``cancel``: an operator's verbs on a live store.

A running bridge picks a change up by itself; each id is its own compare-and-set, so a refusal (exit
1) leaves the others moved. Exit codes: docs/guide/bridge.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Final

from ..._plumbing._converter import unstructure
from ..custody._children import spawned
from ..custody._records import OperatorOutcome
from ..custody._roles import Store
from ..custody._rules import CustodyState, TaskRecord
from ..custody._versions import InFlight

REDRIVE_BATCH: Final = 500
"""Dead tasks re-driven per transaction by ``retry --dead`` (a progress line after each)."""


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def render_list(records: Sequence[TaskRecord], state: CustodyState, now: float) -> str:
    """One line per task: id, attempt, owner, age in the store, reason."""
    if not records:
        return f"no {state.value} tasks"
    lines = [f"{len(records)} {state.value} task(s), oldest first:"]
    for r in records:
        owner = f"  owner {r.owner}" if r.owner else ""
        due = f"  next try in {r.not_before - now:.1f}s" if r.not_before is not None else ""
        why = f"  {r.reason}" if r.reason else ""
        lines.append(
            f"  {r.task.id}  attempt {r.attempt}  age {_age(now - r.created_at)}{owner}{due}{why}"
        )
    return "\n".join(lines)


async def list_tasks(store: Store, state: CustodyState, limit: int, as_json: bool) -> int:
    records = await store.records(state, limit=limit)
    now = store.clock()
    if as_json:
        doc = {"schema_version": 1, "state": state.value, "now": now, "tasks": records}
        print(json.dumps(unstructure(doc), indent=2))
    else:
        print(render_list(records, state, now))
    return 0


async def list_version(store: Store, version: str, limit: int, as_json: bool) -> int:
    """The tasks whose runs began under ``version`` and are not over (``none``: unversioned
    or nothing recorded), and every version in flight (issue #53)."""
    wanted = None if version == "none" else version
    records = await store.records_of_version(wanted, limit=limit)
    flights = await store.versions_in_flight()
    now = store.clock()
    if as_json:
        doc = {
            "schema_version": 1,
            "version": wanted,
            "now": now,
            "tasks": records,
            "in_flight": {flight.version or "none": flight.tasks for flight in flights},
        }
        print(json.dumps(unstructure(doc), indent=2))
        return 0
    print(render_versions(flights))
    if not records:
        print(f"no run in flight began under version {version}")
        return 0
    print(f"{len(records)} run(s) in flight began under version {version}, oldest first:")
    for r in records:
        print(f"  {r.task.id}  {r.state.value}  age {_age(now - r.created_at)}")
    return 0


def render_versions(flights: Sequence[InFlight]) -> str:
    """One line: the runs in flight per version they began under."""
    if not flights:
        return "versions in flight: none (no run in flight)"
    parts = [f"{flight.version or 'none'}: {flight.tasks}" for flight in flights]
    return "versions in flight (tasks in flight by the version their runs began under): " + (
        ", ".join(parts)
    )


async def list_children(store: Store, parent: str, limit: int, as_json: bool) -> int:
    """The children ``parent`` spawned (issue #51), in spawn order: exit 1 if no such task."""
    record = await store.get(parent)
    if record is None:
        print(f"tether: no task {parent!r} in the store", file=sys.stderr)
        return 1
    spawns = spawned(await store.steps(parent))[:limit]
    views = await store.children(parent, [child for _, child in spawns])
    rows = [
        {"id": id, "name": name, "state": None if v is None else v.state.value}
        for (name, id), v in zip(spawns, views, strict=True)
    ]
    if as_json:
        doc = {"schema_version": 1, "parent": parent, "children": rows}
        print(json.dumps(doc, indent=2))
        return 0
    print(f"task {parent}: {record.state.value}, {len(rows)} child run(s)")
    for row in rows:
        print(f"  {row['id']}  {row['name']}: {row['state'] or 'no longer in the store'}")
    return 0


def _report(outcomes: Sequence[OperatorOutcome], *, quiet_done: bool = False) -> int:
    """Print each outcome (done on stdout unless ``quiet_done``, refused on stderr); the
    number refused."""
    refused = 0
    for o in outcomes:
        if o.done:
            if not quiet_done:
                print(o.detail)
        else:
            refused += 1
            print(f"tether: {o.detail}", file=sys.stderr)
    return refused


def _summary(verb: str, done: int, refused: int) -> int:
    tail = f"; {refused} refused (see above), nothing changed for them" if refused else ""
    print(f"{verb} {done} task(s){tail}")
    return 1 if refused else 0


async def retry(
    store: Store, ids: Sequence[str], reason: str | None, *, fresh: bool = False
) -> int:
    outcomes = await store.redrive(ids, reason=reason, fresh=fresh)
    refused = _report(outcomes)
    return _summary("re-drove", len(outcomes) - refused, refused)


async def retry_dead(
    store: Store,
    reason_contains: str | None,
    reason: str | None,
    *,
    include_cancelled: bool = False,
    fresh: bool = False,
) -> int:
    """Re-drive every dead task matching, in batches, with a progress line per batch. Stops
    after as many as were dead when it began: a task that dies again meanwhile (a live bridge
    runs what was re-driven) is not re-driven again in the same call. Operator-cancelled
    tasks stay dead unless ``include_cancelled``."""
    budget = (await store.counts())[CustodyState.DEAD]
    done = refused = 0
    while budget > 0:
        outcomes = await store.redrive_dead(
            reason_contains=reason_contains,
            reason=reason,
            limit=min(REDRIVE_BATCH, budget),
            include_cancelled=include_cancelled,
            fresh=fresh,
        )
        if not outcomes:
            break
        budget -= len(outcomes)
        batch_refused = _report(outcomes, quiet_done=True)
        refused += batch_refused
        done += len(outcomes) - batch_refused
        print(f"re-driven so far: {done}", file=sys.stderr, flush=True)
    if done == 0 and refused == 0:
        match = "" if reason_contains is None else f" whose reason contains {reason_contains!r}"
        print(f"no dead tasks{match}")
        return 0
    return _summary("re-drove", done, refused)


async def rewind(store: Store, id: str, step: str, reason: str | None) -> int:
    """``retry ID --from-step NAME`` (issue #53): exit 1 if refused."""
    outcome = await store.rewind(id, step, reason=reason)
    refused = _report([outcome])
    return _summary("rewound and re-drove", 1 - refused, refused)


async def fork(store: Store, id: str, step: str, room: str | None, reason: str | None) -> int:
    """``fork ID --from-step NAME`` (issue #53): exit 1 if refused."""
    outcome = await store.fork(id, step, room=room, reason=reason)
    return _report([outcome])


async def cancel(store: Store, ids: Sequence[str], reason: str) -> int:
    outcomes = await store.cancel(ids, reason)
    refused = _report(outcomes)
    return _summary("cancelled", len(outcomes) - refused, refused)
