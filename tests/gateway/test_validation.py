"""Bad requests get a 4xx with a JSON error naming the problem, and nothing is stored."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from support.gateway_fixtures import StartGateway
from tether._protocol._messages import BatchItem, parse_batch_item, parse_lenient
from tether.bridge.custody._rules import MAX_BODY_BYTES, check_body
from tether.gateway import AppLimits

MAX_BODY = 4096
JSON = {"Content-Type": "application/json"}


def _raw(data: Any) -> bytes:
    return json.dumps(data).encode()


BAD_REQUESTS = [
    # (method, path, body bytes, extra headers, status, words the error must contain)
    ("POST", "/v1/messages", b"x" * (MAX_BODY + 1), JSON, 413, "exceeds the limit"),
    ("POST", "/v1/messages", _raw({"room": "r", "text": "y" * MAX_BODY}), JSON, 413, "limit"),
    ("POST", "/v1/messages", b"{not json", JSON, 400, "not valid JSON"),
    ("POST", "/v1/messages", b"\xff\xfe", JSON, 400, "not UTF-8"),
    ("POST", "/v1/messages", b"", JSON, 400, "empty"),
    ("POST", "/v1/messages", _raw(["room", "text"]), JSON, 400, "got an array"),
    ("POST", "/v1/messages", _raw({"room": "r"}), JSON, 400, "MessageRequest.text"),
    ("POST", "/v1/messages", _raw({"room": "r", "text": 5}), JSON, 400, "expected str"),
    ("POST", "/v1/messages", _raw({"room": "r", "text": "hi", "x": 1}), JSON, 400, "extra"),
    ("POST", "/v1/messages", _raw({"room": "a/b", "text": "hi"}), JSON, 400, "room 'a/b'"),
    ("POST", "/v1/messages", _raw({"room": "r", "text": "   "}), JSON, 400, "text is empty"),
    (
        "POST",
        "/v1/messages",
        _raw({"room": "r", "text": "hi", "id": "../etc"}),
        JSON,
        400,
        "not a valid task id",
    ),
    # issue #48: the last of two keys won ({"room": "a", "room": "b"} landed in b)
    (
        "POST",
        "/v1/messages",
        b'{"room": "a", "text": "hi", "room": "b"}',
        JSON,
        400,
        "'room' twice",
    ),
    ("POST", "/v1/messages", b"room=r&text=hi", {}, 415, "application/json"),
    ("PUT", "/v1/messages", _raw({"room": "r", "text": "hi"}), JSON, 405, "use GET or POST"),
    ("GET", "/v1/messages", b"", {}, 400, "'room' is required"),
    ("GET", "/v1/tasks?wait=soon", b"", {}, 400, "'wait'"),
    ("GET", "/v1/tasks?wait=-1", b"", {}, 400, "'wait'"),
    ("GET", "/v1/tasks?limit=0", b"", {}, 400, "'limit'"),
    ("GET", "/v1/tasks?wait=1&wait=2", b"", {}, 400, "more than once"),
    ("POST", "/v1/results", _raw({"id": "a..b", "body": "x"}), JSON, 400, "'a..b'"),
    # valid JSON, but a lone surrogate no store can encode: refused, not a 500
    ("POST", "/v1/messages", b'{"room": "r", "text": "hi \\ud800"}', JSON, 400, "lone surrogate"),
    ("POST", "/v1/results", b'{"id": "t1", "body": "\\udc00 x"}', JSON, 400, "lone surrogate"),
    ("POST", "/v1/results", _raw({"id": "t1"}), JSON, 400, "no_send=true"),
    (
        "POST",
        "/v1/results",
        _raw({"id": "t1", "body": "x", "no_send": "yes"}),
        JSON,
        400,
        "ResultRequest.no_send",
    ),
    (
        "POST",
        "/v1/results",
        _raw({"id": "t1", "body": "x", "metadata": {"worker": "a b"}}),
        JSON,
        400,
        "metadata.worker",
    ),
    ("POST", "/v1/tasks/t1/ack", _raw({"id": "t2", "durable": True}), JSON, 400, "does not match"),
    ("POST", "/v1/tasks/t1/ack", _raw({"id": "t1", "durable": False}), JSON, 400, "durable"),
    (
        "POST",
        "/v1/heartbeat",
        _raw({"client": "b", "protocol_version": 2, "inflight": 0}),
        JSON,
        400,
        "protocol_version 2",
    ),
    (
        "POST",
        "/v1/heartbeat",
        _raw({"client": "b", "protocol_version": 1, "inflight": True}),
        JSON,
        400,
        "HeartbeatRequest.inflight",
    ),
    ("GET", "/v1/nowhere", b"", {}, 404, "no such endpoint"),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "needle"),
    BAD_REQUESTS,
    ids=[f"{m} {p} {s} {n}" for m, p, _, _, s, n in BAD_REQUESTS],
)
async def test_bad_request_is_refused_with_a_reason_and_stores_nothing(
    start_gateway: StartGateway,
    http: httpx.AsyncClient,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    needle: str,
) -> None:
    gateway = await start_gateway(limits=AppLimits(max_body=MAX_BODY))
    response = await http.request(
        method,
        f"{gateway.url}{path}",
        content=body,
        headers={**gateway.headers(), **headers},
    )
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert needle in response.json()["error"]

    stats = await gateway.stats()
    assert sum(stats["tasks"].values()) == 0
    assert stats["clients"] == []
    assert (stats["deliveries"], stats["duplicate_results"]) == (0, 0)


async def test_chunked_body_over_the_limit_is_refused(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    """No Content-Length to trust: the limit is enforced while reading."""
    gateway = await start_gateway(limits=AppLimits(max_body=MAX_BODY))

    async def chunks() -> Any:
        for _ in range(8):
            yield b" " * 1024

    response = await http.post(
        f"{gateway.url}/v1/messages", content=chunks(), headers={**gateway.headers(), **JSON}
    )
    assert response.status_code == 413
    assert sum((await gateway.stats())["tasks"].values()) == 0


async def test_result_and_ack_for_an_undelivered_task_conflict(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    task_id = await gateway.submit("not yet polled")
    for path, body in (
        (f"/v1/tasks/{task_id}/ack", {"id": task_id, "durable": True}),
        ("/v1/results", {"id": task_id, "body": "too early"}),
    ):
        response = await http.post(f"{gateway.url}{path}", json=body, headers=gateway.headers())
        assert response.status_code == 409
        assert "never delivered" in response.json()["error"]
    assert (await gateway.message(task_id))["status"] == "queued"


async def test_resubmitting_an_id_is_idempotent_and_other_content_conflicts(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    url, headers = f"{gateway.url}/v1/messages", gateway.headers()
    message = {"room": "r", "text": "once", "id": "client-chosen-1"}
    first = await http.post(url, json=message, headers=headers)
    again = await http.post(url, json=message, headers=headers)
    other = await http.post(url, json={**message, "text": "different"}, headers=headers)
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert first.json()["id"] == again.json()["id"] == "client-chosen-1"
    assert (await gateway.stats())["tasks"]["queued"] == 1


async def test_any_result_the_store_accepts_fits_in_a_gateway_request(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    """One body limit (``MAX_BODY_BYTES``) for the custody store and the gateway: a result of
    the store's largest size in the costliest characters to JSON-escape (control characters,
    six bytes each) still fits the gateway's default request limit with its envelope."""
    body = "\x01" * MAX_BODY_BYTES
    assert check_body(body, MAX_BODY_BYTES) == body  # the store would accept it
    assert AppLimits().max_body >= len(_raw({"id": "x" * 128, "body": body}))
    gateway = await start_gateway()  # default limits
    task_id = await gateway.submit("a question")
    polled = await http.get(f"{gateway.url}/v1/tasks", headers=gateway.headers())
    assert [t["id"] for t in polled.json()["tasks"]] == [task_id]
    response = await http.post(
        f"{gateway.url}/v1/results",
        content=_raw({"id": task_id, "body": body}),
        headers={**gateway.headers(), **JSON},
    )
    assert response.status_code == 200, response.text[:200]
    assert (await gateway.message(task_id))["reply"] == body


