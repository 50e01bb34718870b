"""Supervisor rules, each timed exactly with MockClock(autojump_threshold=0)."""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from tether import (
    ChildSpec,
    Supervisor,
    SupervisorFailed,
    open_runtime,
    open_supervisor,
    stop_requested,
    wait_stop_requested,
)

Status = trio.TaskStatus[Any]


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def scripted(
    lifetimes: list[float], starts: list[float], *, error: bool = True
) -> Callable[..., Awaitable[None]]:
    """A child whose n-th incarnation runs ``lifetimes[n]`` seconds then raises (or returns).

    Incarnations past the script run until stopped.
    """

    async def child(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        n = len(starts)
        starts.append(trio.current_time())
        task_status.started()
        if n >= len(lifetimes):
            await trio.sleep_forever()
        await trio.sleep(lifetimes[n])
        if error:
            raise ValueError(f"boom {n}")

    return child


async def test_backoff_sequence_restarts_at_exact_times(mock_clock: trio.testing.MockClock) -> None:
    starts: list[float] = []
    sups: list[Supervisor] = []

    async def scenario() -> None:
        async with open_supervisor(
            max_restarts=4, period=100, backoff_initial=1, backoff_max=4, jitter=0
        ) as sup:
            sups.append(sup)
            await sup.start_child(ChildSpec("crashy", scripted([0] * 10, starts)))
            await trio.sleep(1000)

    with pytest.raises(SupervisorFailed) as info:
        await scenario()
    # delays 1, 2, 4, 4 (capped); the 5th restart is one too many
    assert starts == [0, 1, 3, 7, 11]
    assert trio.current_time() == 11
    failure = info.value
    assert type(failure) is SupervisorFailed  # bare, not in an ExceptionGroup
    assert failure.child == "crashy"
    assert "crashy" in str(failure)
    assert isinstance(failure.__cause__, ValueError)
    assert str(failure.__cause__) == "boom 4"
    assert sups[0].child("crashy").state.value == "failed"


@pytest.mark.parametrize(("uptime", "next_start"), [(5.0, 9.0), (4.5, 11.5)])
async def test_backoff_resets_once_the_child_stayed_up_backoff_reset_seconds(
    mock_clock: trio.testing.MockClock, uptime: float, next_start: float
) -> None:
    starts: list[float] = []
    async with open_supervisor(
        max_restarts=100, period=1, backoff_initial=1, backoff_max=8, backoff_reset=5, jitter=0
    ) as sup:
        await sup.start_child(ChildSpec("c", scripted([0, 0, uptime], starts)))
        await trio.sleep(20)
    # 0 → fail, +1 → 1 → fail, +2 → 3, up `uptime`: reset (delay 1) or not (delay 4)
    assert starts == [0, 1, 3, next_start]


async def test_jitter_shortens_delays_with_the_injected_rng(
    mock_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []
    async with open_supervisor(
        max_restarts=100,
        period=1,
        backoff_initial=1,
        backoff_max=4,
        jitter=0.5,
        rng=random.Random(7),
    ) as sup:
        await sup.start_child(ChildSpec("c", scripted([0, 0, 0], starts)))
        await trio.sleep(20)
    twin = random.Random(7)
    expected = [0.0]
    for base in (1, 2, 4):
        expected.append(expected[-1] + base * (1 - 0.5 * twin.random()))
    assert starts == pytest.approx(expected, abs=1e-9)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(base / 2 < gap < base for gap, base in zip(gaps, (1, 2, 4), strict=True))


async def test_intensity_restart_exactly_period_after_the_first_is_inside_the_window(
    mock_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []

    async def scenario() -> None:
        async with open_supervisor(
            max_restarts=2, period=4, backoff_initial=0, backoff_max=0
        ) as sup:
            await sup.start_child(ChildSpec("c", scripted([1, 1, 3], starts)))
            await trio.sleep(1000)

    with pytest.raises(SupervisorFailed) as info:
        await scenario()
    # failures at 1, 2, 5: the one at 1 is exactly `period` before 5, so three in the window
    assert starts == [0, 1, 2]
    assert trio.current_time() == 5
    assert str(info.value.__cause__) == "boom 2"


async def test_intensity_restart_just_after_the_window_is_allowed(
    mock_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []
    async with open_supervisor(max_restarts=2, period=4, backoff_initial=0, backoff_max=0) as sup:
        await sup.start_child(ChildSpec("c", scripted([1, 1, 3.5], starts)))
        await trio.sleep(10)
        snap = sup.snapshot()
    # failures at 1, 2, 5.5: the one at 1 has left the window [1.5, 5.5]
    assert starts == [0, 1, 2, 5.5]
    assert snap.child("c").state == "running"
    assert snap.child("c").restarts == 3
    assert snap.child("c").last_error == repr(ValueError("boom 2"))


async def test_max_restarts_zero_fails_on_the_first_end(mock_clock: trio.testing.MockClock) -> None:
    starts: list[float] = []

    async def scenario() -> None:
        async with open_supervisor(max_restarts=0) as sup:
            await sup.start_child(ChildSpec("c", scripted([2], starts, error=False)))
            await trio.sleep(1000)

    with pytest.raises(SupervisorFailed, match="returned normally") as info:
        await scenario()
    assert info.value.__cause__ is None
    assert trio.current_time() == 2


def stop_recorder(
    events: list[tuple[str, str, float]], cleanup: float
) -> Callable[..., Awaitable[None]]:
    async def child(name: str, *, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await wait_stop_requested()
            assert stop_requested()
            events.append((name, "stop requested", trio.current_time()))
            await trio.sleep(cleanup)
            events.append((name, "cleaned up", trio.current_time()))
        except trio.Cancelled:
            events.append((name, "cancelled", trio.current_time()))
            raise

    return child


async def test_shutdown_is_soft_and_in_reverse_start_order(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: list[tuple[str, str, float]] = []
    child = stop_recorder(events, cleanup=0.5)
    async with open_supervisor() as sup:
        for name in ("a", "b", "c"):
            await sup.start_child(ChildSpec(name, child, name, shutdown_grace=2))
        assert not stop_requested()  # outside a child: nobody asks
        await trio.sleep(1)
    assert events == [
        ("c", "stop requested", 1.0),
        ("c", "cleaned up", 1.5),
        ("b", "stop requested", 1.5),
        ("b", "cleaned up", 2.0),
        ("a", "stop requested", 2.0),
        ("a", "cleaned up", 2.5),
    ]
    assert [c.state for c in sup.snapshot().children] == ["stopped"] * 3


async def test_stubborn_child_is_cancelled_exactly_at_its_grace_with_a_reason(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: list[tuple[str, str, float]] = []
    reasons: list[str | None] = []

    async def stubborn(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        except trio.Cancelled as exc:
            events.append(("stubborn", "cancelled", trio.current_time()))
            reasons.append(exc.reason)
            raise

    with trio.fail_after(100):  # virtual seconds: a stop that never cancels fails fast
        async with open_supervisor() as sup:
            await sup.start_child(ChildSpec("polite", stop_recorder(events, 0), "polite"))
            await sup.start_child(ChildSpec("stubborn", stubborn, shutdown_grace=3))
            await trio.sleep(1)
    assert events == [
        ("stubborn", "cancelled", 4.0),
        ("polite", "stop requested", 4.0),
        ("polite", "cleaned up", 4.0),
    ]
    assert reasons[0] is not None
    assert "stubborn" in reasons[0]
    assert "3s" in reasons[0]


async def test_soft_stop_also_runs_when_the_body_raises(mock_clock: trio.testing.MockClock) -> None:
    events: list[tuple[str, str, float]] = []

    async def scenario() -> None:
        async with open_supervisor() as sup:
            await sup.start_child(ChildSpec("a", stop_recorder(events, 1), "a"))
            await trio.sleep(2)
            raise LookupError("body")

    with pytest.raises(LookupError, match="body"):
        await scenario()
    assert events == [("a", "stop requested", 2.0), ("a", "cleaned up", 3.0)]


async def test_failure_stops_siblings_in_reverse_order_and_cancels_the_body(
    mock_clock: trio.testing.MockClock,
) -> None:
    events: list[tuple[str, str, float]] = []
    body_cancelled_at: list[float] = []
    starts: list[float] = []

    async def scenario() -> None:
        async with open_supervisor(max_restarts=0) as sup:
            await sup.start_child(ChildSpec("first", stop_recorder(events, 1), "first"))
            await sup.start_child(ChildSpec("crashy", scripted([5], starts)))
            await sup.start_child(ChildSpec("last", stop_recorder(events, 1), "last"))
            try:
                await trio.sleep(1000)
            except trio.Cancelled:
                body_cancelled_at.append(trio.current_time())
                raise

    with pytest.raises(SupervisorFailed) as info:
        await scenario()
    assert info.value.child == "crashy"
    assert events == [
        ("last", "stop requested", 5.0),
        ("last", "cleaned up", 6.0),
        ("first", "stop requested", 6.0),
        ("first", "cleaned up", 7.0),
    ]
    assert body_cancelled_at == [7.0]


@pytest.mark.parametrize(
    ("restart", "error", "restarted", "final_state"),
    [
        ("permanent", False, True, "running"),
        ("permanent", True, True, "running"),
        ("transient", False, False, "stopped"),
        ("transient", True, True, "running"),
        ("temporary", False, False, "stopped"),
        ("temporary", True, False, "failed"),
    ],
)
async def test_restart_types_on_return_and_on_error(
    mock_clock: trio.testing.MockClock,
    restart: Any,
    error: bool,
    restarted: bool,
    final_state: str,
) -> None:
    starts: list[float] = []
    async with open_supervisor(backoff_initial=1, jitter=0) as sup:
        await sup.start_child(ChildSpec("c", scripted([1], starts, error=error), restart=restart))
        await trio.sleep(5)
        snap = sup.snapshot().child("c")
    assert starts == ([0, 2] if restarted else [0])
    assert snap.state == final_state
    assert snap.restarts == (1 if restarted else 0)
    assert (snap.last_error is not None) == error


async def test_cancellation_from_outside_is_not_a_failure(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    starts: list[float] = []
    with caplog.at_level(logging.INFO, logger="tether.supervisor"), trio.move_on_after(3):
        async with open_supervisor(max_restarts=0) as sup:
            await sup.start_child(ChildSpec("c", scripted([], starts)))
            await trio.sleep_forever()
    assert starts == [0]
    assert sup.child("c").restarts == 0
    assert sup.child("c").last_error is None
    # the outside cancel still got the child its soft stop and grace (5 s, then cancelled)
    assert trio.current_time() == 3 + 5
    assert [r.getMessage() for r in caplog.records] == [
        "supervisor 'supervisor': child 'c' did not stop within 5s; cancelling "
        "(the supervisor block ended)"
    ]


async def test_keyboard_interrupt_in_a_child_is_not_a_failure_and_comes_out_bare(
    mock_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []
    sups: list[Supervisor] = []

    async def interrupted(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        starts.append(trio.current_time())
        task_status.started()
        await trio.sleep(1)
        raise KeyboardInterrupt

    async def scenario() -> None:
        async with open_supervisor(max_restarts=0) as sup:
            sups.append(sup)
            await sup.start_child(ChildSpec("c", interrupted))
            await trio.sleep(1000)

    with pytest.raises(KeyboardInterrupt):
        await scenario()
    assert starts == [0]
    assert sups[0].child("c").restarts == 0


async def test_start_child_raises_an_error_from_before_started_and_forgets_the_child() -> None:
    async def broken(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        raise OSError("no port")

    async def lazy(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        return

    async with open_supervisor() as sup:
        with pytest.raises(OSError, match="no port"):
            await sup.start_child(ChildSpec("broken", broken))
        with pytest.raises(RuntimeError, match="started"):
            await sup.start_child(ChildSpec("lazy", lazy))
        assert sup.children() == []
        assert sup.snapshot().recent_restarts == 0


async def test_start_child_returns_the_started_value_and_state_is_observable(
    mock_clock: trio.testing.MockClock,
) -> None:
    async def server(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        await trio.sleep(1)  # getting ready takes a second
        task_status.started(8080)
        await trio.sleep(1)
        raise ValueError("lost")

    async with open_supervisor(backoff_initial=2, jitter=0) as sup:
        assert await sup.start_child(ChildSpec("server", server)) == 8080
        assert trio.current_time() == 1
        state = sup.state("server")
        assert state.value == "running"
        await state.wait_value("backoff")
        assert trio.current_time() == 2
        assert sup.child("server").last_error is not None
        await state.wait_value("starting")
        assert trio.current_time() == 4
        await state.wait_value("running")
        assert trio.current_time() == 5
        assert sup.snapshot().child("server").running_since == 5


async def test_restart_that_fails_before_started_counts_as_a_failure(
    mock_clock: trio.testing.MockClock,
) -> None:
    attempts: list[float] = []

    async def flaky(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        attempts.append(trio.current_time())
        if len(attempts) in (2, 3):
            raise OSError("dependency down")
        task_status.started()
        if len(attempts) == 1:
            raise ValueError("first crash")
        await trio.sleep_forever()

    async with open_supervisor(max_restarts=5, backoff_initial=1, jitter=0) as sup:
        await sup.start_child(ChildSpec("flaky", flaky))
        await trio.sleep(10)
        assert sup.state("flaky").value == "running"
    assert attempts == [0, 1, 3, 7]
    assert sup.child("flaky").restarts == 3


async def test_dynamic_start_and_terminate(mock_clock: trio.testing.MockClock) -> None:
    events: list[tuple[str, str, float]] = []
    child = stop_recorder(events, cleanup=0.25)
    async with open_runtime(grace=1, handle_signals=False) as rt:
        sup = rt.supervisor
        await sup.start_child(ChildSpec("a", child, "a"))
        await sup.start_child(ChildSpec("b", child, "b"))
        with pytest.raises(ValueError, match="already has a child named 'a'"):
            await sup.start_child(ChildSpec("a", child, "a"))
        assert len(rt.registry.owned_by("a")) == 1
        await trio.sleep(1)
        await sup.terminate_child("a")
        assert events == [("a", "stop requested", 1.0), ("a", "cleaned up", 1.25)]
        assert [c.name for c in sup.children()] == ["b"]
        assert rt.registry.owned_by("a") == []
        with pytest.raises(KeyError, match="no child named 'a'"):
            await sup.terminate_child("a")
        await sup.start_child(ChildSpec("a", child, "a"))  # the name is free again
        assert [c.name for c in sup.children()] == ["b", "a"]
        events.clear()
    assert [e[0] for e in events if e[1] == "stop requested"] == ["a", "b"]


async def test_terminate_cancels_a_pending_restart(mock_clock: trio.testing.MockClock) -> None:
    starts: list[float] = []
    async with open_supervisor(backoff_initial=5, jitter=0) as sup:
        await sup.start_child(ChildSpec("c", scripted([1], starts)))
        await trio.sleep(2)
        assert sup.state("c").value == "backoff"
        await sup.terminate_child("c")
        await trio.sleep(10)
    assert starts == [0]


async def test_children_run_with_their_name_as_registry_owner() -> None:
    async def service(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever, name="worker-1")
            nursery.start_soon(trio.sleep_forever, name="worker-2")
            task_status.started()
            await wait_stop_requested()
            nursery.cancel_scope.cancel()

    async with open_runtime(grace=1, handle_signals=False) as rt:
        await rt.supervisor.start_child(ChildSpec("svc", service))
        await trio.testing.wait_all_tasks_blocked()
        names = sorted(t.name for t in rt.registry.owned_by("svc"))
        assert names == ["svc", "worker-1", "worker-2"]
    assert rt.registry.owned_by("svc") == []


async def test_closed_supervisor_refuses_children() -> None:
    async def noop(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async with open_supervisor() as sup:
        pass
    with pytest.raises(trio.ClosedResourceError, match=r"not running|shutting down"):
        await sup.start_child(ChildSpec("late", noop))


def test_bad_specs_and_policies_are_rejected_with_clear_errors() -> None:
    async def fn() -> None:
        pass

    with pytest.raises(ValueError, match="non-empty string name"):
        ChildSpec("", fn)
    with pytest.raises(ValueError, match="restart must be one of"):
        ChildSpec("x", fn, restart="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shutdown_grace"):
        ChildSpec("x", fn, shutdown_grace=-1)
    with pytest.raises(TypeError, match="async callable"):
        ChildSpec("x", 42)  # type: ignore[arg-type]
    spec = ChildSpec("x", fn, 1, 2, restart="transient", shutdown_grace=3)
    assert spec.args == (1, 2)
    assert spec.shutdown_grace == 3.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "one_for_none"}, "strategy must be one of"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"period": 0}, "period"),
        ({"backoff_initial": -1}, "backoff_initial"),
        ({"backoff_initial": 2, "backoff_max": 1}, "backoff_max"),
        ({"jitter": 1.5}, "jitter"),
        ({"backoff_reset": -1}, "backoff_reset"),
    ],
)
async def test_bad_supervisor_options_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    async def scenario() -> None:
        async with open_supervisor(**kwargs):
            pass

    with pytest.raises(ValueError, match=message):
        await scenario()


async def test_a_failing_sub_supervisor_is_a_failed_child_of_its_parent(
    mock_clock: trio.testing.MockClock,
) -> None:
    starts: list[float] = []
    failures: list[SupervisorFailed] = []

    async def subtree(*, task_status: Status = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with open_supervisor(name="sub", max_restarts=0) as sub:
                await sub.start_child(ChildSpec("leaf", scripted([1, 1, 1, 1], starts)))
                task_status.started()
                await wait_stop_requested()
        except SupervisorFailed as exc:
            failures.append(exc)
            raise

    async with open_supervisor(name="top", backoff_initial=1, jitter=0, max_restarts=10) as top:
        await top.start_child(ChildSpec("subtree", subtree))
        await trio.sleep(5.5)
        snap = top.snapshot().child("subtree")
    # leaf crashes 1 s after each start → sub fails → top restarts the subtree after its
    # backoff (1 s, then 2 s)
    assert starts == [0, 2, 5]
    assert [f.supervisor for f in failures] == ["sub", "sub"]
    assert snap.restarts == 2
    assert snap.state == "running"
    assert snap.last_error is not None
    assert "leaf" in snap.last_error
