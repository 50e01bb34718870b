"""Issue 47.6: words that say what happens. A crash is no failed attempt, so the task's next
run is not shown as "attempt 2"; a suspect runs apart from other work (in a quarantine process
where its worker can start one), not always "alone"; an overdue wake-up is due now, not "next
in 0.0s"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import SqliteStore, Task

LEASE_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time() - 3600  # an hour ago: what it parked is overdue now

    def __call__(self) -> float:
        return self.now


async def _crashed_suspect(path: Path) -> None:
    clock = Clock()
    async with await SqliteStore.open(path, clock=clock, lease_s=LEASE_S) as store:
        await store.ingest(Task("t1", "hello"))
        await store.beat("old-w1", "worker", 10)
        claim = await store.claim("old-w1", leaderless=True)
        assert claim is not None
        clock.now += LEASE_S + 1  # no beat since: its process died
        [expiry] = await store.expire_leases()
        assert expiry.crash


async def _overdue_wake(path: Path) -> None:
    clock = Clock()
    async with await SqliteStore.open(path, clock=clock) as store:
        await store.ingest(Task("sleeper", "remind me"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.park(claim, clock.now + 5, "sleeping until later")
    # read later with the real clock: the wake-up is long past (no bridge ran to wake it)


def test_a_crashed_task_shows_its_run_not_a_second_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_crashed_suspect, path)
    assert main(["store", "show", "t1", "--store", str(path)]) == 0
    show = capsys.readouterr().out
    assert show.splitlines()[0] == "task t1: pending, run 2 (1 crash, not a failed attempt)"
    assert "runs alone as attempt" not in show
    assert "a suspect now, it runs next apart from other tasks" in show
    assert main(["store", "status", "--store", str(path)]) == 0
    status = capsys.readouterr().out
    suspect = next(line for line in status.splitlines() if line.startswith("  t1  "))
    assert "run 2 (1 crash, not a failed attempt)" in suspect
    assert "attempt 2" not in suspect


def test_an_overdue_wake_up_is_due_now_not_next_in_no_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_overdue_wake, path)
    assert main(["store", "status", "--store", str(path)]) == 0
    status = capsys.readouterr().out
    assert "parked runs waiting to wake: 1, the next is due now (the reconciler wakes it)" in status
    assert "next in 0.0s" not in status


def test_the_operator_page_says_where_suspects_run() -> None:
    from tether.bridge.service import ops_page

    html = (Path(ops_page.__path__[0]) / "index.html").read_text()
    assert "each runs alone" not in html
    assert "a quarantine process" in html
