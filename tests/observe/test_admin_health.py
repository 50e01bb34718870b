"""GET /healthz: 200 only when every supervised child runs and the gateway answered in time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import trio

from support.observe import running_admin
from tether import ChildSpec, open_supervisor, wait_stop_requested
from tether._plumbing._converter import structure
from tether.bridge.client import ConnectionStatus
from tether.observe import StatusReport, render_status

NOW = 1_800_000_000.0


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def sleeper(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    await trio.sleep_forever()


async def test_healthy_then_a_child_in_backoff_makes_it_503(tmp_path: Path) -> None:
    crash = trio.Event()

    async def fragile(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await crash.wait()
        raise RuntimeError("lost the database")

    async with running_admin(tmp_path) as admin:
        await admin.runtime.supervisor.start_child(ChildSpec("steady", sleeper, shutdown_grace=0))
        async with open_supervisor(
            name="inner", backoff_initial=60, backoff_max=60, jitter=0
        ) as inner:
            await inner.start_child(ChildSpec("fragile", fragile, shutdown_grace=0))
            healthy = await admin.get("/healthz")
            assert healthy.status_code == 200
            doc = healthy.json()
            assert doc["ok"] is True
            assert doc["status"] == "ok"
            assert doc["problems"] == []
            assert {(c["supervisor"], c["child"]) for c in doc["children"]} == {
                ("runtime", "steady"),
                ("inner", "fragile"),
            }

            crash.set()
            await inner.state("fragile").wait_value("backoff")
            sick = await admin.get("/healthz")
            assert sick.status_code == 503
            doc = sick.json()
            assert doc["status"] == "unhealthy"
            [problem] = doc["problems"]
            assert "'fragile'" in problem
            assert "'inner'" in problem
            assert "backoff" in problem
            assert "lost the database" in problem
            [fragile_child] = [c for c in doc["children"] if c["child"] == "fragile"]
            assert fragile_child["healthy"] is False
            assert fragile_child["restarts"] == 1

            status = (await admin.get("/status")).json()
            [inner_view] = [s for s in status["supervisors"] if s["name"] == "inner"]
            [child] = inner_view["children"]
            assert child["state"] == "backoff"
            assert 59 < child["backoff_s"] <= 60  # restart due in about backoff_initial
            text = render_status(structure(status, StatusReport))
            [line] = [ln for ln in text.splitlines() if ln.strip().startswith("fragile")]
            assert "backoff" in line
            assert "restarts=1" in line
            assert "restart in 59." in line or "restart in 60.0s" in line
            assert "lost the database" in line
            assert text.startswith("health: unhealthy\n  ! child 'fragile'")


async def test_a_supervisor_shutting_down_is_stopping_and_503(tmp_path: Path) -> None:
    stop_seen = trio.Event()
    let_go = trio.Event()

    async def slow_to_stop(
        *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await wait_stop_requested()
        stop_seen.set()
        await let_go.wait()

    async with running_admin(tmp_path) as admin, trio.open_nursery() as nursery:

        async def inner_supervisor() -> None:
            async with open_supervisor(name="inner") as inner:
                await inner.start_child(ChildSpec("slow", slow_to_stop, shutdown_grace=30))

        nursery.start_soon(inner_supervisor)
        await stop_seen.wait()  # the block ended: the supervisor is stopping its child
        response = await admin.get("/healthz")
        assert response.status_code == 503
        doc = response.json()
        assert doc["status"] == "stopping"
        assert doc["problems"][0] == "shutting down"
        let_go.set()


async def test_a_transient_child_that_returned_is_not_a_problem(tmp_path: Path) -> None:
    async def one_shot(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()

    async with running_admin(tmp_path) as admin:
        await admin.runtime.supervisor.start_child(
            ChildSpec("one-shot", one_shot, restart="transient")
        )
        await admin.runtime.supervisor.state("one-shot").wait_value("stopped")
        response = await admin.get("/healthz")
        assert response.status_code == 200, response.json()


async def test_gateway_must_have_answered_within_its_window(tmp_path: Path) -> None:
    status = [ConnectionStatus(gateway="http://gw", client="bridge")]
    async with running_admin(tmp_path, gateway=lambda: status[0], gateway_window=30.0) as admin:
        admin.observed.wall_clock = lambda: NOW
        never = await admin.get("/healthz")
        assert never.status_code == 503
        assert "last answered never" in never.json()["problems"][0]

        status[0] = ConnectionStatus(
            gateway="http://gw", client="bridge", connected=True, last_ok=iso(NOW - 10)
        )
        fresh = await admin.get("/healthz")
        assert fresh.status_code == 200
        assert fresh.json()["gateway"]["age_s"] == 10

        status[0] = ConnectionStatus(
            gateway="http://gw",
            client="bridge",
            connected=False,
            last_ok=iso(NOW - 31),
            error="connection refused",
        )
        stale = await admin.get("/healthz")
        assert stale.status_code == 503
        [problem] = stale.json()["problems"]
        assert "31 s ago" in problem
        assert "connection refused" in problem
