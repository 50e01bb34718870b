"""GatewayClient against the real reference gateway on 127.0.0.1: protocol v1 end to end."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from support.gateway_fixtures import StartGateway
from tether.bridge import GatewayClient
from tether.bridge.client import GatewayRequestError
from tether.gateway import GatewaySettings, serve


async def test_message_round_trip_through_poll_ack_and_result(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("what is 6 x 7?", room="maths")

    async with GatewayClient(gateway.url, client_token_file) as client:
        tasks = await client.poll_tasks(wait=0)
        assert [(t.id, t.body, t.room, t.delivery) for t in tasks] == [
            (task_id, "what is 6 x 7?", "maths", 1)
        ]
        assert (await gateway.message(task_id))["status"] == "leased"
        await client.ack(task_id)
        assert (await gateway.message(task_id))["status"] == "acked"
        receipt = await client.post_result(task_id, "42", worker="w-1", attempt=1)
        assert not receipt.duplicate

    message = await gateway.message(task_id)
    assert (message["status"], message["reply"], message["worker"]) == ("answered", "42", "w-1")


async def test_unacked_task_is_redelivered_after_its_lease(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway(lease=0.5)
    task_id = await gateway.submit("hello")

    async with GatewayClient(gateway.url, client_token_file) as client:
        first = await client.poll_tasks(wait=0)
        assert [t.delivery for t in first] == [1]
        assert await client.poll_tasks(wait=0) == [], "a leased task must not be handed out twice"

        started = trio.current_time()
        again = await client.poll_tasks(wait=5)  # the poll wakes when the lease runs out
        waited = trio.current_time() - started
        assert [(t.id, t.delivery) for t in again] == [(task_id, 2)]
        assert 0.2 < waited < 3.0

        await client.ack(task_id)
        assert await client.poll_tasks(wait=1.0) == [], "an acked task is never redelivered"

    counts = await gateway.stats()
    assert (counts["deliveries"], counts["redeliveries"]) == (2, 1)


async def test_long_poll_returns_as_soon_as_a_message_arrives(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        async with trio.open_nursery() as nursery:
            polled: list[str] = []

            async def poll() -> None:
                polled.extend(task.id for task in await client.poll_tasks(wait=20))

            nursery.start_soon(poll)
            await trio.sleep(0.3)
            started = trio.current_time()
            task_id = await gateway.submit("wake up")
        assert polled == [task_id]
        assert trio.current_time() - started < 2.0


async def test_a_poller_that_hung_up_is_handed_no_tasks(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    with pytest.raises(httpx.ReadTimeout):
        await http.get(
            f"{gateway.url}/v1/tasks", params={"wait": 30}, headers=gateway.headers(), timeout=0.3
        )
    await trio.sleep(0.2)  # the server notices the disconnect and ends that poll
    task_id = await gateway.submit("for a live poller")
    async with GatewayClient(gateway.url, client_token_file) as client:
        tasks = await client.poll_tasks(wait=0)
    assert [(t.id, t.delivery) for t in tasks] == [(task_id, 1)]


async def test_duplicate_result_is_absorbed_and_counted(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("say it once")
    async with GatewayClient(gateway.url, client_token_file) as client:
        await client.poll_tasks(wait=0)
        await client.ack(task_id)
        first = await client.post_result(task_id, "first answer", worker="w-1")
        second = await client.post_result(task_id, "second answer", worker="w-2")
        third = await client.post_result(task_id, "", no_send=True)

    assert (first.duplicate, second.duplicate, third.duplicate) == (False, True, True)
    message = await gateway.message(task_id)
    assert (message["reply"], message["worker"]) == ("first answer", "w-1")
    assert (await gateway.stats())["duplicate_results"] == 2


async def test_no_send_result_closes_the_task_without_a_reply(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("nothing to say")
    async with GatewayClient(gateway.url, client_token_file) as client:
        await client.poll_tasks(wait=0)
        await client.post_result(task_id, "", no_send=True, worker="w-1")
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"]) == ("closed", None)


async def test_reply_long_poll_wakes_when_the_result_arrives(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("waiting on you")
    async with GatewayClient(gateway.url, client_token_file) as client:
        await client.poll_tasks(wait=0)
        async with trio.open_nursery() as nursery:
            seen: list[dict[str, object]] = []

            async def wait_for_reply() -> None:
                seen.append(await gateway.message(task_id, wait=20))

            nursery.start_soon(wait_for_reply)
            await trio.sleep(0.3)
            started = trio.current_time()
            await client.post_result(task_id, "here it is")
        assert trio.current_time() - started < 2.0
        assert (seen[0]["status"], seen[0]["reply"]) == ("answered", "here it is")


async def test_result_for_an_unknown_task_is_refused_not_retried(
    start_gateway: StartGateway, client_token_file: Path
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        with pytest.raises(GatewayRequestError, match="unknown task id 'no-such-task'") as info:
            await client.post_result("no-such-task", "hello")
        assert info.value.status == 404
        with pytest.raises(GatewayRequestError, match="HTTP 404"):
            await client.ack("no-such-task")


async def test_heartbeat_is_recorded_with_the_inflight_count(
    start_gateway: StartGateway, client_token_file: Path, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file, client_name="bridge-a") as client:
        assert await client.heartbeat(inflight=3)
        assert await client.heartbeat(inflight=5)
    (info,) = (await gateway.stats())["clients"]
    assert (info["client"], info["inflight"], info["protocol_version"], info["heartbeats"]) == (
        "bridge-a",
        5,
        1,
        2,
    )


async def test_restart_loses_nothing(
    start_gateway: StartGateway,
    token_file: Path,
    client_token_file: Path,
    http: httpx.AsyncClient,
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    async with trio.open_nursery() as first_run:  # a server of our own, stopped mid-test
        settings = GatewaySettings(token_file=token_file, db=db, port=0, lease=0.5)
        port = await first_run.start(partial(serve, settings))
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer worker-token-1"}
        ids = []
        for text in ("answered before", "acked before", "leased before", "queued before"):
            response = await http.post(
                f"{url}/v1/messages", json={"room": "r", "text": text}, headers=headers
            )
            ids.append(response.json()["id"])
        async with GatewayClient(url, client_token_file, poll_limit=3) as client:
            assert [t.id for t in await client.poll_tasks(wait=0)] == ids[:3]
            await client.ack(ids[0])
            await client.ack(ids[1])
            await client.post_result(ids[0], "the answer")
            await client.post_result(ids[0], "again")  # one duplicate absorbed
        first_run.cancel_scope.cancel()

    gateway = await start_gateway(db=db, lease=0.5)
    statuses = [(await gateway.message(i))["status"] for i in ids]
    assert statuses == ["answered", "acked", "leased", "queued"]
    assert (await gateway.message(ids[0]))["reply"] == "the answer"
    assert (await gateway.stats())["duplicate_results"] == 1

    async with GatewayClient(gateway.url, client_token_file) as client:
        await trio.sleep(0.6)  # the lease taken before the restart runs out
        redelivered = await client.poll_tasks(wait=0)
    assert [(t.id, t.delivery) for t in redelivered] == [(ids[2], 2), (ids[3], 1)]
