"""A real bridge observes every task's queue wait, run time and delivery time once, and
shows them on its admin endpoint."""

from __future__ import annotations

from pathlib import Path

import httpx

from support.gateway import RunningGateway
from support.service import admin_bridge_config, submit_many
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import BridgeService, CustodyState, SqliteStore

from .test_bridge_observe import samples

ADMIN_TOKEN = "bridge-admin-token-7c1f"


async def test_each_task_is_timed_once_from_intake_to_delivery(
    gateway: RunningGateway, token_file: Path, store: SqliteStore, tmp_path: Path
) -> None:
    config = admin_bridge_config(gateway.url, token_file, tmp_path, ADMIN_TOKEN, workers=2)
    service = BridgeService(config, store=store)
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        url = f"http://127.0.0.1:{service.admin_port}"
        headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        ids = await submit_many(gateway, [f"hi {i}" for i in range(12)], "timed")

        async def delivered_all() -> bool:
            counts = await store.counts()
            return counts[CustodyState.DELIVERED] == len(ids)

        await wait_until(delivered_all, within=20)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as admin:
            metrics = samples((await admin.get("/metrics")).text)
            status = (await admin.get("/status")).json()
        await runtime.supervisor.terminate_child("bridge")

    for name in ("queue_wait", "run_time", "delivery"):
        assert metrics[(f"tether_{name}_seconds_count", ())] == len(ids), name
        assert 0 <= metrics[(f"tether_{name}_seconds_sum", ())] < 20 * len(ids)
    # issue #56: where the lead spends its time
    assert metrics[("tether_lead_sweep_seconds_count", ())] >= 1
    assert 0 < metrics[("tether_lead_sweep_seconds_sum", ())] < 20
    views = {t["name"]: t for t in status["timings"]}
    assert views["lead_sweep"]["count"] >= 1
    assert views["lead_sweep"]["p50_s"] <= views["lead_sweep"]["p99_s"]
    assert views["run_time"]["count"] == len(ids)
    assert views["delivery"]["p50_s"] <= views["delivery"]["p99_s"]
    assert status["oldest_s"] == {}  # nothing left in custody
