"""An agent for the parked-sleep test: a body ``sleep N`` records a step (one ``O_APPEND``
line to ``STEPS_AGENT_LOG``), sleeps ``N`` seconds durably and answers with the time it
woke; any other body is answered at once.

``--agent support.agents.sleep:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import os
import time

from tether import Session
from tether.bridge import Task, run_of


def before(task_id: str) -> int:
    fd = os.open(os.environ["STEPS_AGENT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{task_id} before {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return os.getpid()


async def handle(task: Task) -> str:
    if not task.body.startswith("sleep "):
        return f"at once: {task.body}"
    run = run_of(task)
    pid = await run.step("before", before, task.id)
    await run.sleep(float(task.body.split()[1]))
    return f"woke at {time.time():.3f}; the step ran in {pid}, woke in {os.getpid()}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
