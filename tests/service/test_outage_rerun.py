"""A bridge child whose store call met an outage's start runs again in place (one line), and
anything else still fails it (the supervisor's business)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tether.bridge.service._outage import run_through_outages


async def test_a_child_that_met_an_outage_runs_again_and_starts_once(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    calls = 0

    async def child(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal calls
        calls += 1
        task_status.started("up")
        if calls < 3:
            raise ExceptionGroup("nursery", [ConnectionError(f"lost the connection {calls}")])

    async with trio.open_nursery() as nursery:
        assert await nursery.start(run_through_outages, child) == "up"
    assert calls == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "lost the connection 1" in lines[0]
    assert "runs again" in lines[0]
    assert lines[0].startswith("child a child met")


async def test_any_other_failure_is_the_childs() -> None:
    async def child(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        raise ValueError("a bug")

    with pytest.RaisesGroup(ValueError):
        async with trio.open_nursery() as nursery:
            await nursery.start(run_through_outages, child)
