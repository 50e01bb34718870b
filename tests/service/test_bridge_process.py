"""The bridge as real processes on 127.0.0.1: SIGKILL chaos, gateway outage, crashing agent,
SIGTERM under load. The gateway runs in the test; each bridge is ``tether bridge run``."""

from __future__ import annotations

import contextlib
import random
import signal
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count, store_status, submit_many
from support.waiting import wait_until
from tether.bridge import write_token
from tether.bridge.service._dead_notices import notice_reason

pytestmark = pytest.mark.slow

FAST_LEASES = ["--lease-s", "2", "--grace", "5"]
CHAOS = [*FAST_LEASES, "--room-policy", "concurrent", "--quarantine-processes", "4"]
"""The chaos test is about crash safety, so its rooms run concurrently: under the default
``serial`` policy a SIGKILLed bridge's rooms wait out its leases (2 s), longer than most of
these bridges live (``test_rooms.py`` holds the room order across restarts). The tasks in
flight at each kill are suspects, each run in a quarantine child of its own (a Python start-up,
2.5-5 s on a loaded machine), so the final bridge runs four at a time, not two."""


async def _all_answered(
    gateway: RunningGateway, n: int, within: float, store: Path | None = None
) -> None:
    async def done() -> bool:
        return await answered_count(gateway) >= n

    async def explain() -> str:
        status = "" if store is None else f"; store {await store_status(store)}"
        return f"answered {await answered_count(gateway)} of {n}{status}"

    await wait_until(done, within=within, step=0.1, explain=explain)


async def _replies(gateway: RunningGateway, ids: list[str]) -> dict[str, str | None]:
    limiter = trio.CapacityLimiter(16)
    replies: dict[str, str | None] = {}

    async def one(task_id: str) -> None:
        async with limiter:
            replies[task_id] = (await gateway.message(task_id))["reply"]

    async with trio.open_nursery() as nursery:
        for task_id in ids:
            nursery.start_soon(one, task_id)
    return replies


async def _client_heartbeats(gateway: RunningGateway) -> int:
    """Heartbeats the gateway has received from bridges, all clients together."""
    return sum(int(c["heartbeats"]) for c in (await gateway.stats())["clients"])


def _gt(
    count: Callable[[RunningGateway], Awaitable[int]], gateway: RunningGateway, before: int
) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return await count(gateway) > before

    return done


