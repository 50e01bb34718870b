"""One bridge per SQLite store (issue #32, item 3): a second ``tether bridge run`` on the same
file is refused in one line naming the first one's pid, and the first goes on alone. Real
processes and a real gateway; every wait is on a condition (a heartbeat, an exit, a reply).

A second bridge started under the same names used to run silently beside the first: both
said "now leading" and the gateway absorbed their duplicate posts. Refused, not renamed: on
SQLite every bridge's delivery reads the same replies (no delivery leases), so a second one
only doubles the polls and posts; capacity comes from ``--workers`` or ``tether worker run``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count, submit_many
from support.waiting import wait_until
from tether.bridge import BridgeConfig, BridgeService, ConfigError


async def _heartbeats(gateway: RunningGateway) -> int:
    return sum(int(c["heartbeats"]) for c in (await gateway.stats())["clients"])


async def _running(gateway: RunningGateway, beats_before: int) -> None:
    """Until a bridge sent its first heartbeat (it comes once the bridge runs)."""

    async def beat() -> bool:
        return await _heartbeats(gateway) > beats_before

    await wait_until(beat, within=60, step=0.05)


async def _answered(gateway: RunningGateway, n: int) -> None:
    async def done() -> bool:
        return await answered_count(gateway) >= n

    await wait_until(done, within=60, step=0.05)


async def test_a_second_bridge_on_one_sqlite_store_is_refused_and_a_restart_is_not(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    store = tmp_path / "bridge" / "custody.db"
    first = await BridgeProcess.start(gateway.url, token_file, store, tmp_path / "first.log")
    await _running(gateway, 0)

    second = await BridgeProcess.start(gateway.url, token_file, store, tmp_path / "second.log")
    with trio.fail_after(60):  # unrefused, it would run until killed
        assert await second.process.wait() == 2
    assert second.log_tail() == (
        f"tether: error: another tether bridge (pid {first.process.pid}) runs on the store "
        f"{store}: one bridge per SQLite file; stop it first, add workers with --workers or "
        "`tether worker run`, or use PostgreSQL for several bridges\n"
    )

    ids = await submit_many(gateway, [f"hello {i}" for i in range(20)], "one")
    await _answered(gateway, len(ids))
    assert first.process.poll() is None, first.log_tail()

    # the lock goes with its process, however it ends: a bridge killed now is replaced at once
    first.kill()
    assert await first.process.wait() == -signal.SIGKILL
    beats = await _heartbeats(gateway)
    third = await BridgeProcess.start(gateway.url, token_file, store, tmp_path / "third.log")
    await _running(gateway, beats)
    more = await submit_many(gateway, [f"again {i}" for i in range(20)], "two")
    await _answered(gateway, len(ids) + len(more))
    assert await third.stop() == 0, third.log_tail()
    assert not (store.parent / "custody.db.bridge.lock").exists()  # a clean stop removes it
    assert (await gateway.stats())["tasks"]["answered"] == len(ids) + len(more)


async def test_a_second_embedded_bridge_on_one_sqlite_file_is_refused_in_the_same_process(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """The lock is the service's, not the command's: a program that embeds two
    ``BridgeService``s on one file (the kernel lets one process take its record lock twice) gets
    the same refusal, and the file is free again once the first one stops."""
    config = BridgeConfig(
        gateway=gateway.url, token_file=token_file, store=str(tmp_path / "c.db"), workers=1
    )
    async with trio.open_nursery() as nursery:
        first = BridgeService(config, freeze_gc=False)
        await nursery.start(first.run)
        with pytest.raises(ConfigError, match="one bridge per SQLite file"):
            await nursery.start(BridgeService(config, freeze_gc=False).run)
        assert first.running
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        await nursery.start(BridgeService(config, freeze_gc=False).run)
        nursery.cancel_scope.cancel()
