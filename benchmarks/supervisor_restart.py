"""What a supervised restart costs compared with a hand-rolled retry loop.

A child that crashes right after it is ready is restarted N times, first by a bare
``while True: try/except*`` loop around a nursery (the baseline), then by a tether
supervisor (backoff 0, unbounded intensity). Interleaved rounds, medians of CPU time per
restart; prints the ratio.

    uv run python benchmarks/supervisor_restart.py [--restarts 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from typing import Any

import trio

from tether import ChildSpec, open_supervisor


async def _crash_when_ready(
    count: list[int],
    done: trio.Event | None = None,
    target: int = 0,
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    count[0] += 1
    if done is not None and count[0] > target:
        done.set()
    task_status.started()
    await trio.lowlevel.checkpoint()
    raise ValueError("crash")


async def _baseline(restarts: int) -> None:
    count = [0]
    while count[0] <= restarts:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(_crash_when_ready, count)
        except* ValueError:
            pass


async def _supervised(restarts: int) -> None:
    count = [0]
    async with open_supervisor(
        max_restarts=restarts * 10, period=1e9, backoff_initial=0, backoff_max=0, jitter=0
    ) as sup:
        done = trio.Event()
        await sup.start_child(ChildSpec("crashy", _crash_when_ready, count, done, restarts))
        await done.wait()


def _measure(fn: Any, restarts: int) -> float:
    start = time.process_time()
    trio.run(fn, restarts)
    return (time.process_time() - start) / restarts


def main() -> None:
    logging.disable(logging.WARNING)  # each restart logs the crash; not what we time
    parser = argparse.ArgumentParser()
    parser.add_argument("--restarts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    base: list[float] = []
    sup: list[float] = []
    for _ in range(args.rounds):
        base.append(_measure(_baseline, args.restarts))
        sup.append(_measure(_supervised, args.restarts))
    b, s = statistics.median(base), statistics.median(sup)
    print(f"baseline retry loop : {b * 1e6:8.1f} µs CPU per restart (median of {args.rounds})")
    print(f"tether supervisor   : {s * 1e6:8.1f} µs CPU per restart (median of {args.rounds})")
    print(f"ratio supervisor/baseline: {s / b:.2f}x")


if __name__ == "__main__":
    main()
