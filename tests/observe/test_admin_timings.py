"""Timing histograms and the oldest task per custody state: on /metrics, in /status, and as
``tether status`` prints them (p50/p99)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from support.clock import FakeClock
from support.observe import running_admin
from tether._cli._main import main
from tether.bridge import SqliteStore, Task
from tether.bridge.pool import Timings
from tether.bridge.runs._timings import MAX_TRACKED, TimingHistogram

from .test_admin_metrics import parse


def test_a_histogram_counts_into_buckets_and_gives_recent_quantiles() -> None:
    h = TimingHistogram("x", "doc", buckets=(0.1, 1.0))
    assert h.quantile(0.5) is None
    for seconds in [0.05, 0.1, 0.5, 2.0, -1.0, float("nan")]:
        h.observe(seconds)
    assert h.total == 5  # nan is not an observation; a negative one counts as 0
    assert h.cumulative() == [("0.1", 3), ("1.0", 4), ("+Inf", 5)]
    assert h.sum == pytest.approx(2.65)
    assert h.quantile(0.5) == 0.1
    assert h.quantile(0.99) == 2.0


def test_timings_pair_each_tasks_two_moments_and_forget_beyond_the_bound() -> None:
    t = Timings()
    t.taken_in(["a", "b"], at=10.0)
    t.claimed("a", at=12.5)
    t.claimed("a", at=99.0)  # a second claim (a retry) is not a second wait
    t.claimed("zzz", at=13.0)  # taken in by another bridge: not observed
    t.ran(0.25)
    t.result_stored("a", at=13.0)
    t.delivered(["a", "b"], at=13.5)
    assert (t.queue_wait.total, t.queue_wait.sum) == (1, 2.5)
    assert (t.run_time.total, t.delivery.total, t.delivery.sum) == (1, 1, 0.5)
    t.taken_in((f"id{i}" for i in range(MAX_TRACKED + 5)), at=0.0)
    t.claimed("id0", at=1.0)  # the oldest were forgotten
    t.claimed(f"id{MAX_TRACKED}", at=1.0)
    assert t.queue_wait.total == 2


def test_an_intake_noted_before_its_commit_times_a_claim_made_before_the_ingest_returned() -> None:
    """Issue 49: the pool hears of a task at its commit, so its claim may come before the
    ingest returns. Intake is noted before the commit; replays are forgotten after it, and a
    task noted earlier keeps its first intake."""
    t = Timings()
    assert t.taking_in(["old"], at=1.0) == ["old"]  # a first ingest, not claimed yet
    noted = t.taking_in(["new", "old", "replay"], at=5.0)
    assert noted == ["new", "replay"]
    t.claimed("new", at=5.5)  # claimed while the ingest's sync ran
    t.not_taken({"replay"})  # the commit said: already in the store
    t.claimed("replay", at=9.0)
    t.claimed("old", at=6.0)
    assert (t.queue_wait.total, t.queue_wait.sum) == (2, 5.5)  # 0.5 + 5.0


async def test_metrics_and_status_show_timings_and_the_oldest_task_per_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(now=1000.0)
    store = await SqliteStore.open(tmp_path / "c.db", synchronous="NORMAL", clock=clock)
    timings = Timings()
    for seconds in [0.01, 0.02, 0.03, 4.0]:
        timings.ran(seconds)
    timings.taken_in(["q"], at=0.0)
    timings.claimed("q", at=0.2)
    try:
        await store.ingest(Task(id="old", body="first"))
        clock.now += 30
        await store.ingest(Task(id="new", body="second"))
        claim = await store.claim("w1", leaderless=True)  # "old" is claimed
        assert claim is not None
        clock.now += 15
        async with running_admin(tmp_path, store=store, timings=timings) as admin:
            metrics = parse((await admin.get("/metrics")).text)
            oldest = "tether_custody_oldest_age_seconds"
            assert metrics[(oldest, (("state", "claimed"),))] == 45.0
            assert metrics[(oldest, (("state", "pending"),))] == 15.0
            assert metrics[(oldest, (("state", "result"),))] == 0.0
            assert metrics[("tether_run_time_seconds_count", ())] == 4
            assert metrics[("tether_run_time_seconds_bucket", (("le", "0.025"),))] == 2
            assert metrics[("tether_run_time_seconds_bucket", (("le", "+Inf"),))] == 4
            assert metrics[("tether_run_time_seconds_sum", ())] == pytest.approx(4.06)
            assert metrics[("tether_queue_wait_seconds_count", ())] == 1
            assert metrics[("tether_delivery_seconds_count", ())] == 0

            status = (await admin.get("/status")).json()
            assert status["oldest_s"] == {"pending": 15.0, "claimed": 45.0}
            run_time = next(t for t in status["timings"] if t["name"] == "run_time")
            assert (run_time["count"], run_time["p50_s"], run_time["p99_s"]) == (4, 0.02, 4.0)

            token = str(tmp_path / "admin-token")
            argv = ["status", "--url", admin.url, "--token-file", token]
            assert await trio.to_thread.run_sync(main, argv) == 0
            out = capsys.readouterr().out
            assert "oldest in custody: pending 15.0s, claimed 45.0s" in out
            assert "run_time    p50 20.0ms  p99 4.00s  (4 observed)" in out
            assert "queue_wait  p50 200.0ms  p99 200.0ms  (1 observed)" in out
            assert "delivery    no observations yet" in out
    finally:
        await store.aclose()
