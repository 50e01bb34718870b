"""Agents: loading ``module:factory``, the bundled agents, reply rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tether import open_session
from tether.agents import echo, flaky, noop
from tether.bridge import Reply, Task
from tether.bridge.pool import AgentLoadError, EmptyReply, load_agent
from tether.bridge.pool._agent import agent_room_policy, install_agent
from tether.bridge.runs._reply import AgentError, reply_of

not_callable = 42


def test_load_agent_returns_the_factory() -> None:
    assert load_agent("tether.agents.echo:factory") is echo.factory
    assert load_agent("tether.agents.flaky:factory") is flaky.factory
    assert load_agent(f"{__name__}:Holder.factory") is Holder.factory


class Holder:
    @staticmethod
    def factory(session: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tether.agents.echo", "must look like 'package.module:factory'"),
        ("tether.agents.echo:", "must look like"),
        (":factory", "must look like"),
        ("a b:factory", "must look like"),
        ("no_such_module_xyz:factory", "cannot import module 'no_such_module_xyz'"),
        ("tether.agents.echo:nope", "has no attribute 'nope'"),
        (f"{__name__}:not_callable", "is a int, not a callable factory"),
    ],
)
def test_load_agent_errors_are_one_line_and_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(AgentLoadError, match=message) as info:
        load_agent(spec)
    assert "\n" not in str(info.value)


async def _ask(factory: Any, task: Task) -> Reply:
    async with open_session("agent-test") as session:
        install_agent(session, factory)
        return reply_of(await session.call("task", task), task.id)


async def test_bundled_echo_and_noop_agents_reply() -> None:
    assert await _ask(echo.factory, Task("t", "hi")) == Reply("echo: hi")
    assert await _ask(noop.factory, Task("t", "hi")) == Reply("ok")


async def test_flaky_fails_exactly_the_predicted_task_ids() -> None:
    ids = [f"task-{i}" for i in range(40)]
    predicted = {id for id in ids if flaky.fails(id, 0.5)}
    assert 5 < len(predicted) < 35  # some fail, some do not
    headers = {"flaky-delay": "0", "flaky-fail-rate": "0.5"}
    failed = set()
    for id in ids:
        try:
            reply = await _ask(flaky.factory, Task(id, "b", headers=headers))
        except flaky.FlakyFailure:
            failed.add(id)
        else:
            assert reply == Reply("flaky: b")
    assert failed == predicted


async def test_flaky_takes_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_FLAKY_DELAY", "0.2")
    monkeypatch.setenv("TETHER_FLAKY_FAIL_RATE", "0")
    start = trio.current_time()
    assert await _ask(flaky.factory, Task("t", "b")) == Reply("flaky: b")
    assert trio.current_time() - start >= 0.2


async def test_flaky_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="flaky-fail-rate"):
        await _ask(flaky.factory, Task("t", "b", headers={"flaky-fail-rate": "2"}))


def test_reply_rules() -> None:
    assert reply_of(["x"], "t") == Reply("x")
    assert reply_of([Reply("", no_send=True)], "t") == Reply("", no_send=True)
    with pytest.raises(EmptyReply, match="empty reply"):
        reply_of([""], "t")
    with pytest.raises(AgentError, match="must return a str"):
        reply_of([b"bytes"], "t")
    with pytest.raises(AgentError, match="expected one reply"):
        reply_of([], "t")
    with pytest.raises(TypeError):
        Reply(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Reply("x", no_send="yes")  # type: ignore[arg-type]


async def test_an_agent_registering_two_task_handlers_is_refused() -> None:
    def twice(session: Any) -> None:
        echo.factory(session)
        echo.factory(session)

    async with open_session("agent-test") as session:
        with pytest.raises(AgentError, match="registered 2 handler"):
            install_agent(session, twice)


async def test_an_agent_whose_task_handler_skips_runs_is_refused() -> None:
    def factory(session: Any) -> None:
        session.add_handler("task", lambda task: "ok", policy="drop")

    with pytest.raises(AgentError, match="policy 'drop', which cancels or skips runs"):
        await _ask(factory, Task("t", "hi"))


async def test_a_replace_agent_asks_for_barge_in_per_room_not_across_rooms() -> None:
    """A ``replace`` task handler is the room policy ``replace``: the store supersedes per
    room, so the worker's session runs the handler concurrently (a session-wide replace would
    cancel one room's run for another room's message)."""
    release = trio.Event()

    async def slow(task: Task) -> str:
        await release.wait()
        return f"ok {task.id}"

    def factory(session: Any) -> None:
        session.add_handler("task", slow, policy="replace")

    assert await agent_room_policy(factory) == "replace"
    replies: list[Any] = []
    async with open_session("agent-test") as session:
        assert install_agent(session, factory) == "replace"
        assert session.handler_policies("task") == ["concurrent"]
        async with trio.open_nursery() as nursery:
            for id, room in (("a", "r1"), ("b", "r2")):
                nursery.start_soon(_collect, session, Task(id, "hi", room=room), replies)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert sorted(r.body for r in replies) == ["ok a", "ok b"]


async def _collect(session: Any, task: Task, into: list[Any]) -> None:
    into.append(reply_of(await session.call("task", task), task.id))


async def test_an_agent_may_name_its_room_policy() -> None:
    def factory(session: Any) -> None:
        session.add_handler("task", lambda task: "ok")

    assert await agent_room_policy(factory) is None  # the bridge's setting applies
    factory.room_policy = "concurrent"  # type: ignore[attr-defined]
    assert await agent_room_policy(factory) == "concurrent"
    factory.room_policy = "fifo"  # type: ignore[attr-defined]
    with pytest.raises(AgentError, match="room_policy attribute is wrong: room policy must be"):
        await agent_room_policy(factory)


@pytest.mark.parametrize("policy", ["concurrent", "serial"])
async def test_agents_that_run_every_call_are_accepted(policy: Any) -> None:
    def factory(session: Any) -> None:
        session.add_handler("task", lambda task: f"ok {task.id}", policy=policy)

    assert await _ask(factory, Task("t", "hi")) == Reply("ok t")


def test_a_module_missing_a_dependency_names_the_line_that_imports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "cannot import module 'needs_dep'": the module is there; what it imports is not."""
    (tmp_path / "needs_dep.py").write_text('"""An agent."""\nimport no_such_dependency_xyz\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AgentLoadError) as info:
        load_agent("needs_dep:factory")
    assert str(info.value) == (
        f"agent 'needs_dep:factory': {tmp_path / 'needs_dep.py'}, line 2: "
        "ModuleNotFoundError: No module named 'no_such_dependency_xyz'"
    )


async def test_a_factory_returning_a_coroutine_is_refused_without_a_warning() -> None:
    class AsyncCall:
        async def __call__(self, session: Any) -> None:
            session.add_handler("task", echo.factory)

    with pytest.raises(AgentError, match="the factory is an async function"):
        # filterwarnings = error: a "coroutine never awaited" warning would fail the test
        await agent_room_policy(AsyncCall())  # type: ignore[arg-type]  # the mistake tested
