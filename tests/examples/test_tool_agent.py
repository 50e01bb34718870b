"""examples/tool_agent.py: tools as session handlers with time limits, and barge-in."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import attrs
import pytest
import tool_agent
import trio
import trio.testing

import tether
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import PoolWorker


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """Virtual time: each test's timings are exact, and the 10 s tool takes none."""
    return trio.testing.MockClock(autojump_threshold=0)


async def converse(
    messages: list[tuple[str, float]],
) -> tuple[list[tuple[float, str]], tether.Session]:
    replies: list[tuple[float, str]] = []

    async def reply(text: str) -> None:
        replies.append((trio.current_time(), text))

    async with tether.open_session("chat") as session:
        tool_agent.add_tool_agent(session, reply)
        for message, pause in messages:
            session.emit("message", message)
            await trio.sleep(pause)
    return replies, session


async def test_the_agent_answers_with_what_its_tool_found(
    mock_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    replies, _ = await converse([("what is the weather in Paris", 5)])
    assert [(t - start, text) for t, text in replies] == [(0.5, "sunny and 21 degrees in Paris")]


async def test_a_slow_tool_is_cut_at_its_own_limit_and_the_others_still_answer(
    mock_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    replies, session = await converse([("search for trio and the weather in Oslo", 20)])
    ((at, text),) = replies
    assert at - start == 3.0  # search's limit, not its 10 s
    assert text == "sunny and 21 degrees in Oslo; (search timed out after 3s)"
    assert session.stats().failed == 0


async def test_a_newer_message_barges_in_and_cancels_the_answer_and_its_tools(
    mock_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    replies, session = await converse([("weather in Rome", 0.2), ("no, the weather in Lisbon", 5)])
    assert [(t - start, text) for t, text in replies] == [(0.7, "sunny and 21 degrees in Lisbon")]
    stats = session.stats()
    # Rome's message run and the weather tool run it had started were both cancelled
    assert (stats.cancelled, stats.finished, stats.failed) == (2, 2, 0)


async def test_the_scripted_conversation_runs(
    mock_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    await tool_agent.main()
    out = capsys.readouterr().out
    assert "agent: sunny and 21 degrees in Paris" in out
    assert "agent: sunny and 21 degrees in Oslo; (search timed out after 3s)" in out
    assert "Rome" not in out.split("user:  weather in Rome")[1].split("agent:")[1]
    assert "agent: sunny and 21 degrees in Lisbon" in out


async def test_as_a_bridge_agent_it_keeps_what_it_learned_in_the_rooms_state(
    tmp_path: Path,
) -> None:
    async with await SqliteStore.open(tmp_path / "custody.db", synchronous="NORMAL") as store:
        fast = tuple(attrs.evolve(t, fn=_instant) for t in tool_agent.TOOLS)
        worker = PoolWorker(
            store, "w1", partial(tool_agent.factory, tools=fast), poll_interval=0.02
        )
        replies = []
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            for id, text, room in (
                ("a", "I live in Porto", "r"),
                ("b", "what is the weather?", "r"),
                ("c", "what is the weather?", "elsewhere"),
            ):
                await store.ingest(Task(id, text, room=room), room_policy="serial")
                with trio.fail_after(20):
                    while await store.state(id) is not CustodyState.RESULT:  # noqa: ASYNC110
                        await trio.sleep(0.02)
                await store.mark_delivered(id)
                record = await store.get(id)
                assert record is not None
                replies.append(record.result)
            worker.request_stop()
        view = await store.room("r")
    assert replies == [
        "noted: your home is Porto",
        "weather: Porto",
        "you said: what is the weather?",
    ]
    assert view is not None
    assert view.state == {"home": "Porto"}


async def _instant(argument: str) -> str:
    return f"weather: {argument}"


async def test_as_a_bridge_agent_each_tool_call_is_a_durable_step(tmp_path: Path) -> None:
    """A run resumed after a crash finds the weather tool's answer recorded by the run
    before: the tool is not called again; the clock tool, never recorded, runs."""
    async with await SqliteStore.open(tmp_path / "custody.db") as store:
        await store.ingest(Task("t", "weather in Paris and the time"))
        crashed = await store.claim("w0", leaderless=True)
        assert crashed is not None
        await store.record_step(crashed, "tool:0:weather", '"recorded: rainy in Paris"')
        await store.release(crashed)  # (as a crash expiry would: pending, the same attempt)
        worker = PoolWorker(store, "w1", tool_agent.factory, poll_interval=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_until(lambda: _has_result(store))
            worker.request_stop()
        [result] = await store.ready_results()
        weather, clock = result.body.split("; ")
        assert weather == "recorded: rainy in Paris"
        assert clock.startswith("it is ")
        steps = [s.name for s in await store.steps("t")]
        assert steps == ["tool:0:weather", "tool:1:clock"]


async def _has_result(store: SqliteStore) -> bool:
    return await store.state("t") is CustodyState.RESULT
