"""An agent that waits for a payment webhook before it confirms an order (``run.wait_for``,
issue #52).

As a bridge agent: put ``examples/`` on ``PYTHONPATH``, run ``tether bridge run --agent
payment_agent:factory --admin-port 8081``, and have the payment provider's webhook relay
``POST /v1/events {"id": <its event id>, "key": "payment.<order>", "body": {...}}`` to the
admin endpoint (its bearer token), or send one by hand: ``tether store send-event
payment.42 '{"amount": 12}'``.

On its own: ``uv run python examples/payment_agent.py`` runs two orders in-process (a SQLite
store in a temporary folder, one worker with one slot and its reconciler): the first order's
payment comes while it waits, the second's came before it asked, and prints both replies and
each order's moves.

What it shows:

- **The wait is in custody, not in a worker.** ``run.wait_for`` ends the run; its task waits
  in ``waiting`` with no slot held (here the one slot serves the second order meanwhile) until
  the event comes, which wakes it in the transaction that keeps the event; the handler runs
  again from the top and the wait returns the event's body.
- **An early event is not lost.** An event that comes before its wait is kept (``--event-ttl``)
  and the wait takes it at once.
- **A webhook's retry is harmless.** The event's id is the provider's: a replay changes nothing.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import trio

from tether import Session
from tether.bridge import CustodyState, SqliteStore, Task, WaitTimeout, run_of
from tether.bridge.pool import PoolWakeups, PoolWorker, Reconciler

PAYMENT_TIMEOUT: Final = 24 * 3600.0
"""Seconds an order waits for its payment."""


async def handle(task: Task) -> str:
    run = run_of(task)
    order = task.id
    total = await run.step("quote", lambda: {"amount": 12, "currency": "EUR"})
    try:
        paid: Any = await run.wait_for(f"payment.{order}", timeout=PAYMENT_TIMEOUT)
    except WaitTimeout:
        return f"Order {order}: no payment came within a day; it is cancelled."
    if paid.get("amount") != total["amount"]:
        return f"Order {order}: paid {paid.get('amount')}, expected {total['amount']}: on hold."
    return f"Order {order} is confirmed: {paid['amount']} {total['currency']} received."


def factory(session: Session) -> None:
    session.add_handler("task", handle)


async def demo(folder: Path) -> tuple[list[str], list[str]]:
    """Two orders through a real store, worker and reconciler: the replies, and each order's
    moves."""
    async with await SqliteStore.open(folder / "custody.db") as store:
        wakeups = PoolWakeups()
        worker = PoolWorker(
            store, "w1", factory, concurrency=1, poll_interval=0.05, wakeups=wakeups
        )
        reconciler = Reconciler(store, on_woken=wakeups.tasks_pending)
        wakeups.on_parked = reconciler.parked_until
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            nursery.start_soon(reconciler.run)
            await store.send_event("psp-2", "payment.o2", {"amount": 12})  # before its wait
            await store.ingest(Task("o1", "order a lamp"))
            await store.ingest(Task("o2", "order a chair"))
            await _until(store, "o2", CustodyState.RESULT)  # o1 waits, its slot serves o2
            await store.send_event("psp-1", "payment.o1", {"amount": 12})  # the webhook
            await store.send_event("psp-1", "payment.o1", {"amount": 12})  # and its retry
            await _until(store, "o1", CustodyState.RESULT)
            worker.request_stop()
            nursery.cancel_scope.cancel()
        replies, moves = [], []
        for id in ("o1", "o2"):
            record = await store.get(id)
            assert record is not None
            assert record.result is not None
            replies.append(record.result)
            moves.append(f"{id}: " + " -> ".join(e.dst.value for e in await store.journal(id)))
    return replies, moves


async def _until(store: SqliteStore, id: str, state: CustodyState) -> None:
    while await store.state(id) is not state:  # noqa: ASYNC110
        await trio.sleep(0.02)


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        replies, moves = trio.run(demo, Path(folder))
    print("\n".join(replies))
    print()
    print("\n".join(moves))
    return 0


if __name__ == "__main__":
    sys.exit(main())
