"""An agent for the quarantine tests: what a body says, the run does.

- ``sigkill``: SIGKILLs its own process; ``segfault``: reads address 0; ``exit3``:
  ``os._exit(3)``; ``hog``: allocates without bound (a quarantine memory limit stops it);
- ``retry`` / ``permanent`` / ``boom``: raises ``Retry(after=7)`` / ``Permanent`` / ``KeyError``;
- ``progress``: shows a status and a partial reply, then answers; ``print``: prints to stdout
  (which must not reach the pipe); ``sleep``: sleeps a minute; ``steps``: two durable
  steps; ``limited``: holds a permit of ``openai`` and pauses it; ``nap``: a durable sleep of
  an hour (it parks); ``chat``: counts its room's history and keeps a count in the room's
  state; ``environ``: the environment a tool it starts sees (``env``'s output); ``family``:
  spawns two children and joins them (issue #51); anything else: an echo.

``--agent support.agents.quarantine:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

import ctypes
import os
import signal

import trio

from tether import Session
from tether.bridge import Permanent, Reply, Retry, Task, conversation_of, progress_of, run_of


async def handle(task: Task) -> str | Reply:
    body = task.body
    if body == "steps":
        run = run_of(task)
        a = await run.step("a", lambda: "fresh-a")
        b = await run.step("b", lambda: "fresh-b")
        return f"{a}+{b}"
    if body == "limited":  # a permit asked of the parent, a pause told to it
        limited = run_of(task).limit("openai", weight=3)
        async with limited as permit:
            await limited.pause(7)
            return f"permit {permit.id}"
    if body == "family":
        run = run_of(task)
        kids = [await run.spawn(name, f"research {name}") for name in ("a", "b")]
        return " + ".join(await run.join(*kids, timeout=600))
    if body == "nap":
        await run_of(task).sleep(3600)
        return "woke"
    if body == "chat":
        talk = await conversation_of(task)
        assert await conversation_of(task) is talk  # read once: a second await asks nothing
        seen = int(talk.state.get("seen", 0))
        return Reply(f"history {len(talk.history)}", state={"seen": seen + 1})
    if body == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif body == "segfault":
        ctypes.string_at(0)
    elif body == "exit3":
        os._exit(3)
    elif body == "hog":
        hoard = []
        while True:
            hoard.append(bytearray(16 * 2**20))
    elif body == "retry":
        raise Retry("provider busy", after=7)
    elif body == "permanent":
        raise Permanent("cannot ever work")
    elif body == "boom":
        raise KeyError("boom")
    elif body == "progress":
        progress = progress_of(task)
        progress.status("thinking")
        progress.stream("partial ans")
        await trio.sleep(0.5)
        return "final answer"
    elif body == "print":
        print("noise on stdout " * 100)
    elif body == "sleep":
        await trio.sleep(60)
    elif body == "environ":
        done = await trio.run_process(["env"], capture_stdout=True)
        return done.stdout.decode()
    return f"echo: {body}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
