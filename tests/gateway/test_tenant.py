"""The reference gateway and tenants (issue #38, item 3): a message may name its tenant (a
label; anything else is a 400 naming the field), the gateway keeps it with the message, shows
it in the message views, hands it out with the task (left out when there is none), and an old
database gains the column."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx

from support.gateway_fixtures import StartGateway
from tether.gateway._store import GatewayStore


async def _post(http: httpx.AsyncClient, url: str, token: str, **fields: Any) -> httpx.Response:
    return await http.post(
        f"{url}/v1/messages",
        json={"room": "lobby", "text": "hi", **fields},
        headers={"Authorization": f"Bearer {token}"},
    )


async def test_a_message_names_its_tenant_and_a_bad_one_is_a_400_naming_the_field(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    for bad in ["two words", "", "-x", "x" * 129, 5, ["acme"]]:
        refused = await _post(http, gateway.url, gateway.token, tenant=bad)
        assert refused.status_code == 400, (bad, refused.text)
        assert "tenant" in refused.json()["error"], (bad, refused.text)
    assert (await gateway.stats())["tasks"]["queued"] == 0  # nothing stored
    for status in [201, 200]:  # new, then a retry of the same submission
        sent = await _post(http, gateway.url, gateway.token, id="m-1", tenant="acme")
        assert sent.status_code == status, sent.text
    for other in [{"tenant": "globex"}, {}]:  # the same id for another tenant, or for none
        again = await _post(http, gateway.url, gateway.token, id="m-1", **other)
        assert again.status_code == 409, (other, again.text)
    assert (await _post(http, gateway.url, gateway.token, id="m-2")).status_code == 201
    assert (await gateway.message("m-1"))["tenant"] == "acme"
    assert (await gateway.message("m-2"))["tenant"] is None
    history = await http.get(
        f"{gateway.url}/v1/messages", params={"room": "lobby"}, headers=gateway.headers()
    )
    assert [(m["id"], m["tenant"]) for m in history.json()["messages"]] == [
        ("m-1", "acme"),
        ("m-2", None),
    ]


async def test_a_polled_task_carries_its_tenant_and_one_without_leaves_the_field_out(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    await _post(http, gateway.url, gateway.token, id="with", tenant="acme:eu.1")
    await _post(http, gateway.url, gateway.token, id="without", room="other")
    polled = await http.get(
        f"{gateway.url}/v1/tasks", params={"wait": 0, "limit": 10}, headers=gateway.headers()
    )
    tasks = {task["id"]: task for task in polled.json()["tasks"]}
    assert tasks["with"]["tenant"] == "acme:eu.1"
    assert "tenant" not in tasks["without"]


async def test_a_database_from_before_tenants_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1');
        CREATE TABLE tasks (
            id TEXT PRIMARY KEY, room TEXT NOT NULL, sender TEXT NOT NULL, body TEXT NOT NULL,
            created_at REAL NOT NULL, state TEXT NOT NULL, lease_until REAL,
            deliveries INTEGER NOT NULL DEFAULT 0, acked_at REAL, reply TEXT, worker TEXT,
            answered_at REAL, leased_to TEXT, priority TEXT NOT NULL DEFAULT 'normal',
            trace TEXT
        );
        INSERT INTO tasks (id, room, sender, body, created_at, state, priority)
            VALUES ('old-1', 'r', 'u', 'from before', 1.0, 'queued', 'urgent');
        """
    )
    db.close()
    store = await GatewayStore.open(path)
    try:
        old = await store.get("old-1")
        assert old is not None
        assert (old.body, old.priority, old.tenant) == ("from before", "urgent", None)
        new, created = await store.submit("r", "u", "after", 2.0, "new-1", tenant="acme")
        assert created
        assert new.tenant == "acme"
        claim = await store.claim(10, 30.0, 3.0, "bridge-a")
        assert [(t.id, t.tenant) for t in claim.tasks] == [("old-1", None), ("new-1", "acme")]
    finally:
        store.close()
    reopened = sqlite3.connect(path)
    try:
        columns = [row[1] for row in reopened.execute("PRAGMA table_info(tasks)")]
    finally:
        reopened.close()
    assert columns.count("tenant") == 1
