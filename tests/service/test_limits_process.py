"""Flow control across real processes on one PostgreSQL (issue #38): a ``tether bridge run``
and a ``tether worker run`` share the limits the bridge declared (``--limits``).

An agent holds a permit of ``openai`` (concurrency 3, rate 10/s, burst 2) around a 0.2 s call
and logs its start and end: at no moment more than 3 in flight, in no 1 s window more than
10 + 2 starts, across both processes. A 429 (``Retry(after=2, key=)``) pauses the key: no run
of either process starts in the pause. A holder SIGKILLed while it holds a permit frees it
within one lease (``--lease-s 1.5``) and a reconciler pass.

The issue asks for two bridges, a cap of 5, 20/s and 1,000-scale traffic; within the suite's
budget this runs one bridge and one worker process, 3 and 10/s, 30 + 8 messages, with the
same claims.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import trio

from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.gateway import RunningGateway
from support.service import (
    STARTED,
    BridgeProcess,
    answered_count,
    bridge_env,
    password_free_url,
    submit_many,
)
from support.waiting import wait_until
from tether.bridge import PostgresStore

pytestmark = pytest.mark.slow

AGENT = "support.agents.limits:factory"
CAP, RATE, BURST, LEASE_S = 3, 10, 2, 1.5
OPTIONS = ["--lease-s", str(LEASE_S), "--reconcile-interval", "0.2", "--grace", "1"]


def _events(log: Path) -> list[tuple[str, str, float, int]]:
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(kind, id, float(at), int(pid)) for kind, id, at, pid in rows]


async def test_limits_hold_across_a_bridge_and_a_worker_process_on_postgres(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    postgres_dsn: str,
) -> None:
    schema = f"limits_{random.randrange(1 << 30)}"
    url = password_free_url(postgres_dsn, monkeypatch)  # as a user would: PGPASSWORD
    log = tmp_path / "agent.log"
    monkeypatch.setenv("LIMITS_AGENT_LOG", str(log))
    store_args = ["--store-schema", schema]
    limits = f"openai rate={RATE}/s burst={BURST} concurrency={CAP}; hold concurrency=1"
    bridge = await BridgeProcess.start(
        gateway.url,
        token_file,
        url,
        tmp_path / "bridge.log",
        agent=AGENT,
        workers=2,
        extra=[*OPTIONS, *store_args, "--limits", limits, "--room-policy", "concurrent"],
    )
    worker_log = tmp_path / "worker.log"
    args = [
        sys.executable, "-m", "tether", "worker", "run", "--store", url, *store_args,
        "--agent", AGENT, "--workers", "2", *OPTIONS, "--log-level", "WARNING",
    ]  # fmt: skip
    with open(worker_log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
        worker = await trio.lowlevel.open_process(
            args, stderr=sink, env={**bridge_env(), "LIMITS_AGENT_LOG": str(log)}
        )
    STARTED.append(worker)
    pids = {bridge.process.pid, worker.pid}
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        try:
            await _scenario(gateway, store, log, pids, worker, worker_log)
        finally:
            for process in (bridge.process, worker):
                if process.returncode is None:
                    process.kill()
                    await process.wait()


async def _scenario(
    gateway: RunningGateway,
    store: PostgresStore,
    log: Path,
    pids: set[int],
    worker: trio.Process,
    worker_log: Path,
) -> None:
    async def both_joined() -> bool:  # 2 workers each, beating in the store
        assert worker.returncode is None, f"the worker process exited: see {worker_log}"
        return sum(w.role == "worker" for w in await store.workers()) >= 4

    await wait_until(both_joined, within=60, step=0.05)
    # 1. the cap and the rate, across both processes
    ids = await submit_many(gateway, [f"m{i}" for i in range(30)], "lim", rooms=30)

    async def answered(n: int) -> bool:
        return await answered_count(gateway) >= n

    await wait_until(lambda: answered(30), within=90)
    events = _events(log)
    starts = sorted(at for kind, _, at, _ in events if kind == "start")
    assert len(starts) == 30
    moments = sorted(
        (at, +1 if kind == "start" else -1) for kind, _, at, _ in events if kind != "pause"
    )
    flight = most = 0
    for _, step in sorted(moments, key=lambda m: (m[0], m[1])):  # an end before a start
        flight += step
        most = max(most, flight)
    assert most <= CAP
    assert max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts) <= RATE + BURST
    assert {pid for kind, _, _, pid in events if kind == "start"} == pids  # both took part
    for id in ids[:3]:
        assert (await gateway.message(id))["reply"].startswith("done: m")

    # 2. a 429 pauses the key for everyone: no run of either process starts in the pause
    await gateway.submit("429", room="r-429", id="p-429")

    async def paused() -> bool:
        return any(kind == "pause" for kind, *_ in _events(log))

    await wait_until(paused, within=30)
    [(_, _, until, _)] = [e for e in _events(log) if e[0] == "pause"]
    pause_logged = max(at for kind, _, at, _ in _events(log) if kind == "end")
    more = await submit_many(gateway, [f"n{i}" for i in range(8)], "after", rooms=8)
    [view] = [v for v in await store.limit_views() if v.spec.key == "openai"]
    assert view.paused_until is not None
    await wait_until(lambda: answered(30 + 1 + len(more)), within=60)
    late = [at for kind, id, at, _ in _events(log) if kind == "start" and at > pause_logged]
    assert len(late) == len(more) + 1  # the 8, and the 429 again
    assert min(late) >= until - 0.05  # (the store's clock is this machine's wall clock)

    # 3. a SIGKILLed holder's permit is freed within one lease and a reconciler pass
    await gateway.submit("hold", room="r-hold", id="holder")

    async def held() -> bool:
        return any(kind == "hold" for kind, *_ in _events(log))

    await wait_until(held, within=30)
    [(_, _, _, holder)] = [e for e in _events(log) if e[0] == "hold"]
    [view] = [v for v in await store.limit_views() if v.spec.key == "hold"]
    assert view.in_flight == 1
    os.kill(holder, signal.SIGKILL)
    killed_at = time.time()

    async def freed() -> bool:
        # the cap is 1: the dead holder's permit is free once none is held, or once another
        # run holds it (the task again, a suspect now, in a quarantine child of the survivor)
        [view] = [v for v in await store.limit_views() if v.spec.key == "hold"]
        return view.in_flight == 0 or sum(kind == "hold" for kind, *_ in _events(log)) == 2

    await wait_until(freed, within=30, step=0.05)
    # one lease, then a reconciler pass (0.2 s) of the survivor's
    assert time.time() - killed_at <= LEASE_S + 3.0
