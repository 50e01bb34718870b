"""Agents for the child-run kill tests (issue #51): a planner that spawns three researchers on
the ``research`` queue and joins them, and the researcher, which runs the three logged steps
of ``support.agents.steps`` (so a step repeated after its record shows in the log).

The planner appends ``joined <task> <pid>`` to ``STEPS_AGENT_LOG`` each time a join returns:
more than one line for a parent is a resumption repeated by a kill after its join.

``--agent support.agents.family:planner`` / ``support.agents.family:researcher``.
"""

from __future__ import annotations

import os

import trio

from support.agents._log import append_line
from tether import Session
from tether.bridge import Task, run_of

from .steps import STEPS, slow_effect

CHILDREN = 3
QUEUE = "research"


async def plan(task: Task) -> str:
    run = run_of(task)
    kids = [
        await run.spawn(f"r{i}", f"{task.body} / part {i}", queue=QUEUE) for i in range(CHILDREN)
    ]
    notes = await run.join(*kids, timeout=600)
    append_line("STEPS_AGENT_LOG", f"{task.id} joined - {os.getpid()}")
    return f"done: {task.body} <- " + " + ".join(notes)


async def research(task: Task) -> str:
    run = run_of(task)
    for step in STEPS:
        await trio.sleep(0.02)
        await run.step(step, slow_effect, task.id, step)
    return f"notes on {task.body}"


def planner(session: Session) -> None:
    session.add_handler("task", plan)


def researcher(session: Session) -> None:
    session.add_handler("task", research)
