"""An agent for the bounds tests (issue #53): a body ``KIND N`` makes a value of exactly ``N``
bytes (a step's result and a state as JSON, a reply as UTF-8).

- ``step N``: step ``fetch`` returns a string of ``N`` bytes of JSON;
- ``state N``: replies ``ok`` with a room state of ``N`` bytes of JSON;
- ``reply N``: replies ``N`` bytes;
- ``wrapped N``: as ``step``, and raises a ``RuntimeError`` from the ``TooLarge``;
- ``caught N``: as ``step``, and answers ``fell back`` when it is ``TooLarge``;
- ``total N``: ``N`` steps of 1 MiB each (the largest one step records), then one more.

In process (``factory``), or in a quarantine child (``--agent support.agents.bounds:factory``,
the tests put ``tests/`` on PYTHONPATH).
"""

from __future__ import annotations

from tether import Session
from tether.bridge import Reply, Task, TooLarge, run_of
from tether.bridge.custody import MAX_STEP_BYTES

STATE_JSON_BYTES = len('{"k":""}')
"""What a state ``{"k": text}`` adds to its text as JSON."""


async def handle(task: Task) -> str | Reply:
    kind, size = task.body.split()
    n = int(size)
    run = run_of(task)
    if kind == "state":
        return Reply("ok", state={"k": "x" * (n - STATE_JSON_BYTES)})
    if kind == "reply":
        return "x" * n
    if kind == "total":
        for part in range(n):
            await run.step(f"part:{part}", lambda: "x" * (MAX_STEP_BYTES - 2))
        await run.step("one-more", lambda: 1)
        return "all recorded"
    try:
        fetched = await run.step("fetch", lambda: "x" * (n - 2))  # a JSON string: 2 quotes
    except TooLarge as exc:
        if kind == "wrapped":
            raise RuntimeError("the page could not be kept") from exc
        if kind == "caught":
            return "fell back"
        raise
    return f"fetched {len(fetched)}"


def factory(session: Session) -> None:
    session.add_handler("task", handle)
