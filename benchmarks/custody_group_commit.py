"""Durable transitions per second: group commit against one commit per transition.

Same store code, same disk, same run: the only difference is ``max_batch`` (how many queued
transitions may share one commit; 1 = a commit each). Both use ``synchronous=FULL`` and the
same number of concurrent callers; rounds are interleaved and medians reported.
The bar (issue #5): group commit at least 10x.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import trio

from tether.bridge import SqliteStore, Task

CALLERS = 256
GROUP_N = 20_000
SINGLE_N = 2_000
ROUNDS = 3


async def ingest_rate(db: Path, n: int, max_batch: int) -> tuple[float, float]:
    """Return (transitions per second, transitions per commit)."""
    store = await SqliteStore.open(db, max_batch=max_batch)
    try:
        ids = iter(range(n))
        commits = store.commits

        async def caller() -> None:
            for i in ids:
                await store.ingest(Task(f"t{i}", "a chat message of ordinary length"))

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(caller)
        elapsed = time.perf_counter() - start
        per_commit = n / max(1, store.commits - commits)
        assert sum((await store.counts()).values()) == n
    finally:
        await store.aclose()
    return n / elapsed, per_commit


async def main() -> None:
    group: list[float] = []
    single: list[float] = []
    batch_sizes: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ROUNDS):
            rate, per_commit = await ingest_rate(Path(tmp, f"g{r}.db"), GROUP_N, 512)
            group.append(rate)
            batch_sizes.append(per_commit)
            rate, _ = await ingest_rate(Path(tmp, f"s{r}.db"), SINGLE_N, 1)
            single.append(rate)
            print(f"round {r + 1}: group {group[-1]:,.0f}/s  one-per-commit {single[-1]:,.0f}/s")
    g, s = statistics.median(group), statistics.median(single)
    print(
        f"group commit:           {g:>9,.0f} durable transitions/s "
        f"(median of {ROUNDS}, ~{statistics.median(batch_sizes):.0f} per commit)"
    )
    print(f"one commit/transition:  {s:>9,.0f} durable transitions/s")
    print(f"ratio: {g / s:.1f}x (bar: >= 10x)  [{CALLERS} concurrent callers, synchronous=FULL]")
    if g / s < 10:
        print("BELOW THE BAR on this run (a busy machine? rerun when it is quiet)")


if __name__ == "__main__":
    trio.run(main)
