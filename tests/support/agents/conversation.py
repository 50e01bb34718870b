"""A bridge agent for the conversation process test (issue #34): it counts its room's replies
in the room's state and replies with the count; every run appends what it saw (its task, the
history's roles and texts, the state's count) to the JSON-lines file ``$CONVERSATION_AGENT_LOG``
(one ``write`` per line, so a SIGKILL leaves whole lines)."""

from __future__ import annotations

import json
import os
import random

import trio

from tether import Session
from tether.bridge import Reply, Task, conversation_of


def factory(session: Session) -> None:
    log = os.environ["CONVERSATION_AGENT_LOG"]
    rng = random.Random()

    @session.on("task")
    async def reply(task: Task) -> Reply:
        talk = await conversation_of(task)
        count = int(talk.state.get("count", 0)) + 1
        seen = {
            "id": task.id,
            "room": task.room,
            "history": [[t.role, t.text] for t in talk.history],
            "count": count,
        }
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(seen) + "\n").encode())
        finally:
            os.close(fd)
        await trio.sleep(rng.uniform(0.02, 0.2))  # mid-reply long enough for a kill to land
        return Reply(str(count), state={"count": count})
