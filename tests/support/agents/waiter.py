"""An agent for the event kill tests (issue #52): each task waits for the event of key
``ev.<task id>`` and replies with its body. It appends ``<task> took <pid>`` to
``STEPS_AGENT_LOG`` each time its wait returns: more than one line for a task is a resumption
repeated (by a kill after the wait returned and before the reply was stored).

``--agent support.agents.waiter:factory``.
"""

from __future__ import annotations

import os

from support.agents._log import append_line
from tether import Session
from tether.bridge import Task, run_of


async def wait(task: Task) -> str:
    body = await run_of(task).wait_for(f"ev.{task.id}", timeout=600)
    append_line("STEPS_AGENT_LOG", f"{task.id} took {os.getpid()}")
    return f"{task.body}: {body['says']}"


def factory(session: Session) -> None:
    session.add_handler("task", wait)
