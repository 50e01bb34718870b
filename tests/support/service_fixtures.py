"""Fixtures for the bridge service tests: a real gateway on 127.0.0.1, a real SQLite store."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tether.bridge import GatewayClient, SqliteStore, write_token

from .gateway import RunningGateway
from .service import STARTED, gateway_client


@pytest.fixture(autouse=True)
def reap_bridges() -> Iterator[None]:
    """SIGKILL (and reap) every bridge process a test left running, pass or fail.

    This runs after the test's Trio run, where ``trio.Process.poll`` cannot close its pidfd
    (that needs the run), so the process is reaped through its ``Popen`` and the pidfd closed
    here: left open it would be collected during a later test, whose unraisable-exception
    check then fails on its ``ResourceWarning``."""
    yield
    while STARTED:
        process = STARTED.pop()
        popen = process._proc
        if popen.poll() is None:
            popen.kill()
            try:
                popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        pidfd = getattr(process, "_pidfd", None)
        if pidfd is not None:
            pidfd.close()
            process._pidfd = None


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway" / "token"
    path.parent.mkdir(mode=0o700)
    write_token(path, "service-test-token")
    return path


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


@pytest.fixture
async def gateway(
    nursery: trio.Nursery, tmp_path: Path, token_file: Path, http: httpx.AsyncClient
) -> AsyncIterator[RunningGateway]:
    """A real reference gateway (free port, 1 s lease); ``restart``-able on the same port."""
    db = tmp_path / "gateway" / "gateway.db"
    gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=1.0)
    await gateway.start()
    yield gateway
    await gateway.stop()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = await SqliteStore.open(tmp_path / "store" / "custody.db", lease_s=5.0, max_attempts=3)
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
async def client(gateway: RunningGateway, token_file: Path) -> AsyncIterator[GatewayClient]:
    async with gateway_client(gateway.url, token_file) as c:
        yield c
