"""The optional gateway endpoints the bridge uses: reject (a task it cannot take) and notices
(a stalled task). Against the real reference gateway, and degrading on a gateway without them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from support.gateway import RunningGateway
from support.service import gateway_client
from tether.bridge import GatewayClient
from tether.bridge.client import GatewayRequestError


async def test_a_rejected_task_is_closed_with_its_reason_and_counted(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    task_id = await gateway.submit("too big for the bridge")
    [polled] = await client.poll_tasks(wait=1)
    assert await client.reject(polled.id, "task body is 900 bytes; the limit is 64 bytes")
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"]) == ("closed", None)
    assert message["reason"] == "task body is 900 bytes; the limit is 64 bytes"
    assert (await gateway.stats())["rejected"] == 1
    # repeating it changes nothing (the task is already closed, the first reason kept)
    assert await client.reject(polled.id, "again")
    assert (await gateway.stats())["rejected"] == 1
    assert (await gateway.message(task_id))["reason"] == message["reason"]


async def test_rejecting_an_acked_task_closes_it_with_the_reason_for_the_user(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    # what the bridge does when a task it holds goes dead: the user's waiting poll ends
    task_id = await gateway.submit("crash me")
    [polled] = await client.poll_tasks(wait=1)
    await client.ack(polled.id)
    assert (await gateway.message(task_id))["status"] == "acked"
    assert await client.reject(task_id, "the agent failed 3 times: RuntimeError: boom")
    message = await gateway.message(task_id, wait=5)
    assert (message["status"], message["reply"]) == ("closed", None)
    assert message["reason"] == "the agent failed 3 times: RuntimeError: boom"
    # the room's history shows the reason too (what the chat page renders)
    response = await gateway.http.get(
        f"{gateway.url}/v1/messages", params={"room": "lobby"}, headers=gateway.headers()
    )
    [listed] = response.json()["messages"]
    assert (listed["status"], listed["reason"]) == ("closed", message["reason"])


async def test_a_reject_after_the_reply_changes_nothing(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    task_id = await gateway.submit("answered already")
    await client.poll_tasks(wait=1)
    await client.post_result(task_id, "here you go")
    assert await client.reject(task_id, "too late")
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"], message["reason"]) == (
        "answered",
        "here you go",
        None,
    )
    assert (await gateway.stats())["rejected"] == 0


async def test_rejecting_a_task_never_handed_out_is_refused(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    task_id = await gateway.submit("still queued")
    with pytest.raises(GatewayRequestError, match="409"):
        await client.reject(task_id, "nope")


async def test_a_stall_notice_is_recorded_once_per_task(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    task_id = await gateway.submit("a slow one")
    await client.poll_tasks(wait=1)
    assert await client.notice(task_id, 301.5)
    assert await client.notice(task_id, 400.0)  # an update, not a second notice
    assert (await gateway.stats())["notices"] == 1
    # an unknown id is a 409, never a 404 (which would read as "no notices endpoint")
    with pytest.raises(GatewayRequestError, match="409"):
        await client.notice("never-submitted", 1.0)
    assert client.notices_supported


async def test_without_the_endpoints_reject_and_notice_degrade_quietly(token_file: Path) -> None:
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(404, json={"error": "no such endpoint"})

    async with gateway_client(
        "http://old-gateway.test", token_file, transport=httpx.MockTransport(answer)
    ) as client:
        assert await client.reject("t1", "too big") is False
        assert await client.notice("t1", 5.0) is False
        assert await client.reject("t2", "too big") is False
        assert await client.notice("t2", 5.0) is False
    assert calls == ["/v1/tasks/t1/reject", "/v1/notices"]  # asked once each, then never
