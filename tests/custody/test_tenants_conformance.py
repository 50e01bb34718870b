"""Conformance: fair shares among tenants (issue #38), on every backend.

A task's turn among the tenants is fixed at ingest (``custody._tenants``): a tenant's new task
queues one step (``1 / weight``) past the later of its own last pending turn and the queue's
clock (the earliest tenant turn pending at its priority). Claims and the lead's view read the
queue by priority, turn, age; a room's order still holds.
"""

from __future__ import annotations

import pytest

from tether.bridge import CustodyState, Task
from tether.bridge.custody import Store
from tether.bridge.custody._tenants import TenantView


def _of(tenant: str | None, id: str, **fields: str) -> Task:
    return Task(id, "hi", headers={} if tenant is None else {"tenant": tenant}, **fields)


async def _claim_all(store: Store) -> list[str]:
    return [c.task.id for c in await store.claim_many("w1", 100, leaderless=True)]


async def _view_order(store: Store) -> list[str]:
    return [t.id for t in (await store.pool_view(pending_limit=100)).pending]


async def test_a_tenants_burst_does_not_starve_another_tenants_messages(store: Store) -> None:
    for i in range(20):
        await store.ingest(_of("a", f"a{i}"))
    first = await store.claim_many("w1", 5, leaderless=True)
    assert [c.task.id for c in first] == [f"a{i}" for i in range(5)]
    for i in range(3):  # b's messages start at the clock: a's earliest turn still pending
        await store.ingest(_of("b", f"b{i}"))
    for i in (20, 21):  # a's new ones queue behind its own backlog
        await store.ingest(_of("a", f"a{i}"))
    expected = ["a5", "a6", "b0", "a7", "b1", "a8", "b2", *(f"a{i}" for i in range(9, 22))]
    assert await _view_order(store) == expected  # the lead plans in this order
    assert await _claim_all(store) == expected  # and a leaderless claim takes it


async def test_a_tenant_of_weight_two_takes_two_turns_to_anothers_one(store: Store) -> None:
    await store.set_tenant_weight("heavy", 2)
    for i in range(6):
        await store.ingest(_of("heavy", f"h{i}"))
    for i in range(3):
        await store.ingest(_of("light", f"l{i}"))
    assert await _claim_all(store) == ["h0", "h1", "h2", "l0", "h3", "h4", "l1", "h5", "l2"]
    assert await store.tenant_views() == [TenantView("heavy", 2.0, 0)]


async def test_priority_orders_before_turns_and_untenanted_tasks_before_tenants(
    store: Store,
) -> None:
    for i in range(3):
        await store.ingest(_of("a", f"a{i}"))
    await store.ingest(_of("b", "b-low", priority="low"))
    await store.ingest(_of("a", "a-urgent", priority="urgent"))
    await store.ingest(_of(None, "mine"))  # nobody's share: turn 0
    assert await _claim_all(store) == ["a-urgent", "mine", "a0", "a1", "a2", "b-low"]


async def test_a_rooms_order_holds_whatever_the_turns(store: Store) -> None:
    for i in range(4):
        await store.ingest(_of("a", f"a{i}"))
    await store.ingest(_of("a", "r-first", room="r"), room_policy="serial")  # turn 5
    await store.ingest(_of("b", "r-second", room="r"), room_policy="serial")  # turn 2
    claims = await store.claim_many("w1", 100, leaderless=True)
    assert [c.task.id for c in claims] == ["a0", "a1", "a2", "a3", "r-first"]
    await store.complete(claims[-1], "done")
    assert await _claim_all(store) == []  # the room waits for its reply to be delivered
    await store.mark_delivered("r-first")
    assert await _claim_all(store) == ["r-second"]


async def test_tenant_views_count_pending_tasks_and_show_weights(store: Store) -> None:
    assert await store.tenant_views() == []
    for i in range(3):
        await store.ingest(_of("a", f"a{i}"))
    await store.ingest(_of("b", "b0"))
    await store.ingest(_of(None, "n0"))
    await store.set_tenant_weight("c", 0.5)
    await store.set_tenant_weight("b", 3)
    assert await store.tenant_views() == [
        TenantView("a", 1.0, 3),
        TenantView("b", 3.0, 1),
        TenantView("c", 0.5, 0),
    ]
    await store.claim_many("w1", 2, leaderless=True)  # n0 (no tenant), then a0
    assert [(v.tenant, v.pending) for v in await store.tenant_views()] == [
        ("a", 2),
        ("b", 1),
        ("c", 0),
    ]


async def test_bad_tenants_and_weights_are_refused_naming_them(store: Store) -> None:
    with pytest.raises(ValueError, match="tenant 'bad name'"):
        await store.set_tenant_weight("bad name", 1)
    for weight in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="weight must be finite and > 0"):
            await store.set_tenant_weight("a", weight)
    with pytest.raises(TypeError, match="weight must be a number"):
        await store.set_tenant_weight("a", "2")  # type: ignore[arg-type]
    assert await store.tenant_views() == []


async def test_assignments_a_newer_task_outranks_go_back_to_pending_the_worst_first(
    store: Store,
) -> None:
    """Issue #47, item 2: what a lead assigned ahead of a worker's free slots does not keep
    its place against a task with a better turn that came later."""
    for i in range(5):
        await store.ingest(_of("acme", f"a{i}"))
    [running] = await store.claim_many("w1", 1, leaderless=True)
    assert running.task.id == "a0"
    assert await store.assign_many([(f"a{i}", "w1") for i in (1, 2, 3, 4)]) == [True] * 4
    await store.ingest(_of("globex", "g0"))
    assert await _view_order(store) == ["g0"]
    assert sorted(await store.return_outranked("g0", limit=2)) == ["a3", "a4"]  # the worst two
    assert await _view_order(store) == ["g0", "a3", "a4"]
    assert [await store.state(f"a{i}") for i in (1, 2)] == [CustodyState.ASSIGNED] * 2
    assert await store.return_outranked("a3") == []  # a1 and a2 come before it
    assert await store.return_outranked("a1") == []  # not pending: nothing
    record = await store.get("a4")
    assert record is not None
    assert (record.attempt, record.owner) == (1, None)  # a return spends nothing
