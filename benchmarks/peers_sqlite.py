"""SqliteStore beside SQLite job queues, same disk, same durability: jobs per second through
ingest -> claim -> complete at 1 lane and at 16 lanes.

A lane takes one job at a time through its three durable steps (for tether ``ingest_many``,
``claim``, ``complete``; for huey ``enqueue``, ``dequeue``, ``put_data``; for persist-queue
``put``, ``get``, ``ack``; for litequeue ``put``, ``pop``, ``done``), so every step is its own
commit unless the queue lets concurrent lanes share one (tether's writer does: group commit).
The peers run on WAL with ``synchronous=FULL`` (huey ``fsync=True``; litequeue's NORMAL and
persist-queue's default are raised to FULL on their connections), their fastest durable
settings. tether runs twice: ``tether`` in its default mode, durable at promises
(``synchronous=NORMAL``: the ingest, whose ack would follow, waits for a WAL sync; claim and
complete do not), and ``tether-full`` with a sync at every commit (``--synchronous full``). Peer
lanes are threads, each with its own queue object on the shared file (one connection cannot be
shared by concurrent transactions); tether's lanes are Trio tasks on one store. Rounds
interleave the sides (a fresh file each); medians and spreads printed, and tether's ratio to the
fastest peer per lane count.
Bars: 1 lane >= 1.0x the fastest peer; 16 lanes >= 5x.

Peers come from the optional ``bench`` group (``uv sync --group bench``); a missing one is
skipped with a line saying so. ``--baseline DIR`` adds another checkout's tether (run by that
checkout's ``.venv`` in a subprocess, only its own loop timed) as two more sides, ``baseline``
and ``baseline-full`` (the two modes), interleaved with the rest, so a change is measured
against its base in the same run; they are left out of the fastest-peer ratio and get ratios
of their own.

    uv run python benchmarks/peers_sqlite.py [--jobs 600] [--rounds 5] [--lanes 1,16]
        [--baseline ../main]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from tether.bridge import SqliteStore, Task

Lane = Callable[[int], None]
"""One peer lane's job loop: run ``jobs`` jobs through put -> take -> done."""


