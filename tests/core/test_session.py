"""Sessions: identity tracking, policies, call, interrupt, stats."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
import trio.testing

import tether
from tether import HandlerCancelled, HandlerDropped, QueueFull


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_same_handler_twice_is_two_tasks_in_the_registry(
    mock_clock: trio.testing.MockClock,
) -> None:
    gate = trio.Event()
    finished: list[int] = []
    async with tether.open_runtime() as rt, tether.open_session("chat") as session:

        @session.on("message")
        async def reply(payload: int) -> None:
            await gate.wait()
            finished.append(payload)

        session.emit("message", 1)
        session.emit("message", 2)
        await trio.testing.wait_all_tasks_blocked()
        found = rt.registry.find("chat::message::reply")
        assert len(found) == 2
        assert len(set(found)) == 2
        assert all(rt.registry.owner_of(t) == "session:chat" for t in found)
        assert set(session.running_tasks()) == set(found)
        assert session.stats().running == 2
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(finished) == [1, 2]
        assert rt.registry.find("chat::message::reply") == []
        stats = session.stats()
        assert (stats.started, stats.finished, stats.running) == (2, 2, 0)


async def test_standalone_session_tracks_runs_by_identity(
    mock_clock: trio.testing.MockClock,
) -> None:
    gate = trio.Event()
    assert tether.current_runtime() is None
    async with tether.open_session("solo") as session:

        @session.on("tick")
        async def work(payload: None) -> None:
            await gate.wait()

        for _ in range(3):
            session.emit("tick")
        await trio.testing.wait_all_tasks_blocked()
        running = session.running_tasks()
        assert len(set(running)) == 3
        assert {t.name for t in running} == {"solo::tick::work"}
        assert trio.lowlevel.current_task() not in running
        gate.set()
    assert session.running_tasks() == []
    assert session.live_tasks() == []
    assert session.stats().finished == 3


async def test_many_blocking_handlers_all_run_at_once(mock_clock: trio.testing.MockClock) -> None:
    """The worker pool never caps concurrency: 300 blocked runs are 300 live tasks."""
    gate = trio.Event()
    async with tether.open_runtime() as rt, tether.open_session("fan", keep_idle=4) as session:

        @session.on("job")
        async def job(payload: int) -> None:
            await gate.wait()

        for i in range(300):
            session.emit("job", i)
        await trio.testing.wait_all_tasks_blocked()
        assert session.stats().running == 300
        assert len(rt.registry.find("fan::job::job")) == 300
        gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert session.stats().finished == 300
        # only keep_idle workers (+ the foreman) stay around between bursts
        assert len(rt.registry.owned_by("session:fan")) <= 4 + 1


async def test_handlers_of_one_event_start_in_registration_order() -> None:
    order: list[str] = []
    async with tether.open_session("ord") as session:
        for label in "abc":

            async def handler(payload: int, label: str = label) -> None:
                order.append(f"{label}{payload}")

            session.add_handler("e", handler)
        session.emit("e", 1)
        session.emit("e", 2)
    assert order == ["a1", "b1", "c1", "a2", "b2", "c2"]


async def test_serial_runs_fifo_one_at_a_time(mock_clock: trio.testing.MockClock) -> None:
    active = 0
    peak = 0
    seen: list[int] = []
    async with tether.open_session("ser", grace=60) as session:

        @session.on("turn", policy="serial")
        async def turn(payload: int) -> None:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await trio.sleep(1 if payload % 2 else 2)
            seen.append(payload)
            active -= 1

        start = trio.current_time()
        for i in range(5):
            session.emit("turn", i)
        assert session.stats().queued == 5
    assert seen == [0, 1, 2, 3, 4]
    assert peak == 1
    assert trio.current_time() - start == 2 + 1 + 2 + 1 + 2


async def test_serial_queue_full_refuses_the_whole_event(
    mock_clock: trio.testing.MockClock,
) -> None:
    also: list[int] = []
    async with tether.open_session("ser") as session:

        @session.on("turn", policy="serial", max_queue=2)
        async def turn(payload: int) -> None:
            await trio.sleep(1)

        @session.on("turn")
        async def observer(payload: int) -> None:
            also.append(payload)

        session.emit("turn", 0)  # runs
        session.emit("turn", 1)  # queued
        session.emit("turn", 2)  # queued
        with pytest.raises(QueueFull, match=r"ser::turn::turn.*max_queue=2"):
            session.emit("turn", 3)
        await trio.testing.wait_all_tasks_blocked()
        assert also == [0, 1, 2]  # the refused event started no handler at all
        assert session.stats().emitted == 3


async def test_replace_cancels_the_running_handler(mock_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    async with tether.open_session("voice", grace=60) as session:

        @session.on("utterance", policy="replace")
        async def speak(payload: str) -> None:
            try:
                await trio.sleep(10)
                log.append(f"done {payload}")
            except trio.Cancelled:
                log.append(f"cut {payload} at {trio.current_time():g}")
                raise

        session.emit("utterance", "a")
        await trio.sleep(1)
        session.emit("utterance", "b")  # barge-in
        session.emit("utterance", "c")  # supersedes b before b started
        await trio.sleep(1)
        assert [t.name for t in session.running_tasks()] == ["voice::utterance::speak"]
    assert log == ["cut a at 1", "done c"]
    stats = session.stats()
    assert (stats.started, stats.cancelled, stats.finished, stats.dropped) == (2, 1, 1, 1)


async def test_drop_ignores_events_while_busy(mock_clock: trio.testing.MockClock) -> None:
    ran: list[int] = []
    async with tether.open_session("d") as session:

        @session.on("ping", policy="drop")
        async def pong(payload: int) -> None:
            ran.append(payload)
            await trio.sleep(1)

        session.emit("ping", 1)
        session.emit("ping", 2)
        session.emit("ping", 3)
        await trio.sleep(2)
        session.emit("ping", 4)
    assert ran == [1, 4]
    stats = session.stats()
    assert (stats.emitted, stats.started, stats.dropped, stats.finished) == (4, 2, 2, 2)


async def test_unknown_event_is_counted_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="tether.session")
    async with tether.open_session("u") as session:
        session.emit("nobody-listens", 1)
        assert await session.call("nobody-either") == []
    stats = session.stats()
    assert (stats.emitted, stats.unhandled, stats.started) == (2, 2, 0)
    assert "no handler for event 'nobody-listens'" in caplog.text


async def test_call_returns_results_in_registration_order(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_session("c") as session:

        @session.on("ask")
        async def slow(payload: int) -> int:
            await trio.sleep(2)
            return payload * 10

        @session.on("ask")
        async def fast(payload: int) -> str:
            await trio.sleep(1)
            return f"fast {payload}"

        @session.on("ask")
        def blocking(payload: int) -> int:  # a sync handler: runs in a worker thread
            assert threading.current_thread() is not threading.main_thread()
            return payload + 1

        assert await session.call("ask", 4) == [40, "fast 4", 5]
        assert trio.current_time() == 2


async def test_call_raises_the_handler_error_unwrapped() -> None:
    async with tether.open_session("c", on_error="raise") as session:

        @session.on("ask")
        async def ok(payload: int) -> int:
            return payload

        @session.on("ask")
        async def bad(payload: int) -> int:
            raise KeyError(payload)

        with pytest.raises(KeyError) as info:
            await session.call("ask", 7)
        assert info.value.args == (7,)
        # the caller got the error: even with on_error="raise" the session lives on
        assert not session.closed
        with pytest.raises(KeyError):
            await session.call("ask", 8)
    stats = session.stats()
    assert (stats.failed, stats.finished) == (2, 2)
    assert [f.via_call for f in session.failures] == [True, True]
    assert session.failures[0].task_name == "c::ask::bad"
    assert session.failures[0].handler == "bad"


async def test_call_with_two_failures_raises_a_group() -> None:
    async with tether.open_session("c") as session:

        @session.on("ask")
        async def one(payload: None) -> None:
            raise ValueError("one")

        @session.on("ask")
        async def two(payload: None) -> None:
            raise TypeError("two")

        with pytest.RaisesGroup(ValueError, TypeError):
            await session.call("ask")


async def test_cancelled_caller_cancels_its_runs(mock_clock: trio.testing.MockClock) -> None:
    cut: list[float] = []
    async with tether.open_session("c") as session:

        @session.on("ask")
        async def slow(payload: None) -> None:
            try:
                await trio.sleep(100)
            finally:
                cut.append(trio.current_time())

        with trio.move_on_after(3):
            await session.call("ask")
        await trio.testing.wait_all_tasks_blocked()
        assert cut == [3]
        assert session.stats().cancelled == 1


async def test_call_on_a_replaced_run_raises_handler_cancelled(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_session("c") as session:

        @session.on("say", policy="replace")
        async def say(payload: int) -> int:
            await trio.sleep(5)
            return payload

        @session.on("once", policy="drop")
        async def once(payload: int) -> int:
            await trio.sleep(5)
            return payload

        async with trio.open_nursery() as nursery:

            async def first() -> None:
                with pytest.raises(HandlerCancelled):
                    await session.call("say", 1)

            nursery.start_soon(first)
            session.emit("once", 0)
            await trio.sleep(1)
            with pytest.raises(HandlerDropped):
                await session.call("once", 1)
            assert await session.call("say", 2) == [2]


async def test_interrupt_cancels_running_and_queued_but_keeps_the_session(
    mock_clock: trio.testing.MockClock,
) -> None:
    started: list[int] = []
    async with tether.open_session("i") as session:

        @session.on("task", policy="serial")
        async def task(payload: int) -> None:
            started.append(payload)
            await trio.sleep(10)

        @session.on("other")
        async def other(payload: None) -> None:
            await trio.sleep(10)

        for i in range(3):
            session.emit("task", i)
        session.emit("other")
        await trio.sleep(1)
        assert session.interrupt("task") == 1
        await trio.testing.wait_all_tasks_blocked()
        assert started == [0]
        assert [t.name for t in session.running_tasks()] == ["i::other::other"]
        session.emit("task", 9)  # the session lives on
        await trio.sleep(1)
        assert started == [0, 9]
        assert session.interrupt() == 2
        await trio.testing.wait_all_tasks_blocked()
        assert session.running_tasks() == []
    stats = session.stats()
    assert (stats.cancelled, stats.dropped, stats.finished) == (3, 2, 0)


async def test_handler_that_swallows_cancel_does_not_poison_the_next_run(
    mock_clock: trio.testing.MockClock,
) -> None:
    results: list[str] = []
    async with tether.open_session("s", grace=60) as session:

        @session.on("e", policy="serial")
        async def stubborn(payload: int) -> None:
            try:
                await trio.sleep(10)
                results.append(f"done {payload}")
            except trio.Cancelled:
                results.append(f"swallowed {payload}")

        session.emit("e", 1)
        await trio.sleep(1)
        session.interrupt("e")
        session.emit("e", 2)
    assert results == ["swallowed 1", "done 2"]


async def test_handlers_see_the_openers_context_and_owner() -> None:
    seen: list[str | None] = []
    async with tether.open_runtime(), tether.open_session("ctx") as session:

        @session.on("e")
        async def who(payload: None) -> None:
            seen.append(tether.current_owner())

        with tether.owned_by("someone-else"):
            session.emit("e")
    assert seen == ["session:ctx"]


def test_bad_arguments_are_named() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="on_error must be 'log' or 'raise', got 'loud'"):
            async with tether.open_session("x", on_error="loud"):  # type: ignore[arg-type]
                pass
        with pytest.raises(ValueError, match="session name"):
            async with tether.open_session(""):
                pass
        async with tether.open_session("x") as session:

            async def h(payload: Any) -> None:
                pass

            with pytest.raises(ValueError, match="unknown policy 'fifo'"):
                session.add_handler("e", h, policy="fifo")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="max_queue must be an int >= 1, got 0"):
                session.add_handler("e", h, policy="serial", max_queue=0)
            with pytest.raises(ValueError, match="event must be a non-empty string"):
                session.add_handler("", h)
            with pytest.raises(TypeError, match="must be callable"):
                session.add_handler("e", 3)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="grace must be"):
                await session.aclose(grace=-1)

    trio.run(main)


async def test_emit_from_a_sync_handler_thread_is_refused_with_the_fix_named() -> None:
    relayed: list[str] = []
    async with tether.open_session("t") as session:

        @session.on("start")
        def sync_handler(payload: None) -> str:
            with pytest.raises(RuntimeError, match=r"trio.from_thread.run_sync\(session.emit"):
                session.emit("next")
            trio.from_thread.run_sync(session.emit, "next", "via from_thread")
            return "ok"

        @session.on("next")
        async def follow(payload: str) -> None:
            relayed.append(payload)

        assert await session.call("start") == ["ok"]
    assert relayed == ["via from_thread"]


async def test_a_flood_of_quick_handlers_does_not_starve_other_tasks() -> None:
    """Workers run quick handlers back to back, but yield every so often."""
    seen_mid_flood: list[int] = []
    async with tether.open_session("flood") as session:

        @session.on("e")
        async def quick(payload: int) -> None:
            pass

        async def observer() -> None:
            while session.stats().finished < 1000:
                seen_mid_flood.append(session.stats().finished)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for i in range(1000):
                session.emit("e", i)
            nursery.start_soon(observer)
    assert any(0 < n < 1000 for n in seen_mid_flood)
    assert session.stats().finished == 1000


async def test_a_reused_worker_shows_the_current_runs_age_in_the_registry(
    mock_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def quick(_: object) -> None:
        await trio.sleep(1)

    async def slow(_: object) -> None:
        await release.wait()

    async with tether.open_runtime(grace=0) as rt, tether.open_session("ages") as session:
        session.add_handler("quick", quick)
        session.add_handler("slow", slow)
        session.emit("quick", None)
        await trio.sleep(5)  # the worker finished its run and idles
        began = trio.current_time()
        session.emit("slow", None)
        await trio.sleep(2)
        [info] = [i for i in rt.registry.snapshot() if i.name == "ages::slow::slow"]
        assert info.started_at == began
        release.set()


async def test_a_host_wraps_a_handler_before_it_runs_keeping_its_kind() -> None:
    seen: list[str] = []

    async def answer(payload: str) -> str:
        return f"answer to {payload}"

    def plain(payload: str) -> str:
        return f"plain {payload}"

    def around_async(fn: Any) -> Any:
        async def wrapped(payload: str) -> Any:
            seen.append(f"before {payload}")
            return await fn(payload)

        return wrapped

    def around_plain(fn: Any) -> Any:
        def wrapped(payload: str) -> Any:
            seen.append(f"thread {payload}")
            return fn(payload)

        return wrapped

    async with tether.open_session("wrapped") as session:
        session.add_handler("ask", answer)
        session.add_handler("sync", plain)
        with pytest.raises(TypeError, match="from async to plain"):
            session.wrap_handlers("ask", around_plain)
        session.wrap_handlers("ask", around_async)
        session.wrap_handlers("sync", around_plain)
        assert await session.call("ask", "x") == ["answer to x"]
        assert await session.call("sync", "y") == ["plain y"]
    assert seen == ["before x", "thread y"]
