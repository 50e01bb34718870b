"""Bounds in quarantine (issue #53): a suspect's run in a quarantine child keeps to its
worker's bounds as a run in the worker's own process does. The child's steps are refused over
the worker's ``max_step_bytes`` (sent with the task), a bound the handler wrapped still fails
permanently, and the reply and the state are checked by the worker: each task dead on the
attempt it ran, never retried; a value at its bound is kept. Real child processes, a real
SQLite store."""

from __future__ import annotations

import pytest
import trio

from support.agents.bounds import factory
from support.clock import FakeClock
from support.suspects import make_suspects
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import Bounds, PoolWorker, RetryBackoff
from tether.bridge.pool._quarantine import Quarantine, QuarantineSpec

S = CustodyState
SPEC = QuarantineSpec("support.agents.bounds:factory")


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tests_importable")]


async def test_a_quarantined_run_over_a_bound_is_dead_on_the_attempt_it_ran(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    over = {"step": "step 1001", "wrapped": "wrapped 1001", "reply": "reply 501"}
    over["state"] = "state 2001"
    within = {"fits": "step 1000"}
    await make_suspects(
        store,
        fake_clock,
        *(Task(id, body, room="r" if id == "state" else None) for id, body in over.items()),
        *(Task(id, body) for id, body in within.items()),
    )
    quarantine = Quarantine(SPEC, processes=len(over) + len(within))
    worker = PoolWorker(
        store,
        "w1",
        factory,
        quarantine=quarantine,
        concurrency=len(over) + len(within),
        bounds=Bounds(step=1000, state=2000, reply=500),
        retry_backoff=RetryBackoff(0, 0),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        async def settled() -> bool:
            states = [await store.state(id) for id in [*over, *within]]
            return all(state in (S.DEAD, S.RESULT) for state in states)

        await wait_until(settled, within=120)
        worker.request_stop()
    assert quarantine.runs == len(over) + len(within)  # each ran once, in a child
    for id in over:
        record = await store.get(id)
        assert record is not None
        assert record.state is S.DEAD, (id, record.reason)
        ran = [e for e in await store.journal(id) if e.worker == "w1"]
        assert [(e.src, e.dst) for e in ran] == [(S.PENDING, S.CLAIMED), (S.CLAIMED, S.DEAD)]
        assert ran[0].attempt == ran[1].attempt == record.attempt
        assert record.reason is not None
        assert record.reason.startswith(f"permanent failure on attempt {record.attempt}: ")
    reasons = {id: (await store.get(id)).reason for id in over}  # type: ignore[union-attr]
    step_over = "step 'fetch' returned 1,001 bytes of JSON, over the 1,000 bytes a step may record"
    assert step_over in str(reasons["step"])
    assert step_over in str(reasons["wrapped"])  # the child's handler wrapped it: the same
    assert "the reply to task 'reply' is 501 bytes, over the 500 bytes" in str(reasons["reply"])
    assert "the state of room 'r' is 2,001 bytes of JSON, over the 2,000" in str(reasons["state"])
    assert [await store.steps(id) for id in over] == [[], [], [], []]
    fits = await store.get("fits")
    assert fits is not None
    assert (fits.state, fits.result) == (S.RESULT, "fetched 998")
    [fetched] = await store.steps("fits")
    assert fetched.size == 1000  # recorded by the parent for its child
