"""Fair shares through the whole path (issue #38): a real bridge process behind the reference
gateway. Tenant A sends a burst, tenant B a few messages right after: B's are all answered
before A's hundredth answer after them, though A's backlog was queued first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count
from support.waiting import wait_until

A_MESSAGES = 300
B_MESSAGES = 10


async def _send(gateway: RunningGateway, tenant: str, count: int, rooms: int) -> list[str]:
    ids = [f"{tenant}-{i:04d}" for i in range(count)]
    limiter = trio.CapacityLimiter(16)

    async def one(i: int) -> None:
        payload = {"room": f"{tenant}-{i % rooms}", "text": f"hi {i}", "id": ids[i]}
        async with limiter:
            response = await gateway.http.post(
                f"{gateway.url}/v1/messages",
                json={**payload, "tenant": tenant},
                headers=gateway.headers(),
            )
        assert response.status_code == 201, response.text

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
    return ids


@pytest.mark.slow
async def test_one_tenants_burst_does_not_starve_another_tenants_messages(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        tmp_path / "custody.db",
        tmp_path / "bridge.log",
        agent="support.agents.tenant:factory",
        workers=4,
        extra=["--concurrency", "1"],  # four runs at once: a backlog builds behind them
    )
    a_ids = await _send(gateway, "a", A_MESSAGES, rooms=A_MESSAGES)
    b_sent_at = time.time()  # the gateway's clock: the test's process
    b_ids = await _send(gateway, "b", B_MESSAGES, rooms=B_MESSAGES)

    async def all_answered() -> bool:
        return await answered_count(gateway) == A_MESSAGES + B_MESSAGES

    async def explain() -> str:
        return f"answered {await answered_count(gateway)}\n{bridge.log_tail()}"

    await wait_until(all_answered, within=120, explain=explain)
    a_views = [await gateway.message(id) for id in a_ids]
    a_answers = sorted(v["answered_at"] for v in a_views if v["answered_at"] > b_sent_at)
    b_views = [await gateway.message(id) for id in b_ids]
    # A's backlog was still there when B came (else there is nothing to be fair about)
    assert len(a_answers) >= 100, len(a_answers)
    b_done = max(v["answered_at"] for v in b_views)
    before_b = sum(1 for at in a_answers if at < b_done)
    assert before_b < 100, f"{before_b} of A's answers came before B's last"
    assert {v["reply"] for v in b_views} == {f"echo: hi {i}" for i in range(B_MESSAGES)}
    assert await bridge.stop() == 0
