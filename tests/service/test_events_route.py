"""``POST /v1/events`` on a real admin endpoint (127.0.0.1, free port) over a real SQLite store
(issue #52): behind the admin token; an event is kept before the answer and wakes the runs
parked on its key; a replay is a no-op; bad input is a clear 4xx that changes nothing."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx

from support.observe import running_admin
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.service._ops_routes import OpsRoutes

S = CustodyState


async def test_an_event_is_kept_and_wakes_its_waiters_and_bad_input_changes_nothing(
    store: SqliteStore, tmp_path: Path
) -> None:
    await store.ingest(Task("order-7", "wait for the payment"))
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.park_event(claim, "pay.7", (), store.clock() + 3600, "the payment")
    routes = partial(OpsRoutes, store, event_ttl=60.0)
    async with running_admin(tmp_path, routes, store=store) as admin:
        event = {"id": "stripe-evt-1", "key": "pay.7", "body": {"amount": 12}}
        async with httpx.AsyncClient(base_url=admin.url, timeout=10) as anonymous:
            refused = await anonymous.post("/v1/events", json=event)
            assert refused.status_code == 401
        assert await store.events() == []  # nothing kept without the token
        sent = await admin.client.post("/v1/events", json=event)
        assert sent.status_code == 200, sent.text
        answer = sent.json()
        assert (answer["new"], answer["woken"]) == (True, 1)
        assert answer["kept_until"] == (await store.events())[0].until
        assert await store.state("order-7") is S.PENDING
        again = await admin.client.post("/v1/events", json=event)  # a retry after a lost answer
        assert again.status_code == 200
        assert (again.json()["new"], again.json()["woken"]) == (False, 0)
        bad = [
            ({**event, "body": {"amount": 13}}, 409, "another key or body"),
            ({"key": "pay.7", "body": 1}, 400, "id and key required"),
            ({"id": "e2", "body": 1}, 400, "event key"),
            ({"id": "e2", "key": "no/slash", "body": 1}, 400, "event key"),
            ({"id": "../x", "key": "k", "body": 1}, 400, "event id"),
            ({"id": "e2", "key": "k", "body": "x" * 300_000}, 400, "bytes"),
            ({"id": "e2", "key": "k", "body": 1, "extra": 2}, 400, "JSON object"),
            ([1, 2], 400, "JSON object"),
        ]
        for doc, status, words in bad:
            answer = await admin.client.post("/v1/events", json=doc)
            assert answer.status_code == status, (doc, answer.text)
            assert words in answer.json()["error"], answer.text
        not_json = await admin.client.post(
            "/v1/events", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert not_json.status_code == 400
        assert (await admin.client.get("/v1/events")).status_code == 405
        async with httpx.AsyncClient(base_url=admin.url, timeout=10) as anonymous:
            refused = await anonymous.post("/ops/api/events/stripe-evt-1/drop")
            assert refused.status_code == 401  # the page's drop needs the token too
        missing = await admin.client.post("/ops/api/events/nope/drop")
        assert missing.status_code == 404
    assert [(e.id, e.value) for e in await store.events()] == [("stripe-evt-1", {"amount": 12})]


async def test_a_body_over_the_stores_own_limit_is_a_400_not_a_retry(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "small.db", max_body_bytes=1000) as store:
        async with running_admin(tmp_path, partial(OpsRoutes, store), store=store) as admin:
            event = {"id": "e1", "key": "k", "body": "x" * 2000}
            answer = await admin.client.post("/v1/events", json=event)
            assert answer.status_code == 400, answer.text
            assert "the store refused it" in answer.json()["error"]
            same = {"id": "e2", "key": "k", "body": {"b": 1, "a": 2}}
            assert (await admin.client.post("/v1/events", json=same)).status_code == 200
            reordered = {"id": "e2", "key": "k", "body": {"a": 2, "b": 1}}
            again = await admin.client.post("/v1/events", json=reordered)  # the same event
            assert (again.status_code, again.json()["new"]) == (200, False)
        assert [e.id for e in await store.events()] == ["e2"]