@pytest.mark.parametrize(
    "item",
    [
        {"id": "t1", "status": 200},
        {"id": "t1", "status": 200, "duplicate": True},
        {"id": "t1", "status": 404, "error": "unknown task id"},
        {"id": "t1", "status": 200, "from_a_newer_gateway": 1},
    ],
)
def test_a_batch_item_parses_the_same_on_the_fast_path(item: dict[str, Any]) -> None:
    assert parse_batch_item(item) == parse_lenient(item, BatchItem)


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ({"id": 1, "status": 200}, "BatchItem.id"),
        ({"id": "t1", "status": True}, "BatchItem.status"),
        ({"id": "t1"}, "BatchItem.status"),
        ({"id": "t1", "status": 200, "duplicate": "yes"}, "BatchItem.duplicate"),
        ({"id": "t1", "status": 200, "error": 5}, "BatchItem.error"),
        (["t1", 200], "a JSON object"),
    ],
)
def test_a_malformed_batch_item_is_refused_naming_the_field(item: Any, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        parse_batch_item(item)


async def test_a_message_wait_past_the_longest_is_refused_not_cut_short(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    """Issue 32.9: ``?wait=90`` on a message answered after 60 s as if the person had asked
    for 60. The worker side's poll keeps its cap (a bridge's ``poll_wait`` may be longer)."""
    gateway = await start_gateway(limits=AppLimits(max_wait=5.0))
    task_id = await gateway.submit("a question")
    url = f"{gateway.url}/v1/messages/{task_id}"
    response = await http.get(url, params={"wait": 9}, headers=gateway.headers())
    assert response.status_code == 400
    assert response.json()["error"] == (
        "query parameter 'wait' must be at most 5 seconds here (the gateway's longest wait); got 9"
    )
    at_most = await http.get(url, params={"wait": 5, "seen": "x"}, headers=gateway.headers())
    assert at_most.status_code == 200


async def test_rejects_close_known_tasks_with_the_reason_and_name_unknown_ids(
    start_gateway: StartGateway,
) -> None:
    """``POST /v1/rejects`` (issue 33): ids travel in the body, an invalid one too; a known
    task is closed with the reason, which its message shows."""
    gw = await start_gateway()
    task_id = await gw.submit("hello")
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.headers()) as http:
        polled = (await http.get("/v1/tasks", params={"wait": "0"})).json()["tasks"]
        assert [t["id"] for t in polled] == [task_id]
        answer = await http.post(
            "/v1/rejects",
            json={
                "rejects": [
                    {"id": task_id, "reason": "no room for it"},
                    {"id": "../evil", "reason": "not a valid task id"},
                ]
            },
        )
        assert answer.status_code == 200
        items = answer.json()["items"]
        assert [(i["id"], i["status"]) for i in items] == [(task_id, 200), ("../evil", 404)]
        bad = await http.post("/v1/rejects", json={"rejects": [{"id": "", "reason": "x"}]})
        assert bad.status_code == 400
    message = await gw.message(task_id)
    assert (message["status"], message["reason"]) == ("closed", "no room for it")


def test_the_guide_documents_the_text_limit_of_a_message() -> None:
    """Issue 47.11: ``POST /v1/messages`` refuses text over 32,000 characters (a 400 naming
    its length), and the guide's row of the endpoint said nothing of it."""
    from pathlib import Path

    from tether.gateway._wire import MAX_TEXT_CHARS, parse_message

    guide = Path(__file__).resolve().parents[2] / "docs" / "guide" / "gateway.md"
    lines = guide.read_text().splitlines()
    (row,) = [line for line in lines if line.startswith("| `POST /v1/messages` |")]
    assert f"at most {MAX_TEXT_CHARS:,} characters" in row
    with pytest.raises(ValueError, match=f"the limit is {MAX_TEXT_CHARS}"):
        parse_message({"room": "r", "text": "x" * (MAX_TEXT_CHARS + 1)})
