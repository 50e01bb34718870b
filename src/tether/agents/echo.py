"""The demo agent: replies ``echo: <body>``."""

from __future__ import annotations

from tether import Session
from tether.bridge import Task


def factory(session: Session) -> None:
    @session.on("task")
    async def echo(task: Task) -> str:
        return f"echo: {task.body}"
