"""``POST /v1/leases/release`` on the real reference gateway: what it gives back, what never."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from support.gateway import RunningGateway
from support.gateway_fixtures import StartGateway
from tether._http._auth import TokenSource
from tether.bridge import write_token
from tether.gateway import _app
from tether.gateway._app import GatewayApp
from tether.gateway._store import Claim, GatewayStore


async def poll(
    http: httpx.AsyncClient,
    gateway: RunningGateway,
    client: str | None,
    *,
    limit: int = 16,
    wait: float = 0,
) -> list[dict[str, Any]]:
    headers = gateway.headers()
    if client is not None:
        headers["X-Tether-Client"] = client
    response = await http.get(
        f"{gateway.url}/v1/tasks",
        params={"wait": wait, "limit": limit},
        headers=headers,
        timeout=wait + 10,
    )
    assert response.status_code == 200, response.text
    tasks: list[dict[str, Any]] = response.json()["tasks"]
    return tasks


async def release(http: httpx.AsyncClient, gateway: RunningGateway, body: Any) -> httpx.Response:
    return await http.post(f"{gateway.url}/v1/leases/release", json=body, headers=gateway.headers())


async def status(http: httpx.AsyncClient, gateway: RunningGateway, task_id: str) -> str:
    return str((await gateway.message(task_id))["status"])


async def test_release_queues_only_the_clients_unacked_leases(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway(lease=30.0)
    # three rooms: a room's later message is not handed out while an earlier one is leased
    ids = [await gateway.submit(f"message {i}", room=f"room-{i}") for i in range(3)]
    a_tasks = await poll(http, gateway, "bridge-a", limit=2)
    b_tasks = await poll(http, gateway, "bridge-b")
    assert [t["id"] for t in a_tasks] == ids[:2]
    assert [t["id"] for t in b_tasks] == ids[2:]
    acked = await http.post(
        f"{gateway.url}/v1/tasks/{ids[0]}/ack",
        json={"id": ids[0], "durable": True},
        headers=gateway.headers(),
    )
    assert acked.status_code == 200, acked.text

    response = await release(http, gateway, {"client": "bridge-a"})
    assert response.status_code == 200, response.text
    assert response.json() == {"client": "bridge-a", "released": 1}
    # acked: in the bridge's custody, untouched; another client's lease: untouched
    assert [await status(http, gateway, i) for i in ids] == ["acked", "queued", "leased"]
    # the released task goes to the next poll at once (a 30 s lease notwithstanding)
    again = await poll(http, gateway, "bridge-c")
    assert [(t["id"], t["delivery"]) for t in again] == [(ids[1], 2)]
    stats = await gateway.stats()
    assert (stats["released"], stats["redeliveries"]) == (1, 1)
    # idempotent: nothing more is leased to bridge-a
    assert (await release(http, gateway, {"client": "bridge-a"})).json()["released"] == 0


async def test_an_unknown_client_releases_nothing(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("polled without a name")
    assert len(await poll(http, gateway, None)) == 1
    response = await release(http, gateway, {"client": "never-seen"})
    assert response.status_code == 200
    assert response.json() == {"client": "never-seen", "released": 0}
    assert await status(http, gateway, task_id) == "leased"  # an anonymous lease only expires


async def test_release_wakes_a_waiting_long_poll(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway(lease=30.0)
    task_id = await gateway.submit("hello")
    assert len(await poll(http, gateway, "stopping-bridge")) == 1
    got: list[dict[str, Any]] = []

    async def waiting_poller() -> None:
        got.extend(await poll(http, gateway, "other-bridge", wait=20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting_poller)
        await trio.sleep(0.2)  # the poll is waiting at the gateway
        started = trio.current_time()
        assert (await release(http, gateway, {"client": "stopping-bridge"})).json()["released"] == 1
    assert [t["id"] for t in got] == [task_id]
    assert trio.current_time() - started < 3


async def test_an_ack_or_result_that_arrives_after_the_release_is_taken(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    first = await gateway.submit("acked late")
    second = await gateway.submit("answered late")
    assert len(await poll(http, gateway, "bridge-a")) == 2
    assert (await release(http, gateway, {"client": "bridge-a"})).json()["released"] == 2
    # the bridge had committed these; its ack and result were already on their way
    ack = await http.post(
        f"{gateway.url}/v1/tasks/{first}/ack",
        json={"id": first, "durable": True},
        headers=gateway.headers(),
    )
    assert ack.status_code == 200, ack.text
    result = await http.post(
        f"{gateway.url}/v1/results", json={"id": second, "body": "hi"}, headers=gateway.headers()
    )
    assert result.status_code == 200, result.text
    assert await status(http, gateway, first) == "acked"
    assert await status(http, gateway, second) == "answered"
    assert await poll(http, gateway, "bridge-b") == []  # neither is handed out again


async def test_a_never_delivered_task_still_refuses_an_ack(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("not polled yet")
    response = await http.post(
        f"{gateway.url}/v1/tasks/{task_id}/ack",
        json={"id": task_id, "durable": True},
        headers=gateway.headers(),
    )
    assert response.status_code == 409
    assert "never delivered" in response.json()["error"]


async def test_bad_release_requests_get_a_clear_4xx(
    start_gateway: StartGateway, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    user_token = tmp_path / "user-token"
    write_token(user_token, "user-token-1")
    gateway = await start_gateway(user_token_file=user_token)
    url = f"{gateway.url}/v1/leases/release"
    headers = gateway.headers() | {"Content-Type": "application/json"}
    cases: list[tuple[Any, int, str]] = [
        (b"{not json", 400, "JSON"),
        (b"[]", 400, "JSON object"),
        (b"{}", 400, "client"),
        (b'{"client": "two words"}', 400, "client"),
        (b'{"client": 7}', 400, "client"),
        (b'{"client": "a", "ids": []}', 400, "ids"),
    ]
    for body, code, named in cases:
        response = await http.post(url, content=body, headers=headers)
        assert response.status_code == code, (body, response.text)
        assert named in response.json()["error"], (body, response.text)
    assert (await http.get(url, headers=gateway.headers())).status_code == 405
    refused = await http.post(url, json={"client": "a"}, headers=gateway.headers("user-token-1"))
    assert refused.status_code == 403
    bad_header = await http.get(
        f"{gateway.url}/v1/tasks",
        params={"wait": 0},
        headers=gateway.headers() | {"X-Tether-Client": "no spaces allowed"},
    )
    assert bad_header.status_code == 400
    assert "X-Tether-Client" in bad_header.json()["error"]


async def test_a_database_from_before_lease_release_gains_the_column(tmp_path: Path) -> None:
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
            answered_at REAL
        );
        INSERT INTO tasks (id, room, sender, body, created_at, state, lease_until, deliveries)
            VALUES ('old-1', 'r', 'u', 'from before', 1.0, 'leased', 99.0, 1);
        """
    )
    db.close()
    store = await GatewayStore.open(path)
    try:
        assert await store.release_client("anyone") == 0  # an old lease has no holder
        claim = await store.claim(1, 30.0, 100.0, "bridge-a")  # the old lease ran out
        assert [(t.id, t.deliveries) for t in claim.tasks] == [("old-1", 2)]
        assert await store.release_client("bridge-a") == 1
    finally:
        store.close()


