"""Costs that grow with the work (issue #56), each printed so two versions can be compared:

- **drain**: ``--messages`` (each size in turn) submitted to a reference gateway in its own
  process, then a bridge (4 workers x 4, the noop agent, SQLite, its admin endpoint on) started
  here drains them: messages per second and this process's CPU per message.
- **idle**: the same bridge left idle for ``--idle`` seconds afterwards, with every delivered row
  kept and the admin endpoint reading its custody every second: CPU as a share of one core.
- **retention**: the bridge stopped, the store reopened with its clock past the retention
  period, and one retention pass run as the bridge's retention child runs it (``room_keep``
  ``--keep``): the longest single writer job (timed in the writer's thread), the pass's wall
  time, and the longest a pool beat waited for the writer meanwhile (a beat every 10 ms).
- **file**: the store's file and WAL before and after the pass.
- **cli**: ``tether --help`` and ``tether store status`` wall time, ``--cli-rounds`` runs each.

Run it on each version's source (``PYTHONPATH=<other checkout>/src``): with code before issue
#56 it emulates that version's retention loop (one call per kind, 1000 tasks, 100 rooms).
``--drain-only`` measures the drain alone (item 5: CPU per message as the backlog grows). Waking
parked runs is ``benchmarks/wakes.py``; tenants are not measured here. Linux only.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from bridge_throughput import TOKEN, gateway_process, submit_all
from tether import ChildSpec, open_runtime
from tether._plumbing import _sqlite_writer
from tether.bridge import BridgeConfig, BridgeService, SqliteStore, write_token

WORKERS, CONCURRENCY = 4, 4
DAY = 86_400.0


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", default="2000,5000", help="sizes, comma-separated")
    parser.add_argument("--rooms", type=int, default=20, help="rooms the messages go to")
    parser.add_argument("--keep", type=int, default=100, help="room_keep of the pass")
    parser.add_argument("--idle", type=float, default=10.0, help="idle seconds measured")
    parser.add_argument("--cli-rounds", type=int, default=5)
    parser.add_argument("--drain-only", action="store_true", help="no idle, retention or cli")
    return parser.parse_args()


class JobTimer:
    """Each writer job's time in the writer's thread (every SqliteWriter of the process)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.jobs = 0
        self._real = _sqlite_writer.SqliteWriter.run

    def install(self) -> None:
        timer, real = self, self._real

        async def run(self: Any, fn: Callable[[Any], Any], **kw: Any) -> Any:
            def timed(conn: Any) -> Any:
                began = time.perf_counter()
                try:
                    return fn(conn)
                finally:
                    timer.longest = max(timer.longest, time.perf_counter() - began)
                    timer.jobs += 1

            return await real(self, timed, **kw)

        _sqlite_writer.SqliteWriter.run = run  # type: ignore[method-assign]

    def uninstall(self) -> None:
        _sqlite_writer.SqliteWriter.run = self._real  # type: ignore[method-assign]


async def retention_once(store: SqliteStore, keep: int) -> None:
    """One pass of the bridge's retention child, this version's or the one before."""
    try:
        from tether.bridge.service._retention import retention_pass
    except ImportError:  # before issue #56: the loop of BridgeService._prune, until it sleeps
        now = store.clock()
        while True:
            pruned = await store.prune_delivered(now - 7 * DAY, limit=1000)
            forgotten = await store.prune_tombstones(now - 30 * DAY, limit=1000)
            await store.prune_turns(keep=keep, limit=100)
            if pruned < 1000 and forgotten < 1000:
                return
    await retention_pass(store, retention=7 * DAY, tombstone_retention=30 * DAY, room_keep=keep)


def file_mb(db: Path) -> str:
    wal = db.with_name(db.name + "-wal")
    size = db.stat().st_size / 1e6
    return f"{size:.1f} MB + WAL {wal.stat().st_size / 1e6 if wal.exists() else 0:.1f} MB"


