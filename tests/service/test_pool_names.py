"""Pool names: unique per process by default; a name a live process beats under is refused.

Liveness of a name is judged by its beats in the store and whether they move: a dead
process's recent last beat does not block a restart under the same name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from tether.bridge import BridgeConfig, BridgeService, ConfigError, SqliteStore
from tether.bridge.custody._rules import check_worker
from tether.bridge.service._names import (
    NameInUse,
    check_names_free,
    lead_name,
    pool_stem,
    short_host,
    worker_names,
)


def test_default_stems_are_unique_readable_and_valid_worker_names() -> None:
    stems = {pool_stem("tether-bridge", host="db-1.example.org") for _ in range(50)}
    assert len(stems) == 50
    for stem in stems:
        assert re.fullmatch(r"tether-bridge-db-1-[0-9a-f]{6}", stem), stem
    long = pool_stem("c" * 128, host="h" * 80)
    for name in [*worker_names(long, 256), lead_name(long)]:
        check_worker(name)  # raises if not a valid worker name
    assert short_host("Web_01.prod.internal") == "Web_01"
    assert short_host("...") == "host"


def test_an_explicit_pool_name_is_used_verbatim_and_checked() -> None:
    assert pool_stem("anything", "payments-eu") == "payments-eu"
    with pytest.raises(ConfigError, match="pool_name must be"):
        pool_stem("x", "bad name")
    with pytest.raises(ConfigError, match="pool_name must be"):
        pool_stem("x", "-leading-dash")


def test_two_bridges_with_default_settings_never_share_a_name(tmp_path: Path) -> None:
    config = BridgeConfig(token_file=tmp_path / "t", workers=3, store="postgresql://u@db/t")
    a, b = BridgeService(config), BridgeService(config)
    assert not set(a.pool_names) & set(b.pool_names)
    assert len(a.pool_names) == 4  # three workers and a lead candidate


def test_a_bridge_on_a_sqlite_file_keeps_its_names_across_restarts(tmp_path: Path) -> None:
    """One bridge per SQLite file: a restart reuses the names, so its new workers claim what
    the killed one was assigned at once."""
    config = BridgeConfig(token_file=tmp_path / "t", store=str(tmp_path / "c.db"))
    assert BridgeService(config).pool_names == BridgeService(config).pool_names
    assert BridgeService(config).pool_stem == f"tether-bridge-{short_host()}"


async def test_a_name_with_moving_beats_is_refused_in_one_line(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "s.db", synchronous="NORMAL")
    try:
        await check_names_free(store, ["p-w1"], dead_after=10.0, watch=0.3)  # never seen: free

        async def live_process() -> None:
            while True:
                await store.beat("p-w1", "worker", 4)
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(live_process)
            await trio.sleep(0.1)
            with pytest.raises(NameInUse) as refused:
                await check_names_free(store, ["p-w1", "p-w2"], dead_after=10.0, watch=0.3)
            nursery.cancel_scope.cancel()
        message = str(refused.value)
        assert "\n" not in message
        assert "p-w1 is in use by another live process" in message
        assert "--pool-name" in message
        # the process is gone now (killed: its last beat stays): the name is free again
        await check_names_free(store, ["p-w1"], dead_after=10.0, watch=0.3)
    finally:
        await store.aclose()
