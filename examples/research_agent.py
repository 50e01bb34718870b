"""A planner that hands research to three child runs and writes from their notes
(``run.spawn`` and ``run.join``, issue #51).

As a bridge agent: put ``examples/`` on ``PYTHONPATH`` and run
``tether bridge run --agent research_agent:factory``; the person asks a question, the reply
comes once the three researches are done.

On its own: ``uv run python examples/research_agent.py "why is the sky blue"`` runs one
question in-process (a SQLite store in a temporary folder, one worker with two slots and its
reconciler) and prints the answer and the tree of tasks with their states.

What it shows:

- **Each research is a task of its own.** ``run.spawn`` stores it in the transaction that
  records it as a step of the planner: any worker of the pool runs it, and a planner that
  crashes and runs again gets the same three children back, never three more.
- **The join waits in custody, not in a worker.** ``run.join`` ends the planner's run; its task
  waits in ``waiting`` with no slot held (here the children need the slots) until the last
  child's reply is stored, which wakes it; the handler runs again from the top, the spawns
  replay, and the join returns the three notes.
- **A child's reply is the planner's to read.** Only the planner's reply reaches the person.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Final

import trio

from tether import Session
from tether.bridge import ChildFailed, CustodyState, SqliteStore, Task, run_of
from tether.bridge.pool import PoolWakeups, PoolWorker, Reconciler

ANGLES: Final = ("physics", "history", "examples")
"""What each researcher looks into."""
RESEARCH_TIMEOUT: Final = 600.0
"""Seconds the planner waits for its researchers."""


async def research(question: str, angle: str) -> str:
    """One researcher's notes (a real agent calls a model and its tools here)."""
    await trio.sleep(0.01)
    return f"{angle}: three facts about {question!r}"


async def handle(task: Task) -> str:
    run = run_of(task)
    if task.parent is not None:  # a researcher: its body is "angle | question"
        angle, _, question = task.body.partition(" | ")
        return await research(question, angle)
    children = [await run.spawn(angle, f"{angle} | {task.body}") for angle in ANGLES]
    try:
        notes = await run.join(*children, timeout=RESEARCH_TIMEOUT)
    except ChildFailed as exc:
        return f"I could not finish: the {exc.name} research failed ({exc.reason})."
    return "Here is what I found.\n" + "\n".join(f"- {note}" for note in notes)


def factory(session: Session) -> None:
    session.add_handler("task", handle)


async def demo(folder: Path, question: str) -> tuple[str, list[str]]:
    """One question through a real store, worker and reconciler: the reply, and the tree
    (the planner, then its children, each with its state and how its journal went)."""
    async with await SqliteStore.open(folder / "custody.db") as store:
        wakeups = PoolWakeups()
        worker = PoolWorker(
            store, "w1", factory, concurrency=2, poll_interval=0.05, wakeups=wakeups
        )
        reconciler = Reconciler(store, on_woken=wakeups.tasks_pending)
        wakeups.on_parked = reconciler.parked_until
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            nursery.start_soon(reconciler.run)
            await store.ingest(Task("q1", question))
            while await store.state("q1") is not CustodyState.RESULT:  # noqa: ASYNC110
                await trio.sleep(0.02)
            worker.request_stop()
            nursery.cancel_scope.cancel()
        record = await store.get("q1")
        assert record is not None
        assert record.result is not None
        tree = [await _line(store, "q1", "")]
        for step in await store.steps("q1"):
            if step.name.startswith("~spawn:"):
                tree.append(await _line(store, step.value.strip('"'), "  "))
    return record.result, tree


async def _line(store: SqliteStore, id: str, indent: str) -> str:
    moves = " -> ".join(e.dst.value for e in await store.journal(id))
    return f"{indent}{id[:12]:<12} {moves}"


def main(argv: list[str]) -> int:
    question = argv[0] if argv else "why is the sky blue"
    with tempfile.TemporaryDirectory() as folder:
        reply, tree = trio.run(demo, Path(folder), question)
    print(reply)
    print()
    print("\n".join(tree))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
