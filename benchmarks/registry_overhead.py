"""What the always-on TaskRegistry costs: 100k no-op spawns with and without it.

Rounds alternate (bare, registry, bare, registry, ...) in one process so machine noise hits
both sides alike; CPU time (``time.process_time``) per round, ``gc.collect()`` between rounds;
the figure is the median of the per-pair ratios. Bar: <= 1.30; goal: <= 1.15.

A third side, an instrument with empty ``task_spawned``/``task_exited`` hooks, shows the floor:
what Trio's hook dispatch alone costs, which no registry can go below. A fourth spawns the same
tasks with an owner label (as sessions and supervised children do), whose registry entry
carries the label: the ratio the bar is about is the unlabelled one, the issue's setting.

``--baseline DIR`` runs each round a second time in another checkout's tether (this file's
rounds, run by ``DIR/.venv/bin/python``), the two alternating who goes first, and prints the
baseline's ratios beside these and the ratio of the two per round.

    uv run python benchmarks/registry_overhead.py [--tasks 100000] [--rounds 9]
        [--baseline ../wt-base]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import trio

import _baseline
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


def sides_round(n: int, i: int, warm_up: bool = False) -> dict[str, float]:
    """Every side once, the order rotated by round ``i`` so drift cannot favour one side
    (``warm_up``: a small untimed round first, as a fresh process needs)."""
    if warm_up:
        _round(n // 10, "registry")
    order = list(SIDES)
    return {side: _round(n, side) for side in order[i % len(order) :] + order[: i % len(order)]}


def _add(times: dict[str, list[float]], round_: dict[str, float]) -> None:
    for side, t in round_.items():
        times[side].append(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    args = parser.parse_args()
    if args.baseline is not None:
        _baseline.interpreter(args.baseline)
    base: dict[str, list[float]] = {side: [] for side in SIDES}

    _round(args.tasks // 10, "registry")  # warm-up
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    ratios: list[float] = []
    floor: list[float] = []
    n = args.tasks

    def baseline_round(i: int) -> dict[str, float]:
        assert args.baseline is not None
        found: dict[str, float] = _baseline.call(
            args.baseline, "registry_overhead", "sides_round", n, i, True
        )
        return found

    for i in range(args.rounds):
        if args.baseline is not None and i % 2 == 1:  # the baseline first every other round
            _add(base, baseline_round(i))
        _add(times, sides_round(n, i))
        if args.baseline is not None and i % 2 == 0:
            _add(base, baseline_round(i))
        ratios.append(times["registry"][-1] / times["bare"][-1])
        floor.append(times["empty hooks"][-1] / times["bare"][-1])
        print(
            f"round {i + 1}/{args.rounds}: "
            + "  ".join(f"{side} {times[side][-1]:.3f}s" for side in SIDES)
            + f"  ratio {ratios[-1]:.3f}"
            + (
                f"  baseline ratio {base['registry'][-1] / base['bare'][-1]:.3f}"
                if args.baseline is not None
                else ""
            )
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
    if args.baseline is not None:
        theirs = [r / b for r, b in zip(base["registry"], base["bare"], strict=True)]
        ours_vs = [o / t for o, t in zip(ratios, theirs, strict=True)]
        print(
            f"baseline ({args.baseline}) median ratio (registry / bare): "
            f"{statistics.median(theirs):.3f} [{min(theirs):.3f}-{max(theirs):.3f}]; "
            f"this / baseline per round: median {statistics.median(ours_vs):.3f} "
            f"[{min(ours_vs):.3f}-{max(ours_vs):.3f}]"
        )


if __name__ == "__main__":
    main()
