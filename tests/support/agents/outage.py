"""The agent of the store-outage test: each run start appends one line (the task's id) to the
file named by ``OUTAGE_RUNS_FILE`` (O_APPEND: whole lines from every process), then sleeps
the seconds a body ``long <s>`` asks for and echoes.

``--agent support.agents.outage:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import os

import trio

from tether import Session
from tether.bridge import Task

RUNS_ENV = "OUTAGE_RUNS_FILE"


async def handle(task: Task) -> str:
    fd = os.open(os.environ[RUNS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{task.id}\n".encode())
    finally:
        os.close(fd)
    if task.body.startswith("long "):
        await trio.sleep(float(task.body.split()[1]))
    return f"echo: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
