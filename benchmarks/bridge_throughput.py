"""Messages per second through the whole bridge, beside the custody store's own rate.

- **bridge**: a reference gateway and a ``BridgeService`` (4 workers x 4 tasks, the noop agent)
  in this process; ``MESSAGES`` messages are submitted first, then the clock runs from the
  bridge's start until the gateway holds every reply (poll -> commit -> ack -> assign -> claim
  -> agent -> complete -> post -> mark delivered, all durable, ``synchronous=FULL``).
- **store**: the same custody path without HTTP or agents, on the same kind of store: 16 lanes
  (the bridge's 4 x 4 concurrency) each ingest -> claim -> complete -> deliver one task at a
  time, so transitions share commits as they do in the bridge.

- **leaderless**: the same bridge with ``lead=False`` (workers claim pending tasks directly:
  no sweep cadence in the way, no room affinity).

Rounds interleaved; medians of rates and of per-round ratios printed. The bar: the bridge
reaches at least half the store's rate.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from tether.bridge import CustodyState, SqliteStore, Task, write_token
from tether.bridge._config import BridgeConfig
from tether.bridge._service import BridgeService
from tether.gateway import GatewaySettings, serve

MESSAGES = 2_000
ROUNDS = 3
WORKERS = 4
CONCURRENCY = 4
LANES = WORKERS * CONCURRENCY
SWEEP = 0.01
"""The lead's sweep and the workers' idle poll (default 0.05 s): work is handed out by
polling, so these bound the rate; 0.01 s costs more idle wake-ups than a default should."""


async def store_rate(folder: Path) -> float:
    store = await SqliteStore.open(folder / "store.db")
    try:
        ids = iter(range(MESSAGES))

        async def lane(k: int) -> None:
            worker = f"w{k}"
            for i in ids:
                await store.ingest_many([Task(f"t{i}", f"message {i}", room=f"room-{i % 40}")])
                claim = await store.claim(worker, leaderless=True)
                assert claim is not None
                await store.complete(claim, f"reply to {claim.task.body}")
                await store.mark_delivered(claim.task.id)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(LANES):
                nursery.start_soon(lane, k)
        elapsed = time.perf_counter() - start
        assert (await store.counts())[CustodyState.DELIVERED] == MESSAGES
    finally:
        await store.aclose()
    return MESSAGES / elapsed


async def bridge_rate(folder: Path, *, lead: bool) -> float:
    token_file = folder / "token"
    write_token(token_file, "bench-token")
    settings = GatewaySettings(token_file=token_file, db=folder / "gateway.db", port=0)
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        port = await nursery.start(partial(serve, settings, shutdown_trigger=stop.wait))
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer bench-token"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            limiter = trio.CapacityLimiter(16)

            async def submit(i: int) -> None:
                async with limiter:
                    response = await http.post(
                        "/v1/messages", json={"room": f"room-{i % 40}", "text": f"message {i}"}
                    )
                    response.raise_for_status()

            async with trio.open_nursery() as submitters:
                for i in range(MESSAGES):
                    submitters.start_soon(submit, i)

            config = BridgeConfig(
                gateway=url,
                token_file=token_file,
                store=str(folder / "bridge.db"),
                agent="tether.agents.noop:factory",
                workers=WORKERS,
                concurrency=CONCURRENCY,
                poll_wait=5.0,
                grace=2.0,
                lead=lead,
                sweep_interval=SWEEP,
                poll_interval=SWEEP,
                log_level="WARNING",
            )
            service = BridgeService(config, gateway_options={"poll_limit": 100})
            start = time.perf_counter()
            async with trio.open_nursery() as bridge:
                await bridge.start(service.run)
                while True:
                    stats = (await http.get("/v1/stats")).json()
                    if stats["tasks"]["answered"] + stats["tasks"]["closed"] >= MESSAGES:
                        break
                    await trio.sleep(0.01)
                elapsed = time.perf_counter() - start
                bridge.cancel_scope.cancel()
        stop.set()
    return MESSAGES / elapsed


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    bridge: list[float] = []
    leaderless: list[float] = []
    store: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ROUNDS):
            folder = Path(tmp, f"round-{r}")
            (folder / "s").mkdir(parents=True)
            (folder / "b").mkdir(parents=True)
            (folder / "l").mkdir(parents=True)
            store.append(await store_rate(folder / "s"))
            bridge.append(await bridge_rate(folder / "b", lead=True))
            leaderless.append(await bridge_rate(folder / "l", lead=False))
            print(
                f"round {r + 1}: bridge {bridge[-1]:6.0f}  leaderless {leaderless[-1]:6.0f}  "
                f"store {store[-1]:6.0f} msg/s",
                file=sys.stderr,
            )
    b, s = statistics.median(bridge), statistics.median(store)
    n = statistics.median(leaderless)
    print(
        f"bridge end to end (noop agent, {WORKERS} workers x {CONCURRENCY}, sweep/poll "
        f"{SWEEP} s): {b:7.0f} msg/s"
    )
    print(f"bridge without a lead (workers claim pending directly):  {n:7.0f} msg/s")
    print(f"store ingest -> deliver ({LANES} lanes):                   {s:7.0f} msg/s")
    # the disk is shared (fsync cost swings between rounds): compare within each round
    ratio = statistics.median(x / y for x, y in zip(bridge, store, strict=True))
    ratio_n = statistics.median(x / y for x, y in zip(leaderless, store, strict=True))
    print(f"bridge / store (median of per-round ratios): {ratio:.2f} (bar: >= 0.50)")
    print(f"leaderless bridge / store:                   {ratio_n:.2f}")


if __name__ == "__main__":
    trio.run(main)
