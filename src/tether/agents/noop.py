"""Replies at once with a constant: measures the pool, not the agent (benchmarks)."""

from __future__ import annotations

from tether import Session
from tether.bridge import Task


def factory(session: Session) -> None:
    @session.on("task")
    async def noop(task: Task) -> str:
        return "ok"
