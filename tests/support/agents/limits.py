"""An agent for the flow-control process tests (issue #38): each run holds a permit of
``openai`` around a 0.2 s call and appends ``start``/``end`` lines (task, wall time, pid) to the
file named by ``LIMITS_AGENT_LOG``; ``429`` pauses ``openai`` for everyone for 2 s once (a
``Retry(after=, key=)``), logging ``pause <until>``; ``hold`` holds a permit of ``hold`` for a
minute (a holder to SIGKILL).

``--agent support.agents.limits:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import os
import time

import trio

from tether import Session
from tether.bridge import Retry, Task, run_of

CALL_S = 0.2
PAUSE_S = 2.0


def log(*words: object) -> None:
    line = " ".join(map(str, words)) + "\n"
    fd = os.open(os.environ["LIMITS_AGENT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def first_429() -> bool:
    """True once, in whichever process runs a ``429`` first (a marker file made O_EXCL)."""
    try:
        os.close(os.open(os.environ["LIMITS_AGENT_LOG"] + ".429", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


async def handle(task: Task) -> str:
    run = run_of(task)
    if task.body == "hold":
        async with run.limit("hold"):
            log("hold", task.id, time.time(), os.getpid())
            await trio.sleep(60)
    async with run.limit("openai"):
        log("start", task.id, time.time(), os.getpid())
        await trio.sleep(CALL_S)
        log("end", task.id, time.time(), os.getpid())
        if task.body == "429" and first_429():
            log("pause", task.id, time.time() + PAUSE_S, os.getpid())
            raise Retry("rate limited (429)", after=PAUSE_S, key="openai")
    return f"done: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
