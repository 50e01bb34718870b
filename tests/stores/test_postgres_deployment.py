"""The deployment of docs/pool.md for real, sized for a busy 2-core CI machine: one PostgreSQL,
two ``tether bridge run`` and three ``tether worker run`` processes (one of them hosting the
file exchange for the plain-shell example program), one reference gateway, 2,000 messages.

The leading process (whichever began beating first: the oldest lead candidate) is SIGKILLed
under load, and then a worker process; every message must end with exactly one reply, every task
delivered, nothing dead. The test measures the failover: from the SIGKILL to the first
assignment of the new leader (goal: within two lead beat intervals, 2 x 0.5 s), and prints it.

Where its time goes (profiled on the loaded 2-core machine, load average ~11): queueing the
2,000 messages ~3 s, the five processes starting in parallel ~40 s (Python imports and store
opening, CPU-bound: one alone takes ~8 s at that load), the messages ~30 s (with the kills),
the check ~4 s: ~85 s in all. Three choices keep it there. The messages are queued in the
gateway's database before it starts (through HTTP, with the bridges polling a deep queue, each
cost ~30 ms: the run took 2.5-5 min, all of it waiting on the submissions). Rooms are serial
(one run at a time, its reply delivered before the next), so the messages are spread over
``ROOMS`` rooms of 20 (40 rooms of 50 took 80 s, each room waiting out its own round trips).
The replies are read room by room (``ROOMS`` requests, not 2,000), and every wait polls the
gateway's counts or the store, never a fixed sleep.
"""

from __future__ import annotations

import re
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from support.gateway import RunningGateway
from support.service import BRIDGE_COMMAND, answered_count, bridge_env
from support.waiting import wait_until
from tether.bridge import CustodyState, PostgresStore, write_token
from tether.bridge.pool import elect
from tether.gateway import GatewayStore

ROOT = Path(__file__).resolve().parents[2]
ANSWER_SH = ROOT / "examples" / "file-exchange" / "answer.sh"
WORKER_COMMAND = [sys.executable, "-m", "tether", "worker", "run"]
MESSAGES = 2000
ROOMS = 100
LEASE = 0.75
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
_FIRST_ASSIGN = re.compile(r"lead (\S+): first assignment as leader .* \(store clock ([0-9.]+)\)")


@pytest.fixture
async def gateway(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    """The reference gateway (not started: the test queues its messages first), its database
    in memory-backed files where the machine has them: it stands for the remote gateway, whose
    fsyncs (one per message and per batch of acks or replies, on a busy disk) are not what this
    test measures."""
    token_file = tmp_path / "gateway" / "token"
    token_file.parent.mkdir(mode=0o700)
    write_token(token_file, "deployment-token")
    with tempfile.TemporaryDirectory(dir=SHM or tmp_path) as folder:
        async with httpx.AsyncClient(timeout=30) as http:
            db = Path(folder) / "gateway.db"
            gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=1.0)
            yield gateway
            await gateway.stop()


async def queue_messages(db: Path, count: int) -> list[str]:
    """Queue ``count`` messages in the gateway's database before it starts, over ``ROOMS``
    rooms: as users would over HTTP, ~50x faster (through HTTP, with the bridges polling, each
    message cost ~30 ms on the loaded machine: 2,000 took over two minutes)."""
    store = await GatewayStore.open(db)
    ids = [f"d-{i:05d}" for i in range(count)]
    try:
        for i, task_id in enumerate(ids):
            await store.submit(f"room-{i % ROOMS}", "user", f"message {i}", time.time(), task_id)
    finally:
        store.close()
    return ids


