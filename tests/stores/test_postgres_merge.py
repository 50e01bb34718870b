"""PostgreSQL merges the ``complete_many`` calls of a process that meet in flight (issue 50):
workers answering together cost one statement, each reply still under its own fence."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from support.clock import FakeClock
from support.custody import LEASE_S
from tether.bridge import CustodyState, PostgresStore, Task
from tether.bridge.custody import Claim
from tether.bridge.stores.postgres._merge import CompletionMerge, Fence, Item


async def _claims(store: PostgresStore, worker: str, n: int) -> list[Claim]:
    await store.ingest_many([Task(f"{worker}-{i}", "hi") for i in range(n)])
    return list(await store.claim_many(worker, n, leaderless=True))


async def test_workers_answering_together_share_one_statement(postgres_dsn: str) -> None:
    store = await PostgresStore.open(postgres_dsn, schema=f"s_{secrets.token_hex(5)}")
    try:
        held = {w: await _claims(store, w, 2) for w in ("w1", "w2", "w3", "w4")}
        merge = store.parts.custody.completions  # type: ignore[attr-defined]
        assert isinstance(merge, CompletionMerge)
        answers: dict[str, list[bool]] = {}

        async def answer(worker: str, claims: Sequence[Claim]) -> None:
            answers[worker] = await store.complete_many([(c, f"by {worker}") for c in claims])

        async with trio.open_nursery() as nursery:
            for worker, claims in held.items():
                nursery.start_soon(answer, worker, claims)
        assert answers == {w: [True, True] for w in held}
        # calls that meet before or during a statement share one (the first may go alone)
        assert merge.merge.statements <= 2
        assert merge.merge.statements + merge.merge.merged == 4
        for worker, claims in held.items():
            for claim in claims:
                task = await store.get(claim.task.id)
                assert task is not None
                assert (task.state, task.result) == (CustodyState.RESULT, f"by {worker}")
    finally:
        await store.aclose()


async def test_a_fence_in_two_merged_calls_moves_once(postgres_dsn: str) -> None:
    store = await PostgresStore.open(postgres_dsn, schema=f"s_{secrets.token_hex(5)}")
    try:
        first, second = await _claims(store, "w1", 2)
        calls = {
            "a": [(first, "a")],
            "b": [(second, "b"), (first, "b again")],
            "c": [(first, "c")],
        }
        answers: dict[str, list[bool]] = {}

        async def answer(name: str) -> None:
            answers[name] = await store.complete_many(calls[name])

        async with trio.open_nursery() as nursery:
            for name in calls:
                nursery.start_soon(answer, name)
        assert store.parts.custody.completions.merge.merged > 0  # type: ignore[attr-defined]
        assert answers["b"][0] is True
        took = [
            body
            for name, outcomes in calls.items()
            for (claim, body), moved in zip(outcomes, answers[name], strict=True)
            if claim is first and moved
        ]
        assert len(took) == 1  # the fence moved once, whichever call carried it first
        assert (await store.get(first.task.id)).result == took[0]  # type: ignore[union-attr]
        assert (await store.get(second.task.id)).result == "b"  # type: ignore[union-attr]
    finally:
        await store.aclose()


class _Recorder:
    """Stores items as the store's statement would, each statement waiting for its own gate
    first, and cancellable there (as ``PostgresDb.run`` is: a cancelled call ran nothing)."""

    def __init__(self, statements: int) -> None:
        self.stored: list[list[str]] = []
        self.gates = [trio.Event() for _ in range(statements)]
        self.begun = 0

    async def __call__(self, items: Sequence[Item], no_send: bool, now: float) -> set[Fence]:
        self.begun += 1
        await self.gates[self.begun - 1].wait()
        self.stored.append([id for _, _, id, _ in items])
        return {(w, r, id) for w, r, id, _ in items}


def _caller(merge: CompletionMerge, answers: dict[str, list[bool]]):  # type: ignore[no-untyped-def]
    async def call(id: str) -> None:
        answers[id] = await merge.complete_many([("w", 1, id, "")], False, 1.0)

    return call


async def test_a_cancelled_waiting_call_stores_nothing_and_the_rest_go_on() -> None:
    store = _Recorder(2)
    merge = CompletionMerge(store)
    answers: dict[str, list[bool]] = {}
    call = _caller(merge, answers)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "a")  # takes the turn; its statement waits at its gate
        await trio.testing.wait_all_tasks_blocked()
        waiting = trio.CancelScope()

        async def doomed() -> None:
            with waiting:
                await merge.complete_many([("w", 1, "gone", "")], False, 1.0)

        nursery.start_soon(doomed)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(call, "b")
        await trio.testing.wait_all_tasks_blocked()
        waiting.cancel()  # waiting for the turn, not taken yet: leaves with nothing stored
        await trio.testing.wait_all_tasks_blocked()
        for gate in store.gates:
            gate.set()
    assert store.stored == [["a"], ["b"]]
    assert answers == {"a": [True], "b": [True]}


async def test_calls_taken_by_a_turn_cancelled_before_its_statement_ran_go_in_the_next() -> None:
    store = _Recorder(3)
    merge = CompletionMerge(store)
    answers: dict[str, list[bool]] = {}
    call = _caller(merge, answers)
    cancelled: list[bool] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "x")  # the first turn: its statement waits at gate 0
        await trio.testing.wait_all_tasks_blocked()
        leader = trio.CancelScope()

        async def led() -> None:
            with leader:
                await merge.complete_many([("w", 1, "l", "")], False, 1.0)
            cancelled.append(leader.cancelled_caught)

        nursery.start_soon(led)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(call, "y")
        await trio.testing.wait_all_tasks_blocked()
        store.gates[0].set()  # "x" stored; "l" takes the turn with "y", waits at gate 1
        await trio.testing.wait_all_tasks_blocked()
        assert store.begun == 2
        store.gates[2].set()
        leader.cancel()  # before its statement ran: "y" takes a turn of its own
    assert store.stored == [["x"], ["y"]]
    assert answers == {"x": [True], "y": [True]}
    assert cancelled == [True]


async def _scene(store: PostgresStore, clock: FakeClock, suspect: bool) -> None:
    """Assignments for three workers of one process, rooms among them; with ``suspect`` a
    task whose process died waits as a suspect."""
    if suspect:
        await store.ingest(Task("s1", "x"))
        await store.beat("old-w1", "worker", 10)
        [doomed] = await store.claim_many("old-w1", 1, leaderless=True)
        clock.advance(LEASE_S + 1)  # its process went silent: a crash expiry
        [expired] = await store.expire_leases()
        assert (expired.id, expired.crash) == (doomed.task.id, True)
    await store.ingest_many(
        [Task("r1-a", "x", room="r1"), Task("r1-b", "x", room="r1"), Task("r2-a", "x", room="r2")]
        + [Task(f"p{i}", "x") for i in range(5)]
    )
    for worker in ("pool-w1", "pool-w2", "pool-w3"):
        await store.beat(worker, "worker", 10)
    pairs = [("r1-a", "pool-w1"), ("p0", "pool-w1"), ("p1", "pool-w1"), ("r1-b", "pool-w2")]
    pairs += [("r2-a", "pool-w2"), ("p2", "pool-w2"), ("p3", "pool-w3"), ("p4", "pool-w3")]
    assert all(await store.assign_many(pairs))


@pytest.mark.parametrize("quarantine", [None, 2], ids=["in-process", "quarantine"])
@pytest.mark.parametrize("suspect", [False, True], ids=["usual", "suspect-in-play"])
async def test_a_merged_claim_takes_what_each_workers_own_claim_would(
    postgres_dsn: str, suspect: bool, quarantine: int | None
) -> None:
    """The same scene in two schemas: the workers' claims merged into one statement, and each
    worker's own claim in turn, take the same tasks for the same workers (a bridge's workers
    claim with quarantine places: suspects go to them)."""
    taken: list[dict[str, list[str]]] = []
    for merged in (True, False):
        clock = FakeClock()
        schema = f"s_{secrets.token_hex(5)}"
        store = await PostgresStore.open(postgres_dsn, schema=schema, clock=clock, lease_s=LEASE_S)
        try:
            await _scene(store, clock, suspect)
            wants = [("pool-w1", 2), ("pool-w2", 2), ("pool-w3", 1)]
            now = clock()
            if merged:
                custody = store.parts.custody
                calls = [
                    (w, n, now, now + store.lease_s, quarantine, ["default"]) for w, n in wants
                ]
                got = await custody._claim_assigned(calls)  # type: ignore[attr-defined]
            else:
                got = [await store.claim_many(w, n, quarantine=quarantine) for w, n in wants]
            pairs = zip(wants, got, strict=True)
            ids = {w: [c.task.id for c in claims] for (w, _), claims in pairs}
            taken.append(ids)
            for (worker, _), claims in zip(wants, got, strict=True):
                assert all(c.worker == worker for c in claims)
                for claim in claims:  # each claim is fenced as the worker's own
                    await store.complete(claim, "done")
        finally:
            await store.aclose()
    assert taken[0] == taken[1]
    if suspect and quarantine is None:  # the process takes the suspect, alone
        assert taken[0] == {"pool-w1": ["s1"], "pool-w2": [], "pool-w3": []}
    elif suspect:  # the suspect to a quarantine place, ordinary work beside it
        assert taken[0] == {"pool-w1": ["s1", "r1-a"], "pool-w2": ["r2-a", "p2"], "pool-w3": ["p3"]}
    else:  # r1-b waits behind r1-a, its room's earlier message
        assert taken[0] == {"pool-w1": ["r1-a", "p0"], "pool-w2": ["r2-a", "p2"], "pool-w3": ["p3"]}


async def test_members_beating_together_share_one_statement(postgres_dsn: str) -> None:
    """A process's workers beat on one grid: one statement, every member's row for each."""
    store = await PostgresStore.open(postgres_dsn, schema=f"s_{secrets.token_hex(5)}")
    try:
        await store.beat("other-w1", "worker", 3)  # another process's member
        beats = store.parts.custody.beats  # type: ignore[attr-defined]
        before = beats.statements
        seen: dict[str, list[tuple[str, str, int]]] = {}

        async def beat(name: str, role: str, capacity: int) -> None:
            members = await store.beat(name, role, capacity)  # type: ignore[arg-type]
            seen[name] = [(m.name, m.role, m.capacity) for m in members]

        async with trio.open_nursery() as nursery:
            for i in range(1, 5):
                nursery.start_soon(beat, f"pool-w{i}", "worker", 4 * i)
            nursery.start_soon(beat, "pool-lead", "lead", 0)
        everyone = [("other-w1", "worker", 3), ("pool-lead", "lead", 0)]
        everyone += [(f"pool-w{i}", "worker", 4 * i) for i in range(1, 5)]
        assert seen == {name: everyone for name, _, _ in everyone if name != "other-w1"}
        assert beats.statements - before <= 2  # the first may go alone
        assert [(m.name, m.capacity) for m in await store.workers()] == [
            (name, capacity) for name, _, capacity in everyone
        ]
    finally:
        await store.aclose()
