"""Priority end to end: a user sets it on the reference gateway's message API, the gateway
protocol carries it, ingest stores it, and the pool lead's ordering runs urgent work first."""

from __future__ import annotations

from pathlib import Path

import trio

from support.gateway import RunningGateway
from support.waiting import wait_until
from tether import ChildSpec, Session, open_supervisor
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task
from tether.bridge.client import GatewayTask
from tether.bridge.pool._agent import TASK_EVENT
from tether.bridge.service._ingest import to_custody_task


async def _submit(gateway: RunningGateway, id: str, priority: str | None) -> int:
    payload = {"room": f"room-{id}", "text": f"text of {id}", "id": id}
    if priority is not None:
        payload["priority"] = priority
    response = await gateway.http.post(
        f"{gateway.url}/v1/messages", json=payload, headers=gateway.headers()
    )
    return response.status_code


async def test_the_message_api_refuses_an_unknown_priority_and_shows_the_one_given(
    gateway: RunningGateway,
) -> None:
    response = await gateway.http.post(
        f"{gateway.url}/v1/messages",
        json={"room": "r", "text": "x", "priority": "high"},
        headers=gateway.headers(),
    )
    assert response.status_code == 400
    assert "priority must be one of urgent, normal, low" in response.text
    assert await _submit(gateway, "m-1", "urgent") == 201
    assert await _submit(gateway, "m-1", "low") == 409  # same id, other content
    assert (await gateway.message("m-1"))["priority"] == "urgent"
    assert await _submit(gateway, "m-2", None) == 201
    assert (await gateway.message("m-2"))["priority"] == "normal"


def test_a_task_without_priority_from_an_older_gateway_is_normal() -> None:
    old = GatewayTask(id="t", body="b", room="r")
    assert to_custody_task(old).priority == "normal"
    assert to_custody_task(GatewayTask(id="t", body="b", room="r", priority="low")).priority == (
        "low"
    )


async def test_urgent_messages_overtake_a_low_backlog_through_gateway_bridge_and_lead(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """The low backlog is in custody (pending) before the urgent messages are even sent, so
    only the lead's priority ordering can run them first."""
    lows = [f"low-{i:02d}" for i in range(30)]
    for id in lows:
        assert await _submit(gateway, id, "low") == 201
    urgent = ["urgent-a", "urgent-b"]
    path = tmp_path / "custody.db"
    ran: list[str] = []
    released = trio.Event()

    def recording(session: Session) -> None:
        async def handle(task: Task) -> str:
            ran.append(task.id)
            await released.wait()  # the first run holds the only slot until released
            return f"done {task.id}"

        session.add_handler(TASK_EVENT, handle)

    async with await SqliteStore.open(path) as store:
        config = BridgeConfig(
            gateway=gateway.url,
            token_file=token_file,
            store=str(path),
            workers=1,
            concurrency=1,
            capacity=1,  # one at a time: the order of the runs is the lead's order
            poll_wait=0.5,
            grace=1.0,
        )
        service = BridgeService(config, store=store, factory=recording)
        async with open_supervisor(name="test") as supervisor:
            await supervisor.start_child(
                ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
            )

            async def backlog_in_custody() -> bool:
                return len(ran) == 1 and (await store.counts())[CustodyState.PENDING] == 29

            await wait_until(backlog_in_custody, within=30)
            for id in urgent:
                assert await _submit(gateway, id, "urgent") == 201

            async def urgent_in_custody() -> bool:
                return all([await store.get(id) is not None for id in urgent])

            await wait_until(urgent_in_custody, within=30)
            released.set()

            async def all_answered() -> bool:
                stats = (await gateway.stats())["tasks"]
                return int(stats["answered"]) == len(lows) + len(urgent)

            await wait_until(all_answered, within=60)
        for id in urgent:
            record = await store.get(id)
            assert record is not None
            assert record.task.priority == "urgent"
    assert sorted(ran) == sorted([*lows, *urgent])  # each ran once
    assert ran[1:3] == urgent, ran[:5]
