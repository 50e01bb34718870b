"""An agent for the real-process tests: echoes; crashes on 'crash'; dawdles on 'slow' (0.3 s)
and 'stall' (2 s); 'hang' runs until cancelled.

``--agent support.agents.basic:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import trio

from tether import Session
from tether.bridge import Task


class AgentCrash(RuntimeError):
    """What this agent raises for a body containing 'crash'."""


async def handle(task: Task) -> str:
    if "crash" in task.body:
        raise AgentCrash(f"cannot handle {task.body!r}")
    if "slow" in task.body:
        await trio.sleep(0.3)
    if "stall" in task.body:
        await trio.sleep(2.0)
    if "hang" in task.body:
        await trio.sleep_forever()
    return f"echo: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
