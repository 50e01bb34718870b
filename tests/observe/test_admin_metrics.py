"""GET /metrics: Prometheus text that parses and counts exactly what the test did."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from support.observe import running_admin
from support.waiting import wait_until
from tether import ChildSpec, open_session, open_supervisor
from tether.bridge import SqliteStore, Task
from tether.observe import CounterSource


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


async def test_metrics_count_custody_restarts_failures_and_tasks(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "custody.db", synchronous="NORMAL")
    delivered = [0]
    try:
        for i in range(5):
            await store.ingest(Task(id=f"t{i}", body=f"hello {i}"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.complete(claim, "reply")
        await store.mark_delivered(claim.task.id)
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.complete(claim, "reply")
        await store.dead_letter(claim.task.id, "the gateway refused it")
        claim = await store.claim("w1", leaderless=True)  # stays claimed
        assert claim is not None
        await store.ingest(Task(id="c1", body="in a room", room="r", priority="urgent"))
        talk = await store.claim("w1", leaderless=True)
        assert talk is not None
        await store.complete_with_state(talk, "ok", {"k": "v"}, 0)

        crashes = 0
        third_run = trio.Event()

        async def flaky(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            nonlocal crashes
            task_status.started()
            if crashes < 2:
                crashes += 1
                raise RuntimeError("boom")
            third_run.set()
            await trio.sleep_forever()

        counters = [CounterSource("deliveries", "Replies delivered", lambda: delivered[0])]
        async with (
            running_admin(tmp_path, store=store, counters=counters) as admin,
            open_supervisor(
                name="inner", backoff_initial=0.001, backoff_max=0.002, jitter=0
            ) as sup,
        ):
            await sup.start_child(ChildSpec("flaky", flaky, shutdown_grace=0))
            await third_run.wait()
            await sup.state("flaky").wait_value("running")

            async with open_session("metrics") as session:

                @session.on("bad")
                async def bad(payload: object) -> None:
                    raise ValueError("handler broke")

                for _ in range(3):
                    session.emit("bad", None)
                await trio.testing.wait_all_tasks_blocked()
                delivered[0] = 7

                first = parse((await admin.get("/metrics")).text)

                release = trio.Event()
                async with trio.open_nursery() as extra:
                    for _ in range(4):
                        extra.start_soon(release.wait)
                    await trio.testing.wait_all_tasks_blocked()
                    with_extra = parse((await admin.get("/metrics")).text)
                    release.set()

        def custody(state: str) -> float:
            return first[("tether_custody_tasks", (("state", state),))]

        assert custody("pending") == 2
        assert custody("claimed") == 1
        assert custody("delivered") == 1
        assert custody("dead") == 1
        assert custody("result") == 1
        assert custody("assigned") == 0
        assert first[("tether_custody_in_flight", ())] == 4
        assert first[("tether_conversation_rooms", ())] == 1
        assert first[("tether_conversation_turns", ())] == 2
        assert first[("tether_conversation_state_bytes", ())] == len(b'{"k":"v"}')
        assert first[("tether_dead_letters", ())] == 1
        assert first[("tether_deliveries_total", ())] == 7
        assert first[("tether_handler_failures_total", ())] == 3
        assert first[("tether_sessions", ())] == 1
        key = (("child", "flaky"), ("supervisor", "inner"))
        assert first[("tether_child_restarts_total", key)] == 2
        assert first[("tether_child_up", key)] == 1
        running = (("child", "flaky"), ("state", "running"), ("supervisor", "inner"))
        assert first[("tether_child_state", running)] == 1
        backoff = (("child", "flaky"), ("state", "backoff"), ("supervisor", "inner"))
        assert first[("tether_child_state", backoff)] == 0
        user = ("tether_registry_tasks", (("kind", "user"),))
        assert with_extra[user] - first[user] == 4
        assert first[("tether_background_failures_total", ())] == 0
    finally:
        await store.aclose()


async def test_metrics_without_store_or_gateway_leave_those_families_out(tmp_path: Path) -> None:
    async with running_admin(tmp_path) as admin:
        response = await admin.get("/metrics")
        assert response.headers["content-type"].startswith("text/plain")
        names = {f.name for f in text_string_to_metric_families(response.text)}
        assert "tether_registry_tasks" in names
        assert "tether_custody_tasks" not in names
        assert "tether_gateway_connected" not in names


async def test_a_store_that_cannot_answer_is_reported_not_a_500(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await SqliteStore.open(tmp_path / "custody.db", synchronous="NORMAL")
    await store.ingest(Task(id="t1", body="x"))
    async with running_admin(tmp_path, store=store) as admin:
        up = parse((await admin.get("/metrics")).text)
        assert up[("tether_custody_store_up", ())] == 1
        assert up[("tether_custody_in_flight", ())] == 1
        await store.aclose()
        # the endpoint reads the store in the background: its next reading fails
        down: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

        async def store_down() -> bool:
            nonlocal down
            response = await admin.get("/metrics")
            assert response.status_code == 200
            down = parse(response.text)
            return down[("tether_custody_store_up", ())] == 0

        await wait_until(store_down, within=10)
        assert ("tether_custody_in_flight", ()) not in down
        assert ("tether_registry_tasks", (("kind", "user"),)) in down
        status = (await admin.get("/status")).json()
        assert status["custody"] is None
        assert "did not answer" in status["custody_error"]
        assert status["custody_age_s"] is not None
        assert (await admin.get("/healthz")).status_code == 503
    assert caplog.text.count("the custody store did not answer") == 1  # once per incident
