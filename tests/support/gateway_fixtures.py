"""Fixtures for the gateway tests: token files and real gateway servers on free ports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from tether.bridge import write_token
from tether.gateway import GatewaySettings

from .gateway import RunningGateway


@pytest.fixture
def token_path(tmp_path: Path) -> Path:
    """A client's token file, for tests whose gateway is a fake transport."""
    path = tmp_path / "token"
    write_token(path, "sekrit-token")
    return path


@pytest.fixture
def mock_clock() -> MockClock:
    return MockClock(autojump_threshold=0)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway-token"
    write_token(path, "worker-token-1")
    return path


@pytest.fixture
def client_token_file(tmp_path: Path) -> Path:
    """The bridge's own copy of the token (a separate file, as on a real deployment)."""
    path = tmp_path / "bridge-token"
    write_token(path, "worker-token-1")
    return path


StartGateway = Callable[..., Awaitable[RunningGateway]]


@pytest.fixture
async def start_gateway(
    nursery: trio.Nursery, tmp_path: Path, token_file: Path, http: httpx.AsyncClient
) -> AsyncIterator[StartGateway]:
    """Start a real gateway on 127.0.0.1 (free port); keyword args override its settings.

    Every server started here is shut down gracefully when the test ends.
    """
    started: list[RunningGateway] = []

    async def start(**overrides: Any) -> RunningGateway:
        fields: dict[str, Any] = {
            "token_file": token_file,
            "db": tmp_path / "gateway.db",
            "port": 0,
            "lease": 30.0,
        }
        fields.update(overrides)
        gateway = RunningGateway(nursery, GatewaySettings(**fields), http)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        await gateway.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client for the user side and for hand-made (bad) requests."""
    async with httpx.AsyncClient(timeout=10) as client:
        yield client
