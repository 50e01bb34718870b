"""What the always-on TaskRegistry costs: 100k no-op spawns with and without it.

Rounds alternate (bare, registry, bare, registry, ...) in one process so machine noise hits
both sides alike; CPU time (``time.process_time``) per round, ``gc.collect()`` between rounds;
the figure is the median of the per-pair ratios. Bar: <= 1.30; goal: <= 1.15.

A third side, an instrument with empty ``task_spawned``/``task_exited`` hooks, shows the floor:
what Trio's hook dispatch alone costs, which no registry can go below. A fourth spawns the same
tasks with an owner label (as sessions and supervised children do), whose registry entry
carries the label: the ratio the bar is about is the unlabelled one, the issue's setting.

    uv run python benchmarks/registry_overhead.py [--tasks 100000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import trio

from tether import TaskRegistry, owned_by


class _EmptyHooks(trio.abc.Instrument):
    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        pass

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        pass


async def _noop() -> None:
    pass


async def _spawn_many(n: int) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(_noop)


async def _spawn_many_owned(n: int) -> None:
    with owned_by("bench"):
        await _spawn_many(n)


SIDES: dict[str, Callable[[], list[trio.abc.Instrument]]] = {
    "bare": lambda: [],
    "empty hooks": lambda: [_EmptyHooks()],
    "registry": lambda: [TaskRegistry()],
    "registry, owned": lambda: [TaskRegistry()],
}


def _round(n: int, side: str) -> float:
    instruments: list[trio.abc.Instrument] = SIDES[side]()
    gc.collect()
    start = time.process_time()
    trio.run(
        _spawn_many_owned if side.endswith("owned") else _spawn_many, n, instruments=instruments
    )
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    _round(args.tasks // 10, "registry")  # warm-up
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    ratios: list[float] = []
    floor: list[float] = []
    order = list(SIDES)
    for i in range(args.rounds):
        # rotate the order so drift cannot favour one side
        for side in order[i % len(order) :] + order[: i % len(order)]:
            times[side].append(_round(args.tasks, side))
        ratios.append(times["registry"][-1] / times["bare"][-1])
        floor.append(times["empty hooks"][-1] / times["bare"][-1])
        print(
            f"round {i + 1}/{args.rounds}: "
            + "  ".join(f"{side} {times[side][-1]:.3f}s" for side in SIDES)
            + f"  ratio {ratios[-1]:.3f}"
        )
    med = {side: statistics.median(v) for side, v in times.items()}
    print(
        f"{args.tasks} no-op spawns, median CPU: "
        + ", ".join(f"{k} {v:.3f}s" for k, v in med.items())
    )
    print(f"Trio hook dispatch floor (empty hooks / bare): {statistics.median(floor):.3f}")
    owned = [o / b for o, b in zip(times["registry, owned"], times["bare"], strict=True)]
    print(
        f"median ratio with owner labels (registry, owned / bare): {statistics.median(owned):.3f}"
    )
    print(f"median ratio (registry / bare): {statistics.median(ratios):.3f}  (bar 1.30, goal 1.15)")


if __name__ == "__main__":
    main()
