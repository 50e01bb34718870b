"""Fair shares behind prefetch (issue #47, item 2), through a real bridge and the reference
gateway at the default capacity: one worker, one run at a time, an agent taking 1 s. Tenant
acme sends 5 messages and the lead hands several of them to the worker ahead of its free slot;
then globex sends one. Globex's message runs at its turn, one past the earliest turn waiting
(fourth here, as with no prefetch at all), not after every acme message handed out before it
came (sixth)."""

from __future__ import annotations

from pathlib import Path

import trio

from support.agents.handler import agent
from support.gateway import RunningGateway
from support.service import answered_count
from support.waiting import wait_until
from tether import ChildSpec, open_supervisor
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task

RUN_S = 1.0


async def _send(gateway: RunningGateway, id: str, tenant: str) -> None:
    response = await gateway.http.post(
        f"{gateway.url}/v1/messages",
        json={"id": id, "room": id, "text": "hi", "tenant": tenant},
        headers=gateway.headers(),
    )
    assert response.status_code == 201, response.text


async def test_another_tenants_new_message_runs_within_one_turn_whatever_was_handed_out(
    gateway: RunningGateway, token_file: Path, store: SqliteStore
) -> None:
    started: list[str] = []

    async def handle(task: Task) -> str:
        started.append(task.id)
        await trio.sleep(RUN_S)
        return "ok"

    config = BridgeConfig(
        gateway=gateway.url, token_file=token_file, workers=1, concurrency=1, poll_wait=0.5
    )
    service = BridgeService(config, store=store, factory=agent(handle))
    acme = [f"acme-{i}" for i in range(5)]
    async with open_supervisor(name="test") as supervisor:
        await supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        for id in acme:
            await _send(gateway, id, "acme")

        async def handed_out() -> bool:  # the worker holds acme's messages past its one slot
            states = [await store.state(id) for id in acme[1:]]
            return states.count(CustodyState.ASSIGNED) >= 2

        await wait_until(handed_out, within=30)
        await _send(gateway, "globex-0", "globex")

        async def all_answered() -> bool:
            return await answered_count(gateway) == 6

        await wait_until(all_answered, within=60)
    assert started.index("globex-0") <= 3, started  # at its turn: the earliest waiting + 1