def _threads(lanes: int, jobs: int, make_lane: Callable[[int], Lane]) -> float:
    """Wall time for ``lanes`` threads to run ``jobs`` jobs between them."""
    loops = [make_lane(k) for k in range(lanes)]  # queue objects opened before the clock
    per_lane = [jobs // lanes + (1 if k < jobs % lanes else 0) for k in range(lanes)]
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            loops[k](per_lane[k])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(lanes)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def huey_side(folder: Path, lanes: int, jobs: int) -> float:
    from huey.storage import SqliteStorage

    db = str(folder / "huey.db")
    SqliteStorage("bench", db, fsync=True, timeout=120).conn.close()  # create the tables once

    def make(k: int) -> Lane:
        storage = SqliteStorage("bench", db, fsync=True, timeout=120)

        def loop(n: int) -> None:
            done = 0
            while done < n:
                storage.enqueue(f"job {k}-{done}".encode())
                data = storage.dequeue()
                if data is None:
                    continue
                storage.put_data(f"r{k}-{done}", data)
                done += 1

        return loop

    return _threads(lanes, jobs, make)


def persist_queue_side(folder: Path, lanes: int, jobs: int) -> float:
    from persistqueue import SQLiteAckQueue

    queue = SQLiteAckQueue(str(folder / "pq"), multithreading=True, auto_commit=True)
    for conn in {id(c): c for c in (queue._conn, queue._putter)}.values():
        conn.execute("PRAGMA synchronous=FULL")

    def make(k: int) -> Lane:
        def loop(n: int) -> None:
            done = 0
            while done < n:
                queue.put(f"job {k}-{done}")
                item = queue.get(block=False, raw=True)
                queue.ack(id=item["pqid"])
                done += 1

        return loop

    return _threads(lanes, jobs, make)


def litequeue_side(folder: Path, lanes: int, jobs: int) -> float:
    from litequeue import LiteQueue

    db = str(folder / "lq.db")
    LiteQueue(db).conn.close()

    def make(k: int) -> Lane:
        queue = LiteQueue(db, timeout=120)
        queue.conn.execute("PRAGMA synchronous=FULL")

        def loop(n: int) -> None:
            done = 0
            while done < n:
                queue.put(f"job {k}-{done}")
                message = queue.pop()
                if message is None:
                    continue
                queue.done(message.message_id)
                done += 1

        return loop

    return _threads(lanes, jobs, make)


def tether_side(folder: Path, lanes: int, jobs: int, mode: Any = "NORMAL") -> float:
    async def main() -> float:
        store = await SqliteStore.open(folder / "tether.db", synchronous=mode)
        per_lane = [jobs // lanes + (1 if k < jobs % lanes else 0) for k in range(lanes)]

        async def lane(k: int) -> None:
            done = 0
            while done < per_lane[k]:
                await store.ingest_many([Task(f"t{k}-{done}", f"job {k}-{done}")])
                claim = await store.claim(f"w{k}", leaderless=True)
                if claim is None:
                    continue
                await store.complete(claim, "ok")
                done += 1

        try:
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for k in range(lanes):
                    nursery.start_soon(lane, k)
            return time.perf_counter() - start
        finally:
            await store.aclose()

    return trio.run(main)


def baseline_side(checkout: Path, mode: str = "NORMAL") -> Callable[[Path, int, int], float]:
    """``tether_side`` at ``mode`` run against the tether of ``checkout`` (its own virtualenv)."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"--baseline {checkout}: no {python} (run uv sync there first)")
    here = Path(__file__).resolve().parent
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "import peers_sqlite as b; "
        "print(b.tether_side(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))"
    )

    def side(folder: Path, lanes: int, jobs: int) -> float:
        out = subprocess.run(
            [str(python), "-c", code, str(here), str(folder), str(lanes), str(jobs), mode],
            cwd=checkout,
            check=True,
            capture_output=True,
            text=True,
        )
        return float(out.stdout.strip().splitlines()[-1])

    return side


PEERS: dict[str, tuple[str, Callable[[Path, int, int], float]]] = {
    "huey": ("huey", huey_side),
    "persist-queue": ("persistqueue", persist_queue_side),
    "litequeue": ("litequeue", litequeue_side),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lanes", default="1,16")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    args = parser.parse_args()
    sides: dict[str, Callable[[Path, int, int], float]] = {
        "tether": tether_side,
        "tether-full": partial(tether_side, mode="FULL"),
    }
    print(
        "tether: synchronous=NORMAL (durable at promises); tether-full: synchronous=FULL; "
        "huey: SqliteHuey(fsync=True), WAL; persist-queue: SQLiteAckQueue, WAL, synchronous=FULL; "
        "litequeue: LiteQueue, WAL, synchronous=FULL"
    )
    if args.baseline is not None:
        sides["baseline"] = baseline_side(args.baseline.resolve())
        sides["baseline-full"] = baseline_side(args.baseline.resolve(), "FULL")
    for name, (module, side) in PEERS.items():
        if importlib.util.find_spec(module) is None:
            print(f"skipped {name}: not installed (uv sync --group bench)")
        else:
            sides[name] = side
    lane_counts = [int(x) for x in args.lanes.split(",")]
    rates: dict[tuple[str, int], list[float]] = {}
    ratios: dict[int, list[float]] = {n: [] for n in lane_counts}
    full_ratios: dict[int, list[float]] = {n: [] for n in lane_counts}
    vs_base: dict[int, list[float]] = {n: [] for n in lane_counts}
    full_vs_base: dict[int, list[float]] = {n: [] for n in lane_counts}
    order = list(sides)
    for r in range(args.rounds):
        for lanes in lane_counts:
            this_round: dict[str, float] = {}
            for name in order[r % len(order) :] + order[: r % len(order)]:
                with tempfile.TemporaryDirectory() as tmp:
                    rate = args.jobs / sides[name](Path(tmp), lanes, args.jobs)
                this_round[name] = rate
                rates.setdefault((name, lanes), []).append(rate)
            ours = ("tether", "tether-full", "baseline", "baseline-full")
            peers = [v for k, v in this_round.items() if k not in ours]
            if peers:
                ratios[lanes].append(this_round["tether"] / max(peers))
                full_ratios[lanes].append(this_round["tether-full"] / max(peers))
            if "baseline" in this_round:
                vs_base[lanes].append(this_round["tether"] / this_round["baseline"])
                full_vs_base[lanes].append(this_round["tether-full"] / this_round["baseline-full"])
            print(
                f"round {r + 1}, {lanes:>2} lane(s): "
                + "  ".join(f"{k} {v:,.0f}/s" for k, v in this_round.items()),
                flush=True,
            )
    print(f"\n{args.jobs} jobs, ingest -> claim -> complete, medians of {args.rounds} rounds:")
    for lanes in lane_counts:
        parts = []
        for name in sides:
            v = rates[name, lanes]
            parts.append(f"{name} {statistics.median(v):,.0f}/s [{min(v):,.0f}-{max(v):,.0f}]")
        print(f"  {lanes:>2} lane(s): " + ", ".join(parts))
        for name, rs in (("tether", ratios[lanes]), ("tether-full", full_ratios[lanes])):
            if rs:
                bar = " (bar 1.0x)" if lanes == 1 else " (bar 5x)"
                print(
                    f"     {name} / fastest peer: median {statistics.median(rs):.2f}x "
                    f"[{min(rs):.2f}-{max(rs):.2f}]{bar if name == 'tether' else ''}"
                )
        for name, rs in (
            ("tether / baseline", vs_base[lanes]),
            ("tether-full / baseline-full", full_vs_base[lanes]),
        ):
            if rs:
                print(
                    f"     {name}: median {statistics.median(rs):.2f}x "
                    f"[{min(rs):.2f}-{max(rs):.2f}]"
                )


if __name__ == "__main__":
    main()
