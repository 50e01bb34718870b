"""The CLI verbs as a user runs them: PostgreSQL for the store verbs, and no bridge left running."""

from pathlib import Path

import pytest
import trio

from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.service_fixtures import reap_bridges as reap_bridges
from tether.bridge import SqliteStore


@pytest.fixture
def new_store(tmp_path: Path) -> Path:
    """A new SQLite store's file (made by opening it once): what the store verbs read."""
    path = tmp_path / "custody.db"

    async def make() -> None:
        async with await SqliteStore.open(path):
            pass

    trio.run(make)
    return path
