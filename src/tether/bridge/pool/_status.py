"""What a process's part of the pool looks like from outside (its names, who leads and since when),
for ``/status``, ``tether status`` and a status file; times in UTC ISO 8601."""

from __future__ import annotations

import attrs

from ..._plumbing._when import iso_time
from ._lead import PoolLead
from ._worker import PoolWorker


def iso(at: float | None) -> str | None:
    if at is None:
        return None
    try:
        return iso_time(at)
    except (OverflowError, OSError, ValueError):  # a time no calendar holds: shown as none
        return None


@attrs.frozen
class PoolStatus:
    """One process's pool membership: its names, and the leader as its lead candidate saw it."""

    stem: str
    workers: list[str]
    lead: str | None
    """This process's lead candidate (None: it stands for no lead, ``--lead false``)."""
    leading: bool
    leading_since: str | None
    leader: str | None
    """The pool's leader (this process's candidate or another's); None when none is alive or
    this process has no candidate to see it."""
    leader_beating_since: str | None
    """When the leader's process began beating (its candidacy started)."""
    workers_seen: list[str]
    """Live workers of the whole pool (every process) in the beats last read."""
    leaderless: list[str] = attrs.field(factory=list)
    """This process's workers that see no live lead (they claim pending tasks directly)."""


def pool_status(stem: str, workers: list[PoolWorker], lead: PoolLead | None) -> PoolStatus:
    leader = None if lead is None else lead.leader
    return PoolStatus(
        stem=stem,
        workers=[w.name for w in workers],
        lead=None if lead is None else lead.name,
        leading=lead is not None and lead.leading,
        leading_since=None if lead is None else iso(lead.leading_since),
        leader=None if leader is None else leader.name,
        leader_beating_since=None if leader is None else iso(leader.started_at),
        workers_seen=[] if lead is None else list(lead.workers_seen),
        leaderless=[w.name for w in workers if w.leaderless],
    )


def render_pool(status: PoolStatus) -> list[str]:
    """Lines for ``tether status``."""
    if status.lead is None:
        role = "no lead candidate here"
    elif status.leading:
        role = f"LEADS since {status.leading_since} (as {status.lead})"
    else:
        role = f"stands by (as {status.lead})"
    lines = [f"pool {status.stem}: {len(status.workers)} worker(s); {role}"]
    if status.lead is not None:
        leader = (
            "none alive (workers claim directly)"
            if status.leader is None
            else f"{status.leader} (beating since {status.leader_beating_since})"
        )
        lines.append(f"  leader: {leader}")
        seen = ", ".join(status.workers_seen) or "none"
        lines.append(f"  live workers in the pool ({len(status.workers_seen)}): {seen}")
    if status.leaderless:
        lines.append(f"  leaderless here: {', '.join(status.leaderless)}")
    return lines
