"""Sizing a deployment on one PostgreSQL: tasks/s per ``tether worker run`` process, per
bridge, and for the database as worker processes are added (1, 2, 4, 8).

- **worker processes**: N real ``tether worker run`` processes (4 workers x 4 tasks each, the
  noop agent, a lead candidate each: one leads) on a fresh schema. Once every process beats,
  each round ingests ``TASKS`` tasks in one go (100 per transaction) and the clock runs until
  all of them have a stored reply (state ``result``): assign -> claim -> agent -> complete, each
  durable. Rounds run back to back on the same processes (starting 8 processes costs more than
  a round here); the median and the spread of the rounds are printed.
- **bridge**: one ``tether bridge run`` process (4 x 4, noop agent) with a reference gateway in
  its own process: ``TASKS`` messages submitted, the clock runs until the gateway holds every
  reply (poll -> commit -> ack -> assign -> claim -> agent -> complete -> post -> delivered).

The noop agent measures what tether and PostgreSQL cost per task; a real agent's run time adds
to it (and then more workers, not a bigger database, is what helps). ``TETHER_BENCH_PG_DSN`` (or
``TETHER_TEST_PG_DSN``) names the server (a database of its own is created and dropped);
without one a throwaway server is started (initdb, fsync on). ``TASKS``, ``ROUNDS`` and
``PROCESSES`` (e.g. ``1,2,4,8``) may be set in the environment, ``ROOMS`` (the rooms the tasks
are spread over, 40; 0: none) and ``WORKER_ARGS`` (extra flags for each ``tether worker run``,
e.g. ``--poll-interval 0.05``). Each round also prints the server's CPU per task (its process
tree from ``/proc``, from the first ingest to the last result: the server must be local).
Every process runs on this machine, so the figures are a floor for hosts of their own.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from _pg_cpu import postmaster_pid, server_cpu
from tether.bridge import CustodyState, PostgresStore, Task, write_token
from tether.bridge.stores.postgres._throwaway import throwaway_postgres

TASKS = int(os.environ.get("TASKS", "1000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
PROCESSES = [int(n) for n in os.environ.get("PROCESSES", "1,2,4,8").split(",")]
ROOMS = int(os.environ.get("ROOMS", "40"))
"""The rooms the worker processes' tasks are spread over (0: none, as ``pool_postgres.py``)."""
CLI = [sys.executable, "-m", "tether"]
_URL = re.compile(r"tether gateway: (http://\S+?)/ ")


@contextlib.contextmanager
def database() -> Iterator[str]:
    given = os.environ.get("TETHER_BENCH_PG_DSN") or os.environ.get("TETHER_TEST_PG_DSN")
    if not given:
        with throwaway_postgres(fsync=True) as server:
            yield server.dsn
        return
    name = f"tether_bench_{secrets.token_hex(4)}"
    with psycopg.connect(given, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_conninfo(given, dbname=name)
    finally:
        with psycopg.connect(given, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def store_args(dsn: str, folder: Path, schema: str) -> list[str]:
    parts = conninfo_to_dict(dsn)
    url = f"postgresql://{parts['user']}@{parts.get('host', '127.0.0.1')}"
    url += f":{parts.get('port', 5432)}/{parts['dbname']}"
    args = ["--store", url, "--store-schema", schema, "--log-level", "WARNING"]
    if parts.get("password"):
        pwfile = folder / "pg-password"
        pwfile.write_text(f"{parts['password']}\n")
        pwfile.chmod(0o600)
        args += ["--store-password-file", str(pwfile)]
    return args


@contextlib.asynccontextmanager
async def processes(commands: list[list[str]], folder: Path) -> AsyncIterator[None]:
    procs = []
    try:
        for n, command in enumerate(commands):
            with open(folder / f"p{n}.log", "ab") as sink:  # noqa: ASYNC230
                procs.append(await trio.lowlevel.open_process(command, stderr=sink))
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True), trio.move_on_after(60):
            for proc in procs:
                await proc.wait()
        for proc in procs:
            if proc.returncode is None:
                proc.kill()


async def until(check: object, limit_s: float = 300.0) -> None:
    with trio.fail_after(limit_s):
        while not await check():  # type: ignore[operator]  # noqa: ASYNC110
            await trio.sleep(0.05)


async def worker_processes(dsn: str, n: int, folder: Path) -> tuple[list[float], list[float]]:
    """Tasks/s and the server's CPU per task (us) of each round with ``n`` processes."""
    schema = f"bench_{secrets.token_hex(4)}"
    store = await PostgresStore.open(dsn, schema=schema, pool_size=2)
    common = store_args(dsn, folder, schema)
    command = [*CLI, "worker", "run", "--agent", "tether.agents.noop:factory", *common]
    command += os.environ.get("WORKER_ARGS", "").split()
    rates, cpu = [], []
    postmaster = postmaster_pid(dsn)
    try:

        async def all_beating() -> bool:
            return sum(1 for m in await store.workers() if m.role == "lead") == n

        async with processes([command] * n, folder):
            await until(all_beating)
            for r in range(ROUNDS):
                tasks = [Task(f"r{r}-{i}", "x", room=_room(i)) for i in range(TASKS)]
                server = server_cpu(postmaster)
                started = time.perf_counter()
                for k in range(0, TASKS, 100):
                    await store.ingest_many(tasks[k : k + 100])

                async def done(expected: int = (r + 1) * TASKS) -> bool:
                    return (await store.counts())[CustodyState.RESULT] == expected

                await until(done)
                rates.append(TASKS / (time.perf_counter() - started))
                cpu.append((server_cpu(postmaster) - server) / TASKS * 1e6)
    finally:
        await store.aclose()
    return rates, cpu


def _room(i: int) -> str | None:
    return f"room-{i % ROOMS}" if ROOMS else None


@contextlib.asynccontextmanager
async def gateway_process(folder: Path) -> AsyncIterator[tuple[str, Path]]:
    token_file = folder / "gateway-token"
    write_token(token_file, "bench-token")
    command = [*CLI, "gateway", "serve", "--port", "0", "--token-file", str(token_file)]
    command += ["--db", str(folder / "gateway.db")]
    proc = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(1)
            if not chunk:
                break
            line += chunk
        found = _URL.search(line.decode())
        if found is None:
            raise RuntimeError(f"the gateway did not start: {line!r}")
        yield found.group(1), token_file
    finally:
        proc.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True):
            await proc.wait()
            await proc.stdout.aclose()  # type: ignore[union-attr]


