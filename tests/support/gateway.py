"""A reference gateway that a test runs, and plain HTTP calls on its user side and stats."""

from __future__ import annotations

import socket
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tether.gateway import GatewaySettings, serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@attrs.define(eq=False)
class RunningGateway:
    """A reference gateway on 127.0.0.1 in the test's ``nursery``, which a test may stop and
    start again on the same port, and calls on it over ``http`` as a person would make them.

    ``settings.port`` 0 picks a free port at the first ``start`` (the ``url`` is known from
    then on); :meth:`on_free_port` fixes one before (for a command line built in advance).
    """

    nursery: trio.Nursery
    settings: GatewaySettings
    http: httpx.AsyncClient
    _stop: trio.Event | None = None
    _stopped: trio.Event | None = None

    @classmethod
    def on_free_port(
        cls,
        nursery: trio.Nursery,
        http: httpx.AsyncClient,
        token_file: Path,
        db: Path,
        **settings: Any,
    ) -> RunningGateway:
        """Not started yet; ``settings`` are :class:`GatewaySettings`' other fields."""
        fields = GatewaySettings(token_file=token_file, db=db, port=free_port(), **settings)
        return cls(nursery, fields, http)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def token_file(self) -> Path:
        return self.settings.token_file

    @property
    def db(self) -> Path:
        return self.settings.db

    @property
    def token(self) -> str:
        """The gateway's bearer token, as its token file holds it now."""
        return self.token_file.read_text().strip()

    async def start(self) -> None:
        stop, stopped = trio.Event(), trio.Event()

        async def run(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await serve(self.settings, shutdown_trigger=stop.wait, task_status=task_status)
            finally:
                stopped.set()

        port = await self.nursery.start(partial(run))
        self.settings = attrs.evolve(self.settings, port=port)
        self._stop, self._stopped = stop, stopped

    async def stop(self) -> None:
        """A graceful shutdown; waits until the server has closed."""
        if self._stop is not None and self._stopped is not None:
            self._stop.set()
            await self._stopped.wait()
        self._stop = self._stopped = None

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token if token is not None else self.token}"}

    async def submit(self, text: str, room: str = "lobby", id: str | None = None) -> str:
        """Send a message as a person; a new message is 201, a replay of ``id`` may be 200."""
        payload: dict[str, Any] = {"room": room, "text": text}
        if id is not None:
            payload["id"] = id
        response = await self.http.post(
            f"{self.url}/v1/messages", json=payload, headers=self.headers()
        )
        assert response.status_code in ((201,) if id is None else (200, 201)), response.text
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
