"""Shutdown when an enclosing cancellation ends the block, its deadline, and abort()."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import trio
import trio.testing

from tether import ChildSpec, open_runtime, open_supervisor, stop_requested, wait_stop_requested

Status = trio.TaskStatus[Any]
Events = list[tuple[str, float]]


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def polite(name: str, events: Events, cleanup: float) -> Any:
    """Waits for the soft stop, then takes ``cleanup`` seconds to finish."""

    async def child(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await wait_stop_requested()
            events.append((f"{name} soft stop", trio.current_time()))
            await trio.sleep(cleanup)
            events.append((f"{name} clean exit", trio.current_time()))
        except trio.Cancelled:
            events.append((f"{name} cancelled", trio.current_time()))
            raise

    return child


def stubborn(name: str, events: Events, shielded_cleanup: float = 0.0) -> Any:
    """Ignores the soft stop; on the hard cancel, optionally cleans up shielded."""

    async def child(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append(
                (f"{name} cancelled (stop requested: {stop_requested()})", trio.current_time())
            )
            with trio.CancelScope(shield=True):
                await trio.sleep(shielded_cleanup)
            raise

    return child


SOFT_THEN_HARD = [
    # reverse start order: b (started last) first; b ignores the stop and is cancelled at its
    # 2 s grace; only then is a asked, and a finishes within its own grace
    ("b cancelled (stop requested: True)", 2.5),
    ("a soft stop", 2.5),
    ("a clean exit", 2.75),
]


async def test_enclosing_cancel_still_gives_soft_stop_then_grace(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: Events = []
    with trio.move_on_after(0.5) as outer:
        async with open_supervisor() as sup:
            await sup.start_child(ChildSpec("a", polite("a", events, 0.25), shutdown_grace=1))
            await sup.start_child(ChildSpec("b", stubborn("b", events), shutdown_grace=2))
            await trio.sleep_forever()
    assert outer.cancelled_caught
    assert events == SOFT_THEN_HARD
    assert trio.current_time() == 2.75
    snap = sup.snapshot()
    assert snap.closing
    assert [c.state for c in snap.children] == ["stopped", "stopped"]
    with pytest.raises(trio.ClosedResourceError, match="shutting down"):
        await sup.start_child(ChildSpec("late", polite("late", events, 0)))


async def test_runtime_root_supervisor_torn_down_by_an_outer_cancel(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: Events = []
    with trio.move_on_after(0.5) as outer:
        async with open_runtime(grace=1, handle_signals=False) as rt:
            await rt.supervisor.start_child(
                ChildSpec("a", polite("a", events, 0.25), shutdown_grace=1)
            )
            await rt.supervisor.start_child(ChildSpec("b", stubborn("b", events), shutdown_grace=2))
            await trio.sleep_forever()
    assert outer.cancelled_caught
    assert events == SOFT_THEN_HARD
    assert rt.supervisor.snapshot().closing


async def test_shutdown_deadline_cancels_the_rest_when_a_child_outlives_its_cancel(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: Events = []
    with trio.move_on_after(0.5):
        async with open_supervisor() as sup:
            await sup.start_child(ChildSpec("a", polite("a", events, 0.25), shutdown_grace=1))
            await sup.start_child(
                ChildSpec("b", stubborn("b", events, shielded_cleanup=10), shutdown_grace=2)
            )
            await trio.sleep_forever()
    # deadline = 0.5 + (1 + 2) graces + 1 margin = 4.5: a is cancelled then, never asked;
    # the block itself cannot end before b's shielded cleanup does (2.5 + 10)
    assert events == [
        ("b cancelled (stop requested: True)", 2.5),
        ("a cancelled", 4.5),
    ]
    assert trio.current_time() == 12.5
    assert [c.state for c in sup.snapshot().children] == ["stopped", "stopped"]


async def test_abort_cancels_every_child_at_once_without_a_soft_stop(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: Events = []
    async with open_supervisor() as sup:
        await sup.start_child(ChildSpec("a", stubborn("a", events), shutdown_grace=30))
        await sup.start_child(ChildSpec("b", stubborn("b", events), shutdown_grace=30))
        await trio.sleep(1)
        sup.abort("test")
    assert sorted(events) == [
        ("a cancelled (stop requested: False)", 1.0),
        ("b cancelled (stop requested: False)", 1.0),
    ]
    assert [c.state for c in sup.snapshot().children] == ["stopped", "stopped"]


async def test_second_signal_reaches_a_supervisor_nested_in_a_child(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: Events = []

    async def subtree(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        async with open_supervisor(name="inner") as inner:
            await inner.start_child(ChildSpec("leaf", stubborn("leaf", events), shutdown_grace=60))
            task_status.started()
            await trio.sleep_forever()

    async def second_signal(rt: Any) -> None:
        await trio.sleep(2)
        rt.request_shutdown(signal.SIGINT)

    async def scenario() -> None:
        async with open_runtime(grace=30, handle_signals=True) as rt:
            await rt.supervisor.start_child(ChildSpec("subtree", subtree, shutdown_grace=60))
            rt.spawn(second_signal, rt, name="second")  # at t=2
            await trio.sleep(1)
            rt.request_shutdown(signal.SIGINT)  # graceful: the stop reaches the subtree
            await trio.sleep_forever()

    with pytest.raises(KeyboardInterrupt):
        await scenario()
    # the inner supervisor's shielded shutdown would give the leaf 60 s; the second signal
    # aborts it too, so the leaf is cancelled at once (never asked: the subtree was asked)
    assert events == [("leaf cancelled (stop requested: False)", 2.0)]


async def test_the_runtime_s_grace_bounds_its_background_and_a_child_keeps_its_own(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Issue 32.9, as open_runtime's docstring says: leaving ``open_runtime(grace=1.0)`` with
    a child deaf to its soft stop takes the child's ``shutdown_grace`` (5 s), then the
    background's 1 s."""

    async def deaf(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    started = trio.current_time()
    async with open_runtime(grace=1.0, handle_signals=False) as runtime:
        await runtime.supervisor.start_child(ChildSpec("deaf", deaf))
        runtime.spawn(trio.sleep_forever, name="background")
    assert trio.current_time() - started == pytest.approx(6.0)
