"""The CPU a local PostgreSQL server spends: its postmaster's process tree, from ``/proc``.

Benchmarks divide it by the work done (server CPU per job) or by the time (an idle share).
The postmaster is found as the parent of a backend of ours, so the server must run on this
machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import psycopg


def postmaster_pid(dsn: str) -> int:
    """The server's postmaster: the parent of a backend of ours (the server must be local)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        stat = Path(f"/proc/{row[0]}/stat")  # read while the backend lives
        if not stat.exists():
            raise SystemExit("the server is not on this machine: its CPU cannot be read")
        return int(_stat_fields(stat)[1])


def _stat_fields(path: Path) -> list[str]:
    """Fields of /proc/<pid>/stat from the state on (the name may hold spaces)."""
    text = path.read_text()
    return text[text.rindex(")") + 2 :].split()


_TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the postmaster, its reaped children and its live children."""
    fields = _stat_fields(Path(f"/proc/{postmaster}/stat"))
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = _stat_fields(entry / "stat")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(child[1]) == postmaster:
            ticks += int(child[11]) + int(child[12])
    return ticks / _TICK
