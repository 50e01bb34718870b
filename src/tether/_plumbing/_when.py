"""Times and durations as a person reads them in a log line or an error: a wall-clock time
(``08:41:17``, local, as log lines carry it), an ISO 8601 instant (UTC) and a duration
(``43.2 s``, ``2 min 5 s``), never a raw epoch number."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def clock_time(epoch: float) -> str:
    """``HH:MM:SS`` in local time: "next try at 08:41:17" beside a log line's own time."""
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def iso_time(epoch: float) -> str:
    """``2026-12-03T08:41:17.324Z``: an instant in a stored reason or a report."""
    moment = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """``0.4 s``, ``43 s``, ``2 min 5 s``, ``3 h 2 min``: as precise as a person needs."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
