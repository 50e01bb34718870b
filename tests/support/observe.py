"""A real runtime with a real admin endpoint on 127.0.0.1 (free port), for the admin tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tether import Runtime, open_runtime
from tether.bridge import write_token
from tether.bridge.service._admin import bridge_observed
from tether.observe import AdminSettings, Observed, serve_admin
from tether.observe._routes import AdminRoutes

ADMIN_TOKEN = "admin-token-for-tests-4f1c"


@attrs.frozen
class Admin:
    runtime: Runtime
    observed: Observed
    url: str
    client: httpx.AsyncClient

    async def get(self, path: str, **params: str) -> httpx.Response:
        return await self.client.get(path, params=params)


def admin_token_file(directory: Path) -> Path:
    path = directory / "admin-token"
    write_token(path, ADMIN_TOKEN)
    return path


@asynccontextmanager
async def running_admin(
    tmp_path: Path, routes: Callable[[Runtime], AdminRoutes] | None = None, **observed: Any
) -> AsyncIterator[Admin]:
    """``open_runtime`` + ``serve_admin`` + an authenticated httpx client (one keep-alive
    connection, so the server's own tasks stay the same between requests). ``observed`` are
    the bridge's parts (``store``, ``gateway``, ``pool``, ``timings``...), handed to the
    endpoint as the bridge hands them."""
    settings = AdminSettings(token_file=admin_token_file(tmp_path), port=0)
    async with open_runtime(handle_signals=False, grace=1.0) as runtime:
        added = None if routes is None else routes(runtime)
        obs = bridge_observed(runtime, routes=added, **observed)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_admin, obs, settings))
            url = f"http://127.0.0.1:{port}"
            limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
            async with httpx.AsyncClient(
                base_url=url,
                headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
                limits=limits,
                timeout=10,
            ) as client:
                yield Admin(runtime, obs, url, client)
            nursery.cancel_scope.cancel()


def find_nodes(nodes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Every node of the JSON task tree labelled ``name``, at any depth."""
    found = []
    for node in nodes:
        if node["name"] == name:
            found.append(node)
        found.extend(find_nodes(node["children"], name))
    return found


def descendants(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for kid in node["children"]:
        out.append(kid)
        out.extend(descendants(kid))
    return out
