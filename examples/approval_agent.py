"""A booking agent with an approval step: it finds a table, asks the person to confirm, and
books only on a yes (``run.ask``, issue #36).

As a bridge agent: put ``examples/`` on ``PYTHONPATH`` and run
``tether bridge run --agent approval_agent:factory``; the question shows in the room (the
reference gateway's chat page shows it live) and the person's next message is the answer.

On its own: ``uv run python examples/approval_agent.py [yes|no]`` plays one conversation
in-process (a SQLite store in a temporary folder, one worker, the person's answer given on the
command line) and prints it.

What it shows:

- **The approval waits in custody, not in a worker.** ``run.ask`` ends the run; the task waits
  in ``waiting`` with no worker slot held and no attempt spent, for as long as the person
  takes (up to ``APPROVAL_TIMEOUT``), across restarts of the bridge.
- **Replay.** The answer brings the handler back from the top: the search is a recorded step
  (not searched again), the ask returns the answer, and only then is the booking made, as a
  step of its own with an idempotency key (``run.key``) for the booking system.
- **A timeout is an answer too.** ``AskTimeout`` after the hour: the agent says it booked
  nothing.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import trio

from tether import Session
from tether.bridge import AskTimeout, CustodyState, SqliteStore, Task, run_of
from tether.bridge.pool import PoolWorker

APPROVAL_TIMEOUT: Final = 3600.0
"""Seconds the agent waits for the person's yes or no."""
BOOKINGS: list[str] = []
"""The booking system of this example: each booking's idempotency key, once per booking."""


async def find_table(request: str) -> dict[str, Any]:
    """The search (a real agent calls a reservations API here)."""
    people = next((int(w) for w in request.split() if w.isdigit()), 2)
    return {"place": "Chez Anna", "people": people, "time": "20:00"}


def book(table: dict[str, Any], key: str) -> str:
    """The booking: sent with ``key`` as its idempotency key, so a repeat books nothing new."""
    if key not in BOOKINGS:
        BOOKINGS.append(key)
    return f"CA-{BOOKINGS.index(key) + 1:04d}"


def is_yes(answer: str) -> bool:
    return answer.strip().lower().rstrip("!.") in {"yes", "y", "ok", "please do", "book it"}


async def handle(task: Task) -> str:
    run = run_of(task)
    table = await run.step("find", find_table, task.body)
    described = f"a table for {table['people']} at {table['place']}, {table['time']}"
    try:
        answer = await run.ask(f"I found {described}. Shall I book it?", timeout=APPROVAL_TIMEOUT)
    except AskTimeout:
        return f"No answer within the hour, so I did not book {described}."
    if not is_yes(answer):
        return "All right, I booked nothing."
    reference = await run.step("book", book, table, run.key("book"))
    return f"Booked {described}: reference {reference}."


def factory(session: Session) -> None:
    session.add_handler("task", handle)


async def demo(folder: Path, answer: str = "yes") -> list[str]:
    """One conversation through a real store and worker: the person's message, the agent's
    question, the answer, the reply. Returns the transcript."""
    transcript: list[str] = []
    async with await SqliteStore.open(folder / "custody.db") as store:
        worker = PoolWorker(store, "w1", factory, poll_interval=0.05)

        async def until(id: str, state: CustodyState) -> None:
            while await store.state(id) is not state:  # noqa: ASYNC110 - the store's state
                await trio.sleep(0.02)

        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            message = "a table for 4 tonight, please"
            await store.ingest(Task("m1", message, room="demo"), room_policy="serial")
            transcript.append(f"person: {message}")
            await until("m1", CustodyState.WAITING)  # asked; no worker holds it now
            [asked] = await store.asks("m1")
            transcript.append(f"agent:  {asked.question}")
            await store.ingest(Task("m2", answer, room="demo"), room_policy="serial")
            transcript.append(f"person: {answer}")
            await until("m1", CustodyState.RESULT)
            worker.request_stop()
        [reply] = [r for r in await store.ready_results() if r.task.id == "m1"]
        transcript.append(f"agent:  {reply.body}")
    return transcript


def main(argv: list[str]) -> int:
    answer = argv[0] if argv else "yes"
    with tempfile.TemporaryDirectory() as folder:
        for line in trio.run(demo, Path(folder), answer):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