class ClaimUntilHungUp(GatewayStore):
    """A store whose claims return only once the poller's hang-up was noticed: the poll that
    leased tasks then finds its client gone before it could answer."""

    hung_up: trio.Event | None = None

    async def claim(self, limit: int, lease: float, now: float, client: str | None = None) -> Claim:
        claim = await super().claim(limit, lease, now, client)
        if claim.tasks and self.hung_up is not None:
            with trio.CancelScope(shield=True):
                await self.hung_up.wait()
                await trio.testing.wait_all_tasks_blocked()
        return claim


async def test_tasks_leased_to_a_poller_that_hung_up_go_back_at_once(
    tmp_path: Path, token_file: Path
) -> None:
    store = await ClaimUntilHungUp.open(tmp_path / "gateway.db")
    assert isinstance(store, ClaimUntilHungUp)
    try:
        app = GatewayApp(store, TokenSource(token_file), lease=30.0)
        task, _ = await store.submit("lobby", "user", "hello", 1.0, None)
        store.hung_up = trio.Event()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            assert store.hung_up is not None
            store.hung_up.set()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "GET",
            "path": "/v1/tasks",
            "query_string": b"wait=10",
            "headers": [
                (b"authorization", b"Bearer worker-token-1"),
                (b"x-tether-client", b"gone-bridge"),
            ],
        }
        await app(scope, receive, send)
        assert sent == []  # nobody to answer
        again = await store.get(task.id)
        assert again is not None
        assert (again.state, again.deliveries) == ("queued", 1)
        assert (await store.stats()).released == 1
    finally:
        store.close()


def test_the_protocol_docs_list_the_endpoint() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "guide" / "gateway.md").read_text()
    assert "`POST /v1/leases/release`" in docs
    assert "X-Tether-Client" in docs
    assert _app.__doc__ is not None
    assert "POST    /v1/leases/release" in _app.__doc__


async def test_a_rooms_later_messages_wait_while_an_earlier_one_is_leased_elsewhere(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    """With several bridges polling, a room's messages reach them in the order they were
    sent: a later one is held back while an earlier one is leased and not yet acked."""
    gateway = await start_gateway(lease=30.0)
    ids = [await gateway.submit(f"message {i}", room="chat") for i in range(3)]
    other = await gateway.submit("elsewhere", room="other")
    a_tasks = await poll(http, gateway, "bridge-a", limit=1)
    assert [t["id"] for t in a_tasks] == ids[:1]
    b_tasks = await poll(http, gateway, "bridge-b")
    assert [t["id"] for t in b_tasks] == [other]  # not chat's later messages
    acked = await http.post(
        f"{gateway.url}/v1/tasks/{ids[0]}/ack",
        json={"id": ids[0], "durable": True},
        headers=gateway.headers(),
    )
    assert acked.status_code == 200, acked.text
    b_again = await poll(http, gateway, "bridge-b")
    assert [t["id"] for t in b_again] == ids[1:]  # in order, in one poll
