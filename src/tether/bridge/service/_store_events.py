"""``tether store send-event`` and ``tether store events``: send an event to the runs that
wait for its key, and see the kept events and the runs waiting on a key (``custody._events``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from ..._plumbing._when import iso_time
from ..custody._events import Event, EventConflict, EventWaiter
from ..custody._roles import EventStore


async def send_event(store: EventStore, id: str, key: str, body: Any, ttl_s: float) -> int:
    try:
        sent = await store.send_event(id, key, body, ttl_s=ttl_s)
    except EventConflict as exc:
        print(f"tether: {exc}: nothing changed", file=sys.stderr)
        return 1
    if not sent.new:
        print(f"event {id} was kept already (a replay): nothing changed")
        return 0
    woke = ", ".join(sent.woken[:10]) + (", ..." if len(sent.woken) > 10 else "")
    print(
        f"event {id} (key {key}) kept until {iso_time(sent.event.until)}; "
        + (f"woke {len(sent.woken)} run(s): {woke}" if sent.woken else "no run waits on it yet")
    )
    return 0


def document(events: Sequence[Event], waiters: Sequence[EventWaiter]) -> dict[str, Any]:
    """The ``--json`` document (version 1)."""
    return {
        "schema_version": 1,
        "events": [
            {"id": e.id, "key": e.key, "body": e.value, "at": e.at, "until": e.until}
            for e in events
        ],
        "waiting": [{"task": w.task_id, "key": w.key, "until": w.until} for w in waiters],
    }


def render(events: Sequence[Event], waiters: Sequence[EventWaiter]) -> str:
    lines = [f"runs waiting on an event: {len(waiters)}"]
    for w in waiters:
        due = "-" if w.until is None else iso_time(w.until)
        lines.append(f"  {w.task_id:<44} key {w.key:<32} times out {due}")
    lines.append(f"kept events: {len(events)}")
    for e in events:
        body = e.body if len(e.body) <= 60 else e.body[:57] + "..."
        lines.append(f"  {e.id:<32} key {e.key:<32} kept until {iso_time(e.until)}  {body}")
    return "\n".join(lines)


async def show_events(store: EventStore, key: str | None, limit: int, as_json: bool) -> int:
    events, waiters = await store.events(key=key, limit=limit), await store.event_waiters()
    if key is not None:
        waiters = [w for w in waiters if w.key == key]
    print(json.dumps(document(events, waiters), indent=2) if as_json else render(events, waiters))
    return 0


async def drop_event(store: EventStore, id: str) -> int:
    if not await store.drop_event(id):
        print(f"tether: no kept event {id!r} (tether store events)", file=sys.stderr)
        return 1
    print(f"event {id} dropped: later waits will not take it")
    return 0
