"""Durable runs under SIGKILL (issue #35): real bridge processes running an agent of three
steps, each step's function appending one ``O_APPEND`` line (with a nonce it returns, and the
step records) to a log; the bridges are SIGKILLed while runs are inside and between steps.

Every message gets one reply, every step is recorded, and no step's function runs again once
its record committed: for each (task, step) the recorded nonce is the LAST line the log holds
for it. An earlier line for it is a repeat in the window between an effect and its record
(the process died there); the test counts them.

The issue asks for 150 messages and 12 kills per store; within the suite's budget this runs
30 messages and 3 kills on SQLite (one bridge, restarted) and on PostgreSQL (two bridges,
killed in turn and restarted), with the same claims.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import cast

import pytest
import trio

from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.gateway import RunningGateway
from support.service import BridgeProcess, answered_count, password_free_url, submit_many
from support.step_effects import effect_lines, recorded_steps_hold
from support.waiting import wait_until
from tether.bridge import PostgresStore, SqliteStore
from tether.bridge.custody import Store

pytestmark = pytest.mark.slow

AGENT = "support.agents.steps:factory"
MESSAGES, KILLS = 30, 3
OPTIONS = ["--lease-s", "2", "--room-policy", "concurrent", "--concurrency", "2", "--grace", "2"]


async def _kill_matrix(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: str,
    bridges: int,
    extra: list[str],
) -> tuple[list[str], list[str], Path, int]:
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("STEPS_AGENT_LOG", str(effects))
    texts = [f"message {i}" for i in range(MESSAGES)]
    ids = await submit_many(gateway, texts, "steps", rooms=MESSAGES)
    log = tmp_path / "bridge.log"

    async def start() -> BridgeProcess:  # (a URL stays a str: Path would fold its //)
        return await BridgeProcess.start(
            gateway.url, token_file, cast(Path, store), log, agent=AGENT, workers=1,
            extra=[*OPTIONS, *extra],
        )  # fmt: skip

    running = [await start() for _ in range(bridges)]
    rng = random.Random(35)
    kills = 0
    with trio.fail_after(120):
        for k in range(KILLS):
            seen = len(effect_lines(effects))

            async def working(before: int = seen) -> bool:
                return len(effect_lines(effects)) > before

            await wait_until(working, within=60, step=0.02)  # a bridge runs steps now
            await trio.sleep(rng.uniform(0.05, 0.4))  # ... inside a step or between two
            victim = running[k % bridges]
            victim.kill()
            assert await victim.process.wait() == -signal.SIGKILL, victim.log_tail()
            kills += 1
            running[k % bridges] = await start()

        async def all_answered() -> bool:
            return await answered_count(gateway) >= len(ids)

        await wait_until(all_answered, within=90, step=0.1)
        for bridge in running:
            assert await bridge.stop() == 0, bridge.log_tail()
    return ids, texts, effects, kills


async def _check(
    gateway: RunningGateway, store: Store, ids: list[str], texts: list[str], effects: Path
) -> int:
    """Every message one reply, every step recorded and never run after its record; the
    number of repeats (effects of a step before its recorded one)."""
    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == len(ids)
    for id, text in zip(ids, texts, strict=True):
        assert (await gateway.message(id))["reply"] == f"done: {text}"
    return await recorded_steps_hold(store, ids, effects)


async def test_sigkills_inside_and_between_steps_never_repeat_a_recorded_step_sqlite(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bridge" / "custody.db"
    ids, texts, effects, kills = await _kill_matrix(
        gateway, token_file, tmp_path, monkeypatch, str(path), 1, []
    )
    async with await SqliteStore.open(path) as store:
        repeats = await _check(gateway, store, ids, texts, effects)
    print(f"\nsqlite: {kills} SIGKILLs, {repeats} step(s) repeated in the effect-record window")


async def test_sigkills_inside_and_between_steps_never_repeat_a_recorded_step_postgres(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    postgres_dsn: str,
) -> None:
    schema = f"steps_{random.randrange(1 << 30)}"
    url = password_free_url(postgres_dsn, monkeypatch)  # as a user would: PGPASSWORD
    ids, texts, effects, kills = await _kill_matrix(
        gateway, token_file, tmp_path, monkeypatch, url, 2, ["--store-schema", schema]
    )
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        repeats = await _check(gateway, store, ids, texts, effects)
    print(f"\npostgres: {kills} SIGKILLs, {repeats} step(s) repeated in the window")
