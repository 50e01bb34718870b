"""Durable sleep with real processes (issue #35): one worker of concurrency 1, several runs
sleeping durably; the sleepers park in ``waiting`` so other messages are answered at once on
the one slot; the bridge is SIGKILLed while they wait and another process wakes them, each
answered once, its step before the sleep not run again.

The issue's twenty runs sleeping 60 s become six sleeping 12 s with ``--park-after 0.5``
(real time: a process cannot run on a mock clock): the same claims, within the suite's budget.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count, store_status
from support.waiting import wait_until

pytestmark = pytest.mark.slow

AGENT = "support.agents.sleep:factory"
SLEEPERS, QUICK, SLEEP_S = 6, 6, 12.0
OPTIONS = [
    "--concurrency", "1", "--park-after", "0.5", "--lease-s", "2", "--room-policy", "concurrent",
]  # fmt: skip


async def test_sleepers_free_the_only_slot_and_wake_in_another_process(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("STEPS_AGENT_LOG", str(effects))
    store, log = tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log"
    bridge = await BridgeProcess.start(
        gateway.url, token_file, store, log, agent=AGENT, workers=1, extra=OPTIONS
    )
    sleepers = [f"sleeper-{i}" for i in range(SLEEPERS)]
    submitted = time.time()
    for id in sleepers:
        await gateway.submit(f"sleep {SLEEP_S}", id=id, room=id)

    async def all_parked() -> bool:
        try:
            return int((await store_status(store))["counts"]["waiting"]) == SLEEPERS
        except subprocess.CalledProcessError:
            return False  # the bridge has not created its store yet

    with trio.fail_after(120):
        await wait_until(all_parked, within=60, step=0.2)
        quick = [f"quick-{i}" for i in range(QUICK)]
        sent = trio.current_time()
        for id in quick:
            await gateway.submit(f"hello {id}", id=id, room=id)

        async def quick_answered() -> bool:
            return await answered_count(gateway) >= QUICK

        await wait_until(quick_answered, within=30, step=0.05)
        quick_s = trio.current_time() - sent
        assert await answered_count(gateway) == QUICK  # the sleepers still sleep
        bridge.kill()
        assert await bridge.process.wait() == -signal.SIGKILL
        other = await BridgeProcess.start(
            gateway.url, token_file, store, log, agent=AGENT, workers=1, extra=OPTIONS
        )

        async def all_answered() -> bool:
            return await answered_count(gateway) >= SLEEPERS + QUICK

        await wait_until(all_answered, within=60, step=0.1)
        assert await other.stop() == 0, other.log_tail()
    assert quick_s < SLEEP_S / 2, f"the quick messages waited {quick_s:.1f}s behind the sleepers"
    for id in quick:
        assert (await gateway.message(id))["reply"] == f"at once: hello {id}"
    pids = set()
    for id in sleepers:
        reply = (await gateway.message(id))["reply"]
        woke = float(reply.split()[2].rstrip(";"))
        assert woke >= submitted + SLEEP_S
        ran, woke_in = int(reply.split()[7].rstrip(",")), int(reply.split()[-1])
        assert ran == bridge.process.pid != woke_in  # the step in the first, the wake in another
        pids.add(woke_in)
    assert pids == {other.process.pid}
    lines = effects.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(sleepers)  # each step ran once
    assert (await gateway.stats())["tasks"]["answered"] == SLEEPERS + QUICK
