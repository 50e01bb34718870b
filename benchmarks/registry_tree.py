"""What ``TaskRegistry.render_tree()`` and ``snapshot()`` cost per live task, 10k to 1M tasks.

The registry's queries must stay linear: an operator who asks a big service "what is running"
(``tether ps``, SIGUSR1, ``GET /tasks``) should wait in proportion to its size, no worse. The
tree is two levels deep, as a real service's is: groups of 100 (one group task owning a
nursery of 99 parked children; every other group owner-labelled). Each size is measured in
its own ``trio.run``; the figure is the median CPU time (``time.process_time``, steadier than
wall time on a shared machine) of ``--rounds`` calls, in microseconds per live task.
Bar: <= 2.5 us per task at 1M for both.

    uv run python benchmarks/registry_tree.py [--sizes 10000,100000,1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import trio
import trio.testing

from tether import TaskRegistry, owned_by

GROUP = 100


async def _group() -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(GROUP - 1):
            nursery.start_soon(trio.sleep_forever)
        await trio.sleep_forever()


async def _measure(n: int, rounds: int) -> dict[str, float]:
    registry = TaskRegistry()
    trio.lowlevel.add_instrument(registry)
    registry.adopt_running()
    out: dict[str, list[float]] = {"render_tree": [], "snapshot": []}
    async with trio.open_nursery() as nursery:
        for g in range(n // GROUP):
            if g % 2:
                with owned_by(f"owner-{g % 7}"):
                    nursery.start_soon(_group)
            else:
                nursery.start_soon(_group)
        await trio.testing.wait_all_tasks_blocked()
        live = registry.count()
        for _ in range(rounds):
            for name, query in (
                ("render_tree", registry.render_tree),
                ("snapshot", registry.snapshot),
            ):
                start = time.process_time()
                result = query()
                out[name].append((time.process_time() - start) / live * 1e6)
                del result
        nursery.cancel_scope.cancel()
    trio.lowlevel.remove_instrument(registry)
    return {name: statistics.median(v) for name, v in out.items()} | {
        f"{name} spread": max(v) - min(v) for name, v in out.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        gc.collect()
        r = trio.run(_measure, n, args.rounds)
        print(
            f"{n:>9} tasks: render_tree {r['render_tree']:.2f} us/task "
            f"(spread {r['render_tree spread']:.2f}), snapshot {r['snapshot']:.2f} us/task "
            f"(spread {r['snapshot spread']:.2f})  bar 2.5 at 1M",
            flush=True,
        )


if __name__ == "__main__":
    main()
