"""An agent for the ask test (issue #36): it asks the person to confirm, then answers
``booked: <answer>``. ``--agent support.agents.ask:factory`` (the tests put ``tests/`` on
PYTHONPATH)."""

from __future__ import annotations

from tether import Session
from tether.bridge import Task, run_of


async def handle(task: Task) -> str:
    answer = await run_of(task).ask("confirm?", timeout=300)
    return f"booked: {answer}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
