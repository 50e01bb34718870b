"""Bearer tokens: rotation, refusal, the user/worker split, and token files kept private."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from support.gateway_fixtures import StartGateway
from tether.bridge import GatewayClient, TokenFileError, write_token
from tether.bridge.client import GatewayAuthError


async def test_rotated_token_is_picked_up_after_a_401(
    start_gateway: StartGateway,
    token_file: Path,
    client_token_file: Path,
    http: httpx.AsyncClient,
) -> None:
    gateway = await start_gateway()
    async with GatewayClient(gateway.url, client_token_file) as client:
        assert await client.poll_tasks(wait=0) == []

        write_token(token_file, "worker-token-2")  # the gateway rotates...
        write_token(client_token_file, "worker-token-2")  # ...and the bridge's copy follows
        assert await client.poll_tasks(wait=0) == [], "the client re-reads and carries on"
        assert client.status.connected

    old = await http.get(f"{gateway.url}/v1/stats", headers=gateway.headers("worker-token-1"))
    assert old.status_code == 401
    new = await http.get(f"{gateway.url}/v1/stats", headers=gateway.headers("worker-token-2"))
    assert new.status_code == 200


async def test_wrong_token_is_refused_with_one_clear_line(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gateway = await start_gateway()
    wrong = tmp_path / "wrong-token"
    write_token(wrong, "not-the-token")
    status_file = tmp_path / "status.json"

    async with GatewayClient(gateway.url, wrong, status_file=status_file) as client:
        with pytest.raises(GatewayAuthError) as info:
            await client.poll_tasks(wait=0)

    message = str(info.value)
    assert "\n" not in message
    assert str(wrong) in message
    assert "HTTP 401" in message
    assert "not-the-token" not in message
    status = json.loads(status_file.read_text())
    assert status["connected"] is False
    assert status["error"] == message
    assert "not-the-token" not in status_file.read_text()


async def test_requests_without_a_valid_bearer_token_get_401(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    for headers in ({}, {"Authorization": "Basic d29ya2VyOnB3"}, gateway.headers("nope")):
        response = await http.get(f"{gateway.url}/v1/tasks", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert "bearer token" in response.json()["error"]


async def test_user_token_opens_only_the_user_side(
    start_gateway: StartGateway, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    user_token_file = tmp_path / "user-token"
    write_token(user_token_file, "user-token-1")
    gateway = await start_gateway(user_token_file=user_token_file)
    as_user = gateway.headers("user-token-1")

    sent = await http.post(
        f"{gateway.url}/v1/messages", json={"room": "lobby", "text": "hi"}, headers=as_user
    )
    assert sent.status_code == 201
    read = await http.get(f"{gateway.url}/v1/messages/{sent.json()['id']}", headers=as_user)
    assert read.json()["status"] == "queued"

    for method, path in (("GET", "/v1/tasks"), ("GET", "/v1/stats")):
        refused = await http.request(method, f"{gateway.url}{path}", headers=as_user)
        assert refused.status_code == 403
        assert "user token" in refused.json()["error"]
    assert (await gateway.message(sent.json()["id"]))["status"] == "queued"


async def test_the_page_itself_needs_no_token(
    start_gateway: StartGateway, http: httpx.AsyncClient
) -> None:
    gateway = await start_gateway()
    page = await http.get(f"{gateway.url}/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = await http.get(f"{gateway.url}/app.js")
    assert "textContent" in script.text
    shared = await http.get(f"{gateway.url}/base.css")  # the look it shares with the ops page
    assert shared.headers["content-type"].startswith("text/css")
    assert "color-scheme" in shared.text
    helpers = await http.get(f"{gateway.url}/base.js")  # the token and the calls it shares too
    assert helpers.headers["content-type"].startswith("text/javascript")
    assert "Authorization" in helpers.text


async def test_client_refuses_a_token_file_others_can_read(
    start_gateway: StartGateway, client_token_file: Path
) -> None:
    gateway = await start_gateway()
    os.chmod(client_token_file, 0o644)
    with pytest.raises(GatewayAuthError, match="chmod 600"):
        async with GatewayClient(gateway.url, client_token_file):
            pass


async def test_gateway_refuses_to_start_with_an_open_token_file(
    start_gateway: StartGateway, token_file: Path
) -> None:
    os.chmod(token_file, 0o640)
    with pytest.raises(TokenFileError, match="accessible by group or others"):
        await start_gateway()
