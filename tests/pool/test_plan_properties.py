"""Properties of ``plan_sweep`` over random pool views (hypothesis)."""

from __future__ import annotations

import collections

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.bridge.custody import Assignment, PendingTask, PoolView, WorkerInfo
from tether.bridge.pool import is_alive, plan_sweep

NOW = 10_000.0
DEAD_AFTER = 10.0
STUCK_AFTER = 30.0
STUCK_CAP = 90.0
NAMES = ["wa", "wb", "wc", "wd"]
ROOM_NAMES = ["r1", "r2", "r3"]
ROOMS: list[str | None] = [None, *ROOM_NAMES]


@st.composite
def views(draw: st.DrawFn) -> PoolView:
    workers = tuple(
        WorkerInfo(
            name,
            "worker",
            draw(st.integers(0, 4)),
            NOW - draw(st.sampled_from([0.0, 5.0, 10.0, 11.0, -0.5, -5.0])),
            0.0,
        )
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True))
    )
    ids = iter(f"t{i}" for i in range(1000))
    assigned = tuple(
        Assignment(
            next(ids),
            draw(st.sampled_from([*NAMES, "ghost"])),
            draw(st.sampled_from(ROOMS)),
            NOW - draw(st.sampled_from([0.0, 29.0, 30.0, 60.0, 90.0])),
        )
        for _ in range(draw(st.integers(0, 6)))
    )
    claims = {
        n: draw(st.integers(0, 3)) for n in draw(st.lists(st.sampled_from(NAMES), unique=True))
    }
    pending = tuple(
        PendingTask(
            next(ids),
            room=draw(st.sampled_from(ROOMS)),
            priority=draw(st.sampled_from(["urgent", "normal", "low"])),
        )
        for _ in range(draw(st.integers(0, 12)))
    )
    pending = tuple(sorted(pending, key=lambda t: ["urgent", "normal", "low"].index(t.priority)))
    rooms = {r: draw(st.sampled_from(NAMES)) for r in ROOM_NAMES if draw(st.booleans())}
    busy = frozenset(r for r in ROOM_NAMES if draw(st.booleans()))
    return PoolView(NOW, workers, assigned, claims, pending, rooms, busy)


@settings(max_examples=300, deadline=None)
@given(views())
def test_a_plan_keeps_every_rule(view: PoolView) -> None:
    plan = plan_sweep(
        view, now=NOW, dead_after=DEAD_AFTER, stuck_after=STUCK_AFTER, stuck_cap=STUCK_CAP
    )
    live = {w.name: w for w in view.workers if is_alive(w, NOW, DEAD_AFTER)}
    # dead workers are exactly the non-live holders of assignments
    assert set(plan.dead_workers) == {a.worker for a in view.assigned if a.worker not in live}
    # stuck returns: only live workers' assignments past stuck_after, idle or past the cap
    for r in plan.stuck:
        assert r.worker in live
        assert r.age >= STUCK_AFTER
        assert view.claims.get(r.worker, 0) == 0 or r.age >= STUCK_CAP
    # assignments: pending tasks only, once each, to live workers, never over capacity
    pending_ids = [t.id for t in view.pending]
    assert len({a.id for a in plan.assign}) == len(plan.assign)
    assert {a.id for a in plan.assign} <= set(pending_ids)
    returned = {r.id for r in plan.stuck} | {
        a.id for a in view.assigned if a.worker in plan.dead_workers
    }
    kept = collections.Counter(a.worker for a in view.assigned if a.id not in returned)
    new = collections.Counter(a.worker for a in plan.assign)
    for name, count in new.items():
        assert name in live
        assert kept[name] + view.claims.get(name, 0) + count <= live[name].capacity
    # affinity: a room with a run in flight (claimed, or assigned and kept) whose keeper lives
    # goes to the keeper or waits; a room with nothing in flight may move (a preference)
    by_id = {t.id: t for t in view.pending}
    in_flight = set(view.busy_rooms) | {
        a.room for a in view.assigned if a.room is not None and a.id not in returned
    }
    keepers = dict(view.rooms)
    for a in plan.assign:  # in queue order; what the plan assigned is in flight from then on
        room = by_id[a.id].room
        if room is None:
            continue
        keeper = keepers.get(room)
        if keeper in live and room in in_flight:
            assert (a.worker, a.why) == (keeper, "affinity")
        elif a.why == "affinity":
            assert a.worker == keeper
        keepers[room] = a.worker
        in_flight.add(room)
    # a room's tasks in one plan all go to one worker (its order is the store's, but a room
    # is never split in a sweep)
    per_room = collections.defaultdict(set)
    for a in plan.assign:
        if by_id[a.id].room is not None:
            per_room[by_id[a.id].room].add(a.worker)
    assert all(len(workers) == 1 for workers in per_room.values())
    # order: once a task free to go anywhere waits for capacity, no later such task goes
    done = {a.id: a.worker for a in plan.assign}
    keepers = dict(view.rooms)
    waited = False
    for t in view.pending:
        keeper = keepers.get(t.room) if t.room is not None else None
        if keeper not in live:
            if t.id not in done:
                waited = True
            else:
                assert not waited, f"{t.id} went while an earlier free task waited"
        if t.id in done and t.room is not None:
            keepers[t.room] = done[t.id]
    assert plan.waiting == len(view.pending) - len(plan.assign)
