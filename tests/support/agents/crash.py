"""An agent for the crash tests: it SIGKILLs its own process on a body containing 'poison'
(a poison task: the bridge dies with it, as an agent that segfaults or exhausts memory would);
'late poison' does so after ``LATE_S``, 'segv poison' reads address 0, 'exit poison' calls
``os._exit(3)``; any other body is answered after ``RUN_S`` ('slow' in the body: ``SLOW_S``).

``--agent support.agents.crash:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import ctypes
import os
import signal

import trio

from tether import Session
from tether.bridge import Task

RUN_S = 0.02
SLOW_S = 0.3
LATE_S = 0.5


async def handle(task: Task) -> str:
    if "segv poison" in task.body:
        ctypes.string_at(0)
    elif "exit poison" in task.body:
        os._exit(3)
    elif "late poison" in task.body:
        await trio.sleep(LATE_S)
        os.kill(os.getpid(), signal.SIGKILL)
    elif "poison" in task.body:
        os.kill(os.getpid(), signal.SIGKILL)
    await trio.sleep(SLOW_S if "slow" in task.body else RUN_S)
    return f"echo: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
