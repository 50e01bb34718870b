"""An agent that changes between two deploys (issue #53): ``DEPLOY_AGENT_CODE=1`` is the old
code, ``2`` the new. Each task's body names how the new code differs for it:

- ``rename:...``: the step ``fetch`` is renamed ``fetch_page`` (the same call);
- ``args:...``: ``fetch`` is asked with other arguments;
- ``patched:...``: a new step ``extra`` comes behind ``run.patched("extra")``.

Every run steps ``fetch``, sleeps ``DEPLOY_AGENT_SLEEP`` seconds (parked: ``--park-after 0``)
and steps ``finish``. Each step's function appends ``<task> <step> <code>`` to
``STEPS_AGENT_LOG`` when it runs: a line twice is a step run twice.

``--agent support.agents.deploy:factory``.
"""

from __future__ import annotations

import os

from support.agents._log import append_line
from tether import Session
from tether.bridge import Task, run_of


def _effect(task: Task, step: str) -> str:
    code = os.environ["DEPLOY_AGENT_CODE"]
    append_line("STEPS_AGENT_LOG", f"{task.id} {step} {code}")
    return f"{step} by code {code}"


async def handle(task: Task) -> str:
    run = run_of(task)
    new = os.environ["DEPLOY_AGENT_CODE"] == "2"
    kind = task.body.partition(":")[0]
    if new and kind == "rename":  # the same call under a new name
        fetched = await run.step("fetch_page", _effect, task, "fetch")
    elif new and kind == "args":
        fetched = await run.step("fetch", _effect, task, "fetch", "now with an option")
    else:
        fetched = await run.step("fetch", _effect, task, "fetch")
    path = "old path"
    if new and kind == "patched" and await run.patched("extra"):
        await run.step("extra", _effect, task, "extra")
        path = "new path"
    await run.sleep(float(os.environ["DEPLOY_AGENT_SLEEP"]))
    finished = await run.step("finish", _effect, task, "finish")
    return f"{task.body}: {fetched}, {finished}, {path}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
