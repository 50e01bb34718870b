"""What a tenant costs the bridge (issue #56, item 6): the same messages drained with and
without tenants.

Each round submits ``--messages`` messages over ``--rooms`` rooms to a reference gateway in
its own process (message ``i`` in room ``i % rooms``; with tenants, of tenant ``i % tenants``),
then a bridge here (4 workers x 4, the noop agent, SQLite, a lead) drains them: messages per
second and this process's CPU per message (the bridge's Trio thread, its custody writer and its
HTTP). The lead's outranked returns are counted (``Store.return_outranked``: assignments given
back because a newer task has an earlier turn). Rounds alternate without and with tenants (a
fresh gateway and store each); medians and ranges are printed with the settings. Linux only.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from bridge_throughput import TOKEN, gateway_process, submit_all
from tether import ChildSpec, open_runtime
from tether.bridge import BridgeConfig, BridgeService, SqliteStore

WORKERS, CONCURRENCY = 4, 4


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rooms", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    parser.add_argument(
        "--by-room",
        action="store_true",
        help="tenant i %% tenants (each tenant in one room: the queue's turns follow arrival) "
        "instead of a seeded random tenant per message (each tenant in many rooms)",
    )
    return parser.parse_args()


def tenant_of(messages: int, tenants: int, by_room: bool) -> list[int]:
    """Each message's tenant: ``i % tenants``, or a random one (seeded: every round the same)."""
    if by_room:
        return [i % tenants for i in range(messages)]
    pick = random.Random(56)
    return [pick.randrange(tenants) for _ in range(messages)]


async def submit(
    http: httpx.AsyncClient, messages: int, rooms: int, tenants: int, by_room: bool
) -> None:
    """Message ``i`` to room ``i % rooms`` (of a tenant if ``tenants``: ``tenant_of``), as
    ``bridge_throughput.submit_all`` submits."""
    if not tenants:
        await submit_all(http, messages, rooms)
        return
    owner = tenant_of(messages, tenants, by_room)
    await submit_all(http, messages, rooms, lambda i: f"tenant-{owner[i]}")


@contextmanager
def counting_outranked() -> Iterator[list[int]]:
    """Count the tasks the lead gives back as outranked (every store of the process)."""
    returned = [0, 0]  # calls, tasks
    real: Any = SqliteStore.return_outranked

    async def counted(self: Any, *a: Any, **kw: Any) -> Any:
        got = await real(self, *a, **kw)
        returned[0] += 1
        returned[1] += len(got)
        return got

    setattr(SqliteStore, "return_outranked", counted)  # noqa: B010 - a descriptor replaced
    try:
        yield returned
    finally:
        setattr(SqliteStore, "return_outranked", real)  # noqa: B010


async def one_round(folder: Path, opts: argparse.Namespace, tenants: int) -> tuple[float, ...]:
    async with (
        gateway_process(folder) as (url, _pid),
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as http,
    ):
        await submit(http, opts.messages, opts.rooms, tenants, opts.by_room)
        config = BridgeConfig(
            gateway=url,
            token_file=folder / "token",
            store=str(folder / "bridge.db"),
            agent="tether.agents.noop:factory",
            workers=WORKERS,
            concurrency=CONCURRENCY,
            poll_wait=5.0,
            grace=2.0,
            log_level="WARNING",
        )
        store = await SqliteStore.open(folder / "bridge.db")
        service = BridgeService(config, store=store)
        with counting_outranked() as returned:
            async with open_runtime(handle_signals=False) as runtime:
                cpu, start = time.process_time(), time.perf_counter()
                await runtime.supervisor.start_child(
                    ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
                )
                assert service.delivery is not None
                while service.delivery.stats.delivered < opts.messages:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
                await runtime.supervisor.terminate_child("bridge")
        await store.aclose()
    return opts.messages / elapsed, cpu / opts.messages * 1e6, returned[0], returned[1]


def spread(values: list[float], fmt: str) -> str:
    return (
        f"{format(statistics.median(values), fmt)} "
        f"({format(min(values), fmt)}-{format(max(values), fmt)})"
    )


async def main() -> None:
    opts = args()
    logging.basicConfig(level=logging.WARNING)
    kinds = {"no tenants": 0, f"{opts.tenants} tenants": opts.tenants}
    got: dict[str, list[tuple[float, ...]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(opts.rounds):
            for kind, tenants in kinds.items():  # interleaved
                folder = Path(tmp, f"r{n}-{tenants}")
                folder.mkdir()  # noqa: ASYNC240 - before anything runs
                got[kind].append(await one_round(folder, opts, tenants))
                rate, cpu, calls, back = got[kind][-1]
                print(
                    f"  round {n} {kind:<14} {rate:5.0f} msg/s {cpu:6.0f} us CPU/msg, "
                    f"outranked: {calls:.0f} calls, {back:.0f} tasks given back",
                    flush=True,
                )
    print(
        f"{opts.messages} messages over {opts.rooms} rooms, {WORKERS} workers x {CONCURRENCY}, "
        f"SQLite, a lead; medians (ranges) of {opts.rounds} interleaved rounds:"
    )
    for kind, rounds in got.items():
        rates, cpus, _, backs = zip(*rounds, strict=True)
        print(
            f"  {kind:<14} drain {spread(list(rates), '5.0f')} msg/s, "
            f"{spread(list(cpus), '5.0f')} us CPU/msg, "
            f"outranked tasks given back {spread(list(backs), '.0f')}"
        )
    none, some = got.values()  # each round's pair: the machine's load drifts between rounds
    rate_ratio = [b[0] / a[0] for a, b in zip(none, some, strict=True)]
    cpu_ratio = [b[1] / a[1] for a, b in zip(none, some, strict=True)]
    print(
        f"  with tenants / without, per round: drain {spread(rate_ratio, '.2f')}, "
        f"CPU/msg {spread(cpu_ratio, '.2f')}"
    )


if __name__ == "__main__":
    trio.run(main)
