"""Sessions: failures, on_error="raise", closing with grace, nothing outliving the block."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

import tether
from tether import SessionClosed


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_crashing_handler_is_logged_recorded_and_others_go_on(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    done: list[int] = []
    async with tether.open_session("crash") as session:

        @session.on("msg")
        async def explode(payload: int) -> None:
            await trio.sleep(1)
            raise RuntimeError(f"boom {payload}")

        @session.on("msg")
        async def steady(payload: int) -> None:
            await trio.sleep(2)
            done.append(payload)

        session.emit("msg", 1)
        await trio.sleep(3)
        session.emit("msg", 2)  # the session lives on after a failure
    assert done == [1, 2]
    stats = session.stats()
    assert (stats.started, stats.failed, stats.finished) == (4, 2, 2)
    assert [(f.event, f.handler, f.at) for f in session.failures] == [
        ("msg", "explode", 1.0),
        ("msg", "explode", 4.0),
    ]
    assert str(session.failures[1].error) == "boom 2"
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2
    assert "crash::msg::explode" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert errors[0].exc_info[0] is RuntimeError


async def test_on_error_raise_fails_the_session_with_the_handler_error(
    mock_clock: trio.testing.MockClock,
) -> None:
    body_cancelled_at: list[float] = []
    sibling_cut: list[float] = []
    opened: list[tuple[tether.Runtime, tether.Session]] = []

    async def strict_block() -> None:
        async with (
            tether.open_runtime() as rt,
            tether.open_session("strict", on_error="raise") as s,
        ):
            opened.append((rt, s))

            @s.on("msg")
            async def fragile(payload: None) -> None:
                await trio.sleep(2)
                raise ValueError("bad input")

            @s.on("msg")
            async def patient(payload: None) -> None:
                try:
                    await trio.sleep(100)
                finally:
                    sibling_cut.append(trio.current_time())

            s.emit("msg")
            try:
                await trio.sleep(100)
            finally:
                body_cancelled_at.append(trio.current_time())

    with pytest.raises(ValueError, match="bad input") as info:
        await strict_block()
    [(rt, s)] = opened
    # the handler's own exception, not a group, annotated with where it came from
    assert type(info.value) is ValueError
    assert "strict::msg::fragile" in info.value.__notes__[0]
    assert body_cancelled_at == [2]
    assert sibling_cut == [2]
    assert s.closed
    assert rt.registry.owned_by("session:strict") == []
    with pytest.raises(SessionClosed):
        s.emit("msg")


async def test_close_cancels_a_stubborn_handler_exactly_at_the_grace_deadline(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    cut_at: list[float] = []
    polite_done: list[float] = []
    async with tether.open_runtime() as rt:
        async with tether.open_session("close", grace=3) as session:

            @session.on("work")
            async def stubborn(payload: None) -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    cut_at.append(trio.current_time())

            @session.on("work")
            async def polite(payload: None) -> None:
                await trio.sleep(2)
                polite_done.append(trio.current_time())

            session.emit("work")
            session.emit("work")
            await trio.sleep(1)
            closing_from = trio.current_time()
        assert cut_at == [closing_from + 3, closing_from + 3]
        assert polite_done == [2, 2]
        assert rt.registry.owned_by("session:close") == []
    warning = next(r for r in caplog.records if r.levelname == "WARNING")
    assert "2 handler run(s) still running after 3s grace" in warning.getMessage()
    assert "close::work::stubborn" in warning.getMessage()
    stats = session.stats()
    assert (stats.started, stats.finished, stats.cancelled, stats.running) == (4, 2, 2, 0)


async def test_aclose_returns_the_exact_count_and_queued_runs_are_dropped(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_session("q") as session:

        @session.on("turn", policy="serial")
        async def turn(payload: int) -> None:
            await trio.sleep(10)

        @session.on("side")
        async def side(payload: int) -> None:
            await trio.sleep(10)

        for i in range(4):
            session.emit("turn", i)
        for i in range(3):
            session.emit("side", i)
        await trio.sleep(1)
        assert await session.aclose(grace=2) == 4
        assert trio.current_time() == 3
        assert await session.aclose() == 4  # closing twice is harmless
    stats = session.stats()
    assert (stats.started, stats.cancelled, stats.dropped, stats.queued) == (4, 4, 3, 0)


async def test_queued_serial_runs_drain_during_grace(mock_clock: trio.testing.MockClock) -> None:
    seen: list[int] = []
    async with tether.open_session("drain", grace=10) as session:

        @session.on("turn", policy="serial")
        async def turn(payload: int) -> None:
            await trio.sleep(1)
            seen.append(payload)

        for i in range(3):
            session.emit("turn", i)
    assert seen == [0, 1, 2]
    assert trio.current_time() == 3


async def test_nothing_of_the_session_outlives_its_block(
    mock_clock: trio.testing.MockClock,
) -> None:
    async with tether.open_runtime() as rt:
        async with tether.open_session("tree", grace=1) as session:

            @session.on("spawn")
            async def spawner(payload: None) -> None:
                async with trio.open_nursery() as nursery:  # the handler's own children
                    nursery.start_soon(trio.sleep_forever, name="grandchild")
                    nursery.start_soon(trio.sleep_forever, name="grandchild")

            @session.on("quick")
            def quick(payload: None) -> str:
                return "ok"

            session.emit("spawn")
            assert await session.call("quick") == ["ok"]  # a worker thread, joined
            await trio.testing.wait_all_tasks_blocked()
            owned = rt.registry.owned_by("session:tree")
            assert len([t for t in owned if t.name == "grandchild"]) == 2
            assert session.running_tasks() == rt.registry.find("tree::spawn::spawner")
            assert set(session.live_tasks()) == set(owned)
        assert rt.registry.owned_by("session:tree") == []
        assert rt.registry.find("grandchild") == []
        assert session.live_tasks() == []


async def test_after_close_everything_refuses_with_session_closed() -> None:
    async with tether.open_session("gone") as session:

        @session.on("e")
        async def h(payload: None) -> None:
            pass

    with pytest.raises(SessionClosed, match="session 'gone' is closed; cannot emit 'e'"):
        session.emit("e")
    with pytest.raises(SessionClosed):
        await session.call("e")
    with pytest.raises(SessionClosed):
        session.add_handler("e", h)
    with pytest.raises(SessionClosed):
        session.emit("unknown-too")
    assert session.stats().emitted == 0


async def test_emit_during_grace_is_refused(mock_clock: trio.testing.MockClock) -> None:
    refused: list[str] = []
    async with tether.open_session("g", grace=5) as session:

        @session.on("e")
        async def h(payload: None) -> None:
            await trio.sleep(1)
            try:
                session.emit("e")
            except SessionClosed as exc:
                refused.append(str(exc))

        session.emit("e")
    assert len(refused) == 1


async def test_sync_handler_is_abandoned_at_the_grace_deadline() -> None:
    # real clock: a worker thread is real time; keep grace tiny
    release = threading.Event()
    entered = threading.Event()
    try:
        async with tether.open_session("sync", grace=0.05) as session:

            @session.on("e")
            def blocker(payload: None) -> None:
                entered.set()
                release.wait(10)

            session.emit("e")
            await trio.to_thread.run_sync(entered.wait, 10)
            start = trio.current_time()
        elapsed = trio.current_time() - start
        assert 0.05 <= elapsed < 2
        stats = session.stats()
        assert (stats.started, stats.cancelled, stats.running) == (1, 1, 0)
    finally:
        release.set()


async def test_stats_are_exact_across_every_outcome(mock_clock: trio.testing.MockClock) -> None:
    async with tether.open_session("all", grace=0.5) as session:

        @session.on("ok")
        async def ok(payload: None) -> None:
            pass

        @session.on("fail")
        async def fail(payload: None) -> None:
            raise OSError("nope")

        @session.on("busy", policy="drop")
        async def busy(payload: None) -> None:
            await trio.sleep(10)

        for _ in range(5):
            session.emit("ok")
        session.emit("fail")
        session.emit("busy")
        session.emit("busy")
        session.emit("nobody")
        await trio.testing.wait_all_tasks_blocked()
        mid = session.stats()
        assert mid == tether.SessionStats(
            emitted=9,
            unhandled=1,
            started=7,
            finished=5,
            failed=1,
            cancelled=0,
            dropped=1,
            running=1,
            queued=0,
        )
    end = session.stats()
    assert (end.cancelled, end.running) == (1, 0)
    assert end.started == end.finished + end.failed + end.cancelled + end.running


async def test_on_error_raise_stops_runs_not_yet_started(
    mock_clock: trio.testing.MockClock,
) -> None:
    ran: list[str] = []

    async def block() -> None:
        async with tether.open_session("strict", on_error="raise") as s:

            @s.on("e")
            async def first(payload: None) -> None:
                ran.append("first")
                raise KeyError("first")

            @s.on("e")
            async def second(payload: None) -> None:  # would fail too if it ever ran
                ran.append("second")
                raise KeyError("second")

            s.emit("e")
            await trio.sleep_forever()

    with pytest.raises(KeyError, match="first"):
        await block()
    assert ran == ["first"]


async def test_on_error_raise_with_failures_during_cancellation_is_a_group(
    mock_clock: trio.testing.MockClock,
) -> None:
    async def block() -> None:
        async with tether.open_session("strict", on_error="raise") as s:

            @s.on("e")
            async def fails(payload: None) -> None:
                await trio.sleep(1)
                raise ValueError("primary")

            @s.on("e")
            async def messy_cleanup(payload: None) -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    raise OSError("cleanup failed")  # replaces the Cancelled: the point

            s.emit("e")
            await trio.sleep_forever()

    with pytest.RaisesGroup(ValueError, OSError, match="session 'strict': 2 handlers failed"):
        await block()


async def test_outer_cancellation_tears_the_session_down(
    mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="tether.session")
    async with tether.open_runtime() as rt:
        with trio.move_on_after(2):
            async with tether.open_session("outer", grace=60) as session:

                @session.on("e", policy="serial")
                async def forever(payload: int) -> None:
                    await trio.sleep_forever()

                session.emit("e", 1)
                session.emit("e", 2)
                await trio.sleep_forever()
        # the grace period does not apply to an outer cancellation: it is immediate
        assert trio.current_time() == 2
        assert rt.registry.owned_by("session:outer") == []
    stats = session.stats()
    assert (stats.started, stats.cancelled, stats.dropped, stats.running) == (1, 1, 1, 0)
    assert session.closed
    assert "closed by cancellation" in caplog.text
    assert "grace" not in caplog.text
