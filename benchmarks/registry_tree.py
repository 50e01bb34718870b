"""What ``TaskRegistry.render_tree()`` and ``snapshot()`` cost per live task, 10k to 1M tasks.

The registry's queries must stay linear: an operator who asks a big service "what is running"
(``tether ps``, SIGUSR1, ``GET /tasks``) should wait in proportion to its size, no worse. The
tree is two levels deep, as a real service's is: groups of 100 (one group task owning a
nursery of 99 parked children; every other group owner-labelled). Each size is measured in
its own ``trio.run`` (on a ``MockClock`` jumped every 5,000 spawns, so the tasks have
distinct start times that two registries read alike); the figure is the median CPU time
(``time.process_time``, steadier than wall time on a shared machine) of ``--rounds`` calls,
in microseconds per live task, and its ratio to the bar: <= 2.5 us per task at 1M for both
(issue #19), and the cost at 1M close to the cost at 10k (linear). The ``floor`` line is a
bare pass over the tasks (each one's nursery and name read, nothing built): its own growth
with the size is the CPU caches' (10k tasks fit, 1M do not), so "x the floor" staying flat
across sizes is what linear means on real hardware.

``--baseline PATH`` compares with another version of the registry in the same run: PATH is a
``_registry.py`` (e.g. main's checkout), loaded as a second module and installed as a second
instrument on the same tasks; each round calls both versions' queries one after the other
(the order reversed every round), so both see the same heap and the same machine load.
Their outputs are checked equal first.

    uv run python benchmarks/registry_tree.py [--sizes 10000,100000,1000000] [--rounds 5]
        [--baseline ../main/src/tether/_core/_registry.py]
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import attrs
import trio
import trio.lowlevel
import trio.testing

from tether import TaskRegistry, owned_by

GROUP = 100
BAR_US = 2.5
QUERIES = ("render_tree", "snapshot")


async def _group() -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(GROUP - 1):
            nursery.start_soon(trio.sleep_forever)
        await trio.sleep_forever()


def _floor(registry: TaskRegistry) -> int:
    """The least any query must do: visit each live task and read its nursery and name (no
    output). Its growth from 10k to 1M is the memory hierarchy's (10k tasks fit in the CPU's
    caches, 1M do not), not the algorithm's; a query that grows no faster is linear."""
    total = 0
    for task in registry._live.copy():
        if task.parent_nursery is not None:
            total += len(task.name)
    return total


def _load_baseline(path: str) -> ModuleType:
    """``path`` as the module ``tether._registry_baseline`` (its relative imports resolve
    inside this ``tether``)."""
    spec = importlib.util.spec_from_file_location("tether._registry_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _same_output(name: str, ours: Any, theirs: Any) -> bool:
    if name == "snapshot":  # two TaskInfo classes: compare the field values
        return [attrs.astuple(i) for i in ours] == [attrs.astuple(i) for i in theirs]
    return bool(ours == theirs)


async def _measure(
    n: int, rounds: int, baseline: ModuleType | None, floor: bool, clock: trio.testing.MockClock
) -> dict[str, list[float]]:
    registries: dict[str, Any] = {"new": TaskRegistry()}
    if baseline is not None:
        registries["main"] = baseline.TaskRegistry()
    for registry in registries.values():
        trio.lowlevel.add_instrument(registry)
        registry.adopt_running()
    out: dict[str, list[float]] = {}
    async with trio.open_nursery() as nursery:
        for g in range(n // GROUP):
            if g % 2:
                with owned_by(f"owner-{g % 7}"):
                    nursery.start_soon(_group)
            else:
                nursery.start_soon(_group)
            if g % 50 == 49:  # a new start time every 5,000 tasks, read alike by both versions
                await trio.lowlevel.checkpoint()
                clock.jump(0.75)
        await trio.testing.wait_all_tasks_blocked()
        live = registries["new"].count()
        now = trio.current_time()
        calls: dict[str, Callable[[], object]] = {}
        for version, registry in registries.items():
            calls[f"render_tree {version}"] = functools.partial(registry.render_tree, now=now)
            calls[f"snapshot {version}"] = registry.snapshot
        if floor:
            calls["floor"] = functools.partial(_floor, registries["new"])
        if baseline is not None:
            for name in QUERIES:
                if not _same_output(name, calls[f"{name} new"](), calls[f"{name} main"]()):
                    raise SystemExit(f"{name}: the two versions disagree at {n} tasks")
        order = list(calls.items())
        for _ in range(rounds):
            for key, query in order:
                start = time.process_time()
                result = query()
                out.setdefault(key, []).append((time.process_time() - start) / live * 1e6)
                del result
            order.reverse()  # neither version always runs right after the other
        nursery.cancel_scope.cancel()
    for registry in registries.values():
        trio.lowlevel.remove_instrument(registry)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", metavar="PATH", help="another _registry.py to compare")
    parser.add_argument("--no-floor", action="store_true", help="skip the bare-pass floor line")
    args = parser.parse_args()
    baseline = _load_baseline(args.baseline) if args.baseline else None
    first: dict[str, float] = {}
    for n in (int(s) for s in args.sizes.split(",")):
        gc.collect()
        clock = trio.testing.MockClock()  # time moves only when jumped: both versions agree
        times = trio.run(_measure, n, args.rounds, baseline, not args.no_floor, clock, clock=clock)
        floor = statistics.median(times["floor"]) if "floor" in times else None
        for key, values in times.items():
            median = statistics.median(values)
            first.setdefault(key, median)
            line = (
                f"{n:>9} tasks  {key:<16} {median:5.2f} us/task "
                f"(spread {max(values) - min(values):.2f}, n={len(values)})  "
                f"{median / first[key]:.2f}x its first size"
            )
            if key != "floor":
                line += f"  {median / BAR_US:.2f}x the {BAR_US} bar"
                if floor:
                    line += f"  {median / floor:.1f}x the floor"
            name, _, version = key.partition(" ")
            if version == "new" and f"{name} main" in times:
                line += f"  new/main {median / statistics.median(times[f'{name} main']):.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
