"""GET /tasks: the live task tree with owners, ages, parents and (on request) await stacks."""

from __future__ import annotations

from pathlib import Path

import trio

from support.observe import descendants, find_nodes, running_admin
from tether import ChildSpec, open_session
from tether.observe import TaskNode, render_nodes, task_tree


async def parked_in_helper(release: trio.Event) -> None:
    await release.wait()


async def test_tree_shows_sessions_and_supervised_children_under_their_owners(
    tmp_path: Path,
) -> None:
    release = trio.Event()

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(parked_in_helper, release, name="svc-helper")
            task_status.started()
            await release.wait()

    async with running_admin(tmp_path) as admin:
        await admin.runtime.supervisor.start_child(ChildSpec("svc", service))
        async with open_session("chat") as session:

            @session.on("ask")
            async def answer(payload: object) -> None:
                await parked_in_helper(release)

            session.emit("ask", None)
            session.emit("ask", None)
            await trio.testing.wait_all_tasks_blocked()

            response = await admin.get("/tasks")
            assert response.status_code == 200
            doc = response.json()
            tasks = doc["tasks"]
            assert doc["count"] == len([n for r in tasks for n in [r, *descendants(r)]])

            [svc] = find_nodes(tasks, "svc")
            assert svc["owner"] == "svc"
            assert svc["kind"] == "user"
            [helper] = find_nodes(tasks, "svc-helper")
            assert helper["owner"] == "svc"
            assert helper["parent_id"] == svc["id"]
            assert helper in descendants(svc)
            assert helper["stack"] is None  # not asked for

            runs = find_nodes(tasks, "chat::ask::answer")
            assert len(runs) == 2  # two concurrent runs are two tasks, by identity
            assert {r["owner"] for r in runs} == {"session:chat"}
            assert len({r["id"] for r in runs}) == 2
            assert all(r["age_s"] >= 0 for r in runs)

            with_stacks = (await admin.get("/tasks", stacks="1")).json()["tasks"]
            [helper] = find_nodes(with_stacks, "svc-helper")
            assert any("parked_in_helper" in frame for frame in helper["stack"])
            assert "test_admin_tasks.py" in helper["stack"][0]
            assert not any("_traps.py" in frame for frame in helper["stack"])  # trimmed noise
            assert helper["stack"][-1].endswith(" in Event.wait")  # where it is parked
            for run in find_nodes(with_stacks, "chat::ask::answer"):
                assert any(" in test_tree_shows" in f and "answer" in f for f in run["stack"])

            release.set()


async def test_kinds_all_adds_trio_system_tasks(tmp_path: Path) -> None:
    async with running_admin(tmp_path) as admin:
        user = (await admin.get("/tasks")).json()
        everything = (await admin.get("/tasks", kinds="all")).json()
        assert everything["count"] > user["count"]
        kinds = {n["kind"] for r in everything["tasks"] for n in [r, *descendants(r)]}
        assert "system" in kinds
        assert (await admin.get("/tasks", kinds="bogus")).status_code == 400


async def test_render_nodes_draws_owners_and_stacks(tmp_path: Path) -> None:
    release = trio.Event()
    async with running_admin(tmp_path) as admin, trio.open_nursery() as nursery:
        nursery.start_soon(parked_in_helper, release, name="lonely")
        await trio.testing.wait_all_tasks_blocked()
        nodes = task_tree(admin.runtime.registry, stacks=True)
        text = render_nodes(nodes)
        lonely = [line for line in text.splitlines() if "lonely" in line]
        assert len(lonely) == 1
        assert "  at " in text
        assert "parked_in_helper" in text
        first = text.splitlines()[0]
        assert first == f"{sum(1 + len(_all(n)) for n in nodes)} live tasks"
        release.set()


def _all(node: TaskNode) -> list[TaskNode]:
    return [k for kid in node.children for k in [kid, *_all(kid)]]
