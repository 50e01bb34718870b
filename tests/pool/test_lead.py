"""The lead's rules, one sweep at a time on a store whose clock the test moves."""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from pathlib import Path

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import PoolView, SweepPlanner
from tether.bridge.custody._roles import plan_then_assign
from tether.bridge.pool import PoolLead, SweepReport
from tether.bridge.pool._liveness import live_lead

S = CustodyState


def lead(store: SqliteStore, **options: object) -> PoolLead:
    options.setdefault("dead_after", 10.0)
    options.setdefault("stuck_after", 30.0)
    return PoolLead(store, **options)  # type: ignore[arg-type]


async def owners(store: SqliteStore, *ids: str) -> list[tuple[S, str | None]]:
    out = []
    for id in ids:
        rec = await store.get(id)
        assert rec is not None
        out.append((rec.state, rec.owner))
    return out


async def test_urgent_is_assigned_before_a_low_backlog(store: SqliteStore) -> None:
    for i in range(50):
        await store.ingest(Task(f"low-{i}", "x", priority="low"))
    await store.ingest(Task("normal", "x"))
    await store.ingest(Task("urgent", "x", priority="urgent"))
    await store.beat("w1", "worker", 2)
    report = await lead(store).sweep_once()
    assert [a.id for a in report.assigned] == ["urgent", "normal"]
    assert report.waiting == 50  # the backlog waits: the only worker is at its capacity
    assert await store.state("low-0") is S.PENDING


async def test_least_loaded_with_round_robin_and_capacity(store: SqliteStore) -> None:
    for name, cap in (("wa", 2), ("wb", 2), ("wc", 1)):
        await store.beat(name, "worker", cap)
    await store.ingest(Task("pre", "x"))
    await store.assign("pre", "wa")
    for i in range(6):
        await store.ingest(Task(f"t{i}", "x"))
    report = await lead(store).sweep_once()
    # wa already has one: wb and wc first (round robin by name), then wa/wb; wc is full at 1
    assert [(a.id, a.worker) for a in report.assigned] == [
        ("t0", "wb"),
        ("t1", "wc"),
        ("t2", "wa"),
        ("t3", "wb"),
    ]
    assert report.waiting == 2


async def test_round_robin_spreads_ties_across_sweeps(store: SqliteStore) -> None:
    for name in ("wa", "wb", "wc"):
        await store.beat(name, "worker", 10)
    the_lead = lead(store)
    picks = []
    for i in range(3):
        await store.ingest(Task(f"t{i}", "x"))
        (assigned,) = (await the_lead.sweep_once()).assigned
        picks.append(assigned.worker)
        claim = await store.claim(assigned.worker)
        assert claim is not None
        await store.complete(claim, "done")
    assert picks == ["wa", "wb", "wc"]


