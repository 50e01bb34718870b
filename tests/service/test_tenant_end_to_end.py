"""A tenant end to end (issue #38, item 3): a user names it on the reference gateway's message
API, protocol v1 carries it, and ingest stores it as the custody task's ``tenant`` header,
where the store reads it; a gateway that hands out a tenant that is not a label has the task
rejected, naming it."""

from __future__ import annotations

import sqlite3

from support.gateway import RunningGateway
from tether.bridge import GatewayClient, SqliteStore
from tether.bridge.client import GatewayTask
from tether.bridge.service._ingest import Ingest, to_custody_task


async def test_a_tenant_travels_from_the_message_api_into_the_custody_tasks_header(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    for id, tenant in [("a-1", "acme"), ("plain-1", None)]:
        payload = {"room": f"room-{id}", "text": f"text of {id}", "id": id}
        if tenant is not None:
            payload["tenant"] = tenant
        response = await gateway.http.post(
            f"{gateway.url}/v1/messages", json=payload, headers=gateway.headers()
        )
        assert response.status_code == 201, response.text
    done = await Ingest(store, client).run_once(wait=1)
    assert sorted(done.ingested) == ["a-1", "plain-1"]
    tenanted = await store.get("a-1")
    plain = await store.get("plain-1")
    assert tenanted is not None
    assert plain is not None
    assert tenanted.task.headers == {"sender": "user", "delivery": "1", "tenant": "acme"}
    assert tenanted.task.tenant == "acme"
    assert "tenant" not in plain.task.headers
    assert plain.task.tenant is None


def test_a_task_from_an_older_gateway_has_no_tenant() -> None:
    assert to_custody_task(GatewayTask(id="t", body="b", room="r")).tenant is None
    task = to_custody_task(GatewayTask(id="t", body="b", room="r", tenant="acme"))
    assert task.headers["tenant"] == "acme"


async def test_a_tenant_that_is_not_a_label_has_the_task_rejected_by_name(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    """A gateway that checks nothing: the reference one's stored tenant is overwritten."""
    await gateway.submit("fine", room="r1", id="fine-1")
    await gateway.submit("bad", room="r2", id="bad-1")
    db = sqlite3.connect(gateway.db)
    try:
        with db:
            db.execute("UPDATE tasks SET tenant = 'two words' WHERE id = 'bad-1'")
    finally:
        db.close()
    done = await Ingest(store, client).run_once(wait=1)
    assert done.ingested == ("fine-1",)
    [(rejected, reason)] = done.rejected
    assert rejected == "bad-1"
    assert reason.startswith("tenant 'two words' is not valid"), reason
    assert await store.get("bad-1") is None
    closed = await gateway.message("bad-1")
    assert (closed["status"], closed["reason"]) == ("closed", reason)
