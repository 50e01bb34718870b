"""``tether store show ID``: one task's record and its custody journal as a timeline, what an
operator reads when one user's reply is late or missing."""

from __future__ import annotations

import attrs

from ..._plumbing._converter import unstructure
from ..custody._records import JournalEntry
from ..custody._rules import TaskRecord


@attrs.frozen
class TaskShow:
    """A task and its journal (a versioned document for ``--json``)."""

    record: TaskRecord
    journal: tuple[JournalEntry, ...]
    now: float
    schema_version: int = 1

    def to_document(self) -> dict[str, object]:
        return unstructure(self)  # type: ignore[no-any-return]


def _at(seconds: float, now: float) -> str:
    ago = now - seconds
    return f"{ago:.1f}s ago" if ago >= 0 else f"in {-ago:.1f}s"


def render_show(show: TaskShow) -> str:
    """The record, then the journal as one line per move."""
    r, now = show.record, show.now
    lines = [f"task {r.task.id}: {r.state.value}, attempt {r.attempt}"]
    if r.owner is not None:
        lines.append(f"  owner       {r.owner}")
    if r.lease_until is not None:
        lines.append(f"  lease until {_at(r.lease_until, now)}")
    if r.not_before is not None:
        lines.append(f"  next try    {_at(r.not_before, now)}")
    if r.crash_count:
        suspect = ", a suspect: it runs alone" if r.suspect else ""
        lines.append(
            f"  crashes     {r.crash_count} ({r.crashes_alone} while running alone){suspect}"
        )
    if r.reason is not None:
        lines.append(f"  reason      {r.reason}")
    lines.append(
        f"  ingested    {_at(r.created_at, now)}, room {r.task.room or '-'}, "
        f"priority {r.task.priority}"
    )
    lines.append("journal:" if show.journal else "journal: (none)")
    for e in show.journal:
        src = "ingested" if e.src is None else e.src.value
        who = f" {e.worker}" if e.worker else ""
        why = f": {e.reason}" if e.reason else ""
        lines.append(
            f"  {_at(e.at, now):>14}  {src} -> {e.dst.value}  attempt {e.attempt}  "
            f"by {e.actor}{who}{why}"
        )
    return "\n".join(lines)