async def test_affinity_is_kept_and_moves_when_its_worker_dies(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    await store.beat("wa", "worker", 5)
    await store.beat("wb", "worker", 5)
    the_lead = lead(store)
    await store.ingest(Task("r1", "x", room="room"), room_policy="concurrent")
    (first,) = (await the_lead.sweep_once()).assigned
    keeper = first.worker
    other = "wb" if keeper == "wa" else "wa"
    # the keeper is now more loaded than the other worker, yet the room's tasks follow it
    for i in range(3):
        await store.ingest(Task(f"r1-{i}", "x", room="room"), room_policy="concurrent")
    report = await the_lead.sweep_once()
    assert {(a.worker, a.why) for a in report.assigned} == {(keeper, "affinity")}
    # the keeper dies: its assignments go back to pending (not to the other worker) ...
    fake_clock.advance(11)
    await store.beat(other, "worker", 5)
    report = await the_lead.sweep_once()
    assert {r.worker for r in report.returned} == {keeper}
    assert {r.why for r in report.returned} == {"dead_worker"}
    assert report.assigned == ()
    assert await store.counts() == {**dict.fromkeys(S, 0), S.PENDING: 4}
    # ... and the next sweep gives the room to the live worker, which keeps it from then on
    report = await the_lead.sweep_once()
    assert {a.worker for a in report.assigned} == {other}
    await store.ingest(Task("r1-later", "x", room="room"), room_policy="concurrent")
    (later,) = (await the_lead.sweep_once()).assigned
    assert (later.worker, later.why) == (other, "affinity")


async def test_a_full_keeper_makes_its_room_wait(store: SqliteStore) -> None:
    await store.beat("wa", "worker", 1)
    await store.beat("wb", "worker", 1)
    the_lead = lead(store)
    await store.ingest(Task("a", "x", room="r"), room_policy="concurrent")
    (first,) = (await the_lead.sweep_once()).assigned
    await store.ingest(Task("b", "x", room="r"), room_policy="concurrent")
    report = await the_lead.sweep_once()
    assert report.assigned == ()
    assert report.waiting == 1
    claim = await store.claim(first.worker)
    assert claim is not None
    await store.complete(claim, "ok")
    (second,) = (await the_lead.sweep_once()).assigned
    assert second.worker == first.worker


async def test_a_dead_workers_assignment_returns_while_a_live_claim_stays(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    await store.beat("dead", "worker", 4)
    await store.beat("live", "worker", 4)
    for id in ("d1", "d2", "l1"):
        await store.ingest(Task(id, "x"))
    await store.assign_many([("d1", "dead"), ("d2", "dead"), ("l1", "live")])
    live_claim = await store.claim("live")
    assert live_claim is not None
    dead_claim = await store.claim("dead")  # the dead worker's claim is a lease: not the lead's
    assert dead_claim is not None
    assert dead_claim.task.id == "d1"
    fake_clock.advance(5)
    live_claim = await store.renew(live_claim)
    await store.beat("live", "worker", 4)
    fake_clock.advance(6)  # "dead" last beat 11 s ago; "live" 6 s ago
    report = await lead(store).sweep_once()
    assert report.live_workers == ("live",)
    assert [(r.id, r.worker, r.why) for r in report.returned] == [("d2", "dead", "dead_worker")]
    assert report.returned[0].age == pytest.approx(11)
    assert report.assigned == ()  # never straight to another worker
    assert await owners(store, "d1", "d2", "l1") == [
        (S.CLAIMED, "dead"),
        (S.PENDING, None),
        (S.CLAIMED, "live"),
    ]
    report = await lead(store).sweep_once()
    assert [(a.id, a.worker) for a in report.assigned] == [("d2", "live")]


async def test_an_assignment_newer_than_the_sweeps_clock_reading_is_never_a_negative_age(
    store: SqliteStore, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 33: "assigned -6.4s ago". A lead whose clock reading is behind the time an
    assignment was written (another lead wrote it while this one waited on the store) says
    0 s, not a negative age."""
    await store.beat("dead", "worker", 4)
    await store.ingest(Task("d1", "x"))
    fake_clock.advance(20)
    await store.assign_many([("d1", "dead")])  # written at 20 s; "dead" last beat at 0 s
    behind = fake_clock() - 6.4
    report = await lead(store, clock=lambda: behind).sweep_once()
    [returned] = report.returned
    assert (returned.id, returned.why, returned.age) == ("d1", "dead_worker", 0.0)
    assert "assigned 0.0s ago" in caplog.text


async def test_an_assignment_to_a_worker_that_never_beat_is_returned(store: SqliteStore) -> None:
    await store.ingest(Task("t", "x"))
    await store.assign("t", "ghost")
    report = await lead(store).sweep_once()
    assert [(r.id, r.why) for r in report.returned] == [("t", "dead_worker")]


async def test_a_stuck_assignment_is_returned(store: SqliteStore, fake_clock: FakeClock) -> None:
    await store.beat("w1", "worker", 4)
    the_lead = lead(store)
    await store.ingest(Task("t", "x"))
    (a,) = (await the_lead.sweep_once()).assigned
    fake_clock.advance(29)
    await store.beat("w1", "worker", 4)
    assert (await the_lead.sweep_once()).returned == ()
    fake_clock.advance(1)
    await store.beat("w1", "worker", 4)
    report = await the_lead.sweep_once()
    assert [(r.id, r.worker, r.why) for r in report.returned] == [("t", a.worker, "stuck")]
    assert report.assigned == ()
    assert await store.state("t") is S.PENDING


async def test_a_stuck_assignment_is_deferred_while_its_worker_is_busy_up_to_the_cap(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    await store.beat("w1", "worker", 4)
    the_lead = lead(store, stuck_cap=60.0)
    for id in ("busy", "waiting"):
        await store.ingest(Task(id, "x"))
    await store.assign_many([("busy", "w1"), ("waiting", "w1")])
    claim = await store.claim("w1")
    assert claim is not None
    assert claim.task.id == "busy"
    for step in range(59):
        fake_clock.advance(1)
        claim = await store.renew(claim)
        await store.beat("w1", "worker", 4)
        report = await the_lead.sweep_once()
        assert report.returned == ()
        if step + 1 >= 30:
            assert [(d.id, d.claims) for d in report.deferred] == [("waiting", 1)]
    fake_clock.advance(1)
    await store.beat("w1", "worker", 4)
    report = await the_lead.sweep_once()
    assert [(r.id, r.why) for r in report.returned] == [("waiting", "stuck")]
    assert await store.state("busy") is S.CLAIMED


async def test_the_lead_beats_and_reports_a_versioned_document(store: SqliteStore) -> None:
    await store.beat("w1", "worker", 1)
    await store.ingest(Task("t", "x"))
    report = await lead(store, name="lead-1").sweep_once()
    assert any(m.name == "lead-1" and m.role == "lead" for m in await store.workers())
    doc = report.to_document()
    assert doc["schema_version"] == 1
    assert SweepReport.from_document(doc) == report
    with pytest.raises(ValueError, match="schema_version"):
        SweepReport.from_document({**doc, "schema_version": 99})
    with pytest.raises(ValueError, match="invalid SweepReport"):
        SweepReport.from_document({**doc, "waiting": "3"})


class RacingStore(SqliteStore):
    """A worker claims leaderlessly right after every pool view is read."""

    async def pool_view(
        self,
        *,
        pending_limit: int = 1000,
        skip_rooms: Collection[str] = (),
        skip_queues: Collection[str] = (),
    ) -> PoolView:
        view = await super().pool_view(
            pending_limit=pending_limit, skip_rooms=skip_rooms, skip_queues=skip_queues
        )
        assert await self.claim("racer", leaderless=True) is not None
        return view

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        """In two transactions, as a backend without one for the sweep does (PostgreSQL)."""
        return await plan_then_assign(self, decide, pending_limit=pending_limit)


async def test_a_lost_race_is_reported_not_forced(tmp_path: Path, fake_clock: FakeClock) -> None:
    """A worker's claim between the view and the assignment wins; nothing breaks."""
    store = await RacingStore.open(tmp_path / "race.db", clock=fake_clock)
    try:
        await store.beat("w1", "worker", 1)
        await store.ingest(Task("t", "x"))
        report = await lead(store).sweep_once()
        assert report.lost == ("t",)
        assert report.assigned == ()
        assert await owners(store, "t") == [(S.CLAIMED, "racer")]
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("sweep_interval", 0),
        ("dead_after", -1),
        ("stuck_after", float("nan")),
        ("stuck_cap", 1.0),
        ("capacity", 0),
        ("name", "no spaces"),
    ],
)
async def test_bad_lead_options_are_refused(store: SqliteStore, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option if option != "name" else "worker name"):
        lead(store, **{option: value})


async def test_a_busy_room_at_the_head_of_the_queue_does_not_starve_idle_workers(
    store: SqliteStore,
) -> None:
    """The first page of pending tasks all belong to a room whose keeper is full: the lead
    pages past that room, so the other worker still gets the tasks anyone may take."""
    await store.beat("wa", "worker", 4)
    await store.beat("wb", "worker", 4)
    await store.ingest(Task("first", "x", room="busy"), room_policy="concurrent")
    await store.assign("first", "wa")  # wa keeps the room "busy"
    for i in range(3):
        await store.ingest(Task(f"pre{i}", "x"))
        await store.assign(f"pre{i}", "wa")  # and is full
    await store.ingest_many(
        [Task(f"r{i:03}", "x", room="busy") for i in range(100)], room_policy="concurrent"
    )
    await store.ingest_many([Task(f"o{i}", "x") for i in range(6)])  # anyone may take these
    report = await lead(store, pending_limit=10).sweep_once()
    assert sorted((a.id, a.worker) for a in report.assigned) == [(f"o{i}", "wb") for i in range(4)]
    assert report.waiting == 12  # 10 of the busy room read on the first page, 2 over wb's capacity
    assert await store.state("r000") is S.PENDING


async def test_paging_past_rooms_its_own_plan_filled_keeps_what_each_page_assigned(
    store: SqliteStore,
) -> None:
    """Rooms whose keepers this very sweep fills are paged past; what the earlier pages
    assigned must still be assigned (a sweep that planned only its last page assigned nothing
    once every room had been paged past, and a restarted bridge stalled)."""
    for worker, room in (("wa", "A"), ("wb", "B")):
        await store.beat(worker, "worker", 2)
        await store.ingest(Task(f"seed-{room}", "x", room=room), room_policy="concurrent")
        await store.assign(f"seed-{room}", worker)  # the worker keeps the room ...
        claim = await store.claim(worker)
        assert claim is not None
        await store.complete(claim, "done")  # ... and holds nothing now
    await store.beat("wc", "worker", 2)
    await store.ingest_many(
        [Task(f"a{i}", "x", room="A") for i in range(4)], room_policy="concurrent"
    )
    await store.ingest_many(
        [Task(f"b{i}", "x", room="B") for i in range(4)], room_policy="concurrent"
    )
    await store.ingest_many([Task(f"f{i}", "x") for i in range(2)])
    report = await lead(store, pending_limit=4).sweep_once()
    assert sorted((a.id, a.worker) for a in report.assigned) == [
        ("a0", "wa"),
        ("a1", "wa"),
        ("b0", "wb"),
        ("b1", "wb"),
        ("f0", "wc"),
        ("f1", "wc"),
    ]
    assert report.waiting == 4  # a2, a3, b2, b3 wait for their keepers


async def test_the_lead_beats_again_at_once_after_its_clock_stepped_back(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    """A beat from the future counts as dead (``is_alive``): after the clock steps back, the
    lead's next sweep must beat at the new time, or workers go leaderless until the clock has
    caught up with the old beat."""
    the_lead = lead(store, name="lead-1", sweep_interval=0.5)
    await store.beat("w1", "worker", 4)
    await the_lead.sweep_once()
    fake_clock.advance(-30)  # an NTP step back
    await store.beat("w1", "worker", 4)
    await the_lead.sweep_once()
    members = await store.workers()
    assert live_lead(members, fake_clock(), 10.0) is not None


@pytest.mark.parametrize(("work_from", "said"), [(0.0, "(work was waiting)"), (46.0, None)])
async def test_the_first_assignment_line_tells_idle_time_from_delay(
    store: SqliteStore,
    fake_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    work_from: float,
    said: str | None,
) -> None:
    """Issue 32.9: "first assignment as leader 46.129s after taking over" read as a slow
    takeover; there was no work for 46 s."""
    caplog.set_level(logging.INFO, logger="tether.bridge.pool.lead")
    the_lead = lead(store, name="l1")
    the_lead.leading, the_lead.leading_since = True, fake_clock()  # it has just taken over
    await store.beat("w1", "worker", 2)
    if work_from:
        await the_lead.sweep_once()  # nothing to assign yet
        fake_clock.advance(work_from)
        await store.beat("w1", "worker", 2)
    await store.ingest(Task("t", "x"))
    fake_clock.advance(0.25)
    await the_lead.sweep_once()
    (line,) = [r.getMessage() for r in caplog.records if "first assignment" in r.getMessage()]
    if said is None:
        said = "(no work to assign before 46.250s)"
    assert re.fullmatch(
        rf"lead l1: first assignment as leader {work_from + 0.25:.3f}s after taking over "
        rf"{re.escape(said)} \(store clock [0-9.]+\)",
        line,
    ), line