@pytest.mark.slow
async def test_two_bridges_and_three_worker_processes_survive_killing_the_leader(
    postgres_dsn: str, gateway: RunningGateway, tmp_path: Path
) -> None:
    parts = conninfo_to_dict(postgres_dsn)
    url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    pwfile = tmp_path / "pg-password"
    pwfile.write_text(f"{parts['password']}\n")
    pwfile.chmod(0o600)
    schema = f"deploy_{secrets.token_hex(4)}"
    exchange = tmp_path / "exchange"
    common = [
        "--store", url,
        "--store-password-file", str(pwfile),
        "--store-schema", schema,
        "--lease-s", "4",
        "--reconcile-interval", "0.3",
        "--lead-lease", str(LEASE),
        "--grace", "2",
        "--log-level", "WARNING",
    ]  # fmt: skip
    gateway_args = ["--gateway", gateway.url, "--token-file", str(gateway.token_file)]
    commands = {
        "bridge-a": [*BRIDGE_COMMAND, *gateway_args, "--workers", "2", "--poll-wait", "1"],
        "bridge-b": [*BRIDGE_COMMAND, *gateway_args, "--workers", "2", "--poll-wait", "1"],
        "wk-1": [*WORKER_COMMAND, "--workers", "2"],
        "wk-2": [*WORKER_COMMAND, "--workers", "2"],
        "xch": [*WORKER_COMMAND, "--exchange", str(exchange), "--workers", "1",
                "--concurrency", "4"],
    }  # fmt: skip
    processes: dict[str, trio.Process] = {}
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    watch = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)

    async def start(name: str) -> None:
        args = [*commands[name], *common, "--pool-name", name]
        with open(logs[name], "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
            processes[name] = await trio.lowlevel.open_process(args, stderr=sink, env=bridge_env())

    async def beating(*names: str) -> bool:
        return {f"{n}-lead" for n in names} <= {m.name for m in await watch.workers()}

    started = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = time.monotonic() - started

    async def answered(n: int) -> bool:
        return await answered_count(gateway) >= n

    ids = await queue_messages(gateway.db, MESSAGES)
    phase("queued")
    await gateway.start()
    try:
        for name in commands:  # all at once: the first to beat leads
            await start(name)
        processes["shell"] = await trio.lowlevel.open_process(["sh", ANSWER_SH, exchange])
        await wait_until(lambda: beating(*commands), within=120, step=0.1)
        phase("started")
        await wait_until(lambda: answered(MESSAGES // 5), within=120, step=0.1)
        members = await watch.workers()
        leader = elect(members, time.time(), LEASE)
        assert leader is not None
        leading = leader.name.removesuffix("-lead")
        # the next leader: the candidate that began beating next
        heir = elect([m for m in members if m is not leader], time.time(), LEASE)
        assert heir is not None
        killed_at = time.time()
        processes[leading].send_signal(signal.SIGKILL)
        phase("leader killed")
        await wait_until(lambda: answered(MESSAGES // 2), within=120, step=0.1)
        victim = "wk-1" if leading == "wk-2" else "wk-2"  # a worker process, still alive
        victim_killed_at = time.time()
        processes[victim].send_signal(signal.SIGKILL)
        phase("worker killed")
        await wait_until(lambda: answered(MESSAGES), within=180, step=0.2)
        phase("answered")
        survivor = "bridge-b" if leading == "bridge-a" else "bridge-a"
        processes[survivor].send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await processes[survivor].wait() == 0, logs[survivor].read_text()[-2000:]

        counts = await watch.counts()
        assert counts[CustodyState.DELIVERED] == sum(counts.values()) == MESSAGES
        assert counts[CustodyState.DEAD] == 0
    finally:
        for process in processes.values():
            if process.returncode is None:
                process.kill()
            await process.wait()
        await watch.aclose()

    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == MESSAGES  # exactly one reply each
    by_worker: dict[str, int] = {}
    seen: set[str] = set()
    for room in range(ROOMS):  # a room's history holds its messages with their replies
        response = await gateway.http.get(
            f"{gateway.url}/v1/messages",
            params={"room": f"room-{room}", "limit": 200},
            headers=gateway.headers(),
        )
        assert response.status_code == 200, response.text
        for message in response.json()["messages"]:
            seen.add(message["id"])
            text = message["text"]
            assert message["reply"] in (f"echo: {text}", text.upper()), message
            stem = message["worker"].rsplit("-w", 1)[0]
            by_worker[stem] = by_worker.get(stem, 0) + 1
    assert seen == set(ids)
    assert by_worker.get("xch", 0) >= 1  # the shell program answered some
    assert {"wk-1", "wk-2"} & set(by_worker)
    phase("checked")

    takeovers = sorted(
        (float(m.group(2)), m.group(1))
        for name in commands
        if name != leading
        for m in _FIRST_ASSIGN.finditer(logs[name].read_text())
    )
    # the heir took over once; a second takeover only if the killed worker process led then
    assert 1 <= len(takeovers) <= 2, takeovers
    first_assign, new_leader = takeovers[0]
    assert new_leader == heir.name
    failover = first_assign - killed_at
    assert 0 < failover < 7 * LEASE, failover
    figures = [f"{failover:.2f}s ({failover / LEASE:.1f} leases) after killing {leading}"]
    if len(takeovers) == 2:
        assert new_leader == f"{victim}-lead", takeovers  # the killed worker process led
        second = takeovers[1][0] - victim_killed_at
        assert 0 < second < 7 * LEASE, second
        figures.append(f"{second:.2f}s ({second / LEASE:.1f}) after killing {victim}")
    print(
        f"\nfailover to the first assignment of the new leader: {'; '.join(figures)}; "
        f"replies by process: {dict(sorted(by_worker.items()))}; {MESSAGES} messages; "
        f"phases (s from the first start): "
        f"{', '.join(f'{k} {v:.1f}' for k, v in phases.items())}; "
        f"duplicates absorbed by the gateway: {stats['duplicate_results']}"
    )