async def test_sigkill_chaos_every_message_gets_exactly_one_reply(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    started = trio.current_time()
    texts = [f"message {i}" for i in range(1000)]  # 2,000 doubled its time, not its kills
    ids = await submit_many(gateway, texts, "chaos")
    print(f"\nsubmitted in {trio.current_time() - started:.1f} s")
    store, log = tmp_path / "bridge" / "custody.db", tmp_path / "bridge.log"
    rng = random.Random(8)
    kills = 0
    for n in range(12):
        beats = await _client_heartbeats(gateway)
        bridge = await BridgeProcess.start(gateway.url, token_file, store, log, extra=CHAOS)
        # each kill lands on a running bridge (its first heartbeat follows its start-up), and
        # the first only once replies flow: on a loaded machine a start-up alone can take longer
        # than the random life below, and then no kill would land mid-work
        await wait_until(_gt(_client_heartbeats, gateway, beats), within=30, step=0.05)
        if n == 0:
            await wait_until(_gt(answered_count, gateway, 0), within=30, step=0.05)
        await trio.sleep(rng.uniform(0.4, 1.6))
        bridge.kill()
        assert await bridge.process.wait() == -signal.SIGKILL
        kills += 1
    answered_during_chaos = await answered_count(gateway)
    print(f"chaos done at {trio.current_time() - started:.1f} s")
    beats_before = await _client_heartbeats(gateway)
    final = await BridgeProcess.start(gateway.url, token_file, store, log, extra=CHAOS)
    await _all_answered(gateway, len(ids), within=90, store=store)
    print(f"all answered at {trio.current_time() - started:.1f} s")
    # the work may all be done before the final bridge is even up (a fast chaos phase): stop
    # it only once it runs (its first gateway heartbeat comes after its signal handlers)
    await wait_until(_gt(_client_heartbeats, gateway, beats_before), within=30, step=0.05)
    assert await final.stop() == 0, final.log_tail()

    replies = await _replies(gateway, ids)
    wrong = [(i, replies[i]) for i, t in zip(ids, texts, strict=True) if replies[i] != f"echo: {t}"]
    assert not wrong, wrong[:5]
    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == len(ids)  # exactly one reply each: the gateway keeps one
    status = await store_status(store)
    assert status["in_custody"] == 0
    assert status["counts"]["delivered"] == len(ids)
    assert status["counts"]["dead"] == 0
    print(
        f"\nchaos: {kills} SIGKILLs, {answered_during_chaos} answered during the chaos, "
        f"duplicates absorbed by the gateway: {stats['duplicate_results']}, "
        f"redeliveries: {stats['redeliveries']}"
    )
    assert kills >= 10
    assert answered_during_chaos > 0  # the kills really landed while work was in progress


async def test_the_gateway_going_down_and_back_up_loses_nothing(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    first = await submit_many(gateway, [f"before {i}" for i in range(100)], "before")
    store, log = tmp_path / "custody.db", tmp_path / "bridge.log"
    bridge = await BridgeProcess.start(gateway.url, token_file, store, log)
    await _all_answered(gateway, 20, within=30)
    await gateway.stop()
    await trio.sleep(1.5)  # the bridge backs off; its workers go on with what they hold
    await gateway.start()
    second = await submit_many(gateway, [f"after {i}" for i in range(100)], "after")
    await _all_answered(gateway, 200, within=40)
    assert await bridge.stop() == 0, bridge.log_tail()
    replies = await _replies(gateway, first + second)
    assert all(reply is not None and reply.startswith("echo: ") for reply in replies.values())
    assert (await gateway.stats())["tasks"]["answered"] == 200
    logged = log.read_text()
    assert f"gateway {gateway.url} unreachable (" in logged, logged  # with the next try
    assert f"gateway {gateway.url} answers again after " in logged, logged  # and its end


async def test_an_agent_that_crashes_is_retried_then_dead_lettered_with_its_reason(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    texts = [f"crash {i}" if i % 10 == 0 else f"fine {i}" for i in range(50)]
    ids = await submit_many(gateway, texts, "mixed")
    store, log = tmp_path / "custody.db", tmp_path / "bridge.log"
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        store,
        log,
        agent="support.agents.basic:factory",
        extra=["--max-attempts", "2"],
    )
    await _all_answered(gateway, 45, within=30)

    async def crashes_dead() -> bool:
        return bool((await store_status(store))["counts"]["dead"] == 5)

    await wait_until(crashes_dead, within=30, step=0.2)

    async def crashes_closed_at_the_gateway() -> bool:
        return bool((await gateway.stats())["tasks"]["closed"] == 5)

    # each dead letter is reported: its user sees the message closed, with the reason
    await wait_until(crashes_closed_at_the_gateway, within=30, step=0.2)
    assert await bridge.stop() == 0, bridge.log_tail()
    status = await store_status(store)
    assert status["dead_unreported"] == 0
    for task_id, text in zip(ids, texts, strict=True):
        if text.startswith("crash"):
            message = await gateway.message(task_id)
            assert message["status"] == "closed"
            assert message["reason"] == notice_reason(task_id)  # plain words (issue 47.5)
    assert status["counts"]["delivered"] == 45
    dead = {entry["id"]: entry for entry in status["dead_letters"]}
    assert sorted(dead) == [i for i, t in zip(ids, texts, strict=True) if t.startswith("crash")]
    for entry in dead.values():
        assert "AgentCrash" in entry["reason"]
        assert "cannot handle" in entry["reason"]
        assert entry["attempt"] == 2
    replies = await _replies(gateway, ids)
    for task_id, text in zip(ids, texts, strict=True):
        assert replies[task_id] == (None if text.startswith("crash") else f"echo: {text}")


async def test_sigterm_under_load_exits_0_and_loses_nothing(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    texts = [f"slow {i}" for i in range(300)]
    ids = await submit_many(gateway, texts, "load")
    store, log = tmp_path / "custody.db", tmp_path / "bridge.log"
    agent = "support.agents.basic:factory"
    bridge = await BridgeProcess.start(gateway.url, token_file, store, log, agent=agent)
    await _all_answered(gateway, 30, within=30)
    assert await bridge.stop(signal.SIGTERM) == 0, bridge.log_tail()
    status = await store_status(store)
    # workers finished or handed back what they held: nothing is left claimed or assigned
    assert status["counts"]["claimed"] == 0
    assert status["counts"]["assigned"] == 0
    assert status["counts"]["dead"] == 0
    answered = await answered_count(gateway)
    assert answered < len(ids)  # the stop really interrupted the load
    # a new bridge takes up the rest: every message answered, none twice
    bridge = await BridgeProcess.start(gateway.url, token_file, store, log, agent=agent)
    await _all_answered(gateway, len(ids), within=60)
    assert await bridge.stop(signal.SIGINT) == 0, bridge.log_tail()
    replies = await _replies(gateway, ids)
    assert all(replies[i] == f"echo: {t}" for i, t in zip(ids, texts, strict=True))


async def test_a_second_sigterm_stops_at_once_with_the_documented_130_and_keeps_the_task(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    """Issue 21.5: the second signal's exit status (130) was documented nowhere."""
    from tether._cli._main import EXIT_INTERRUPTED, build_parser

    assert f"  {EXIT_INTERRUPTED}  stopped at once by a second SIGINT/SIGTERM" in (
        build_parser().format_help()
    )
    [task_id] = await submit_many(gateway, ["hang on"], "hang")
    store, log = tmp_path / "custody.db", tmp_path / "bridge.log"
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        store,
        log,
        agent="support.agents.basic:factory",
        extra=["--grace", "120"],  # the graceful stop waits for the run: still on at signal 2
    )

    def claimed_now() -> bool:  # read in-process: no subprocess per poll on a loaded machine
        if not store.exists():
            return False
        with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
            try:
                return bool(
                    db.execute("SELECT count(*) FROM tasks WHERE state = 'claimed'").fetchone()[0]
                    == 1
                )
            except sqlite3.OperationalError:  # not created or migrated yet
                return False

    async def claimed() -> bool:
        return await trio.to_thread.run_sync(claimed_now)

    await wait_until(claimed, within=30, step=0.1)
    bridge.process.send_signal(signal.SIGTERM)  # graceful: the worker waits for its run

    async def graceful_stop_began() -> bool:
        return "SIGTERM received: graceful shutdown" in bridge.log_tail()

    await wait_until(graceful_stop_began, within=30)
    assert await bridge.stop(signal.SIGTERM) == EXIT_INTERRUPTED, bridge.log_tail()
    assert "Traceback" not in bridge.log_tail()
    status = await store_status(store)
    assert status["counts"]["delivered"] + status["counts"]["dead"] == 0
    assert sum(status["counts"].values()) == 1  # still in custody for the next run
    assert (await gateway.message(task_id))["reply"] is None


async def test_a_stall_notice_and_heartbeats_reach_the_gateway(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    [task_id] = await submit_many(gateway, ["stall here"], "stall")
    store, log = tmp_path / "custody.db", tmp_path / "bridge.log"
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        store,
        log,
        agent="support.agents.basic:factory",
        extra=["--stall-after", "0.5", "--client-name", "stall-bridge"],
    )
    await _all_answered(gateway, 1, within=30)
    assert await bridge.stop() == 0, bridge.log_tail()
    stats = await gateway.stats()
    assert stats["notices"] == 1
    [client] = stats["clients"]
    assert client["client"] == "stall-bridge"
    assert client["heartbeats"] >= 1
    assert (await gateway.message(task_id))["reply"] == "echo: stall here"


async def test_a_refused_token_stops_the_bridge_with_exit_3(
    gateway: RunningGateway, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong-token"
    write_token(wrong, "not-the-gateways-token")
    log = tmp_path / "bridge.log"
    bridge = await BridgeProcess.start(gateway.url, wrong, tmp_path / "custody.db", log)
    with trio.fail_after(30):
        code = await bridge.process.wait()
    assert code == 3, bridge.log_tail()
    last = bridge.log_tail().strip().splitlines()[-1]
    assert last.startswith("tether: error: gateway ")
    assert "refused the token" in last
    assert "not-the-gateways-token" not in bridge.log_tail()
