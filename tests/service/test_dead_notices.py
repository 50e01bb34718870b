"""Dead notices: every dead-lettered task is reported to the gateway (closed there with its
reason, so the user learns their message failed), at least once, durably, and never again once
the gateway confirmed. Real gateway on 127.0.0.1 and real SQLite files, except where a gateway
without the endpoint or a flaky one is the point (``httpx.MockTransport`` and a MockClock)."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from support.agents import basic
from support.clock import StoreAwareClock
from support.gateway import RunningGateway
from support.service import admin_bridge_config, gateway_client
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import (
    BridgeService,
    CustodyState,
    GatewayClient,
    SqliteStore,
    Task,
    render_store_status,
    store_status,
)
from tether.bridge.service._dead_notices import DeadNotices, notice_reason
from tether.bridge.service._ingest import Ingest

ADMIN_TOKEN = "dead-notice-admin-token"
DOOM = "the agent failed 3 times: RuntimeError: boom"


async def _take(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient, text: str
) -> str:
    """Submit a message and ingest it (the bridge holds it, acked at the gateway)."""
    task_id = await gateway.submit(text)
    with trio.fail_after(10):
        while await store.state(task_id) is None:
            await Ingest(store, client).run_once(wait=1)
    return task_id


async def _closed(gateway: RunningGateway, task_id: str) -> bool:
    return bool((await gateway.message(task_id))["status"] == "closed")


async def test_an_agent_that_always_crashes_gets_its_user_a_closed_message_with_the_reason(
    gateway: RunningGateway, token_file: Path, store: SqliteStore, tmp_path: Path
) -> None:
    config = admin_bridge_config(gateway.url, token_file, tmp_path, ADMIN_TOKEN)
    service = BridgeService(config, store=store, factory=basic.factory)
    crash_id = await gateway.submit("crash, please")
    fine_id = await gateway.submit("fine, thanks")
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )
        # the user's own long poll ends with the news, as the chat page's does
        with trio.fail_after(15):
            while (message := await gateway.message(crash_id, wait=5))["status"] != "closed":
                pass
        assert message["reply"] is None
        # issue 47.5: the person reads a plain sentence with a reference, no operator jargon;
        # the detail stays in the store (below), the bridge's log and the operator page
        assert message["reason"] == (
            f"something went wrong and this message was not answered (reference {crash_id})"
        )
        assert (await gateway.message(fine_id, wait=5))["reply"] == "echo: fine, thanks"

        dead_notices = service.dead_notices
        assert dead_notices is not None

        async def marked_and_counted() -> bool:
            # the store is marked first, the in-memory count follows: wait for both (reading
            # the count right after the store said "marked" failed under load, issue 21.11)
            return await store.unreported_dead_count() == 0 and dead_notices.stats.reported == 1

        await wait_until(marked_and_counted)
        assert (dead_notices.stats.reported, dead_notices.stats.refused) == (1, 0)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{service.admin_port}",
            headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as admin:
            values: dict[str, float] = {}

            async def reading_caught_up() -> bool:  # the endpoint reads the store each second
                nonlocal values
                text = (await admin.get("/metrics")).text
                families = text_string_to_metric_families(text)
                values = {s.name: s.value for f in families for s in f.samples}
                dead = values.get("tether_dead_letters")
                return dead == 1 and values.get("tether_dead_letters_unreported") == 0

            await wait_until(reading_caught_up, within=10)
        assert values["tether_dead_letters_reported_total"] == 1
        assert values["tether_dead_letters_report_refused_total"] == 0
        assert values["tether_dead_letters"] == 1
        assert values["tether_dead_letters_unreported"] == 0
    # the dead letter itself is untouched: still dead with the agent's reason
    record = await store.get(crash_id)
    assert record is not None
    assert record.state is CustodyState.DEAD
    assert record.attempt == store.max_attempts
    assert "AgentCrash" in (record.reason or "")
    assert (await gateway.stats())["rejected"] == 1


async def test_a_task_that_dies_while_the_gateway_is_down_is_reported_once_it_is_back(
    gateway: RunningGateway,
    token_file: Path,
    store: SqliteStore,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "tether.bridge.dead_notices")
    async with gateway_client(gateway.url, token_file) as client:
        task_id = await _take(gateway, store, client, "doomed")
        await gateway.stop()
        await store.dead_letter(task_id, DOOM)
        notices = DeadNotices(store, client, interval=60.0)
        nursery.start_soon(notices.run)
        notices.wakeup.set()
        await trio.sleep(0.5)  # several backed-off attempts against the closed port
        assert await store.unreported_dead_count() == 1
        assert client.status.consecutive_failures >= 2
        await gateway.start()

        async def reported() -> bool:
            return await store.unreported_dead_count() == 0

        await wait_until(reported)
        message = await gateway.message(task_id)
        assert message["status"] == "closed"
        assert message["reason"] == notice_reason(task_id)
        assert "boom" not in message["reason"]
        told = [r.getMessage() for r in caplog.records if r.name == "tether.bridge.dead_notices"]
        assert f"told the gateway that task {task_id} is dead: {DOOM}" in told  # the detail
        assert notices.stats.reported == 1
        assert client.reject_supported
        nursery.cancel_scope.cancel()


class MarkFailsOnce(SqliteStore):
    """A store that dies (as a SIGKILLed bridge would) right after the gateway confirmed a
    report and before the marker is committed: the first ``mark_dead_reported`` raises."""

    failed: bool = False

    async def mark_dead_reported(self, ids: Sequence[str]) -> list[bool]:
        if not self.failed:
            self.failed = True
            raise OSError("simulated crash between the report and the mark")
        return await super().mark_dead_reported(ids)


async def test_a_crash_between_report_and_mark_reports_again_and_the_gateway_absorbs_it(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / "crash" / "custody.db"
    store = await MarkFailsOnce.open(path, lease_s=5.0, max_attempts=3)
    async with store, gateway_client(gateway.url, token_file) as client:
        task_id = await _take(gateway, store, client, "doomed")
        await store.dead_letter(task_id, "RuntimeError: boom")
        with pytest.raises(OSError, match="simulated crash"):
            await DeadNotices(store, client).run_once()
        assert await _closed(gateway, task_id)  # the gateway has it ...
        assert await store.unreported_dead_count() == 1  # ... the store does not know yet
    # "after restart": a new store handle and a new loop report it again
    async with (
        await SqliteStore.open(path, lease_s=5.0) as again,
        gateway_client(gateway.url, token_file) as client,
    ):
        notices = DeadNotices(again, client)
        assert await notices.run_once() == 1
        assert notices.stats.reported == 1
        assert await again.unreported_dead_count() == 0
        assert await notices.run_once() == 0  # confirmed once: never reported again
    assert (await gateway.stats())["rejected"] == 1  # the repeat was a no-op at the gateway
    assert (await gateway.message(task_id))["reason"] == notice_reason(task_id)


async def test_a_dead_task_the_gateway_does_not_know_is_settled_not_retried(
    gateway: RunningGateway, token_file: Path, store: SqliteStore
) -> None:
    # e.g. the gateway's database was reset: it answers 409 "unknown task id", which is final
    await store.ingest(Task("never-at-this-gateway", "hello"))
    await store.dead_letter("never-at-this-gateway", "RuntimeError: boom")
    async with gateway_client(gateway.url, token_file) as client:
        notices = DeadNotices(store, client)
        assert await notices.run_once() == 1
        assert (notices.stats.reported, notices.stats.refused) == (0, 1)
        assert await store.unreported_dead_count() == 0
        assert await notices.run_once() == 0
    assert await store.state("never-at-this-gateway") is CustodyState.DEAD


@pytest.fixture
def mock_clock() -> StoreAwareClock:
    """Autojump, except while the store's threads work (a plain MockClock would skip ahead
    during a read, as Trio sees a task waiting on a thread as idle)."""
    return StoreAwareClock()


async def test_a_gateway_without_the_endpoint_is_asked_once_and_never_spun_on(
    mock_clock: StoreAwareClock, token_file: Path, store: SqliteStore, nursery: trio.Nursery
) -> None:
    await store.ingest(Task("t1", "hello"))
    await store.dead_letter("t1", "RuntimeError: boom")
    calls: list[str] = []

    def old_gateway(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(404, json={"error": "no such endpoint"})

    async with gateway_client(
        "http://old-gateway.test", token_file, transport=httpx.MockTransport(old_gateway)
    ) as client:
        notices = DeadNotices(store, client, interval=5.0)
        nursery.start_soon(notices.run)
        for _ in range(20):  # an hour of wake-ups and periodic looks
            notices.wakeup.set()
            await trio.sleep(180)
        assert calls == ["/v1/tasks/t1/reject"]
        assert not notices.supported
        assert notices.stats.reported == 0
        nursery.cancel_scope.cancel()
    status = await store_status(store)
    assert (status.counts["dead"], status.dead_unreported) == (1, 1)
    assert "1 not yet reported to the gateway" in render_store_status(status, "here")


async def test_a_flaky_gateway_is_retried_with_backoff_until_it_confirms(
    mock_clock: StoreAwareClock, token_file: Path, store: SqliteStore
) -> None:
    await store.ingest(Task("t1", "hello"))
    await store.dead_letter("t1", "RuntimeError: boom")
    times: list[float] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        times.append(trio.current_time())
        if len(times) <= 3:
            return httpx.Response(503, json={"error": "overloaded"})
        assert json.loads(request.content)["reason"] == notice_reason("t1")
        return httpx.Response(200, json={"id": "t1", "status": "closed"})

    async with gateway_client(
        "http://flaky.test",
        token_file,
        transport=httpx.MockTransport(flaky),
        backoff_initial=1.0,
        backoff_maximum=60.0,
    ) as client:
        notices = DeadNotices(store, client)
        assert await notices.run_once() == 1
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 3
    # exponential backoff from 1 s (each delay at most 20 % shorter for jitter)
    for gap, nominal in zip(gaps, [1.0, 2.0, 4.0], strict=True):
        assert nominal * 0.8 - 1e-9 <= gap <= nominal + 1e-9
    assert await store.unreported_dead_count() == 0
    assert notices.stats.reported == 1


def test_the_person_is_told_in_plain_words_whether_an_operator_cancelled_it() -> None:
    """Issue 47.5: the sentence a person reads never carries the store's reason (jargon, an
    operator's note such as "spam"), only whether an operator cancelled the message."""
    failed = notice_reason("m1", "quarantine: killed its quarantine process 2 times")
    assert failed == "something went wrong and this message was not answered (reference m1)"
    cancelled = notice_reason("m2", "operator: cancelled: spam")
    assert cancelled == "an operator cancelled this message; it was not answered (reference m2)"
    assert notice_reason("m3") == notice_reason("m3", None)


