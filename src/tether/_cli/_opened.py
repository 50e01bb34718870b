"""The store a ``tether store`` verb works on, opened for that one verb and closed after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..bridge.custody._roles import Store
    from ..bridge.service._config import BridgeConfig


@asynccontextmanager
async def opened_store(
    config: BridgeConfig, *, read_only: bool, must_exist: bool = True
) -> AsyncIterator[Store]:
    """The store ``config`` names, for one store verb, closed after: ``read_only`` for a verb
    that only reads (it changes nothing, not even the schema); ``must_exist`` refuses a path
    that is not already a tether store."""
    from ..bridge.stores._open import open_store

    store = await open_store(
        config.store,
        must_exist=must_exist,
        read_only=read_only,
        password_file=config.store_password_file,
        schema=config.store_schema,
    )
    try:
        yield store
    finally:
        await store.aclose()
