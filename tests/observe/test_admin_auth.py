"""The admin endpoint is closed without the token, and starts only with a usable token file."""

from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from support.observe import ADMIN_TOKEN, running_admin
from tether import open_runtime
from tether.bridge import TokenFileError
from tether.observe import AdminSettings, Observed, serve_admin

ENDPOINTS = ["/healthz", "/metrics", "/tasks", "/status"]


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_every_endpoint_answers_401_without_the_right_token(
    tmp_path: Path, path: str
) -> None:
    async with running_admin(tmp_path) as admin, httpx.AsyncClient(base_url=admin.url) as anon:
        missing = await anon.get(path)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert missing.json() == {"error": "missing bearer token"}
        wrong = await anon.get(path, headers={"authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        assert wrong.json() == {"error": "invalid bearer token"}
        right = await anon.get(path, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        assert right.status_code == 200


async def test_rotated_token_takes_effect_without_restart(tmp_path: Path) -> None:
    from tether.bridge import write_token

    async with running_admin(tmp_path) as admin:
        assert (await admin.get("/tasks")).status_code == 200
        write_token(tmp_path / "admin-token", "rotated-admin-token-77")
        assert (await admin.get("/tasks")).status_code == 401
        fresh = await admin.client.get(
            "/tasks", headers={"authorization": "Bearer rotated-admin-token-77"}
        )
        assert fresh.status_code == 200


async def test_unknown_path_404_and_other_methods_405(tmp_path: Path) -> None:
    async with running_admin(tmp_path) as admin:
        assert (await admin.get("/nope")).status_code == 404
        posted = await admin.client.post("/tasks")
        assert posted.status_code == 405
        assert posted.headers["allow"] == "GET"
        bad = await admin.get("/tasks", stacks="maybe")
        assert bad.status_code == 400
        assert "stacks" in bad.json()["error"]


async def test_a_missing_or_open_token_file_is_a_startup_error(tmp_path: Path) -> None:
    async with open_runtime(handle_signals=False) as runtime:
        observed = Observed.of_runtime(runtime)
        async with trio.open_nursery() as nursery:
            with pytest.raises(TokenFileError, match="does not exist"):
                await nursery.start(
                    partial(serve_admin, observed, AdminSettings(tmp_path / "none", port=0))
                )
            loose = tmp_path / "loose"
            loose.write_text("some-token-value\n")
            os.chmod(loose, 0o644)
            with pytest.raises(TokenFileError, match="chmod 600"):
                await nursery.start(partial(serve_admin, observed, AdminSettings(loose, port=0)))


def test_settings_refuse_a_bad_port(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="admin port"):
        AdminSettings(tmp_path / "t", port=70000)


async def test_admin_as_a_supervised_child_reports_its_port_and_stops_softly(
    tmp_path: Path,
) -> None:
    from support.observe import admin_token_file
    from tether.observe import admin_child

    settings = AdminSettings(admin_token_file(tmp_path), port=0)
    async with open_runtime(handle_signals=False) as runtime:
        port = await runtime.supervisor.start_child(
            admin_child(Observed.of_runtime(runtime), settings)
        )
        headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            health = await client.get("/healthz", headers=headers)
            assert health.status_code == 200
            assert [c["child"] for c in health.json()["children"]] == ["admin"]
        with trio.fail_after(5):
            await runtime.supervisor.terminate_child("admin")
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient() as client:
                await client.get(f"http://127.0.0.1:{port}/healthz")


async def test_the_listening_line_names_the_url_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21.7: it logged ``http://http://127.0.0.1:PORT``."""
    with caplog.at_level(logging.INFO, logger="tether.admin"):
        async with running_admin(tmp_path) as admin:
            pass
    [line] = [r.getMessage() for r in caplog.records if "listening" in r.getMessage()]
    assert line == f"admin endpoint listening on {admin.url}"
