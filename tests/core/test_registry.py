"""The registry mirrors live tasks by identity: ported from the public name-keyed bug.

The asyncio SDK kept ``{task_name: task}``; two live handlers named
``sess::on_message::handle::handler`` evicted each other and ``current_tasks()`` said 0 while
work ran. Each test here fails on a name-keyed registry (see ``NameKeyedRegistry``, which the
first test runs side by side to show the bug is real).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from tether import ALL_KINDS, TaskRegistry, owned_by

SHARED = "sess::on_message::handle::handler"


@attrs.define(eq=False)
class NameKeyedRegistry(trio.abc.Instrument):
    """The public bug, reproduced: live tasks keyed by name."""

    live: dict[str, trio.lowlevel.Task] = attrs.Factory(dict)

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.live[task.name] = task

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.live.pop(task.name, None)


@pytest.fixture
async def registry() -> AsyncIterator[TaskRegistry]:
    reg = TaskRegistry()
    trio.lowlevel.add_instrument(reg)
    reg.adopt_running()
    yield reg
    trio.lowlevel.remove_instrument(reg)


async def test_two_namesakes_are_both_registered_and_the_quick_one_does_not_evict(
    registry: TaskRegistry,
) -> None:
    by_name = NameKeyedRegistry()
    trio.lowlevel.add_instrument(by_name)
    quick_done = trio.Event()
    release_slow = trio.Event()

    async def quick() -> None:
        await trio.lowlevel.checkpoint()
        quick_done.set()

    async def slow() -> None:
        await release_slow.wait()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow, name=SHARED)
            nursery.start_soon(quick, name=SHARED)
            await trio.testing.wait_all_tasks_blocked()
            await quick_done.wait()
            await trio.testing.wait_all_tasks_blocked()
            # the slow namesake is still running: the identity registry sees it ...
            assert len(registry.find(SHARED)) == 1
            assert registry.find(SHARED)[0].name == SHARED
            # ... while the name-keyed one lost it when the quick one finished
            assert SHARED not in by_name.live
            release_slow.set()
    finally:
        trio.lowlevel.remove_instrument(by_name)
    assert registry.find(SHARED) == []


async def test_many_live_namesakes_all_counted(registry: TaskRegistry) -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(release.wait, name=SHARED)
        await trio.testing.wait_all_tasks_blocked()
        assert len(registry.find(SHARED)) == 5
        assert len(set(registry.find(SHARED))) == 5
        assert len(registry) == 5
        release.set()
    assert len(registry) == 0


async def test_finished_task_is_pruned(registry: TaskRegistry) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 0, name="short")
    assert registry.find("short") == []
    assert len(registry) == 0


async def test_cancelled_task_is_pruned(registry: TaskRegistry) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever, name=SHARED)
        nursery.start_soon(trio.sleep_forever, name=SHARED)
        await trio.testing.wait_all_tasks_blocked()
        assert len(registry.find(SHARED)) == 2
        nursery.cancel_scope.cancel()
    assert registry.find(SHARED) == []


async def test_crashed_task_is_pruned(registry: TaskRegistry) -> None:
    async def boom() -> None:
        raise ValueError("boom")

    with pytest.RaisesGroup(ValueError):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever, name="sibling")
            nursery.start_soon(boom, name="boom")
    assert len(registry) == 0


async def test_distinct_names_are_unaffected(registry: TaskRegistry) -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(release.wait, name="a")
        nursery.start_soon(release.wait, name="b")
        nursery.start_soon(trio.sleep, 0, name=SHARED)
        await trio.testing.wait_all_tasks_blocked()
        assert [t.name for t in registry.find("a")] == ["a"]
        assert [t.name for t in registry.find("b")] == ["b"]
        assert sorted(t.name for t in registry.current_tasks()) == ["a", "b"]
        release.set()


async def test_system_and_harness_tasks_are_excluded_unless_asked(registry: TaskRegistry) -> None:
    assert registry.current_tasks() == []
    assert len(registry) == 0
    everything = registry.current_tasks(kinds=ALL_KINDS)
    names = {t.name for t in everything}
    # the test itself runs as pytest-trio's `<test '...'>` task: harness, not user
    assert any(name.startswith("<test ") for name in names)
    assert any(name == "<TrioToken.run_sync_soon task>" for name in names)
    kinds = {info.name: info.kind for info in registry.snapshot(kinds=ALL_KINDS)}
    assert kinds["<init>"] == "system"
    assert kinds[trio.lowlevel.current_task().name] == "harness"


async def test_children_of_the_test_task_are_user_tasks(registry: TaskRegistry) -> None:
    release = trio.Event()

    async def parent() -> None:
        async with trio.open_nursery() as inner:
            inner.start_soon(release.wait, name="<fixture 'lookalike'>")
            await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parent, name="parent")
        await trio.testing.wait_all_tasks_blocked()
        # a user task that merely looks like a harness name is still counted
        assert sorted(t.name for t in registry.current_tasks()) == [
            "<fixture 'lookalike'>",
            "parent",
        ]
        release.set()


async def test_owner_labels_come_from_the_spawner_and_are_inherited(
    registry: TaskRegistry,
) -> None:
    release = trio.Event()

    async def child_spawner() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release.wait, name="grandchild")
            await release.wait()

    async with trio.open_nursery() as nursery:
        with owned_by("session:alpha"):
            nursery.start_soon(child_spawner, name="child")
        nursery.start_soon(release.wait, name="unowned")
        await trio.testing.wait_all_tasks_blocked()
        info = {i.name: i for i in registry.snapshot()}
        assert info["child"].owner == "session:alpha"
        assert info["grandchild"].owner == "session:alpha"
        assert info["grandchild"].parent == "child"
        assert info["grandchild"].parent_id == info["child"].task_id
        assert info["unowned"].owner is None
        assert {t.name for t in registry.owned_by("session:alpha")} == {"child", "grandchild"}
        release.set()


async def test_snapshot_is_frozen_and_render_tree_shows_every_task(
    registry: TaskRegistry,
) -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        with owned_by("svc"):
            nursery.start_soon(release.wait, name=SHARED)
            nursery.start_soon(release.wait, name=SHARED)
        await trio.testing.wait_all_tasks_blocked()
        snap = registry.snapshot()
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            snap[0].name = "x"  # type: ignore[misc]
        tree = registry.render_tree()
        assert tree.splitlines()[0] == "2 live tasks"
        assert tree.count(f"{SHARED} [svc]") == 2
        release.set()


async def test_adopt_running_finds_tasks_started_before_install() -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(release.wait, name="early")
        await trio.testing.wait_all_tasks_blocked()
        reg = TaskRegistry()
        trio.lowlevel.add_instrument(reg)
        try:
            assert reg.find("early") == []
            assert reg.adopt_running() >= 1
            assert [t.name for t in reg.find("early")] == ["early"]
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert reg.find("early") == []
        finally:
            trio.lowlevel.remove_instrument(reg)


class _FlakyLive(dict[trio.lowlevel.Task, Any]):
    """A live-set whose insert fails for one task name, to force a hook failure."""

    def __setitem__(self, task: trio.lowlevel.Task, value: Any) -> None:
        if task.name == "second":
            raise RuntimeError("insert broke")
        super().__setitem__(task, value)


async def test_a_failing_hook_is_logged_and_counted_and_never_uninstalls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reg = TaskRegistry()
    reg._live = _FlakyLive()
    trio.lowlevel.add_instrument(reg)
    try:
        with caplog.at_level(logging.ERROR, logger="tether.registry"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep, 0, name="first")
                nursery.start_soon(trio.sleep, 0, name="second")  # its hook raises
                nursery.start_soon(trio.sleep_forever, name="third")
                await trio.testing.wait_all_tasks_blocked()
                # still installed: the third task, spawned after the failure, is registered
                assert [t.name for t in reg.current_tasks()] == ["third"]
                nursery.cancel_scope.cancel()
        assert reg.hook_errors == 1
        assert "TaskRegistry.task_spawned failed" in caplog.text
        assert "insert broke" in caplog.text
    finally:
        # Trio raises KeyError here if it removed the instrument after the failure
        trio.lowlevel.remove_instrument(reg)


async def test_a_failing_clock_is_guarded_too(caplog: pytest.LogCaptureFixture) -> None:
    ticks = iter([0.0, 1.0])

    def clock() -> float:
        return next(ticks)  # StopIteration from the third read on

    reg = TaskRegistry(clock=clock)
    trio.lowlevel.add_instrument(reg)
    try:
        with caplog.at_level(logging.ERROR, logger="tether.registry"):
            for _ in range(3):
                await trio.sleep(0.001)  # each pass through the run loop reads the clock
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever, name="after")
                await trio.testing.wait_all_tasks_blocked()
                assert [t.name for t in reg.current_tasks()] == ["after"]
                nursery.cancel_scope.cancel()
        assert reg.hook_errors >= 1
        assert "TaskRegistry.after_io_wait failed" in caplog.text
    finally:
        trio.lowlevel.remove_instrument(reg)


async def _nest(depth: int, release: trio.Event) -> None:
    if depth == 0:
        await release.wait()
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_nest, depth - 1, release, name=f"level-{depth - 1}")


async def test_render_tree_draws_a_chain_deeper_than_the_recursion_limit(
    registry: TaskRegistry,
) -> None:
    import sys

    depth = 300
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_nest, depth, release, name=f"level-{depth}")
        await trio.testing.wait_all_tasks_blocked()
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(150)  # below the tree's depth: a recursive walk would fail
        try:
            lines = registry.render_tree().splitlines()
            names = [i.name for i in registry.snapshot()]
        finally:
            sys.setrecursionlimit(limit)
        assert lines[0] == f"{depth + 1} live tasks"
        # each level one step further in, in order from the top
        assert [line.lstrip(" └─├│").split()[0] for line in lines[1:4]] == [
            f"level-{depth}",
            f"level-{depth - 1}",
            f"level-{depth - 2}",
        ]
        assert lines[-1].split()[-2] == "level-0"
        assert lines[-1].index("level-0") == 4 * (depth + 1)  # the deepest, drawn deepest
        assert sorted(names) == sorted(f"level-{k}" for k in range(depth + 1))
        release.set()


async def test_siblings_started_together_keep_their_spawn_order(registry: TaskRegistry) -> None:
    import gc

    release = trio.Event()
    async with trio.open_nursery() as nursery:
        for name in ("b", "a", "d", "c"):  # one scheduler pass: the same start time
            nursery.start_soon(release.wait, name=name)
        await trio.testing.wait_all_tasks_blocked()
        assert gc.isenabled()
        tree = registry.render_tree()
        assert [line.split()[1] for line in tree.splitlines()[1:]] == ["b", "a", "d", "c"]
        assert gc.isenabled()  # the queries pause the collector and restore it
        gc.disable()
        try:
            registry.snapshot()
            assert not gc.isenabled()  # ... and leave it off if it was off
        finally:
            gc.enable()
        release.set()
