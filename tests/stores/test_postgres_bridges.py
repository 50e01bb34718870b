"""The distributed deployment for real: two ``tether bridge run`` processes and six worker
processes share one PostgreSQL custody store behind one reference gateway. A worker process
holding a task and a bridge process are SIGKILLed mid-run; every message must end answered
exactly once, every task delivered, nothing dead.

The bridges get the database password two ways, as users would: one from
``--store-password-file`` (0600), one from ``PGPASSWORD``; neither URL carries it. The worker
processes are ``PoolWorker``s (``pg_pool_fleet_child.py worker``) that join the bridges' pool
through the store: the leads see their beats and assign them work.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from support.gateway import RunningGateway
from support.service import BRIDGE_COMMAND, answered_count, bridge_env, submit_many
from support.waiting import wait_until
from tether.bridge import CustodyState, PostgresStore, write_token

from .test_postgres_fleet import open_fleet

WORKER_CHILD = Path(__file__).with_name("pg_pool_fleet_child.py")
MESSAGES = 240


@pytest.fixture
async def gateway(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    token_file = tmp_path / "gateway" / "token"
    token_file.parent.mkdir(mode=0o700)
    write_token(token_file, "pg-bridges-token")
    async with httpx.AsyncClient(timeout=30) as http:
        db = tmp_path / "gateway" / "gateway.db"
        gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=1.0)
        await gateway.start()
        yield gateway
        await gateway.stop()


def _split(dsn: str) -> tuple[str, str]:
    parts = conninfo_to_dict(dsn)
    url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    return url, str(parts["password"])


@pytest.mark.slow
async def test_two_bridges_and_six_worker_processes_on_one_postgres(
    postgres_dsn: str, gateway: RunningGateway, tmp_path: Path
) -> None:
    url, password = _split(postgres_dsn)
    schema = f"bridges_{secrets.token_hex(4)}"
    pwfile = tmp_path / "pg-password"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    ids = await submit_many(gateway, [f"message {i}" for i in range(MESSAGES)], "pg")

    bridges: list[trio.Process] = []
    logs = [tmp_path / "bridge-a.log", tmp_path / "bridge-b.log"]
    try:
        for n, log in enumerate(logs):
            env = bridge_env()
            secret = ["--store-password-file", str(pwfile)]
            if n == 1:
                env["PGPASSWORD"], secret = password, []
            args = [
                *BRIDGE_COMMAND,
                "--gateway", gateway.url,
                "--token-file", str(gateway.token_file),
                "--store", url,
                "--store-schema", schema,
                *secret,
                "--client-name", f"bridge-{'ab'[n]}",
                "--workers", "1",
                "--poll-wait", "1",
                "--reconcile-interval", "0.2",
                "--lease-s", "2",
                "--grace", "2",
                "--log-level", "WARNING",
            ]  # fmt: skip
            with open(log, "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
                bridges.append(await trio.lowlevel.open_process(args, stderr=sink, env=env))
        # px0 holds its runs after three results, so the SIGKILL finds it holding one for
        # sure: seen between "start" and "done" of a 50 ms run, it often was not on a loaded
        # machine (the output of both came in one read)
        commands = [
            (
                f"px{k}",
                [
                    sys.executable,
                    str(WORKER_CHILD),
                    "holder" if k == 0 else "worker",
                    schema,
                    f"px{k}",
                    "0",
                ],
            )
            for k in range(6)
        ]
        async with open_fleet(commands, {**os.environ, "FLEET_DSN": postgres_dsn}) as fleet:
            victim = fleet["px0"]

            def held() -> set[str]:
                started = {line.split()[1] for line in victim.seen("start")}
                return started - {line.split()[1] for line in victim.seen("done")}

            with trio.fail_after(60):
                await fleet.until(lambda: len(victim.seen("done")) >= 2 and bool(held()))
            victim.process.send_signal(signal.SIGKILL)
            lost_with_victim = held()

            async def some_answered() -> bool:
                return bool(await answered_count(gateway) >= MESSAGES // 3)

            await wait_until(some_answered, within=60, step=0.05)
            bridges[0].send_signal(signal.SIGKILL)
            assert await bridges[0].wait() == -signal.SIGKILL

            async def all_answered() -> bool:
                return bool(await answered_count(gateway) >= MESSAGES)

            await wait_until(all_answered, within=60, step=0.1)
        bridges[1].send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await bridges[1].wait() == 0, logs[1].read_text()[-2000:]
    finally:
        for process in bridges:
            if process.returncode is None:
                process.kill()
            await process.wait()

    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == MESSAGES  # the gateway keeps exactly one reply each
    for task_id in ids:
        reply = (await gateway.message(task_id))["reply"]
        assert reply is not None
        assert reply.startswith(("echo: message ", f"reply to {task_id} by px"))
    watch = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)
    try:
        counts = await watch.counts()
        assert counts[CustodyState.DELIVERED] == sum(counts.values()) == MESSAGES
        for task_id in lost_with_victim:  # what the killed worker held was finished elsewhere
            rec = await watch.get(task_id)
            assert rec is not None
            if rec.owner != "px0":
                assert rec.attempt >= 2
    finally:
        await watch.aclose()
    done_by_workers = {line.split()[1] for w in fleet.children.values() for line in w.seen("done")}
    assert len(done_by_workers) >= MESSAGES // 4  # the worker processes really took work
    print(
        f"\nduplicates absorbed by the gateway: {stats['duplicate_results']}, "
        f"redeliveries: {stats['redeliveries']}"
    )
