"""An agent for the forget-room process test (issue #53): it keeps the room's text everywhere
a run can: a step records the message, the room's state keeps it, the reply quotes it, and a
message of the room that says ``wait`` parks on a question (its text kept in the asks and at
the gateway) until the room's next message answers it.

``--agent support.agents.remember:factory`` (the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

from tether import Session
from tether.bridge import Reply, Task, conversation_of, run_of


def factory(session: Session) -> None:
    @session.on("task")
    async def remember(task: Task) -> Reply:
        run = run_of(task)
        noted = await run.step("note", lambda: f"noted: {task.body}")
        answer = ""
        if "wait" in task.body:
            answer = await run.ask(f"are you sure about {task.body}?", timeout=60)
        talk = await conversation_of(task)
        said = " | ".join(t.text for t in talk.history)
        return Reply(f"{noted} {answer} (after: {said})", state={"last": task.body})
