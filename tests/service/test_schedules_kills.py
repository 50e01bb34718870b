"""Schedules and events under SIGKILL (issue #52), with real bridge processes.

Schedules: three bridges on one PostgreSQL store and a schedule every second while bridges are
SIGKILLed and restarted in turn: every due time from the first to the last fired is a task
(counted by id), none missing, none twice, and the schedule's count agrees. Its tasks wait in
a queue no worker serves, so what is counted is the firing, not a run.

Outage: two bridges on a PostgreSQL server that stops for a few seconds (under the minute after
which a due time counts as missed): every due time, those of the outage too, fires once.

Events: fifty runs on a SQLite bridge wait for an event each (``ev.<task id>``); the bridge is
SIGKILLed while they wait, half the events are sent while it is down and half after it is back:
every run resumes once with its own event, and every person gets its reply.

The issue asks for a schedule every second for 60 s; within the suite's budget this runs
``SCHEDULE_KILLS_SECONDS`` (default 20) seconds with a kill every 2 to 4 s.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
import trio

from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count, password_free_url, submit_many
from support.step_effects import effect_lines
from support.waiting import wait_until
from tether.bridge import CustodyState, PostgresStore, SqliteStore
from tether.bridge.custody._schedules import ScheduleSpec, ScheduleView, firing_id
from tether.bridge.stores.postgres._throwaway import NoPostgres, Throwaway, throwaway_postgres

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("SCHEDULE_KILLS_SECONDS", "20"))
OPTIONS = ["--lease-s", "2", "--grace", "2", "--lead-lease", "1"]
WAITERS = 50


@pytest.fixture
def server() -> Iterator[Throwaway]:
    try:
        with throwaway_postgres(fsync=False) as server:
            yield server
    except NoPostgres as exc:
        pytest.skip(f"needs its own PostgreSQL server to stop and start: {exc}")


async def _fired_once_each(store: PostgresStore) -> tuple[ScheduleView, list[str]]:
    """``tick`` as kept, and the ids of its due times from the first fired to the last,
    checked: each fired once (its task is in the store), none missing."""
    view = await store.schedule("tick")
    assert view is not None
    assert view.last_due is not None
    records = await store.records(CustodyState.PENDING, limit=10_000)
    ids = Counter(r.task.id for r in records if r.task.id.startswith("tick~"))
    assert max(ids.values()) == 1
    first = min(_due_of(id) for id in ids)
    expected = [firing_id("tick", first + n) for n in range(round(view.last_due - first) + 1)]
    assert sorted(ids) == sorted(expected)  # every due time, none missing, none twice
    return view, expected


def _due_of(id: str) -> float:
    stamp = id.split("~")[1].rstrip("Z")
    moment = datetime.strptime(stamp.split(".")[0], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    return moment.timestamp() + (float("0." + stamp.split(".")[1]) if "." in stamp else 0.0)


async def test_three_bridges_killed_in_turn_fire_each_due_time_once(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    postgres_dsn: str,
) -> None:
    schema = f"sched_{random.randrange(1 << 30)}"
    url = password_free_url(postgres_dsn, monkeypatch)
    log = tmp_path / "bridge.log"

    async def bridge() -> BridgeProcess:
        return await BridgeProcess.start(
            gateway.url, token_file, cast(Path, url), log, workers=1,
            extra=[*OPTIONS, "--store-schema", schema],
        )  # fmt: skip

    running = [await bridge() for _ in range(3)]
    rng = random.Random(52)
    kills, last_kill = 0, 0.0
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        await store.add_schedule(ScheduleSpec("tick", "ops", "status?", every=1, queue="nobody"))
        end = trio.current_time() + SECONDS
        while trio.current_time() < end:
            await trio.sleep(rng.uniform(2, 4))
            n = rng.randrange(3)
            running[n].kill()
            assert await running[n].process.wait() == -signal.SIGKILL, running[n].log_tail()
            kills += 1
            last_kill = store.clock()
            running[n] = await bridge()
        assert await store.pause_schedule("tick")  # no firing commits after this

        async def all_up() -> bool:  # each process beats after the last kill: it is running
            beats = [w for w in await store.workers() if w.role == "worker"]
            return sum(w.last_beat > last_kill for w in beats) == 3

        await wait_until(all_up, within=60, step=0.1)
        for b in running:
            assert await b.stop() == 0, b.log_tail()
        view, expected = await _fired_once_each(store)
    assert view.fired == len(expected) >= SECONDS - 5
    print(f"\npostgres: {len(expected)} due times fired once each through {kills} SIGKILLs")


async def test_due_times_during_a_postgres_outage_fire_once_when_it_ends(
    server: Throwaway, gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    url = f"postgresql://tether@127.0.0.1:{server.port}/postgres"
    bridges = [
        await BridgeProcess.start(
            gateway.url,
            token_file,
            cast(Path, url),
            tmp_path / f"bridge-{n}.log",
            workers=1,
            extra=OPTIONS,
            env={"PGPASSWORD": server.password},
        )
        for n in range(2)
    ]
    async with await PostgresStore.open(server.dsn) as store:
        await store.add_schedule(ScheduleSpec("tick", "ops", "status?", every=1, queue="nobody"))

        async def fired(n: int) -> bool:
            view = await store.schedule("tick")
            return view is not None and view.fired >= n

        await wait_until(lambda: fired(3), within=30, step=0.1)
        server.pause("fast")  # the outage: nothing can fire
        down_at = time.monotonic()
        await trio.sleep(4)  # (the outage's length is the point: due times pass meanwhile)
        await trio.to_thread.run_sync(server.resume)
        outage = time.monotonic() - down_at
        await wait_until(lambda: fired(round(outage) + 6), within=30, step=0.1)
        assert await store.pause_schedule("tick")
        for b in bridges:
            assert await b.stop() == 0, b.log_tail()
        view, expected = await _fired_once_each(store)
    assert view.fired == len(expected)
    print(f"\npostgres outage {outage:.1f} s: {len(expected)} due times fired once each")


async def test_runs_waiting_on_events_resume_once_each_across_a_sigkill(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("STEPS_AGENT_LOG", str(effects))
    path = tmp_path / "bridge" / "custody.db"
    texts = [f"order {i}" for i in range(WAITERS)]
    ids = await submit_many(gateway, texts, "w", rooms=WAITERS)
    log = tmp_path / "bridge.log"

    async def bridge() -> BridgeProcess:
        return await BridgeProcess.start(
            gateway.url, token_file, path, log, agent="support.agents.waiter:factory",
            workers=2, extra=OPTIONS,
        )  # fmt: skip

    running = await bridge()
    await wait_until(lambda: trio.to_thread.run_sync(path.exists), within=60)
    async with await SqliteStore.open(path) as store:

        async def all_parked() -> bool:
            return len(await store.event_waiters()) == WAITERS

        await wait_until(all_parked, within=120, step=0.1)
        running.kill()
        assert await running.process.wait() == -signal.SIGKILL, running.log_tail()
        for id in ids[: WAITERS // 2]:  # while the bridge is down
            await store.send_event(f"e-{id}", f"ev.{id}", {"says": f"said-{id}"})
        running = await bridge()
        for id in ids[WAITERS // 2 :]:  # and once it is back
            await store.send_event(f"e-{id}", f"ev.{id}", {"says": f"said-{id}"})
            await store.send_event(f"e-{id}", f"ev.{id}", {"says": f"said-{id}"})  # a replay

        async def all_answered() -> bool:
            return await answered_count(gateway) >= WAITERS

        await wait_until(all_answered, within=120, step=0.1)
        assert await running.stop() == 0, running.log_tail()
        assert await store.event_waiters() == []
    for id, text in zip(ids, texts, strict=True):
        assert (await gateway.message(id))["reply"] == f"{text}: said-{id}"
    took = Counter(line[0] for line in effect_lines(effects) if line[1] == "took")
    assert took == Counter({id: 1 for id in ids})  # each resumed once, with its own event
