"""An agent for the durable-run kill tests: three steps, each of whose functions appends one
line (``O_APPEND``, one ``write``) to the file named by ``STEPS_AGENT_LOG`` and returns the
line's nonce, which the step records. A run that is killed and resumed shows in the log as a
repeated (task, step) line only where the process died between a step's effect and its record.

``--agent support.agents.steps:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import os
import secrets

import trio

from support.agents._log import append_line
from tether import Session
from tether.bridge import Task, run_of

STEPS = ("one", "two", "three")
BETWEEN_S = 0.03
"""Seconds between steps (a kill may land there)."""
INSIDE_S = 0.03
"""Seconds inside a step, before its effect (a kill may land there too)."""


def effect(task_id: str, step: str) -> str:
    nonce = secrets.token_hex(8)
    append_line("STEPS_AGENT_LOG", f"{task_id} {step} {nonce} {os.getpid()}")
    return nonce


async def slow_effect(task_id: str, step: str) -> str:
    await trio.sleep(INSIDE_S)
    return effect(task_id, step)


async def handle(task: Task) -> str:
    run = run_of(task)
    for step in STEPS:
        await trio.sleep(BETWEEN_S)
        await run.step(step, slow_effect, task.id, step)
    return f"done: {task.body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
