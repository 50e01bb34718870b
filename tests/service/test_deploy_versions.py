"""A deploy while runs wait (issue #53), with real processes: 30 runs park in a sleep under
version 1 of an agent; the bridge stops; the agent changes (one step renamed, one step's
arguments changed, one change behind ``run.patched``) and the bridge starts again as version
2. Each run ends as the contract says: the renamed and the changed steps end dead with
``StepMismatch`` naming the step and both versions, the patched runs finish along the old
path, a new task takes the new one; no step runs twice; and the operator sees, through the
real ``tether store`` verbs, which version each ran and when version 1 has drained."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from support.gateway import RunningGateway
from support.service import BridgeProcess, bridge_env
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore

S = CustodyState
PER_KIND = 10
KINDS = ("rename", "args", "patched")
SLEEP_S = 20.0
"""The parked sleep: long enough that no run wakes before the old bridge has stopped, on a
busy machine (the first bridge parks 30 runs in about a second)."""


async def _store_verb(store: Path, *args: str) -> Any:
    result = await trio.run_process(
        [sys.executable, "-m", "tether", "store", *args, "--store", str(store), "--json"],
        capture_stdout=True,
        capture_stderr=True,
        env=bridge_env(),
    )
    return json.loads(result.stdout)


async def _counts(path: Path) -> dict[S, int]:
    async with await SqliteStore.open(path) as store:
        return dict(await store.counts())


async def test_a_deploy_meets_parked_runs_and_each_ends_as_the_contract_says(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bridge" / "custody.db"
    effects = tmp_path / "effects.log"
    env = {"STEPS_AGENT_LOG": str(effects), "DEPLOY_AGENT_SLEEP": str(SLEEP_S)}
    agent = "support.agents.deploy:factory"
    ids = {
        kind: [await gateway.submit(f"{kind}:{n}", room=f"{kind}-{n}") for n in range(PER_KIND)]
        for kind in KINDS
    }
    old = await BridgeProcess.start(
        gateway.url, token_file, path, tmp_path / "old.log", agent=agent,
        extra=["--park-after", "0", "--agent-version", "1"],
        env={**env, "DEPLOY_AGENT_CODE": "1"},
    )  # fmt: skip

    async def all_parked() -> bool:
        if not await trio.to_thread.run_sync(path.exists):
            return False
        return (await _counts(path)).get(S.WAITING, 0) == PER_KIND * len(KINDS)

    await wait_until(all_parked, within=60, step=0.1)
    assert await old.stop() == 0, old.log_tail()
    # the operator sees the runs in flight under version 1, through the real verb
    listed = await _store_verb(path, "list", "--version", "1", "--limit", "100")
    assert len(listed["tasks"]) == PER_KIND * len(KINDS)
    assert listed["in_flight"] == {"1": PER_KIND * len(KINDS)}
    woke_early = [line for line in effects.read_text().splitlines() if " finish " in line]
    assert woke_early == [], "a run woke under the old bridge: the test's sleep is too short"

    new = await BridgeProcess.start(
        gateway.url, token_file, path, tmp_path / "new.log", agent=agent,
        extra=["--park-after", "0", "--agent-version", "2"],
        env={**env, "DEPLOY_AGENT_CODE": "2", "DEPLOY_AGENT_SLEEP": "0"},
    )  # fmt: skip
    fresh = await gateway.submit("patched:new", room="patched-new")

    async def all_ended() -> bool:
        counts = await _counts(path)
        return counts.get(S.DEAD, 0) + counts.get(S.DELIVERED, 0) == PER_KIND * len(KINDS) + 1

    await wait_until(all_ended, within=SLEEP_S + 90, step=0.2)
    assert await new.stop() == 0, new.log_tail()

    # no step ran twice, in either deploy
    ran = Counter(tuple(line.split()[:2]) for line in effects.read_text().splitlines())
    assert [key for key, n in ran.items() if n > 1] == []
    async with await SqliteStore.open(path) as store:
        for id in ids["rename"]:
            record = await store.get(id)
            assert record is not None
            assert record.state is S.DEAD, record
            assert record.attempt == 1  # dead at once: no retry
            reason = record.reason or ""
            assert "step 'fetch_page' calls support.agents.deploy._effect" in reason, reason
            assert "step 'fetch' was recorded with by version '1'" in reason
            assert "version '2' has not asked" in reason
            assert ran[(id, "fetch")] == 1  # not run again under its new name
        for id in ids["args"]:
            record = await store.get(id)
            assert record is not None
            assert record.state is S.DEAD, record
            reason = record.reason or ""
            assert "step 'fetch' was recorded by version '1' with other arguments" in reason
            assert "version '2' asks" in reason
            assert ran[(id, "finish")] == 0
        for id in ids["patched"]:
            record = await store.get(id)
            assert record is not None
            assert record.state is S.DELIVERED, record
            assert record.result is not None
            assert record.result.endswith("old path")
            versions = [(s.name, s.version) for s in await store.steps(id)]
            assert versions == [
                ("fetch", "1"),
                ("~sleep:1", "1"),
                ("~patch:extra", "2"),
                ("finish", "2"),
            ]
            assert (id, "extra") not in ran
        newer = await store.get(fresh)
        assert newer is not None
        assert newer.state is S.DELIVERED
        assert (newer.result or "").endswith("new path")
        assert ran[(fresh, "extra")] == 1
    # version 1 has drained: nothing in custody ran under it
    drained = await _store_verb(path, "list", "--version", "1")
    assert drained["tasks"] == []
    assert drained["in_flight"] == {}
    # the gateway heard of each dead letter, as of any dead task
    for id in ids["rename"] + ids["args"]:
        message = await gateway.message(id)
        assert message["status"] == "closed", message
