"""Child runs in the pool (issue #51), on virtual time with a real SQLite store.

A parent spawns children and joins them: it parks (its slot free for the children), the last
child's outcome wakes it, and its handler runs again from the top: the spawns replay (nothing
spawned twice), the join returns the children's replies. A dead child raises ``ChildFailed``
in the parent; a join past its deadline raises ``JoinTimeout``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import trio

from support.agents.handler import agent
from support.one_slot import serve_one_slot
from support.pool_fixtures import StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether.bridge import (
    ChildFailed,
    CustodyState,
    JoinTimeout,
    Permanent,
    SqliteStore,
    Task,
    run_of,
)
from tether.bridge.custody._children import child_id
from tether.bridge.pool import PoolLead, PoolWakeups, PoolWorker, Reconciler

S = CustodyState


async def _serve(
    store: SqliteStore, handle: Callable[[Task], Awaitable[str]], until: str, state: S = S.RESULT
) -> PoolWorker:
    return await serve_one_slot(store, handle, lambda: _is(store, until, state), within=3600)


async def test_a_parent_fans_out_parks_and_writes_from_its_childrens_replies(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    runs: Counter[str] = Counter()

    async def handle(task: Task) -> str:
        run = run_of(task)
        runs[task.body] += 1
        if task.body.startswith("research "):
            return f"notes on {task.body.removeprefix('research ')}"
        topics = ["tides", "moons", "orbits"]
        kids = [await run.spawn(f"r:{t}", f"research {t}") for t in topics]
        notes = await run.join(*kids, timeout=3600)
        return " | ".join(notes)

    # one slot: the parent must free it (park) for its children to run at all
    await timed_store.ingest(Task("p", "plan"))
    worker = await _serve(timed_store, handle, "p")
    record = await timed_store.get("p")
    assert record is not None
    assert record.result == "notes on tides | notes on moons | notes on orbits"
    assert record.attempt == 1  # the park spent no attempt
    assert runs == {"plan": 2, "research tides": 1, "research moons": 1, "research orbits": 1}
    steps = [s.name for s in await timed_store.steps("p")]
    assert steps == [
        "~spawn:r:tides",
        "~spawn:r:moons",
        "~spawn:r:orbits",
        "~join:1:until",
        "~join:1",
    ]
    moves = [(e.src, e.dst) for e in await timed_store.journal("p")]
    assert (S.CLAIMED, S.WAITING) in moves
    assert (S.WAITING, S.PENDING) in moves
    assert worker.counts.parked == 1


async def test_a_dead_child_raises_child_failed_in_its_parent(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def handle(task: Task) -> str:
        run = run_of(task)
        if task.body == "doomed":
            raise Permanent("the source is gone")
        if task.body == "fine":
            return "ok"
        ok = await run.spawn("ok", "fine")
        bad = await run.spawn("bad", "doomed")
        try:
            await run.join(ok, bad, timeout=3600)
        except ChildFailed as exc:
            return f"child {exc.name} failed: {exc.reason}"
        return "unreachable"

    await timed_store.ingest(Task("p", "plan"))
    await _serve(timed_store, handle, "p")
    record = await timed_store.get("p")
    assert record is not None
    assert record.result is not None
    assert record.result.startswith("child bad failed: ")
    assert "the source is gone" in record.result


async def test_a_join_past_its_deadline_raises_join_timeout(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def handle(task: Task) -> str:
        run = run_of(task)
        if task.body == "slow":
            await run.sleep(7200)
            return "late"
        slow = await run.spawn("slow", "slow")
        try:
            await run.join(slow, timeout=600)
        except JoinTimeout:
            return "gave up"
        return "unreachable"

    await timed_store.ingest(Task("p", "plan"))
    start = trio.current_time()
    await _serve(timed_store, handle, "p")
    assert 600 <= trio.current_time() - start < 700
    record = await timed_store.get("p")
    assert record is not None
    assert record.result == "gave up"
    # the parent ended without it: the reconciler's next pass cancels the sleeping child
    reconciler = Reconciler(timed_store)
    await reconciler.run_once()
    child = await timed_store.get(child_id("p", "slow"))
    assert child is not None
    assert child.state is S.DEAD
    assert child.reason == "cancelled: its parent p ended (result) before joining it"


async def test_gather_spawns_and_joins_a_fan_out(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def handle(task: Task) -> str:
        if task.body.startswith("n"):
            return str(int(task.body[1:]) ** 2)
        squares = await run_of(task).gather({f"sq{n}": f"n{n}" for n in range(5)}, timeout=60)
        return ",".join(f"{k}={v}" for k, v in squares.items())

    await timed_store.ingest(Task("p", "plan"))
    await _serve(timed_store, handle, "p")
    record = await timed_store.get("p")
    assert record is not None
    assert record.result == "sq0=0,sq1=1,sq2=4,sq3=9,sq4=16"


async def test_children_run_on_the_workers_of_their_queue_under_a_lead(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The planner's worker serves ``default``, the researcher's ``research``; the lead
    assigns each task only to a worker of its queue, so each agent sees only its own tasks."""
    seen: dict[str, list[str]] = {"planner": [], "researcher": []}

    async def planner(task: Task) -> str:
        seen["planner"].append(task.body)
        run = run_of(task)
        kids = [await run.spawn(f"r{i}", f"topic {i}", queue="research") for i in range(4)]
        return " | ".join(await run.join(*kids, timeout=3600))

    async def researcher(task: Task) -> str:
        seen["researcher"].append(task.body)
        assert task.queue == "research"
        return f"notes on {task.body}"

    wakeups = PoolWakeups()
    plans = PoolWorker(
        timed_store, "plans", agent(planner), concurrency=1, poll_interval=1.0, wakeups=wakeups
    )
    research = PoolWorker(
        timed_store,
        "research",
        agent(researcher),
        concurrency=2,
        poll_interval=1.0,
        wakeups=wakeups,
        queues=("research",),
    )
    lead = PoolLead(timed_store, name="lead", sweep_interval=0.05, wakeups=wakeups)
    reconciler = Reconciler(timed_store, on_woken=wakeups.tasks_pending)
    wakeups.on_parked = reconciler.parked_until
    await timed_store.ingest(Task("p", "plan"))
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(plans.run)
        await nursery.start(research.run)
        nursery.start_soon(lambda: reconciler.run(interval=5.0))
        await wait_until(lambda: _is(timed_store, "p", S.RESULT), within=600)
        plans.request_stop()
        research.request_stop()
        nursery.cancel_scope.cancel()
    record = await timed_store.get("p")
    assert record is not None
    assert record.result == " | ".join(f"notes on topic {i}" for i in range(4))
    assert seen["planner"] == ["plan", "plan"]  # before the join, and after it
    assert sorted(seen["researcher"]) == [f"topic {i}" for i in range(4)]
    for i in range(4):  # each child was assigned by the lead to the research worker
        moves = [
            (e.dst, e.worker, e.actor) for e in await timed_store.journal(child_id("p", f"r{i}"))
        ]
        assert (S.ASSIGNED, "research", "lead") in moves
