"""Messages per second through the whole bridge, beside the custody store's own rate.

- **bridge**: a reference gateway in a SEPARATE PROCESS (``tether gateway serve`` on a free port
  of 127.0.0.1, a token file; as a real gateway is remote, its HTTP and SQLite work does not
  share this process's GIL) and a ``BridgeService`` here (4 workers x 4 tasks, the noop agent,
  the default sweep/poll intervals, ``synchronous=FULL``). ``MESSAGES`` messages are submitted
  first; the clock runs from the bridge's start until delivery has every reply confirmed by
  the gateway and marked delivered (read from the bridge's own delivery counter, so no stats
  polling loads either side; the gateway's count of answered tasks is checked after): poll ->
  commit -> ack -> assign -> claim -> agent -> complete -> post -> mark delivered, every step
  durable, every ack after its commit, every task marked delivered only after the gateway
  confirmed it.
- **leaderless**: the same bridge with ``lead=False`` (workers claim pending tasks directly:
  no room affinity, no lead).
- **store**: the same custody path without HTTP, gateway or agents, on the same kind of store
  (``synchronous=FULL``): 16 lanes (the bridge's 4 x 4 concurrency), each taking one message
  at a time through ``ingest_many([task])`` -> ``claim`` -> ``complete`` -> ``mark_delivered``,
  so the lanes' transitions share group commits as the bridge's do. It is what the store alone
  sustains at the bridge's concurrency, the ceiling the bridge's own work is measured against.

Rounds interleaved (store, bridge, leaderless; a fresh gateway process and fresh files each);
medians of rates and of per-round ratios printed. The bars (issue #19): the bridge reaches at
least 0.75 of the store's rate with its lead, 0.85 leaderless. ``ROUNDS`` and ``MESSAGES``
may be set in the environment.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio

from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task, write_token

MESSAGES = int(os.environ.get("MESSAGES", "2000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
WORKERS = 4
CONCURRENCY = 4
LANES = WORKERS * CONCURRENCY
TOKEN = "bench-token"
STALL_S = 30.0
_URL = re.compile(r"tether gateway: (http://\S+?)/ ")


@asynccontextmanager
async def gateway_process(folder: Path) -> AsyncIterator[str]:
    """A reference gateway in its own process; yields its base URL, SIGTERMs it after."""
    token_file = folder / "token"
    write_token(token_file, TOKEN)
    command = [
        sys.executable,
        "-c",
        "import sys; from tether._cli import main; sys.exit(main(sys.argv[1:]))",
        "gateway",
        "serve",
        "--port",
        "0",
        "--token-file",
        str(token_file),
        "--db",
        str(folder / "gateway.db"),
    ]
    log = (folder / "gateway.log").open("wb")  # its own log, read if it fails to start
    proc = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stderr=log)
    log.close()
    try:
        assert proc.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(1)
            if not chunk:
                break
            line += chunk
        found = _URL.search(line.decode())
        if found is None:
            log_text = (folder / "gateway.log").read_text()
            raise RuntimeError(f"the gateway did not start: {line!r}\n{log_text}")
        yield found.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True):
            await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()


async def post_message(http: httpx.AsyncClient, i: int) -> None:
    """Submit message ``i`` (room ``i % 40``) under the id ``m-<i>``, so a retry is idempotent:
    on a loaded machine the gateway may close a kept-alive connection as a request goes out."""
    message = {"id": f"m-{i}", "room": f"room-{i % 40}", "text": f"message {i}"}
    for attempt in range(5):
        try:
            response = await http.post("/v1/messages", json=message)
        except httpx.TransportError:
            if attempt == 4:
                raise
            await trio.sleep(0.1)
            continue
        response.raise_for_status()
        return


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


async def _until_delivered(service: BridgeService, store: SqliteStore) -> None:
    """Wait until delivery has confirmed every message; fail loudly (with the store's counts)
    if it makes no progress for ``STALL_S`` seconds instead of hanging the benchmark."""
    assert service.delivery is not None
    stats = service.delivery.stats
    seen, since = -1, time.perf_counter()
    while stats.delivered < MESSAGES:
        if stats.delivered != seen:
            seen, since = stats.delivered, time.perf_counter()
        elif time.perf_counter() - since > STALL_S:
            counts = {k.value: v for k, v in (await store.counts()).items()}
            raise RuntimeError(f"stalled at {seen} of {MESSAGES} delivered; store: {counts}")
        await trio.sleep(0.005)  # in-process: polling the gateway would load both sides


async def bridge_rate(folder: Path, *, lead: bool) -> float:
    async with (
        gateway_process(folder) as url,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as http,
    ):
        limiter = trio.CapacityLimiter(16)

        async def submit(i: int) -> None:
            async with limiter:
                await post_message(http, i)

        async with trio.open_nursery() as submitters:
            for i in range(MESSAGES):
                submitters.start_soon(submit, i)

        config = BridgeConfig(
            gateway=url,
            token_file=folder / "token",
            store=str(folder / "bridge.db"),
            agent="tether.agents.noop:factory",
            workers=WORKERS,
            concurrency=CONCURRENCY,
            poll_wait=5.0,
            grace=2.0,
            lead=lead,
            synchronous="FULL",
            log_level="WARNING",
        )
        store = await SqliteStore.open(folder / "bridge.db", synchronous="FULL")
        service = BridgeService(config, store=store)
        start = time.perf_counter()
        try:
            async with trio.open_nursery() as bridge:
                await bridge.start(service.run)
                await _until_delivered(service, store)
                elapsed = time.perf_counter() - start
                bridge.cancel_scope.cancel()
        finally:
            await store.aclose()
        stats = (await http.get("/v1/stats")).json()
        assert stats["tasks"]["answered"] == MESSAGES, stats  # every reply is at the gateway
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
        f"bridge end to end (noop agent, {WORKERS} workers x {CONCURRENCY}, with a lead):"
        f"   {b:7.0f} msg/s"
    )
    print(f"bridge without a lead (workers claim pending directly):  {n:7.0f} msg/s")
    print(f"store ingest -> deliver ({LANES} lanes):                   {s:7.0f} msg/s")
    # the disk is shared (fsync cost swings between rounds): compare within each round
    ratio = statistics.median(x / y for x, y in zip(bridge, store, strict=True))
    ratio_n = statistics.median(x / y for x, y in zip(leaderless, store, strict=True))
    print(f"bridge / store (median of per-round ratios): {ratio:.2f} (bar: >= 0.75)")
    print(f"leaderless bridge / store:                   {ratio_n:.2f} (bar: >= 0.85)")


if __name__ == "__main__":
    trio.run(main)
