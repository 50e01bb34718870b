"""Helpers for the bridge service tests: a restartable real gateway and user-side calls."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tether.bridge import GatewayClient
from tether.gateway import GatewaySettings, serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def gateway_client(url: str, token_file: Path, **overrides: Any) -> GatewayClient:
    """A client with test-sized timings: short polls, backoff from 50 ms."""
    fields: dict[str, Any] = {
        "client_name": "bridge-test",
        "poll_wait": 0.5,
        "backoff_initial": 0.05,
        "backoff_maximum": 0.5,
    }
    fields.update(overrides)
    return GatewayClient(url, token_file, **fields)


@attrs.define(eq=False)
class LiveGateway:
    """A reference gateway on a fixed free port that a test can stop and start again."""

    nursery: trio.Nursery
    token_file: Path
    db: Path
    lease: float = 1.0
    port: int = attrs.field(factory=free_port)
    _stop: trio.Event | None = None
    _stopped: trio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        settings = GatewaySettings(
            token_file=self.token_file, db=self.db, port=self.port, lease=self.lease
        )
        stop, stopped = trio.Event(), trio.Event()

        async def run(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await serve(settings, shutdown_trigger=stop.wait, task_status=task_status)
            finally:
                stopped.set()

        await self.nursery.start(partial(run))
        self._stop, self._stopped = stop, stopped

    async def stop(self) -> None:
        if self._stop is not None and self._stopped is not None:
            self._stop.set()
            await self._stopped.wait()
        self._stop = self._stopped = None


@attrs.define(eq=False)
class GatewayHandle:
    """The running gateway and plain HTTP calls on its user side and stats."""

    live: LiveGateway
    http: httpx.AsyncClient

    @property
    def url(self) -> str:
        return self.live.url

    def headers(self) -> dict[str, str]:
        token = self.live.token_file.read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    async def submit(self, text: str, room: str = "lobby", id: str | None = None) -> str:
        payload: dict[str, Any] = {"room": room, "text": text}
        if id is not None:
            payload["id"] = id
        response = await self.http.post(
            f"{self.url}/v1/messages", json=payload, headers=self.headers()
        )
        assert response.status_code in (200, 201), response.text
        task_id: str = response.json()["id"]
        return task_id

    async def message(self, task_id: str, wait: float = 0) -> Any:
        response = await self.http.get(
            f"{self.url}/v1/messages/{task_id}", params={"wait": wait}, headers=self.headers()
        )
        assert response.status_code == 200, response.text
        return response.json()

    async def stats(self) -> Any:
        response = await self.http.get(f"{self.url}/v1/stats", headers=self.headers())
        assert response.status_code == 200, response.text
        return response.json()


async def wait_until(
    check: Callable[[], Awaitable[bool]], limit_s: float = 10.0, step: float = 0.02
) -> None:
    """Poll ``check`` until it is true; fail the test after ``limit_s`` seconds."""
    with trio.fail_after(limit_s):
        for _ in itertools.count():
            if await check():
                return
            await trio.sleep(step)
