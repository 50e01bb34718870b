"""``tether store show`` draws a task's tree of child runs (its parent, its children with
their states), and ``tether store list --parent ID`` lists the children a task spawned
(issue #51); the operator page's task document carries the same tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import SqliteStore, Task
from tether.bridge.custody._children import child_id, child_task
from tether.bridge.service._ops_page import task_timeline


async def _family(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("plan-1", "why"))
        parent = await store.claim("w1", leaderless=True)
        assert parent is not None
        for name in ("tides", "moons"):
            await store.spawn(
                parent, name, child_task(parent.task, name, name, queue=None, room=None)
            )
        await store.park_join(parent, [child_id("plan-1", "tides")], store.clock() + 60, "1 child")
        child = await store.claim("w2", leaderless=True)
        assert child is not None
        assert child.task.id == child_id("plan-1", "tides")
        await store.spawn(
            child, "deeper", child_task(child.task, "deeper", "x", queue=None, room=None)
        )
        await store.complete(child, "notes")


def test_show_draws_the_tree_of_child_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_family, path)
    tides, moons = child_id("plan-1", "tides"), child_id("plan-1", "moons")
    deeper = child_id(tides, "deeper")
    assert main(["store", "show", "plan-1", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    tree = out[out.index("tree:") :].splitlines()[1:5]
    # the parent woke when tides, its only awaited child, finished
    assert tree == [
        "  plan-1  this task: pending",
        f"    {tides}  tides: result",
        f"      {deeper}  deeper: pending",
        f"    {moons}  moons: pending",
    ]
    assert main(["store", "show", tides, "--store", str(path), "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["tree"]
    assert [(n["id"], n["name"], n["depth"]) for n in nodes] == [
        ("plan-1", "parent", 0),
        (tides, "this task", 1),
        (deeper, "deeper", 2),
    ]

    async def page() -> object:
        async with await SqliteStore.open(path) as store:
            return await task_timeline(store, "plan-1")

    doc = trio.run(page)
    assert isinstance(doc, dict)
    assert [n["name"] for n in doc["tree"]] == ["this task", "tides", "deeper", "moons"]


def test_list_parent_names_the_children_in_spawn_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_family, path)
    assert main(["store", "list", "--parent", "plan-1", "--store", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "task plan-1: pending, 2 child run(s)",
        f"  {child_id('plan-1', 'tides')}  tides: result",
        f"  {child_id('plan-1', 'moons')}  moons: pending",
    ]
    assert main(["store", "list", "--parent", "plan-1", "--store", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in doc["children"]] == ["tides", "moons"]
    assert main(["store", "list", "--parent", "nobody", "--store", str(path)]) == 1
    assert "no task 'nobody'" in capsys.readouterr().err
    assert main(["store", "list", "--parent", "bad id!", "--store", str(path)]) == 2
