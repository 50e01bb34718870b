"""Runtime.spawn: the background scope never loses a task or an error."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
import trio
import trio.lowlevel
import trio.testing

from tether import Runtime, ScopeClosed, open_runtime


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_uncaught_exception_is_logged_once_with_name_and_exc_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def explode() -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("kaput")

    async def survivor(done: list[str]) -> None:
        await trio.sleep(0.01)
        done.append("ok")

    done: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="tether"):
        async with open_runtime(grace=1) as rt:
            rt.spawn(explode, name="exploder")
            rt.spawn(survivor, done, name="survivor")
            await trio.sleep(0.05)
            assert rt.failed_count == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    record = warnings[0]
    assert "exploder" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)
    assert str(record.exc_info[1]) == "kaput"
    assert done == ["ok"]  # the failure did not take the runtime or its siblings down


async def test_cancellation_logs_nothing(
    caplog: pytest.LogCaptureFixture, mock_clock: trio.testing.MockClock
) -> None:
    with caplog.at_level(logging.DEBUG, logger="tether.background"):
        async with open_runtime(grace=0.5) as rt:
            rt.spawn(trio.sleep_forever, name="forever")
            await trio.sleep(0.1)
    # only the drain notice, no failure record
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "still running" in caplog.records[0].getMessage()
    assert rt.failed_count == 0


async def test_active_count_falls_back_to_zero(mock_clock: trio.testing.MockClock) -> None:
    async with open_runtime() as rt:
        for delay in (1, 2, 3):
            rt.spawn(trio.sleep, delay, name=f"sleep{delay}")
        assert rt.active_count() == 3
        await trio.sleep(1.5)
        assert rt.active_count() == 2
        await trio.sleep(2)
        assert rt.active_count() == 0


async def test_exit_waits_for_grace_then_cancels(mock_clock: trio.testing.MockClock) -> None:
    finished: list[str] = []
    cancelled_at: list[float] = []

    async def quick() -> None:
        await trio.sleep(2)
        finished.append("quick")

    async def stubborn() -> None:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            cancelled_at.append(trio.current_time())
            raise

    start = trio.current_time()
    async with open_runtime(grace=5) as rt:
        rt.spawn(quick, name="quick")
        rt.spawn(stubborn, name="stubborn")
    assert finished == ["quick"]
    assert cancelled_at == [start + 5]
    assert trio.current_time() == start + 5


async def test_exit_returns_as_soon_as_background_is_idle(
    mock_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    async with open_runtime(grace=30) as rt:
        rt.spawn(trio.sleep, 2, name="two-seconds")
    assert trio.current_time() == start + 2


async def test_a_task_whose_caller_dropped_every_reference_still_completes() -> None:
    completed = trio.Event()
    refs: list[weakref.ref[object]] = []

    class Job:
        async def run(self) -> None:
            await trio.sleep(0.02)
            completed.set()

    def fire(rt: Runtime) -> None:
        job = Job()
        refs.append(weakref.ref(job))
        rt.spawn(job.run, name="orphan")
        # `job` goes out of scope here: the caller keeps no reference

    async with open_runtime(grace=1) as rt:
        fire(rt)
        gc.collect()
        with trio.fail_after(1):
            await completed.wait()
        assert rt.active_count() == 0
        assert rt.failed_count == 0


async def test_spawn_after_close_is_refused(mock_clock: trio.testing.MockClock) -> None:
    async with open_runtime(grace=1) as rt:
        pass
    with pytest.raises(ScopeClosed, match="late"):
        rt.spawn(trio.sleep, 1, name="late")


async def test_background_tasks_are_owned_and_visible_in_the_registry() -> None:
    release = trio.Event()
    async with open_runtime(grace=1) as rt:
        rt.spawn(release.wait, name="job")
        rt.spawn(release.wait, name="job")
        await trio.testing.wait_all_tasks_blocked()
        jobs = rt.registry.find("job")
        assert len(jobs) == 2
        assert {rt.registry.owner_of(t) for t in jobs} == {"runtime.background"}
        release.set()
        await rt.background.wait_idle()
        await trio.testing.wait_all_tasks_blocked()
        assert rt.registry.find("job") == []


async def test_an_error_in_the_block_comes_out_unwrapped() -> None:
    async def body() -> None:
        async with open_runtime(grace=1) as rt:
            rt.spawn(trio.sleep, 0, name="noise")
            raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await body()
