"""An agent for the fair-shares test: each message costs a 40 ms call to a "model" (a sleep),
then echoes. ``--agent support.agents.tenant:factory``."""

from __future__ import annotations

import trio

from tether import Session
from tether.bridge import Task

CALL_S = 0.04


async def handle(task: Task) -> str:
    await trio.sleep(CALL_S)
    return f"echo: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
