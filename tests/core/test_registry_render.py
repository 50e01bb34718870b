"""The exact text of ``render_tree()`` and the exact records of ``snapshot()``, pinned.

The queries were rewritten for speed at a million tasks (issue #19); these tests hold them to
the output they had before, byte for byte: a golden tree (owners, nested nurseries, ages in
all three units, siblings ordered by start time then spawn order, a restarted age, a parent
filtered out), and a reference renderer built from ``snapshot()`` alone that must agree with
``render_tree()`` on every kind filter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import ALL_KINDS, TaskInfo, TaskRegistry, owned_by
from tether._core._registry import _TASK_INFO_BUILDER, USER_ONLY, TaskKind


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def registry() -> AsyncIterator[TaskRegistry]:
    reg = TaskRegistry()
    trio.lowlevel.add_instrument(reg)
    reg.adopt_running()
    yield reg
    trio.lowlevel.remove_instrument(reg)


async def _parent(release: trio.Event, late: float) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(release.wait, name="kid-a")
        with owned_by("inner"):
            nursery.start_soon(release.wait, name="kid-b")
        await trio.sleep(late)
        nursery.start_soon(release.wait, name="kid-late")
        await release.wait()


async def _build(nursery: trio.Nursery, release: trio.Event) -> None:
    nursery.start_soon(release.wait, name="first")
    await trio.sleep(250)
    with owned_by("svc"):
        nursery.start_soon(_parent, release, 5.0, name="parent")
    await trio.sleep(1.5)
    for name in ("z", "y"):  # one scheduler pass: the same start time, spawn order kept
        nursery.start_soon(release.wait, name=name)
    await trio.sleep(10)
    await trio.testing.wait_all_tasks_blocked()


async def test_golden_tree_with_ages_in_every_unit(
    registry: TaskRegistry, clock: trio.testing.MockClock
) -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        await _build(nursery, release)
        nursery.start_soon(release.wait, name="new")
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(0.25)
        nursery.start_soon(release.wait, name="newer")
        await trio.testing.wait_all_tasks_blocked()
        tree = registry.render_tree(now=trio.current_time())
        assert tree == (
            "9 live tasks\n"
            "├── first  4.4m\n"
            "├── parent [svc]  11.8s\n"
            "│   ├── kid-a [svc]  11.8s\n"
            "│   ├── kid-b [inner]  11.8s\n"
            "│   └── kid-late [svc]  6.8s\n"
            "├── z  10.2s\n"
            "├── y  10.2s\n"
            "├── new  250ms\n"
            "└── newer  0ms"
        )
        # a filter that hides the parents draws their children as roots
        everything = registry.render_tree(kinds=ALL_KINDS, now=trio.current_time())
        lines = everything.splitlines()
        assert lines[1] == "└── <init>  4.4m"
        [test_line] = [k for k, line in enumerate(lines) if "<test " in line]
        depth = lines[test_line].index("<test ") + 4  # the test's children, one level in
        assert lines[test_line + 2][depth:] == "parent [svc]  11.8s"
        assert lines[test_line + 5][depth + 4 :] == "kid-late [svc]  6.8s"
        assert lines[-1] == "    └── <TrioToken.run_sync_soon task>  4.4m"
        release.set()


def _reference_tree(infos: list[TaskInfo], now: float) -> str:
    """The tree drawn the plain recursive way from ``snapshot()``'s records (oldest first,
    ties in spawn order): parents not shown make their children roots."""
    shown = {info.task_id for info in infos}
    children: dict[int | None, list[TaskInfo]] = {}
    for info in infos:
        key = info.parent_id if info.parent_id in shown else None
        children.setdefault(key, []).append(info)

    def age(seconds: float) -> str:
        if seconds < 1:
            return f"{seconds * 1000:.0f}ms"
        if seconds < 120:
            return f"{seconds:.1f}s"
        return f"{seconds / 60:.1f}m"

    lines = [f"{len(infos)} live task{'s' if len(infos) != 1 else ''}"]

    def draw(key: int | None, prefix: str) -> None:
        kids = children.get(key, [])
        for i, info in enumerate(kids):
            last = i == len(kids) - 1
            owner = f" [{info.owner}]" if info.owner else ""
            lines.append(
                f"{prefix}{'└── ' if last else '├── '}{info.name}{owner}  "
                f"{age(now - info.started_at)}"
            )
            draw(info.task_id, prefix + ("    " if last else "│   "))

    draw(None, "")
    return "\n".join(lines)


@pytest.mark.parametrize(
    "kinds",
    [frozenset({"user"}), ALL_KINDS, frozenset({"system"}), frozenset({"user", "harness"})],
)
async def test_render_tree_agrees_with_a_reference_drawn_from_the_snapshot(
    registry: TaskRegistry, clock: trio.testing.MockClock, kinds: frozenset[TaskKind]
) -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        await _build(nursery, release)
        for k in range(30):  # a wider nursery, owners alternating, three start times
            with owned_by(f"o{k % 3}") if k % 2 else _no_owner():
                nursery.start_soon(_parent, release, float(k % 3), name=f"g{k}")
        await trio.sleep(4)
        await trio.testing.wait_all_tasks_blocked()
        now = trio.current_time() + 0.5
        infos = registry.snapshot(kinds=kinds)
        assert [i.started_at for i in infos] == sorted(i.started_at for i in infos)
        assert registry.render_tree(kinds=kinds, now=now) == _reference_tree(infos, now)
        release.set()


class _no_owner:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def test_snapshot_records_are_pinned(
    registry: TaskRegistry, clock: trio.testing.MockClock
) -> None:
    release = trio.Event()
    async with trio.open_nursery() as nursery:
        await _build(nursery, release)
        me = trio.lowlevel.current_task()
        infos = registry.snapshot()
        by_name = {i.name: i for i in infos}
        assert [i.name for i in infos] == [
            "first",
            "parent",
            "kid-a",
            "kid-b",
            "z",
            "y",
            "kid-late",
        ]
        parent = by_name["parent"]
        [parent_task] = registry.find("parent")
        assert parent == TaskInfo(
            "parent", "svc", "user", parent.started_at, me.name, id(parent_task), id(me)
        )
        assert by_name["kid-b"] == TaskInfo(
            "kid-b",
            "inner",
            "user",
            parent.started_at,
            "parent",
            id(registry.find("kid-b")[0]),
            id(parent_task),
        )
        assert by_name["kid-late"].started_at == parent.started_at + 5.0
        assert by_name["first"].parent_id == id(me)
        release.set()


def test_a_record_built_without_init_is_the_same_value() -> None:
    """``snapshot()`` fills the records' slots directly; the result must be exactly what the
    public constructor makes (equal, same hash, frozen, every field set)."""
    new, name, owner, kind, started, parent, task_id, parent_id = _TASK_INFO_BUILDER
    fast = new(TaskInfo)
    name(fast, "n")
    owner(fast, None)
    kind(fast, "system")
    started(fast, 2.5)
    parent(fast, "p")
    task_id(fast, 7)
    parent_id(fast, 9)
    made = TaskInfo("n", None, "system", 2.5, "p", 7, 9)
    assert fast == made
    assert hash(fast) == hash(made)
    assert attrs.asdict(fast) == attrs.asdict(made)
    assert repr(fast) == repr(made)
    assert fast != attrs.evolve(made, parent_id=None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.name = "other"  # type: ignore[misc]


# a random tree: each node is (owner, two nurseries?, restart its age?, children)
_Node = tuple[str | None, bool, bool, tuple["_Node", ...]]
_nodes: st.SearchStrategy[_Node] = st.deferred(
    lambda: st.tuples(
        st.sampled_from([None, "a", "b"]),
        st.booleans(),
        st.booleans(),
        st.lists(_nodes, max_size=4).map(tuple) | st.just(()),
    )
)


def _reference_snapshot(registry: TaskRegistry, kinds: frozenset[TaskKind]) -> list[TaskInfo]:
    """``snapshot()`` the plain way: a record per entry through the constructor, the parent
    read from each task, then a stable sort on the start time."""
    infos = []
    for task, owner, kind, started in registry.entries(kinds=kinds):
        nursery = task.parent_nursery
        parent = None if nursery is None else nursery.parent_task
        infos.append(
            TaskInfo(
                task.name,
                owner,
                kind,
                started,
                None if parent is None else parent.name,
                id(task),
                None if parent is None else id(parent),
            )
        )
    return sorted(infos, key=lambda info: info.started_at)


@settings(max_examples=60, deadline=None)
@given(forest=st.lists(_nodes, min_size=1, max_size=6))
async def test_random_trees_agree_with_the_references(forest: list[_Node]) -> None:
    """Any shape (depth, nurseries per parent, owners, ages restarted out of spawn order):
    ``snapshot()`` equals the plain construction and ``render_tree()`` the plain drawing."""
    registry = TaskRegistry()
    trio.lowlevel.add_instrument(registry)
    registry.adopt_running()
    release = trio.Event()
    spawned: list[trio.lowlevel.Task] = []
    restart: list[trio.lowlevel.Task] = []

    async def node(spec: _Node) -> None:
        _, two_nurseries, restarted, children = spec
        me = trio.lowlevel.current_task()
        spawned.append(me)
        if restarted:
            restart.append(me)
        async with trio.open_nursery() as first, trio.open_nursery() as second:
            for k, child in enumerate(children):
                target = second if two_nurseries and k % 2 else first
                with owned_by(child[0]) if child[0] else _no_owner():
                    target.start_soon(node, child, name=f"n{len(spawned)}-{k}")
                await trio.lowlevel.checkpoint()  # a new scheduler pass: a later start time
            await release.wait()

    async with trio.open_nursery() as nursery:
        for k, spec in enumerate(forest):
            with owned_by(spec[0]) if spec[0] else _no_owner():
                nursery.start_soon(node, spec, name=f"top-{k % 2}")  # names shared
        await trio.testing.wait_all_tasks_blocked()
        await trio.lowlevel.checkpoint()
        for task in restart:
            registry.mark_started(task)  # later than tasks spawned after it
        now = trio.current_time() + 0.5
        user = registry.snapshot()
        assert {info.task_id for info in user} == {id(task) for task in spawned}
        filters: tuple[frozenset[TaskKind], ...] = (USER_ONLY, ALL_KINDS, frozenset({"system"}))
        for kinds in filters:
            infos = registry.snapshot(kinds=kinds)
            assert infos == _reference_snapshot(registry, kinds)
            assert registry.render_tree(kinds=kinds, now=now) == _reference_tree(infos, now)
        release.set()
    trio.lowlevel.remove_instrument(registry)