async def bridge_process(dsn: str, folder: Path) -> list[float]:
    schema = f"bench_{secrets.token_hex(4)}"
    rates = []
    async with gateway_process(folder) as (url, token_file):
        headers = {"authorization": "Bearer bench-token"}
        command = [*CLI, "bridge", "run", "--gateway", url, "--token-file", str(token_file)]
        command += ["--agent", "tether.agents.noop:factory", "--poll-wait", "1"]
        command += store_args(dsn, folder, schema)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:

            async def answered() -> int:
                tasks = (await http.get("/v1/stats")).json()["tasks"]
                return int(tasks["answered"] + tasks["closed"])

            limiter = trio.CapacityLimiter(16)
            async with processes([command], folder):
                # one message answered first: the bridge is up (its start-up is not timed)
                warm = {"room": "warm", "text": "x", "id": "warm-up"}
                assert (await http.post("/v1/messages", json=warm)).status_code == 201

                async def warmed() -> bool:
                    return await answered() == 1

                await until(warmed)
                for r in range(ROUNDS):

                    async def submit(i: int, r: int = r) -> None:
                        async with limiter:
                            payload = {"room": f"room-{i % 40}", "text": "x", "id": f"r{r}-{i}"}
                            response = await http.post("/v1/messages", json=payload)
                            assert response.status_code == 201, response.text

                    async with trio.open_nursery() as nursery:  # submitted before the clock
                        for i in range(TASKS):
                            nursery.start_soon(submit, i)
                    started = time.perf_counter()

                    async def done(expected: int = (r + 1) * TASKS + 1) -> bool:
                        return await answered() == expected

                    await until(done)
                    rates.append(TASKS / (time.perf_counter() - started))
    return rates


def spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):7.0f}  ({min(rates):.0f}-{max(rates):.0f})"


async def main() -> None:
    load = os.getloadavg()[0]
    print(f"{TASKS} tasks a round, {ROUNDS} rounds, noop agent; load average {load:.1f}")
    with database() as dsn, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = []
        for n in PROCESSES:
            rates, cpu = await worker_processes(dsn, n, folder)
            rows.append((n, rates, cpu))
            print(
                f"  {n} worker process(es): {spread(rates)} tasks/s, "
                f"server CPU {spread(cpu)} us/task",
                flush=True,
            )
        bridge = await bridge_process(dsn, folder)
    one = statistics.median(rows[0][1]) / rows[0][0]
    print()
    print(
        "| worker processes (4 x 4 each) | tasks/s, median (min-max) | per process | vs 1 "
        "| server CPU us/task |"
    )
    print("|---|---|---|---|---|")
    for n, rates, cpu in rows:
        median = statistics.median(rates)
        print(
            f"| {n} | {spread(rates)} | {median / n:.0f} | {median / n / one:.2f}x "
            f"| {spread(cpu)} |"
        )
    print(f"| 1 bridge process (4 x 4), gateway to gateway | {spread(bridge)} | | | |")
    print(f"\nload average after: {os.getloadavg()[0]:.1f} (2 cores, shared)")


if __name__ == "__main__":
    trio.run(main)
