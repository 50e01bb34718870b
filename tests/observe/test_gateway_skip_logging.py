"""A task the gateway client cannot take is logged with its id (a drop must be traceable)."""

from __future__ import annotations

from pathlib import Path

import pytest


async def test_a_task_the_gateway_client_skips_is_logged_with_its_id(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    import httpx

    from tether.bridge import GatewayClient, write_token

    tasks = [{"id": "../../etc/passwd", "body": "x"}, {"id": "no-body"}, {"body": "no id"}]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/rejects":
            return httpx.Response(404)
        return httpx.Response(200, json={"tasks": tasks})

    token = tmp_path / "token"
    write_token(token, "token-for-skips-1")
    transport = httpx.MockTransport(answer)
    async with GatewayClient(
        "http://gw.invalid", token, client_name="t", transport=transport
    ) as client:
        assert await client.poll_tasks(wait=0) == []
    skipped = [r for r in caplog.records if "cannot take" in r.getMessage()]
    assert [r.task_id for r in skipped] == [  # type: ignore[attr-defined]
        "'../../etc/passwd'",
        "'no-body'",
        "(no id)",
    ]
