"""Conformance: schedules (issue #52), on every backend.

Each due time fires once across every process on the store, as the ingest of a task whose id
names the schedule and the due time; times missed while nothing ran fire once, as the latest
(or each, with ``catch_up="all"``); a paused schedule fires nothing and resumes from now. The
fired task is a task: its room, queue and tenant apply. Time is the store's ``FakeClock``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio

from support.clock import FakeClock
from support.custody import Backend
from tether.bridge import CustodyState, PostgresStore, SqliteStore
from tether.bridge.custody import Store
from tether.bridge.custody._schedules import (
    MISSED_AFTER_S,
    SCHEDULE_HEADER,
    ScheduleError,
    ScheduleSpec,
    firing_id,
    spec_document,
)

S = CustodyState


async def _set_spec(store: Store, name: str, document: str) -> None:
    """Write a schedule's kept document by hand (what another tether version would keep)."""
    if isinstance(store, SqliteStore):
        await store.db.write(
            lambda conn: conn.execute(
                "UPDATE schedules SET spec = ? WHERE name = ?", (document, name)
            )
        )
    else:
        assert isinstance(store, PostgresStore)
        sql = f'UPDATE "{store.schema}".schedules SET spec = %s WHERE name = %s'
        await store.db.run(lambda conn: conn.execute(sql, (document, name)))


async def _ids(store: Store) -> list[str]:
    return sorted(r.task.id for r in await store.records(S.PENDING, limit=10_000))


async def test_each_due_time_fires_one_task_named_by_it(
    store: Store, fake_clock: FakeClock
) -> None:
    view = await store.add_schedule(
        ScheduleSpec("tick", "ops", "status?", every=60, queue="reports", tenant="acme")
    )
    first = fake_clock.now + 60
    assert view.next_due == first
    assert await store.fire_schedules() == []  # nothing due yet
    fake_clock.advance(60)
    assert await store.fire_schedules() == [firing_id("tick", first)]
    assert await store.fire_schedules() == []  # fired once, not again
    record = await store.get(firing_id("tick", first))
    assert record is not None
    assert record.state is S.PENDING
    task = record.task
    assert (task.body, task.room, task.queue, task.tenant) == ("status?", "ops", "reports", "acme")
    assert task.headers[SCHEDULE_HEADER] == "tick"
    fake_clock.advance(59)
    assert await store.fire_schedules() == []
    fake_clock.advance(1)
    assert await store.fire_schedules() == [firing_id("tick", first + 60)]
    [kept] = await store.schedules()
    assert (kept.next_due, kept.last_due, kept.fired) == (first + 120, first + 60, 2)
    assert kept.last_task == firing_id("tick", first + 60)
    assert await store.next_schedule_due() == first + 120


