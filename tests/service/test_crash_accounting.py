"""Crash accounting with real processes (issues #16 and #37): ``tether bridge run`` killed for
real, restarted by a supervisor loop the way systemd would (``Restart=always``).

- A poison task (its agent SIGKILLs its own process) kills the bridge once; then, a suspect,
  it runs in a quarantine process, whose two deaths (SIGKILL) are the proof: dead-lettered
  with the reason naming the signal; every other message is answered.
- SIGKILL chaos with an agent that never fails: no message ends dead (crashes spend no
  attempts, and an innocent suspect is not convicted), each gets exactly one reply, and more
  than one run is in flight at the kills (suspects no longer serialise the pool).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count, store_status, submit_many
from support.waiting import wait_until
from tether.bridge.service._dead_notices import notice_reason

pytestmark = pytest.mark.slow

AGENT = "support.agents.crash:factory"
OPTIONS = ["--lease-s", "2", "--grace", "5", "--room-policy", "concurrent"]
BRIDGE_OPTIONS = [*OPTIONS, "--workers", "2"]
"""Every run in flight at a crash becomes a suspect, and each suspect's run pays a quarantine
process's start (a second or more of CPU on a busy 2-core machine, see the guide), at most
``--quarantine-processes`` at once: two workers (8 runs in flight) keep the suspects few."""
FULL_CHAOS = os.environ.get("TETHER_TEST_FULL_CHAOS") == "1"
"""The issue's numbers (200 messages, 15 kills) take several minutes on a loaded 2-core
machine, where one bridge start alone can take 10 s or more; by default the chaos run is
scaled down (120 messages, 8 kills, the same 1.5-3 s lives). ``TETHER_TEST_FULL_CHAOS=1``
runs the full one."""
MESSAGES, KILLS = (200, 15) if FULL_CHAOS else (120, 8)


def _claimed(store: Path) -> int:
    """Tasks claimed in the SQLite store now (a read-only look beside the running bridge)."""
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM tasks WHERE state = 'claimed'").fetchone()[0])
    finally:
        conn.close()


async def _client_heartbeats(gateway: RunningGateway) -> int:
    return sum(int(c["heartbeats"]) for c in (await gateway.stats())["clients"])


async def test_a_poison_task_is_proven_and_dead_lettered_and_every_other_message_answered(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    texts = [f"message {i}" for i in range(150)]  # the size
    poison = 37
    texts[poison] = "poison pill"
    ids = await submit_many(gateway, texts, "poison")
    store = tmp_path / "bridge" / "custody.db"
    restarts = await _supervised_until_settled(gateway, token_file, tmp_path, ids)

    # the poison task: dead, with the proof; its user was told
    message = await gateway.message(ids[poison])
    assert message["status"] == "closed"
    # issue 47.5: the person reads a plain sentence; the proof stays with the operators
    assert message["reason"] == notice_reason(ids[poison])
    status = await store_status(store)
    assert status["counts"]["dead"] == 1
    [dead] = status["dead_letters"]
    assert dead["id"] == ids[poison]
    assert (
        "quarantine: killed its quarantine process 2 times (last: its quarantine process was "
        "killed by SIGKILL)"
    ) in dead["reason"]
    # one crash of the bridge in a crowd, then two deaths of its quarantine process
    assert (dead["crash_count"], dead["crashes_alone"], dead["quarantine_deaths"]) == (3, 0, 2)
    assert dead["last_quarantine_death"] == "its quarantine process was killed by SIGKILL"
    # issue #37: the bridge itself died once for it, no more
    assert restarts == 1
    # every other message: answered once, with its own reply
    assert status["counts"]["delivered"] == len(ids) - 1
    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == len(ids) - 1
    for i in random.Random(3).sample([i for i in range(len(ids)) if i != poison], 60):
        assert (await gateway.message(ids[i]))["reply"] == f"echo: {texts[i]}"
    assert status["suspects"] == 0
    print(f"\npoison: {restarts} restarts; crash counts {dead['crash_count']}")


async def test_sigkill_chaos_with_a_healthy_agent_dead_letters_nothing(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """``MESSAGES`` messages, ``KILLS`` SIGKILLs 1.5-3 s apart, an agent that takes 0.3 s and
    never fails."""
    texts = [f"slow message {i}" for i in range(MESSAGES)]
    ids = await submit_many(gateway, texts, "chaos")
    store, log = tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log"
    rng = random.Random(16)
    started = trio.current_time()
    kills = 0
    answered_at_kills: list[int] = []
    in_flight_at_kills: list[int] = []
    """Runs claimed in the store as each kill lands (suspects once ran one at a time)."""
    for _ in range(KILLS):
        beats = await _client_heartbeats(gateway)
        bridge = await BridgeProcess.start(
            gateway.url, token_file, store, log, agent=AGENT, extra=BRIDGE_OPTIONS
        )

        async def beating(before: int = beats) -> bool:
            return await _client_heartbeats(gateway) > before

        # each kill lands on a running bridge (its first gateway heartbeat follows start-up)
        await wait_until(beating, within=90, step=0.05)
        await trio.sleep(rng.uniform(1.5, 3.0))
        in_flight_at_kills.append(_claimed(store))
        bridge.kill()
        assert await bridge.process.wait() == -signal.SIGKILL
        kills += 1
        answered_at_kills.append(await answered_count(gateway))
    chaos_s = trio.current_time() - started
    beats = await _client_heartbeats(gateway)
    final = await BridgeProcess.start(
        gateway.url, token_file, store, log, agent=AGENT, extra=BRIDGE_OPTIONS
    )

    async def all_answered() -> bool:
        return await answered_count(gateway) >= len(ids)

    async def final_beating() -> bool:
        return await _client_heartbeats(gateway) > beats

    await wait_until(all_answered, within=120, step=0.1)
    # the work may be done before the final bridge is even up: stop it once it runs (its
    # first gateway heartbeat comes after its signal handlers)
    await wait_until(final_beating, within=90, step=0.05)
    assert await final.stop() == 0, final.log_tail()

    status = await store_status(store)
    assert status["counts"]["dead"] == 0, status["dead_letters"]
    assert status["counts"]["delivered"] == len(ids)
    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == len(ids)  # exactly one reply each
    for task_id, text in zip(ids, texts, strict=True):
        message = await gateway.message(task_id)
        assert message["reply"] == f"echo: {text}"
    # the kills really landed while work was in progress
    in_progress = sum(1 for n in answered_at_kills if 0 < n < len(ids))
    assert in_progress >= 3, answered_at_kills
    # issue #37: suspects run in quarantine beside ordinary work, so the pool keeps more than
    # one run in flight through the crash loop (alone, it ran one at a time at every kill)
    # (a kill after the last answer finds nothing to run: it says nothing of the pool)
    busy = [
        n
        for n, done in zip(in_flight_at_kills, answered_at_kills, strict=True)
        if 0 < done < len(ids)
    ]
    assert busy, answered_at_kills
    assert sum(n > 1 for n in busy) >= len(busy) - 1, (in_flight_at_kills, answered_at_kills)
    print(
        f"\nchaos: {kills} SIGKILLs in {chaos_s:.1f} s, answered at each kill "
        f"{answered_at_kills}, runs in flight {in_flight_at_kills}; all answered "
        f"{trio.current_time() - started:.1f} s after start"
    )


async def _supervised_until_settled(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    ids: list[str],
    deaths: tuple[int, ...] = (-signal.SIGKILL,),
) -> int:
    """Run the bridge as systemd would (a bridge that dies is started again at once) until
    every message is settled; return how many times it died (each with one of ``deaths``)."""
    store, log = tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log"
    restarts = 0

    async def all_settled() -> bool:
        return await answered_count(gateway) >= len(ids)

    with trio.fail_after(240):  # a bridge start alone can take 10 s on a loaded machine
        while True:
            bridge = await BridgeProcess.start(
                gateway.url, token_file, store, log, agent=AGENT, extra=BRIDGE_OPTIONS
            )
            async with trio.open_nursery() as nursery:
                exited = trio.Event()

                async def watch(
                    bridge: BridgeProcess = bridge, exited: trio.Event = exited
                ) -> None:
                    await bridge.process.wait()
                    exited.set()

                nursery.start_soon(watch)
                while not exited.is_set() and not await all_settled():
                    with trio.move_on_after(0.2):
                        await exited.wait()
                if not exited.is_set():
                    assert await bridge.stop() == 0, bridge.log_tail()
                    return restarts
            assert bridge.process.returncode in deaths, bridge.log_tail()
            restarts += 1
            assert restarts <= 6, f"the bridge keeps dying: {restarts} restarts"


async def test_late_and_other_poisons_beside_a_crowd_of_innocents(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """Issue #37: a poison that kills only after 0.5 s while 100 innocents run beside it, and
    the segfault and ``os._exit(3)`` variants, through a whole bridge: each poison ends dead
    naming its signal or exit code, every innocent is answered, and the bridge process dies
    at most once per poison task (later deaths are its quarantine child's)."""
    texts = [f"slow message {i}" for i in range(100)]
    poisons = {10: "late poison", 40: "segv poison", 70: "exit poison"}
    for i, body in poisons.items():
        texts[i] = body
    ids = await submit_many(gateway, texts, "poisons")
    deaths = (-signal.SIGKILL, -signal.SIGSEGV, 3)
    restarts = await _supervised_until_settled(gateway, token_file, tmp_path, ids, deaths)
    assert restarts <= len(poisons)
    proofs = {
        "late poison": "killed by SIGKILL",
        "segv poison": "killed by SIGSEGV",
        "exit poison": "exited with code 3",
    }
    status = await store_status(tmp_path / "bridge" / "custody.db")
    reasons = {d["id"]: d["reason"] for d in status["dead_letters"]}
    for i, body in poisons.items():
        message = await gateway.message(ids[i])
        assert message["status"] == "closed"
        assert message["reason"] == notice_reason(ids[i])  # plain words (issue 47.5)
        assert f"its quarantine process was {proofs[body]}" in reasons[ids[i]] or (
            f"its quarantine process {proofs[body]}" in reasons[ids[i]]
        ), reasons[ids[i]]
    assert status["counts"]["dead"] == len(poisons)
    assert status["counts"]["delivered"] == len(ids) - len(poisons)
    for i in random.Random(5).sample([i for i in range(len(ids)) if i not in poisons], 30):
        assert (await gateway.message(ids[i]))["reply"] == f"echo: {texts[i]}"
    print(f"\npoisons: {restarts} bridge deaths for {len(poisons)} poison tasks")
