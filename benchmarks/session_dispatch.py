"""Events per second through ``emit`` -> handler done: tether sessions vs the asyncio SDK pattern.

The asyncio baseline is written the way the SDK tether replaces did it: ``create_task`` per
handler call, a registry dict keyed by the task name, a done callback that removes the entry,
and a wrapper that logs handler exceptions. tether runs inside ``open_runtime()`` (so the
TaskRegistry instrument is installed and every handler run is visible by identity).

Two arrival patterns, both measured in one process with interleaved rounds (medians of CPU time):

- ``paced``: events arrive in batches of ``--batch`` with a scheduler checkpoint in between (as
  when they come from a socket); the session's worker pool is reused.
- ``burst``: all events are emitted in one synchronous loop (the issue's "100k events").
- ``burst, handler yields``: the same, but each handler awaits one checkpoint, so no worker can
  run handlers back to back and the foreman must fan out: the worst case for the pool.

``--baseline DIR`` runs each round a second time in another checkout's tether (this file's
rounds, run by ``DIR/.venv/bin/python``), the two alternating who goes first, and prints the
baseline's ratio under each line and the ratio of the two per round.

Usage: ``uv run python benchmarks/session_dispatch.py [--events 100000] [--rounds 5]
[--baseline ../wt-base]``
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import _baseline
import tether

log = logging.getLogger("bench.asyncio_sdk")


# -- the asyncio SDK pattern --------------------------------------------------------------------


async def asyncio_round(events: int, batch: int, yielding: bool) -> float:
    registry: dict[str, asyncio.Task[None]] = {}
    done = asyncio.Event()
    count = 0

    async def handler(payload: Any) -> None:
        nonlocal count
        if yielding:
            await asyncio.sleep(0)
        count += 1
        if count == events:
            done.set()

    async def wrapper(name: str, fn: Callable[[Any], Any], payload: Any) -> None:
        try:
            await fn(payload)
        except Exception:
            log.exception("handler %s failed", name)

    loop = asyncio.get_running_loop()

    def forget(name: str, task: asyncio.Task[None]) -> None:
        registry.pop(name, None)

    def emit(event: str, payload: Any) -> None:
        name = f"session::{event}::handler::{handler.__name__}"
        task = loop.create_task(wrapper(name, handler, payload), name=name)
        registry[name] = task
        task.add_done_callback(functools.partial(forget, name))

    start = time.process_time()
    for i in range(events):
        emit("message", i)
        if batch and (i + 1) % batch == 0:
            await asyncio.sleep(0)
    await done.wait()
    return time.process_time() - start


def run_asyncio(events: int, batch: int, yielding: bool) -> float:
    return asyncio.run(asyncio_round(events, batch, yielding))


# -- tether ---------------------------------------------------------------------------------------


async def tether_round(events: int, batch: int, yielding: bool) -> float:
    done = trio.Event()
    count = 0

    async def handler(payload: Any) -> None:
        nonlocal count
        if yielding:
            await trio.lowlevel.checkpoint()
        count += 1
        if count == events:
            done.set()

    async with tether.open_runtime(), tether.open_session("session") as session:
        session.add_handler("message", handler)
        start = time.process_time()
        for i in range(events):
            session.emit("message", i)
            if batch and (i + 1) % batch == 0:
                await trio.lowlevel.checkpoint()
        await done.wait()
        elapsed = time.process_time() - start
        stats = session.stats()
        assert stats.finished == events, stats
    return elapsed


def run_tether(events: int, batch: int, yielding: bool) -> float:
    return trio.run(tether_round, events, batch, yielding)


def pair_round(events: int, batch: int, yielding: bool, r: int) -> tuple[float, float]:
    """(asyncio's, tether's) CPU seconds, alternating who goes first by round ``r``."""
    if r % 2 == 0:
        a = run_asyncio(events, batch, yielding)
        return a, run_tether(events, batch, yielding)
    t = run_tether(events, batch, yielding)
    return run_asyncio(events, batch, yielding), t


def measure(
    label: str,
    events: int,
    batch: int,
    rounds: int,
    yielding: bool = False,
    baseline: Path | None = None,
) -> None:
    a_times: list[float] = []
    t_times: list[float] = []
    base: list[tuple[float, float]] = []
    for r in range(rounds):  # interleaved, alternating who goes first
        if baseline is not None and r % 2 == 1:
            base.append(_base_round(baseline, events, batch, yielding, r))
        a, t = pair_round(events, batch, yielding, r)
        a_times.append(a)
        t_times.append(t)
        if baseline is not None and r % 2 == 0:
            base.append(_base_round(baseline, events, batch, yielding, r))
    a_rate = events / statistics.median(a_times)
    t_rate = events / statistics.median(t_times)
    print(
        f"{label:<22} asyncio {a_rate:>10,.0f} ev/s   tether {t_rate:>10,.0f} ev/s   "
        f"ratio tether/asyncio {t_rate / a_rate:.2f}x"
    )
    if base:
        b_rate = events / statistics.median(t for _, t in base)
        theirs = statistics.median(t for _, t in base) / statistics.median(a for a, _ in base)
        ours = [(a / t) / (ba / bt) for a, t, (ba, bt) in zip(a_times, t_times, base, strict=True)]
        print(
            f"  baseline: tether {b_rate:>10,.0f} ev/s, ratio tether/asyncio {1 / theirs:.2f}x; "
            f"this / baseline ratio per round: median {statistics.median(ours):.2f} "
            f"[{min(ours):.2f}-{max(ours):.2f}]"
        )


def _base_round(
    checkout: Path, events: int, batch: int, yielding: bool, r: int
) -> tuple[float, float]:
    a, t = _baseline.call(checkout, "session_dispatch", "pair_round", events, batch, yielding, r)
    return float(a), float(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    args = parser.parse_args()
    if args.baseline is not None:
        _baseline.interpreter(args.baseline)
    print(f"{args.events:,} events, {args.rounds} interleaved rounds, medians of CPU time")
    base = args.baseline
    measure(f"paced (batch {args.batch})", args.events, args.batch, args.rounds, baseline=base)
    measure("burst (one loop)", args.events, 0, args.rounds, baseline=base)
    measure("burst, handler yields", args.events, 0, args.rounds, yielding=True, baseline=base)


if __name__ == "__main__":
    main()
