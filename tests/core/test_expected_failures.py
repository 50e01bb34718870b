"""An expected failure (issue 33) is one supervisor line saying when the child restarts; an
unexpected one keeps its traceback."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from tether import ChildSpec, open_supervisor
from tether._expected import ExpectedFailure, expected_one_line


class StoreDown(ExpectedFailure, ConnectionError):
    pass


def test_a_group_of_expected_failures_is_one_line_and_any_other_is_not() -> None:
    down = StoreDown("cannot reach\nthe store")
    assert expected_one_line(down) == "StoreDown: cannot reach the store"
    group = ExceptionGroup("g", [ExceptionGroup("inner", [down]), StoreDown("again")])
    assert expected_one_line(group) == "StoreDown: cannot reach the store (and 1 more)"
    assert expected_one_line(ExceptionGroup("g", [down, ValueError("bug")])) is None
    assert expected_one_line(ValueError("bug")) is None


@pytest.mark.parametrize(("error", "tracebacks"), [(StoreDown, 0), (KeyError, 1)])
async def test_the_supervisor_logs_an_expected_failure_in_one_line_with_the_restart_time(
    mock_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    error: type[Exception],
    tracebacks: int,
) -> None:
    starts: list[float] = []

    async def child(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        starts.append(trio.current_time())
        task_status.started()
        if len(starts) == 1:
            async with trio.open_nursery():  # fails inside a nursery: an exception group
                raise error("store unreachable")
        await trio.sleep_forever()

    caplog.set_level(logging.INFO, logger="tether")
    async with open_supervisor(max_restarts=5, period=60, backoff_initial=2, jitter=0) as sup:
        await sup.start_child(ChildSpec("ingest", child))
        await trio.sleep(5)
    assert starts == [0, 2]
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in failed]
    assert sum(r.exc_info is not None for r in failed) == tracebacks
    if not tracebacks:
        line = failed[0].getMessage()
        assert "child 'ingest' failed: StoreDown: store unreachable; restart in 2.0 s (at " in line


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)
