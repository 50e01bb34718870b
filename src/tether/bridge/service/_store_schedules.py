"""``tether store schedules``: the schedules the store keeps (each one's next due time, the
due time it last fired, paused or not), and ``add``, ``pause``, ``resume``, ``remove``
(``custody._schedules``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from ..._plumbing._when import iso_time
from ..custody._roles import ScheduleStore
from ..custody._schedules import ScheduleSpec, ScheduleView


def view_document(view: ScheduleView) -> dict[str, Any]:
    spec = view.spec
    return {
        "name": spec.name,
        "when": spec.when,
        "every": spec.every,
        "cron": spec.cron,
        "tz": spec.tz,
        "room": spec.room,
        "body": spec.body,
        "queue": spec.queue,
        "tenant": spec.tenant,
        "catch_up": spec.catch_up,
        "paused": view.paused,
        "next_due": view.next_due,
        "last_due": view.last_due,
        "last_task": view.last_task,
        "fired": view.fired,
    }


def document(views: Sequence[ScheduleView]) -> dict[str, Any]:
    """The ``--json`` document (version 1)."""
    return {"schema_version": 1, "schedules": [view_document(v) for v in views]}


def render(views: Sequence[ScheduleView]) -> str:
    if not views:
        return "no schedules (tether store schedules add NAME --room R --body TEXT --every 15m)"
    lines = [f"{'name':<20} {'when':<34} {'room':<16} {'next due':<25} {'last fired':<25} fired"]
    for v in views:
        due = "paused" if v.paused else iso_time(v.next_due)
        last = "-" if v.last_due is None else iso_time(v.last_due)
        lines.append(
            f"{v.spec.name:<20} {v.spec.when:<34.34} {v.spec.room:<16.16} {due:<25} "
            f"{last:<25} {v.fired}"
        )
    return "\n".join(lines)


async def show_schedules(store: ScheduleStore, as_json: bool) -> int:
    views = await store.schedules()
    print(json.dumps(document(views), indent=2) if as_json else render(views))
    return 0


async def add_schedule(store: ScheduleStore, spec: ScheduleSpec) -> int:
    view = await store.add_schedule(spec)
    print(render([view]))
    return 0


async def change_schedule(store: ScheduleStore, verb: str, name: str) -> int:
    """``pause``, ``resume`` or ``remove`` ``name``: 1 if the store keeps no such schedule."""
    change = {
        "pause": store.pause_schedule,
        "resume": store.resume_schedule,
        "remove": store.remove_schedule,
    }[verb]
    if not await change(name):
        print(f"tether: no schedule named {name!r} (tether store schedules)", file=sys.stderr)
        return 1
    view = await store.schedule(name)
    print(f"schedule {name} removed" if view is None else render([view]))
    return 0
