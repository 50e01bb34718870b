"""Restart sets of one_for_one, one_for_all and rest_for_one, with exact MockClock times."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tether import ChildSpec, RestartType, Strategy, open_supervisor, wait_stop_requested

Status = trio.TaskStatus[Any]
Log = list[tuple[str, str, float]]


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def member(
    name: str, log: Log, crash_at: float | None, *, task_status: Status = trio.TASK_STATUS_IGNORED
) -> None:
    """Logs start/stop; the first incarnation of a crasher raises at ``crash_at``."""
    first = not any(e[0] == name and e[1] == "start" for e in log)
    log.append((name, "start", trio.current_time()))
    task_status.started()
    if crash_at is not None and first:
        await trio.sleep_until(crash_at)
        log.append((name, "crash", trio.current_time()))
        raise ValueError(f"{name} crashed")
    await wait_stop_requested()
    log.append((name, "stop", trio.current_time()))


async def run_three(strategy: Strategy, log: Log, *, temporary_c: bool = False) -> dict[str, int]:
    restart_c: RestartType = "temporary" if temporary_c else "permanent"
    with trio.fail_after(100):  # virtual seconds: a wedged restart fails fast
        async with open_supervisor(strategy=strategy, backoff_initial=1, jitter=0) as sup:
            await sup.start_child(ChildSpec("a", member, "a", log, None))
            await sup.start_child(ChildSpec("b", member, "b", log, 2.0))
            await sup.start_child(ChildSpec("c", member, "c", log, None, restart=restart_c))
            await trio.sleep(10)
            log.append(("-", "block ends", trio.current_time()))
            return {c.name: c.restarts for c in sup.children()}


async def test_one_for_one_restarts_only_the_failed_child(
    mock_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    restarts = await run_three("one_for_one", log)
    assert log[:6] == [
        ("a", "start", 0),
        ("b", "start", 0),
        ("c", "start", 0),
        ("b", "crash", 2),
        ("b", "start", 3),
        ("-", "block ends", 10),
    ]
    assert restarts == {"a": 0, "b": 1, "c": 0}


async def test_one_for_all_stops_the_others_in_reverse_then_restarts_all_in_order(
    mock_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    restarts = await run_three("one_for_all", log)
    assert log[:10] == [
        ("a", "start", 0),
        ("b", "start", 0),
        ("c", "start", 0),
        ("b", "crash", 2),
        ("c", "stop", 2),
        ("a", "stop", 2),
        ("a", "start", 3),
        ("b", "start", 3),
        ("c", "start", 3),
        ("-", "block ends", 10),
    ]
    assert restarts == {"a": 1, "b": 1, "c": 1}


async def test_rest_for_one_restarts_the_failed_child_and_those_started_after_it(
    mock_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    restarts = await run_three("rest_for_one", log)
    assert log[:8] == [
        ("a", "start", 0),
        ("b", "start", 0),
        ("c", "start", 0),
        ("b", "crash", 2),
        ("c", "stop", 2),
        ("b", "start", 3),
        ("c", "start", 3),
        ("-", "block ends", 10),
    ]
    assert restarts == {"a": 0, "b": 1, "c": 1}


async def test_a_temporary_sibling_stopped_by_a_group_restart_stays_stopped(
    mock_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    restarts = await run_three("one_for_all", log, temporary_c=True)
    assert log[:9] == [
        ("a", "start", 0),
        ("b", "start", 0),
        ("c", "start", 0),
        ("b", "crash", 2),
        ("c", "stop", 2),
        ("a", "stop", 2),
        ("a", "start", 3),
        ("b", "start", 3),
        ("-", "block ends", 10),
    ]
    assert restarts == {"a": 1, "b": 1, "c": 0}


async def test_group_restart_during_shutdown_is_abandoned(
    mock_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    async with open_supervisor(strategy="one_for_all", backoff_initial=5, jitter=0) as sup:
        await sup.start_child(ChildSpec("a", member, "a", log, None))
        await sup.start_child(ChildSpec("b", member, "b", log, 1.0))
        await trio.sleep(2)  # b crashed at 1, the group waits its backoff until 6
        assert [c.state for c in sup.snapshot().children] == ["backoff", "backoff"]
    assert trio.current_time() == 2
    assert [e for e in log if e[1] == "start"] == [("a", "start", 0), ("b", "start", 0)]
    assert [c.state for c in sup.snapshot().children] == ["stopped", "stopped"]
