"""The liveness predicate, and the lead applying it to workers (pure: hand-built views)."""

from __future__ import annotations

import pytest

from tether.bridge.custody import Assignment, PendingTask, PoolView, WorkerInfo
from tether.bridge.pool import is_alive, live_lead, plan_sweep

NOW = 1000.0


def member(name: str, age: float, role: str = "worker", capacity: int = 4) -> WorkerInfo:
    return WorkerInfo(name, role, capacity, NOW - age, NOW - 100)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("age", "alive"),
    [
        (0.0, True),
        (9.99, True),
        (10.0, True),
        (10.01, False),
        (-0.5, True),  # a small future skew is tolerated
        (-1.0, True),
        (-1.01, False),  # a beat from further in the future counts as dead
        (-3600.0, False),
    ],
)
def test_is_alive(age: float, alive: bool) -> None:
    assert is_alive(member("w", age), NOW, dead_after=10.0) is alive


def test_live_lead_picks_the_freshest_live_lead() -> None:
    members = [member("l1", 3, "lead"), member("l2", 1, "lead"), member("w", 0)]
    assert live_lead(members, NOW, 10.0) == members[1]
    assert live_lead([member("l1", 11, "lead")], NOW, 10.0) is None
    assert live_lead([member("l1", -5, "lead")], NOW, 10.0) is None
    assert live_lead([member("w", 0)], NOW, 10.0) is None


def test_the_lead_treats_a_future_beat_as_a_dead_worker() -> None:
    view = PoolView(
        at=NOW,
        workers=(member("ahead", -30), member("skewed", -0.5)),
        assigned=(Assignment("a1", "ahead", None, NOW - 1), Assignment("a2", "skewed", None, NOW)),
        claims={},
        pending=(PendingTask("p1"), PendingTask("p2")),
        rooms={},
    )
    plan = plan_sweep(view, now=NOW, dead_after=10.0, stuck_after=30.0, stuck_cap=90.0)
    assert plan.dead_workers == ("ahead",)
    assert [(a.id, a.worker) for a in plan.assign] == [("p1", "skewed"), ("p2", "skewed")]
