"""The admin endpoint of a real running bridge: health, metrics, the task tree, no tokens in
the logs; and ``tether bridge run --admin-port 0 --log-format json`` as a real process."""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from support.gateway import RunningGateway
from support.service import admin_bridge_config, answered_count, bridge_env, submit_many
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import (
    BridgeService,
    CustodyState,
    SqliteStore,
    read_token,
)

ADMIN_TOKEN = "bridge-admin-token-5e9d"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def nodes(tree: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [n for node in tree for n in [node, *nodes(node["children"])]]


async def test_a_running_bridge_reports_health_metrics_and_its_task_tree(
    gateway: RunningGateway,
    token_file: Path,
    store: SqliteStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    config = admin_bridge_config(
        gateway.url, token_file, tmp_path, ADMIN_TOKEN, workers=2, health_window=30.0
    )
    service = BridgeService(config, store=store)
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        assert service.admin_port is not None
        url = f"http://127.0.0.1:{service.admin_port}"
        headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        async with httpx.AsyncClient(base_url=url, timeout=10) as admin:
            assert (await admin.get("/healthz")).status_code == 401
            assert (await admin.get("/metrics")).status_code == 401

            ids = await submit_many(gateway, [f"hi {i}" for i in range(12)], "obs")

            async def all_answered() -> bool:
                return await answered_count(gateway) >= len(ids)

            await wait_until(all_answered, within=20)

            async def delivered_all() -> bool:
                counts = await store.counts()
                return sum(counts.values()) == counts[CustodyState.DELIVERED] == len(ids)

            await wait_until(delivered_all, within=10)

            health = await admin.get("/healthz", headers=headers)
            assert health.status_code == 200, health.json()
            doc = health.json()
            assert doc["gateway"]["ok"] is True
            children = {(c["supervisor"], c["child"]) for c in doc["children"]}
            assert {("runtime", "bridge"), ("bridge", "admin"), ("bridge", "ingest")} <= children
            w1, w2 = service.pool_names[:2]
            assert w1.startswith("tether-bridge-")
            assert w1.endswith("-w1")
            assert {("workers", w1), ("workers", w2)} <= children

            metrics: dict[Any, float] = {}

            async def reading_caught_up() -> bool:  # the endpoint reads the store each second
                nonlocal metrics
                metrics = samples((await admin.get("/metrics", headers=headers)).text)
                delivered = ("tether_custody_tasks", (("state", "delivered"),))
                return metrics.get(delivered) == len(ids)

            await wait_until(reading_caught_up, within=10)
            assert metrics[("tether_ingested_total", ())] == len(ids)
            assert metrics[("tether_ingest_conflicts_total", ())] == 0
            assert metrics[("tether_deliveries_total", ())] == len(ids)
            assert metrics[("tether_custody_tasks", (("state", "delivered"),))] == len(ids)
            assert metrics[("tether_custody_in_flight", ())] == 0
            assert metrics[("tether_dead_letters", ())] == 0
            assert metrics[("tether_gateway_connected", ())] == 1
            ingest_up = (("child", "ingest"), ("supervisor", "bridge"))
            assert metrics[("tether_child_up", ingest_up)] == 1
            assert metrics[("tether_child_restarts_total", ingest_up)] == 0

            tree = (await admin.get("/tasks", headers=headers)).json()["tasks"]
            everything = nodes(tree)
            [ingest] = [n for n in everything if n["name"] == "ingest"]
            assert ingest["owner"] == "ingest"
            for worker in (w1, w2):
                # the supervised worker, and its agent session's tasks below it
                [child] = [n for n in everything if n["name"] == worker]
                assert child["owner"] == worker
                below = {n["owner"] for n in nodes(child["children"])}
                assert f"session:worker-{worker}" in below

            status = (await admin.get("/status", headers=headers)).json()
            assert status["custody"]["delivered"] == len(ids)
            assert len(status["sessions"]) == config.workers
            pool = status["pool"]  # the only lead candidate on this store leads
            assert pool["stem"] == service.pool_stem
            assert pool["workers"] == [w1, w2]
            assert pool["leading"] is True
            assert pool["leader"] == pool["lead"] == f"{service.pool_stem}-lead"
            assert pool["leading_since"] is not None
            assert pool["workers_seen"] == [w1, w2]
        await runtime.supervisor.terminate_child("bridge")

    logged = "\n".join(
        r.getMessage() + (logging.Formatter().formatException(r.exc_info) if r.exc_info else "")
        for r in caplog.records
    )
    custody = [r for r in caplog.records if r.name == "tether.custody"]
    delivered = {r.task_id for r in custody if r.custody_to == "delivered"}  # type: ignore[attr-defined]
    assert delivered == set(ids)
    assert ADMIN_TOKEN not in logged
    assert read_token(token_file) not in logged


@pytest.mark.slow
async def test_bridge_process_admin_endpoint_json_logs_and_sigusr1(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    admin_token_file = tmp_path / "admin-token"  # created by the bridge
    log_path = tmp_path / "bridge.log"
    args = [
        sys.executable, "-m", "tether", "bridge", "run",
        "--gateway", gateway.url,
        "--token-file", str(token_file),
        "--store", str(tmp_path / "bridge" / "custody.db"),
        "--workers", "2",
        "--poll-wait", "0.5",
        "--grace", "1",
        "--log-level", "DEBUG",
        "--log-format", "json",
        "--admin-port", "0",
        "--admin-token-file", str(admin_token_file),
    ]  # fmt: skip
    with open(log_path, "wb") as sink:  # noqa: ASYNC230 - a file handle for the child
        process = await trio.lowlevel.open_process(args, stderr=sink, env=bridge_env())
    try:

        async def admin_announced() -> bool:
            return "admin endpoint http://" in log_path.read_text()

        await wait_until(admin_announced, within=20, step=0.05)
        [line] = [ln for ln in log_path.read_text().splitlines() if "admin endpoint http" in ln]
        url = line.split()[4]
        token = admin_token_file.read_text().strip()
        assert oct(admin_token_file.stat().st_mode & 0o777) == "0o600"
        headers = {"authorization": f"Bearer {token}"}
        ids = await submit_many(gateway, ["one", "two", "three"], "proc")
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as admin:

            async def healthy_and_done() -> bool:
                health = await admin.get("/healthz")
                metrics = samples((await admin.get("/metrics")).text)
                return health.status_code == 200 and metrics.get(
                    ("tether_deliveries_total", ())
                ) == len(ids)

            await wait_until(healthy_and_done, within=20, step=0.1)

        process.send_signal(signal.SIGUSR1)

        async def dumped() -> bool:
            return '"logger": "tether.tasks"' in log_path.read_text()

        await wait_until(dumped, within=10, step=0.05)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    text = log_path.read_text()
    records = []
    for raw in text.splitlines():
        if raw.startswith("tether"):  # the CLI's own banner lines
            continue
        records.append(json.loads(raw))  # every log line is one JSON object
    [dump] = [r for r in records if r["logger"] == "tether.tasks"]
    assert "ingest [ingest]" in dump["message"]
    assert " at " in dump["message"]  # with await stacks
    moved = {(r.get("task_id"), r.get("custody_to")) for r in records}
    assert {(task_id, "delivered") for task_id in ids} <= moved
    assert token not in text
    assert read_token(token_file) not in text
