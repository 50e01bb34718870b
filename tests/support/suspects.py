"""What the pool's quarantine tests share: ``tests/`` importable in a quarantine child (its
agents live there), and tasks made suspects by a process that died with them in flight."""

from __future__ import annotations

import os

import pytest

from support.clock import FakeClock
from support.pool_fixtures import LEASE_S
from support.service import TESTS_DIR
from tether.bridge import SqliteStore, Task


@pytest.fixture
def tests_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quarantine child imports its agent from ``tests/`` (``support.agents...``)."""
    path = os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)


async def make_suspects(store: SqliteStore, clock: FakeClock, *tasks: Task) -> None:
    """``tasks`` in flight together in a process that dies: suspects, each one crash."""
    await store.ingest_many(list(tasks), room_policy="concurrent")
    await store.beat("gone-w1", "worker", 10)
    claims = await store.claim_many("gone-w1", len(tasks), leaderless=True)
    assert len(claims) == len(tasks)
    clock.advance(LEASE_S + 1)
    assert len(await store.expire_leases()) == len(tasks)
