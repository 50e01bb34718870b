"""Batch acks and results: one request and one gateway commit for many tasks, with each id's
own outcome; a gateway without the batch endpoints gets one request per task instead."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from support.gateway import RunningGateway
from support.service import gateway_client
from tether._protocol._messages import ResultMetadata, ResultRequest
from tether.bridge import GatewayClient
from tether.bridge.client import GatewayRequestError, ResultReceipt


async def test_ack_many_acks_each_and_reports_each_refusal(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    handed = [await gateway.submit(f"m{i}") for i in range(3)]
    await client.poll_tasks(wait=1)
    queued = await gateway.submit("not handed out yet")
    refused = await client.ack_many([*handed, queued, "never-heard-of"])
    assert sorted((e.status, e.detail.split("'")[1]) for e in refused) == [
        (404, "never-heard-of"),
        (409, queued),
    ]
    for task_id in handed:
        assert (await gateway.message(task_id))["status"] == "acked"
    assert (await gateway.message(queued))["status"] == "queued"


async def test_post_results_gives_a_receipt_or_refusal_per_result_in_order(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    first, second = [await gateway.submit(f"q{i}") for i in range(2)]
    await client.poll_tasks(wait=1)
    await client.post_result(second, "already answered")
    answers = await client.post_results(
        [
            ResultRequest(id=first, body="a1", metadata=ResultMetadata(worker="w1")),
            ResultRequest(id="unknown-id", body="a?"),
            ResultRequest(id=second, body="a2"),
        ]
    )
    assert answers[0] == ResultReceipt(id=first, duplicate=False)
    assert isinstance(answers[1], GatewayRequestError)
    assert answers[1].status == 404
    assert answers[2] == ResultReceipt(id=second, duplicate=True)
    message = await gateway.message(first)
    assert (message["reply"], message["worker"]) == ("a1", "w1")
    assert (await gateway.message(second))["reply"] == "already answered"
    assert (await gateway.stats())["duplicate_results"] == 1


async def test_a_bad_batch_is_refused_whole_with_the_reason(gateway: RunningGateway) -> None:
    response = await gateway.http.post(
        f"{gateway.url}/v1/acks",
        json={"ids": ["ok-1", "ok-1"], "durable": True},
        headers=gateway.headers(),
    )
    assert response.status_code == 400
    assert "must not repeat" in response.json()["error"]
    response = await gateway.http.post(
        f"{gateway.url}/v1/results/batch",
        json={"results": [{"id": "x-1", "body": ""}]},
        headers=gateway.headers(),
    )
    assert response.status_code == 400
    assert "results[0]" in response.json()["error"]


async def test_without_batch_endpoints_the_client_sends_one_request_per_task(
    token_file: Path,
) -> None:
    paths: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path in ("/v1/acks", "/v1/results/batch"):
            return httpx.Response(404, json={"error": "no such endpoint"})
        if request.url.path.endswith("/ack"):
            return httpx.Response(200, json={"id": "x", "status": "acked"})
        task_id = json.loads(request.content)["id"]
        return httpx.Response(200, json={"id": task_id, "duplicate": False})

    async with gateway_client(
        "http://old-gateway.test", token_file, transport=httpx.MockTransport(answer)
    ) as client:
        assert await client.ack_many(["a", "b"]) == []
        answers = await client.post_results([ResultRequest(id="a", body="1")])
        assert answers == [ResultReceipt(id="a", duplicate=False)]
        assert await client.ack_many(["c"]) == []
    assert paths.count("/v1/acks") == 1  # asked once, then never again
    assert paths.count("/v1/results/batch") == 0  # one switch for both batch endpoints
    assert sorted(p for p in paths if p.endswith("/ack")) == [
        "/v1/tasks/a/ack",
        "/v1/tasks/b/ack",
        "/v1/tasks/c/ack",
    ]
    assert paths.count("/v1/results") == 1


@pytest.mark.parametrize("size", [0, 101])
async def test_batch_size_is_bounded(gateway: RunningGateway, size: int) -> None:
    response = await gateway.http.post(
        f"{gateway.url}/v1/acks",
        json={"ids": [f"t-{i}" for i in range(size)], "durable": True},
        headers=gateway.headers(),
    )
    assert response.status_code == 400
    assert "1 to 100 entries" in response.json()["error"]
