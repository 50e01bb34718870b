"""``tether store room`` and ``tether store forget-room``: an operator's look at a room's
conversation (issue #34), and its erasure (privacy: the history, the state and the stored
bodies of the room's finished tasks; journalled as the operator's). Exit codes:
docs/guide/conversations.md."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ..._plumbing._converter import unstructure
from ..._plumbing._when import iso_time
from ..custody._conversation import RoomView
from ..custody._roles import Store

SCHEMA_VERSION = 1
"""Of the ``--json`` document."""
NOT_ERASED = (
    "NOT erased: the gateway's own copy of the room's messages and replies (the reference "
    "gateway keeps serving them and has no route to erase a room yet): erase them there too"
)
"""What ``forget-room`` leaves, said plainly until the gateway can be asked to forget."""


def room_document(view: RoomView) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    doc.update(unstructure(view))
    doc["turns"] = [unstructure(t) for t in view.turns]
    doc["state"] = dict(view.state)
    return doc


def render_room(view: RoomView, *, width: int = 100) -> str:
    """The room's turns, one line each (time, who, outcome, text cut to ``width``), then its
    state."""
    shown = len(view.turns)
    lines = [
        f"room {view.room}: {view.turn_count} turn(s) kept"
        + (f", the newest {shown} shown" if shown < view.turn_count else "")
        + f"; state version {view.version}, {view.state_bytes} bytes"
    ]
    for t in view.turns:
        text = " ".join(t.text.split())
        if len(text) > width:
            text = text[: width - 3] + "..."
        lines.append(f"  {iso_time(t.at)}  {t.role:<9}  {t.outcome:<11}  {t.task_id}  {text}")
    state = json.dumps(dict(view.state), indent=2, ensure_ascii=False)
    lines.append("state:" if view.state else "state: {} (empty)")
    if view.state:
        lines.extend("  " + line for line in state.splitlines())
    return "\n".join(lines)


async def show_room(store: Store, room: str, limit: int, as_json: bool) -> int:
    view = await store.room(room, limit=limit)
    if view is None:
        print(f"tether: the store holds no conversation of room {room!r}", file=sys.stderr)
        return 1
    print(json.dumps(room_document(view), indent=2) if as_json else render_room(view))
    return 0


async def forget_room(store: Store, room: str) -> int:
    started = time.monotonic()
    turns, tasks = await store.forget_room(room)
    print(
        f"forgot room {room!r}: {turns} turn(s) and its state erased, the stored bodies of "
        f"{tasks} finished task(s) blanked (journalled as the operator's; "
        f"{time.monotonic() - started:.2f}s)"
    )
    print(NOT_ERASED)
    return 0
