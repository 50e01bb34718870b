"""CPU an idle bridge and an idle ``tether worker run`` burn: no messages, no runs.

A reference gateway in its own process, then ``tether bridge run`` (default settings, a fresh
SQLite store, the echo agent) and ``tether worker run`` on the same store, each a real child
process. After ``SETTLE`` seconds (start-up done) each one's CPU (``utime + stime`` from
``/proc/<pid>/stat``) is read over ``SECONDS`` seconds, in ``ROUNDS`` interleaved windows;
printed as a share of one core, per process, with the gateway's beside them. Goal (issue 39):
under 0.5% of a core for the bridge and for the worker. Linux only. ``SECONDS``, ``ROUNDS``,
``SETTLE`` and ``STORE`` may be set: ``STORE=postgres`` runs both on a throwaway PostgreSQL
(fsync on, the password in a 0600 file as a user keeps it) and prints the server's share too
(its process tree: what the idle polls and beats cost the database); with ``STATEMENTS=1``
as well, the statements the idle processes ran each second (``pg_stat_statements``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import attrs
import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from _pg_cpu import postmaster_pid, server_cpu
from bridge_throughput import TOKEN, gateway_process
from tether.bridge import write_token
from tether.bridge.stores.postgres._throwaway import throwaway_postgres

SECONDS = float(os.environ.get("SECONDS", "30"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SETTLE = float(os.environ.get("SETTLE", "5"))
STATEMENTS = os.environ.get("STATEMENTS") == "1"
TICKS = os.sysconf("SC_CLK_TCK")
TETHER = [
    sys.executable,
    "-c",
    "import sys; from tether._cli import main; sys.exit(main(sys.argv[1:]))",
]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


@attrs.frozen
class Server:
    dsn: str
    postmaster: int

    def reset_statements(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    def print_statements(self) -> None:
        """What ran on the server since the measured windows began, per second."""
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT calls, query FROM pg_stat_statements WHERE toplevel ORDER BY calls DESC"
            ).fetchall()
        print(f"statements each second over {SECONDS:.0f} s (the top level):")
        for calls, query in rows:
            if calls / SECONDS >= 0.05:
                print(f"  {calls / SECONDS:6.2f}  {' '.join(query.split())[:130]}")


@contextlib.contextmanager
def store_args(folder: Path) -> Iterator[tuple[list[str], Server | None]]:
    """The processes' store flags, and the server for a throwaway PostgreSQL."""
    store = os.environ.get("STORE", str(folder / "bridge.db"))
    if store != "postgres":
        yield ["--store", store], None
        return
    counting = {"shared_preload_libraries": "pg_stat_statements"} if STATEMENTS else None
    with throwaway_postgres(fsync=True, settings=counting) as pg:
        if STATEMENTS:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pg_stat_statements")
        info = conninfo_to_dict(pg.dsn)
        secret = folder / "pg-password"
        secret.write_text(f"{info.pop('password')}\n")
        secret.chmod(0o600)
        url = make_conninfo("", **info)
        yield (
            ["--store", url, "--store-password-file", str(secret)],
            Server(pg.dsn, postmaster_pid(pg.dsn)),
        )


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tether-idle-") as tmp:
        folder = Path(tmp)
        with store_args(folder) as (store, server):
            shares = await measure(folder, store, server)
    kind = "PostgreSQL" if server is not None else "SQLite"
    print(f"idle CPU, {kind} store, {ROUNDS} windows of {SECONDS / ROUNDS:.0f} s (goal < 0.5%):")
    for name, values in shares.items():
        spread = f"{min(values):.2%}-{max(values):.2%}"
        print(f"  {name:<11} median {statistics.median(values):6.2%} of a core ({spread})")


async def measure(folder: Path, store: list[str], server: Server | None) -> dict[str, list[float]]:
    """Each process's share of a core in each window (the server's too, for a ``server``)."""
    async with gateway_process(folder) as (url, gateway_pid):
        bridge_token = folder / "bridge-token"
        write_token(bridge_token, TOKEN)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env["TETHER_DATA_DIR"] = str(folder / "data")
        common = [*store, "--log-level", "WARNING"]
        gateway = ["--gateway", url, "--token-file", str(bridge_token)]
        bridge = await trio.lowlevel.open_process(
            [*TETHER, "bridge", "run", *gateway, *common],
            env=env,
            stderr=(folder / "bridge.log").open("wb"),
        )
        await trio.sleep(2.0)  # the bridge creates and migrates the store first
        worker = await trio.lowlevel.open_process(
            [*TETHER, "worker", "run", *common],
            env=env,
            stderr=(folder / "worker.log").open("wb"),
        )
        procs = {"bridge": bridge.pid, "worker run": worker.pid, "gateway": gateway_pid}
        readers = {name: partial(cpu_seconds, pid) for name, pid in procs.items()}
        if server is not None:
            readers["server"] = partial(server_cpu, server.postmaster)
        try:
            await trio.sleep(SETTLE)
            if STATEMENTS and server is not None:
                server.reset_statements()
            shares: dict[str, list[float]] = {name: [] for name in readers}
            for _ in range(ROUNDS):
                before = {name: read() for name, read in readers.items()}
                start = trio.current_time()
                await trio.sleep(SECONDS / ROUNDS)
                wall = trio.current_time() - start
                for name, read in readers.items():
                    shares[name].append((read() - before[name]) / wall)
            if STATEMENTS and server is not None:
                server.print_statements()  # before the processes leave (their goodbyes)
            for proc, name in ((bridge, "bridge"), (worker, "worker")):
                if proc.poll() is not None:
                    log = (folder / f"{name}.log").read_text()
                    raise RuntimeError(f"the {name} exited early:\n{log}")
        finally:
            for proc in (worker, bridge):
                proc.terminate()
                with trio.CancelScope(shield=True):
                    await proc.wait()
    return shares


if __name__ == "__main__":
    trio.run(main)
