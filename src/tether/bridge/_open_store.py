"""Open the custody store a setting names: a SQLite file path or a ``postgresql://`` URL."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import trio

from ._config import ConfigError, is_postgres_url
from ._sqlite import SqliteStore
from ._store import Store


async def open_store(
    spec: str,
    *,
    must_exist: bool = False,
    lease_s: float = 60.0,
    max_attempts: int = 5,
    synchronous: str = "FULL",
) -> Store:
    """The store at ``spec``. ``must_exist`` refuses to create a new SQLite file (for tools
    that only inspect, like ``tether store status``)."""
    if is_postgres_url(spec):
        try:
            module = importlib.import_module("tether.bridge._postgres")
        except ImportError as exc:
            raise ConfigError(
                f"a PostgreSQL store needs the postgres extra (pip install 'tether[postgres]'): "
                f"{exc}"
            ) from None
        postgres: Any = module.PostgresStore
        store: Store = await postgres.open(spec, lease_s=lease_s, max_attempts=max_attempts)
        return store
    path = trio.Path(spec)
    if must_exist and not await path.is_file():
        raise ConfigError(f"no custody store at {path} (is --store right?)")
    if await path.is_dir():
        raise ConfigError(f"store {path} is a directory; give the path of a SQLite file")
    return await SqliteStore.open(
        Path(path),
        lease_s=lease_s,
        max_attempts=max_attempts,
        synchronous=synchronous,  # type: ignore[arg-type]
    )