class _Rejects:
    """A gateway that records the dead tasks it is told of."""

    reject_supported = True

    def __init__(self) -> None:
        self.told: list[str] = []

    async def reject(self, task_id: str, reason: str) -> bool:
        self.told.append(task_id)
        return True


async def test_a_dead_child_is_its_parents_news_not_the_gateways(tmp_path: Path) -> None:
    """Issue #51: the gateway never saw a child run, so its death is marked reported without
    a notice (a gateway answering 404 for an unknown id would otherwise switch the notices
    off for every real task); its parent's join reads it."""
    from tether.bridge.custody._children import child_task
    from tether.bridge.service._dead_notices import DeadNotices

    async with await SqliteStore.open(tmp_path / "custody.db") as store:
        await store.ingest(Task("p", "plan"))
        parent = await store.claim("w1", leaderless=True)
        assert parent is not None
        kid = child_task(parent.task, "k", "k", queue=None, room=None)
        await store.spawn(parent, "k", kid)
        await store.fail(parent, "gave up", permanent=True)
        child = await store.claim("w2", leaderless=True)
        assert child is not None
        await store.fail(child, "no luck", permanent=True)
        gateway = _Rejects()
        notices = DeadNotices(store, gateway)  # type: ignore[arg-type]
        await notices.run_once()
        assert gateway.told == ["p"]
        assert await store.unreported_dead() == []