async def one_size(folder: Path, messages: int, opts: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    admin_token = folder / "admin-token"
    write_token(admin_token, "growth-admin")
    async with (
        gateway_process(folder) as (url, _pid),
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as http,
    ):
        await submit_all(http, messages, opts.rooms)
        db = folder / "bridge.db"
        config = BridgeConfig(
            gateway=url,
            token_file=folder / "token",
            store=str(db),
            agent="tether.agents.noop:factory",
            workers=WORKERS,
            concurrency=CONCURRENCY,
            poll_wait=5.0,
            grace=2.0,
            room_keep=10_000,  # the pass below prunes to --keep
            admin_port=0,
            admin_token_file=admin_token,
            log_level="WARNING",
        )
        store = await SqliteStore.open(db)
        service = BridgeService(config, store=store)
        async with open_runtime(handle_signals=False) as runtime:
            cpu, start = time.process_time(), time.perf_counter()
            await runtime.supervisor.start_child(
                ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
            )
            assert service.delivery is not None
            while service.delivery.stats.delivered < messages:  # noqa: ASYNC110 - a counter
                await trio.sleep(0.01)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            out["drain"] = (messages / elapsed, cpu / messages * 1e6)
            if opts.drain_only:
                await runtime.supervisor.terminate_child("bridge")
                await store.aclose()
                return out
            await trio.sleep(2.0)  # settle: the last idle backoffs
            cpu, start = time.process_time(), time.perf_counter()
            await trio.sleep(opts.idle)
            out["idle"] = (time.process_time() - cpu) / (time.perf_counter() - start)
            await runtime.supervisor.terminate_child("bridge")
        await store.aclose()
    out["file_before"] = file_mb(db)
    store = await SqliteStore.open(db, clock=lambda: time.time() + 8 * DAY)  # past retention
    timer = JobTimer()
    waits: list[float] = []
    try:
        timer.install()
        done = trio.Event()

        async def beats() -> None:
            while not done.is_set():
                began = time.perf_counter()
                await store.beat("beater", "worker", 1)
                waits.append(time.perf_counter() - began)
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(beats)
            began = time.perf_counter()
            await retention_once(store, opts.keep)
            out["pass_s"] = time.perf_counter() - began
            done.set()
    finally:
        timer.uninstall()
        await store.aclose()
    out["longest_job_ms"] = timer.longest * 1000
    out["beat_ms"] = (statistics.median(waits) * 1000, max(waits) * 1000)
    out["file_after"] = file_mb(db)
    return out


def cli_times(db: Path, rounds: int) -> dict[str, tuple[float, float, float]]:
    verbs = {"--help": ["--help"], "store status": ["store", "status", "--store", str(db)]}
    times: dict[str, list[float]] = {v: [] for v in verbs}
    for _ in range(rounds):
        for name, argv in verbs.items():  # interleaved
            began = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "tether", *argv], stdout=subprocess.DEVNULL, check=True
            )
            times[name].append(time.perf_counter() - began)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in times.items()}


async def main() -> None:
    opts = args()
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(n) for n in opts.messages.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        last_db = None
        for messages in sizes:
            folder = Path(tmp, f"m{messages}")
            folder.mkdir()  # noqa: ASYNC240 - before anything runs
            got = await one_size(folder, messages, opts)
            rate, cpu = got["drain"]
            print(f"{messages} messages in {opts.rooms} rooms:")
            print(f"  drain               {rate:7.0f} msg/s, {cpu:5.0f} us CPU/msg")
            if opts.drain_only:
                continue
            print(f"  idle, admin on      {got['idle']:7.2%} of a core")
            print(
                f"  retention pass      {got['pass_s'] * 1000:7.0f} ms, longest writer job "
                f"{got['longest_job_ms']:.1f} ms; a beat waited median "
                f"{got['beat_ms'][0]:.1f} ms, longest {got['beat_ms'][1]:.1f} ms"
            )
            print(f"  file                before {got['file_before']}; after {got['file_after']}")
            last_db = folder / "bridge.db"
        if last_db is None:
            return  # --drain-only
        for verb, (median, low, high) in cli_times(last_db, opts.cli_rounds).items():
            print(
                f"tether {verb:<13} {median:.3f} s "
                f"(median of {opts.cli_rounds}, {low:.3f}-{high:.3f})"
            )


if __name__ == "__main__":
    trio.run(main)
