"""Durable steps: tether's ``run.step`` beside DBOS Transact's ``@DBOS.step`` (issue #35).

``--lanes`` lanes (default 1) run ``--workflows`` units between them, each lane one unit
after another: tether's lanes are Trio tasks on one store, DBOS's are threads (its
workflows are synchronous functions). A tether unit is a task taken through
custody (``ingest``, ``claim``), three ``run.step`` calls of a no-op, then ``complete``; a
DBOS unit is a ``@DBOS.workflow`` of three no-op ``@DBOS.step`` calls. Each step's wall time
is measured around the call; steps per second count the three steps of every unit over the
whole loop (so each side pays its unit's own start and end too). Same store kind and
durability per step: SQLite files (WAL; tether at its default ``synchronous=NORMAL``, where a
step's record is a promise, synced before ``run.step`` returns; DBOS its default) or one
PostgreSQL server (``--pg DSN``; tether's barrier after each record, a synchronous commit
per step on DBOS). Rounds interleave the sides (a fresh file or schema each); medians and
spreads printed, and each round's ratio. ``--baseline DIR`` adds another checkout's tether as a
third side (this file's tether loop run by ``DIR/.venv/bin/python`` in a subprocess, only its
loop timed), with its own per-round ratios: a change measured against its base in one run.

    uv run --group bench python benchmarks/durable_steps.py [--workflows 300] [--rounds 3]
        [--lanes 1] [--pg postgresql://user:pw@host:port/db] [--baseline ../wt-base]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import _baseline
from _stats import percentile
from tether.bridge import SqliteStore, Task
from tether.bridge.custody import Store
from tether.bridge.runs import run_for


def _noop() -> int:
    return 1


def _shares(workflows: int, lanes: int) -> list[int]:
    return [workflows // lanes + (1 if k < workflows % lanes else 0) for k in range(lanes)]


async def _tether_lanes(store: Store, workflows: int, lanes: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def lane(k: int, units: int) -> None:
        for n in range(units):
            await store.ingest(Task(f"t{k}-{n}", "x"))
            claim = None
            while claim is None:  # another lane may have taken this lane's task: take its
                claim = await store.claim(f"w{k}", leaderless=True)
            run = run_for(claim, store)
            for step in ("a", "b", "c"):
                t0 = time.perf_counter()
                await run.step(step, _noop)
                latencies.append(time.perf_counter() - t0)
            await store.complete(claim, "done")

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k, units in enumerate(_shares(workflows, lanes)):
            nursery.start_soon(lane, k, units)
    return time.perf_counter() - start, latencies


def tether_round(workflows: int, pg: str | None, lanes: int = 1) -> tuple[float, list[float]]:
    async def main() -> tuple[float, list[float]]:
        if pg is None:
            with tempfile.TemporaryDirectory() as tmp:
                async with await SqliteStore.open(Path(tmp) / "custody.db") as store:
                    return await _tether_lanes(store, workflows, lanes)
        from tether.bridge import PostgresStore

        schema = f"bench_{secrets.token_hex(4)}"
        async with await PostgresStore.open(pg, schema=schema) as pstore:
            return await _tether_lanes(pstore, workflows, lanes)

    return trio.run(main)


def baseline_round(checkout: Path) -> Callable[[int, str | None, int], tuple[float, list[float]]]:
    """``tether_round`` run against the tether of ``checkout`` (its own virtualenv)."""
    _baseline.interpreter(checkout)

    def side(workflows: int, pg: str | None, lanes: int) -> tuple[float, list[float]]:
        wall, latencies = _baseline.call(
            checkout, "durable_steps", "tether_round", workflows, pg, lanes
        )
        return float(wall), [float(x) for x in latencies]

    return side


_STEP_TIMES: list[float] = []


def dbos_round(workflows: int, pg: str | None, lanes: int = 1) -> tuple[float, list[float]] | None:
    try:
        from dbos import DBOS
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/dbos.sqlite" if pg is None else _pg_database(pg)
        DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})

        @DBOS.step()  # type: ignore[untyped-decorator]
        def noop() -> int:
            return 1

        @DBOS.workflow()  # type: ignore[untyped-decorator]
        def three() -> None:
            for _ in range(3):
                t0 = time.perf_counter()
                noop()
                _STEP_TIMES.append(time.perf_counter() - t0)

        DBOS.launch()
        try:
            _STEP_TIMES.clear()
            errors: list[BaseException] = []

            def lane(units: int) -> None:
                try:
                    for _ in range(units):
                        three()
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=lane, args=(n,)) for n in _shares(workflows, lanes)]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - start
            if errors:
                raise errors[0]
            return elapsed, list(_STEP_TIMES)
        finally:
            DBOS.destroy(destroy_registry=True)


def _pg_database(dsn: str) -> str:
    """A fresh database for one DBOS round (its system tables live in their own database)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = f"dbos_bench_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    p = conninfo_to_dict(dsn)
    return f"postgresql://{p['user']}:{p.get('password', '')}@{p['host']}:{p['port']}/{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lanes", type=int, default=1, help="units run at once")
    parser.add_argument("--pg", default=None, help="a PostgreSQL DSN (default: SQLite files)")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    args = parser.parse_args()
    if args.lanes < 1:
        parser.error(f"--lanes must be at least 1; got {args.lanes}")
    kind = "PostgreSQL" if args.pg else "SQLite file (WAL)"
    print(
        f"durable steps, {kind}: {args.workflows} units of 3 no-op steps, {args.lanes} at once "
        f"(tether: Trio tasks on one store; dbos: threads), {args.rounds} rounds"
    )
    sides: dict[str, Callable[[int, str | None, int], Any]] = {
        "tether": tether_round,
        "dbos": dbos_round,
    }
    if args.baseline is not None:
        sides["baseline"] = baseline_round(args.baseline.resolve())
    rates: dict[str, list[float]] = {name: [] for name in sides}
    steps: dict[str, list[float]] = {name: [] for name in sides}
    ratios: list[float] = []
    vs_base: list[float] = []
    for k in range(args.rounds):
        names = list(sides)[k % len(sides) :] + list(sides)[: k % len(sides)]  # rotate who's first
        for name in names:
            got = sides[name](args.workflows, args.pg, args.lanes)
            if got is None:
                print(f"  {name}: not installed (uv sync --group bench), skipped")
                continue
            wall, latencies = got
            rates[name].append(3 * args.workflows / wall)
            steps[name].extend(latencies)
        if len(rates["tether"]) == len(rates["dbos"]) == k + 1:
            ratios.append(rates["tether"][-1] / rates["dbos"][-1])
        if "baseline" in sides:
            vs_base.append(rates["tether"][-1] / rates["baseline"][-1])
        print(
            f"  round {k + 1}: "
            + ", ".join(f"{name} {rates[name][-1]:.0f} steps/s" for name in sides if rates[name])
            + (f", tether / dbos {ratios[-1]:.2f}x" if len(ratios) == k + 1 else "")
            + (f", tether / baseline {vs_base[-1]:.2f}x" if vs_base else ""),
            flush=True,
        )
    for name in sides:
        if not rates[name]:
            continue
        r, s = rates[name], steps[name]
        print(
            f"  {name:>8}: {statistics.median(r):8.0f} steps/s (spread {min(r):.0f}-{max(r):.0f})"
            f"  per step p50 {percentile(s, 0.5) * 1e3:.3f} ms"
            f"  p99 {percentile(s, 0.99) * 1e3:.3f} ms"
        )
    if rates["tether"] and rates["dbos"]:
        ratio = statistics.median(rates["tether"]) / statistics.median(rates["dbos"])
        print(f"  tether / dbos: {ratio:.2f}x steps per second")
        print(
            f"  tether / dbos per round: median {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        )
    if vs_base:
        print(
            f"  tether / baseline per round: median {statistics.median(vs_base):.2f}x "
            f"[{min(vs_base):.2f}-{max(vs_base):.2f}]"
        )


if __name__ == "__main__":
    main()