async def test_two_processes_firing_at_once_make_each_task_once(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    stores = [await backend.open(where, fake_clock) for _ in range(3)]
    try:
        await stores[0].add_schedule(ScheduleSpec("tick", "ops", "x", every=1))
        made: list[str] = []
        for _ in range(20):
            fake_clock.advance(1)

            async def fire(store: Store) -> None:
                made.extend(await store.fire_schedules())

            async with trio.open_nursery() as nursery:
                for store in stores:
                    for _ in range(2):
                        nursery.start_soon(fire, store)
        assert len(made) == len(set(made)) == 20  # each due time by one of six
        assert await _ids(stores[1]) == sorted(made)
        [view] = await stores[2].schedules()
        assert view.fired == 20
    finally:
        for store in stores:
            await store.aclose()


async def test_times_missed_while_down_fire_once_as_the_latest(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock)
    await store.add_schedule(ScheduleSpec("tick", "ops", "x", every=10))
    await store.add_schedule(ScheduleSpec("all", "ops", "y", every=10, catch_up="all"))
    start = fake_clock.now
    await store.aclose()  # everything is down for an hour
    fake_clock.advance(3600 + 5)
    store = await backend.open(where, fake_clock)  # a restart fires what was missed
    try:
        made = await store.fire_schedules()
        latest = firing_id("tick", start + 3600)
        assert latest in made
        assert len([id for id in made if id.startswith("tick~")]) == 1
        assert len([id for id in made if id.startswith("all~")]) == 360  # each, when asked
        views = {v.spec.name: v for v in await store.schedules()}
        assert views["tick"].next_due == start + 3610
        assert views["all"].next_due == start + 3610
        assert await store.fire_schedules() == []
    finally:
        await store.aclose()


async def test_a_late_but_not_missed_due_time_fires_each_time(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.add_schedule(ScheduleSpec("tick", "ops", "x", every=5))
    start = fake_clock.now
    fake_clock.advance(MISSED_AFTER_S)  # a slow pass, not an outage: each time fires
    made = await store.fire_schedules()
    assert made == [firing_id("tick", start + 5 * n) for n in range(1, 13)]


async def test_a_paused_schedule_fires_nothing_and_resumes_from_now(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.add_schedule(ScheduleSpec("tick", "ops", "x", every=10))
    assert await store.pause_schedule("tick")
    fake_clock.advance(100)
    assert await store.fire_schedules() == []
    assert await store.next_schedule_due() is None
    assert await store.resume_schedule("tick")
    view = await store.schedule("tick")
    assert view is not None
    assert (view.paused, view.next_due) == (False, fake_clock.now + 10)
    fake_clock.advance(10)
    assert len(await store.fire_schedules()) == 1
    assert await store.remove_schedule("tick")
    assert not await store.remove_schedule("tick")
    assert not await store.pause_schedule("tick")
    assert await store.schedules() == []


async def test_a_fired_task_is_idempotent_with_one_already_made(
    store: Store, fake_clock: FakeClock
) -> None:
    """A process that ingested a due time's task and died before the schedule moved on: the
    next firing of that due time makes nothing new."""
    spec = ScheduleSpec("tick", "ops", "x", every=10)
    await store.add_schedule(spec)
    fake_clock.advance(10)
    assert await store.ingest(spec.task(fake_clock.now))
    assert await store.fire_schedules() == []
    assert await _ids(store) == [firing_id("tick", fake_clock.now)]
    [view] = await store.schedules()
    assert view.next_due == fake_clock.now + 10


async def test_bad_schedules_are_refused_naming_what_was_wrong(store: Store) -> None:
    with pytest.raises(ScheduleError, match="either every or cron"):
        ScheduleSpec("x", "r", "b")
    with pytest.raises(ScheduleError, match="cron line"):
        ScheduleSpec("x", "r", "b", cron="61 * * * *")
    with pytest.raises(ScheduleError, match="time zone"):
        ScheduleSpec("x", "r", "b", cron="0 9 * * *", tz="Mars/Olympus")
    with pytest.raises(ScheduleError, match="schedule name"):
        ScheduleSpec("a~b", "r", "b", every=60)
    with pytest.raises(ScheduleError, match="every must be"):
        ScheduleSpec("x", "r", "b", every=0.5)
    await store.add_schedule(ScheduleSpec("x", "r", "b", every=60))
    with pytest.raises(ScheduleError, match="exists"):
        await store.add_schedule(ScheduleSpec("x", "r", "other", every=60))
    assert [v.spec.body for v in await store.schedules()] == ["b"]


def _local(id: str, tz: str) -> str:
    stamp = datetime.strptime(id.split("~")[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return stamp.astimezone(ZoneInfo(tz)).strftime("%a %m-%d %H:%M")


async def _fired_through(store: Store, fake_clock: FakeClock, until: datetime) -> list[str]:
    made: list[str] = []
    while fake_clock.now < until.timestamp():
        fake_clock.advance(600)  # a pass every ten minutes: nothing is late enough to be missed
        made.extend(await store.fire_schedules())
    return made


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (  # spring forward (02:00 -> 03:00): the 02:30 that does not exist runs at 03:00
            datetime(2026, 3, 27, 12, tzinfo=UTC),
            ["Sat 03-28 02:30", "Sun 03-29 03:00", "Mon 03-30 02:30"],
        ),
        (  # fall back (03:00 -> 02:00): the 02:30 that comes twice runs once
            datetime(2026, 10, 23, 12, tzinfo=UTC),
            ["Sat 10-24 02:30", "Sun 10-25 02:30", "Mon 10-26 02:30"],
        ),
    ],
)
async def test_a_cron_line_keeps_local_time_through_daylight_saving(
    store: Store, fake_clock: FakeClock, start: datetime, expected: list[str]
) -> None:
    fake_clock.now = start.timestamp()
    await store.add_schedule(
        ScheduleSpec("night", "ops", "x", cron="30 2 * * *", tz="Europe/Paris")
    )
    await store.add_schedule(
        ScheduleSpec("standup", "ops", "y", cron="0 9 * * 1-5", tz="Europe/Paris")
    )
    made = await _fired_through(store, fake_clock, start + timedelta(days=3, hours=12))
    night = [_local(id, "Europe/Paris") for id in made if id.startswith("night~")]
    standup = [_local(id, "Europe/Paris") for id in made if id.startswith("standup~")]
    assert night == expected
    assert standup == [expected[-1][:-5] + "09:00"]  # Monday, local 09:00 (not the weekend)


def test_missed_times_in_the_repeated_hour_fire_the_latest_once() -> None:
    """The reverse walk of a cron line misses a time in the hour that comes twice (DST ends);
    the latest missed due time is still the latest."""
    spec = ScheduleSpec("night", "ops", "x", cron="30 2 * * *", tz="Europe/Paris")
    paris = ZoneInfo("Europe/Paris")
    due = datetime(2026, 10, 23, 2, 30, tzinfo=paris).timestamp()
    now = datetime(2026, 10, 25, 2, 10, fold=1, tzinfo=paris).timestamp()  # the second 02:10
    fired, next_due = spec.firings(due, now)
    assert fired == [datetime(2026, 10, 25, 2, 30, tzinfo=paris).timestamp()]  # the first 02:30
    assert next_due == datetime(2026, 10, 26, 2, 30, tzinfo=paris).timestamp()
    assert spec.firings(next_due, now) == ([], next_due)  # nothing fires twice


async def test_a_schedule_this_tether_cannot_read_stops_no_other(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.add_schedule(ScheduleSpec("new", "ops", "x", every=10))
    await store.add_schedule(ScheduleSpec("old", "ops", "y", every=10))
    doc = spec_document(ScheduleSpec("new", "ops", "x", every=10)).replace(
        '"schema_version":1', '"schema_version":2'
    )
    await _set_spec(store, "new", doc)  # as a newer tether would have kept it
    fake_clock.advance(10)
    made = await store.fire_schedules()
    assert [id.split("~")[0] for id in made] == ["old"]
    assert [v.spec.name for v in await store.schedules()] == ["old"]
