"""Helpers shared by the gateway tests: a handle on a running gateway, user-side calls."""

from __future__ import annotations

from typing import Any

import attrs
import httpx

from tether.gateway import GatewaySettings


@attrs.frozen
class RunningGateway:
    """A gateway server started by a test, and plain HTTP access to it."""

    url: str
    settings: GatewaySettings
    token: str

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token if token is not None else self.token}"}

    async def submit(self, http: httpx.AsyncClient, text: str, room: str = "lobby") -> str:
        response = await http.post(
            f"{self.url}/v1/messages", json={"room": room, "text": text}, headers=self.headers()
        )
        assert response.status_code == 201, response.text
        task_id: str = response.json()["id"]
        return task_id

    async def message(self, http: httpx.AsyncClient, task_id: str, wait: float = 0) -> Any:
        response = await http.get(
            f"{self.url}/v1/messages/{task_id}", params={"wait": wait}, headers=self.headers()
        )
        assert response.status_code == 200, response.text
        return response.json()

    async def stats(self, http: httpx.AsyncClient) -> Any:
        response = await http.get(f"{self.url}/v1/stats", headers=self.headers())
        assert response.status_code == 200, response.text
        return response.json()
