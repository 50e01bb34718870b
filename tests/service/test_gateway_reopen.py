"""The reference gateway reopens a task it was told was dead when its real reply comes (issue
#16, item 4): an operator re-drove the dead task on the bridge's side. Through the real HTTP
server: a reject (the dead notice), then a result, single or batched."""

from __future__ import annotations

from support.gateway import RunningGateway
from tether._protocol._messages import ResultRequest
from tether.bridge import GatewayClient


async def _told_dead(gateway: RunningGateway, client: GatewayClient, text: str) -> str:
    task_id = await gateway.submit(text)
    [polled] = await client.poll_tasks(wait=1)
    await client.ack(polled.id)
    assert await client.reject(task_id, "failed on attempt 5 of 5: ConnectionError: 503")
    message = await gateway.message(task_id)
    assert (message["status"], message["reason"]) == ("closed", message["reason"])
    assert message["reason"] is not None
    return task_id


async def test_a_reply_after_the_dead_notice_replaces_it(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    task_id = await _told_dead(gateway, client, "ask the model")
    receipt = await client.post_result(task_id, "the model is back: here is your answer")
    assert not receipt.duplicate
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"], message["reason"]) == (
        "answered",
        "the model is back: here is your answer",
        None,
    )
    stats = await gateway.stats()
    assert (stats["reopened"], stats["duplicate_results"]) == (1, 0)
    # the reply is final again: a repeat is a duplicate, a late dead notice a no-op
    assert (await client.post_result(task_id, "again")).duplicate
    assert await client.reject(task_id, "stale notice")
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"], message["reason"]) == (
        "answered",
        "the model is back: here is your answer",
        None,
    )
    assert (await gateway.stats())["reopened"] == 1


async def test_a_batched_reply_reopens_too_and_a_no_send_one_closes_without_reason(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    first = await _told_dead(gateway, client, "one")
    second = await _told_dead(gateway, client, "two")
    answers = await client.post_results(
        [
            ResultRequest(id=first, body="answer one"),
            ResultRequest(id=second, body="", no_send=True),
        ]
    )
    assert [getattr(a, "duplicate", a) for a in answers] == [False, False]
    one, two = await gateway.message(first), await gateway.message(second)
    assert (one["status"], one["reply"], one["reason"]) == ("answered", "answer one", None)
    assert (two["status"], two["reply"], two["reason"]) == ("closed", None, None)
    assert (await gateway.stats())["reopened"] == 2


async def test_a_result_for_a_task_closed_without_a_notice_stays_a_duplicate(
    gateway: RunningGateway, client: GatewayClient
) -> None:
    task_id = await gateway.submit("quiet")
    await client.poll_tasks(wait=1)
    await client.post_result(task_id, "", no_send=True)  # closed by a no-send result
    assert (await client.post_result(task_id, "late")).duplicate
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"]) == ("closed", None)
    assert (await gateway.stats())["reopened"] == 0
